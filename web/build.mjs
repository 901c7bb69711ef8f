// Bundles the dashboard: src/main.ts (and uPlot) -> app.js + app.css, index.html copied.
// `node build.mjs [--outdir DIR]` (default dist/). The CMake build calls it with its own
// outdir so concurrent build trees never write the same files.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const i = process.argv.indexOf('--outdir');
const outdir = i > 0 ? process.argv[i + 1] : 'dist';
mkdirSync(outdir, { recursive: true });
await build({
  entryPoints: { app: 'src/main.ts' },
  bundle: true,
  minify: true,
  format: 'iife',
  target: 'es2020',
  outdir,
  logLevel: 'warning',
  legalComments: 'none',
});
copyFileSync('index.html', join(outdir, 'index.html'));
