// Bundles the dashboard: src/main.ts (and uPlot) -> app.js + app.css, index.html copied.
// `node build.mjs [--outdir DIR]` (default dist/). The CMake build calls it with its own
// outdir so concurrent build trees never write the same files.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

// The doctor's knowledge base is 46 kB of prose: the dashboard bundles only what it reads
// of each code (src/codes.ts).
const knowledgeViews = {
  name: 'knowledge-views',
  setup(b) {
    b.onLoad({ filter: /knowledge\.json$/ }, (args) => {
      const { codes } = JSON.parse(readFileSync(args.path, 'utf8'));
      const kept = Object.fromEntries(Object.entries(codes).map(([code, info]) => [code, info.view ? { view: info.view } : {}]));
      return { contents: JSON.stringify({ codes: kept }), loader: 'json' };
    });
  },
};

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
  plugins: [knowledgeViews],
});
copyFileSync('index.html', join(outdir, 'index.html'));
