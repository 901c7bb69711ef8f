// Time from navigation start to a page of the dashboard fully drawn (body[data-ready="1"],
// set once every chart of the view is on screen), in headless Debian chromium, for one run
// of a running `trainscope serve`: node page_ready.mjs URL RUN [TAB] [REPEATS]
// Uses ?static=1, so the time is the page's own (no event stream). Prints one JSON line
// (median and every sample, in milliseconds).
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const { chromium } = createRequire(join(repo, 'web/package.json'))('playwright-core');
const [base, run, tab = 'overview', repeats = '7'] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), 'ts-bench-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1400, height: 1000 },
});
const page = context.pages()[0] || await context.newPage();
const inPage = [], wall = [];
let charts = 0;
try {
  for (let i = 0; i < Number(repeats) + 1; i++) {
    await page.goto('about:blank');
    const t0 = Date.now();
    await page.goto(`${base}?static=1#runs=${encodeURIComponent(run)}&tab=${tab}`);
    await page.waitForSelector('body[data-ready="1"]', { timeout: 60000 });
    const ms = await page.evaluate(() => performance.now());
    if (i === 0) continue;  // the first load warms the browser process
    wall.push(Date.now() - t0);
    inPage.push(Math.round(ms));
    charts = await page.evaluate(() => document.querySelectorAll('.chart canvas, .heatmap canvas, .spark canvas').length);
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(JSON.stringify({ run, tab, ready_ms_median: median(inPage), wall_ms_median: median(wall), canvases: charts,
                             in_page_ms: inPage, wall_ms: wall }));
