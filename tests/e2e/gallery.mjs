// Every tab of a healthy, a NaN and a diverged run, at 1440×900 and 1366×768, light and dark,
// as docs/dashboard.md shows them: one contact sheet per run, size and theme (the nine tabs at
// a third of their size, 3 × 3, each named), reduced to 96 colours with PIL. The full-size
// screenshots stay in <build>/test-artifacts/gallery/.
//   node tests/e2e/gallery.mjs [OUT]   (OUT default docs/img/gallery)
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { browser, build, python, pythonPath, repo, run, serve } from './harness.mjs';

const out = process.argv[2] || join(repo, 'docs', 'img', 'gallery');
const full = join(build, 'test-artifacts', 'gallery');
mkdirSync(out, { recursive: true });
mkdirSync(full, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'ts-gallery-'));
const logdir = join(work, 'runs');
const env = { PYTHONPATH: pythonPath, OMP_NUM_THREADS: '1' };
run(python, [join(repo, 'tests/e2e/truth_fixture.py'), logdir], env);
run(python, [join(repo, 'tests/e2e/train_fixture.py'), logdir, 'healthy', '300', 'healthy'], env);
const TABS = ['overview', 'scalars', 'distributions', 'gradients', 'activations', 'findings', 'performance', 'numerics', 'ranks', 'sweep'];
const RUNS = { healthy: 'healthy', nan: 'nan-at-40', diverged: 'diverged' };
const server = await serve(logdir);
try {
  for (const [width, height] of [[1440, 900], [1366, 768]]) {
    const { page, close } = await browser({ width, height });
    for (const theme of ['light', 'dark']) {
      for (const [kind, runName] of Object.entries(RUNS)) {
        const shots = [];
        for (const tab of TABS) {
          await page.goto('about:blank');
          await page.goto(`${server.base}?static=1&theme=${theme}#runs=${runName}&tab=${tab}`);
          await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
          const file = join(full, `${kind}-${tab}-${width}x${height}-${theme}.png`);
          await page.screenshot({ path: file });
          shots.push(file);
        }
        const sheet = join(out, `${kind}-${width}x${height}-${theme}.png`);
        run(python, ['-c', `
import sys
from PIL import Image, ImageDraw
files, out = sys.argv[1:-1], sys.argv[-1]
w, h = Image.open(files[0]).size
tw, th = w // 3, h // 3
sheet = Image.new("RGB", (3 * tw, 3 * (th + 16)), "white")
draw = ImageDraw.Draw(sheet)
for i, f in enumerate(files):
    x, y = (i % 3) * tw, (i // 3) * (th + 16)
    draw.text((x + 4, y + 2), f.rsplit("/", 1)[1].split("-")[1], fill="black")
    sheet.paste(Image.open(f).convert("RGB").resize((tw, th), Image.LANCZOS), (x, y + 16))
sheet.quantize(96).save(out, optimize=True)
`, ...shots, sheet]);
        console.log(`gallery: ${sheet}`);
      }
    }
    await close();
  }
} finally {
  server.stop();
  rmSync(work, { recursive: true, force: true });
}
