// Unit test of the UI's EMA smoothing (web/src/smooth.ts), run with node's test runner after
// esbuild strips the types: node --test tests/e2e/smooth.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const esbuild = createRequire(join(repo, 'web/package.json'))('esbuild');
const source = esbuild.transformSync(readFileSync(join(repo, 'web/src/smooth.ts'), 'utf8'), { loader: 'ts', format: 'esm' }).code;
const { emaSmooth } = await import('data:text/javascript,' + encodeURIComponent(source));

test('weight 0 returns the values unchanged', () => {
  assert.deepEqual(emaSmooth([1, 2, 3], 0), [1, 2, 3]);
});

test('bias correction: a constant series stays constant from the first point', () => {
  for (const v of emaSmooth([5, 5, 5, 5], 0.9)) assert.ok(Math.abs(v - 5) < 1e-12);
});

test('matches TensorBoard\'s formula step by step', () => {
  // w = 0.6: last = 0.4*1 = 0.4 -> 0.4/0.4 = 1; last = 0.24 + 0.4*3 = 1.44 -> 1.44/0.64 = 2.25;
  // last = 0.864 + 0.4*2 = 1.664 -> 1.664/0.784
  const out = emaSmooth([1, 3, 2], 0.6);
  assert.ok(Math.abs(out[0] - 1) < 1e-12);
  assert.ok(Math.abs(out[1] - 2.25) < 1e-12);
  assert.ok(Math.abs(out[2] - 1.664 / 0.784) < 1e-12);
});

test('NaN, Inf and gaps pass through without disturbing the average', () => {
  const out = emaSmooth([1, NaN, null, Infinity, 3], 0.6);
  assert.ok(Number.isNaN(out[1]));
  assert.equal(out[2], null);
  assert.equal(out[3], Infinity);
  assert.ok(Math.abs(out[4] - 2.25) < 1e-12);  // as if the middle points were absent
});
