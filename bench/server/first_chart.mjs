// Time from navigation start to the first chart drawn, in headless Debian chromium, for
// one run of a running `trainscope serve`: node first_chart.mjs URL RUN [TAG] [REPEATS]
// Prints one JSON line (median and every sample, in milliseconds).
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const { chromium } = createRequire(join(repo, 'web/package.json'))('playwright-core');
const [base, run, tag = 'train/loss', repeats = '7'] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), 'ts-bench-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1400, height: 1000 },
});
const page = context.pages()[0] || await context.newPage();
const inPage = [], wall = [];
try {
  for (let i = 0; i < Number(repeats) + 1; i++) {
    await page.goto('about:blank');
    const t0 = Date.now();
    await page.goto(`${base}#runs=${encodeURIComponent(run)}&tab=scalars`);
    await page.locator(`.chart[data-tag="${tag}"] canvas`).first().waitFor({ timeout: 20000 });
    if (i === 0) continue;  // the first load warms the browser process
    wall.push(Date.now() - t0);
    inPage.push(Number(await page.evaluate(() => document.body.dataset.firstChartMs)));
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(JSON.stringify({ run, tag, first_chart_ms_median: median(inPage), wall_ms_median: median(wall), in_page_ms: inPage, wall_ms: wall }));
