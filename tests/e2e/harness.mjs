// What the browser tests share: the build's paths, running a command, `trainscope serve` on a
// logdir, Debian's Chromium through playwright-core, and named checks that report and go on.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const build = resolve(process.env.TRAINSCOPE_BUILD_DIR || join(repo, 'build'));
export const trainscope = join(build, 'trainscope');
export const python = process.env.TRAINSCOPE_PYTHON || '/usr/bin/python3';
// The trainscope Python package of this build (or of the default build/).
export const pythonPath = [join(build, 'python'), join(repo, 'build', 'python')].find((p) => existsSync(join(p, 'trainscope')));

export function run(cmd, args, env = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 180000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout + r.stderr;
}

// `trainscope serve LOGDIR` on a free port: { base, stop }.
export async function serve(logdir) {
  const server = spawn(trainscope, ['serve', logdir, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const base = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not print its URL in 10 s:\n' + log)), 10000);
    const onData = (d) => {
      log += d;
      const m = /(http:\/\/[^\s#]+)/.exec(log);
      if (m) { clearTimeout(timer); resolveUrl(m[1]); }
    };
    server.stdout.on('data', onData);
    server.stderr.on('data', onData);
    server.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
  });
  return { base, stop: () => server.kill('SIGTERM') };
}

// Headless Chromium with a throwaway profile: { context, page, errors, close }.
export async function browser(viewport = { width: 1400, height: 1000 }) {
  const { chromium } = createRequire(join(repo, 'web/package.json'))('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'ts-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium', headless: true, viewport,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = context.pages()[0] || await context.newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, page, errors, close };
}

// Named checks: each one's failure is printed and counted, and the next one still runs.
export function checks() {
  const results = [];
  const check = (name, fn) => fn().then(
    () => { results.push(['ok', name]); console.log(`  ok   ${name}`); },
    (e) => { results.push(['FAIL', name, e]); console.log(`  FAIL ${name}\n       ${e.message.split('\n').join('\n       ')}`); });
  const failed = () => results.filter((r) => r[0] === 'FAIL').length;
  return { check, results, failed };
}
