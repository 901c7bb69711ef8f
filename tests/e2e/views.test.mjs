// Unit tests of the UI's pure parts, run with node's test runner after esbuild bundles them:
// tick labels (web/src/util.ts), percentiles from exponent histograms (web/src/percentiles.ts),
// sections and internal series (web/src/groups.ts).
//   node --test tests/e2e/views.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const esbuild = createRequire(join(repo, 'web/package.json'))('esbuild');
// Bundled, as the dashboard is: groups.ts imports data/tag_families.json.
const load = async (file) => {
  const out = esbuild.buildSync({ entryPoints: [join(repo, 'web/src', file)], bundle: true, format: 'esm', write: false });
  return import('data:text/javascript,' + encodeURIComponent(out.outputFiles[0].text));
};
const { fmtNum, parseNum, tickLabels, timeAxisTitle, timeLabels } = await load('util.ts');
const { histogramPercentiles, BAND_PERCENTILES } = await load('percentiles.ts');
const { sections, isInternal, isUserSeries } = await load('groups.ts');

test('numbers stay short: SI above 1e4, short exponents beyond, plain between', () => {
  assert.equal(fmtNum(1.5e32), '1.5e32');
  assert.equal(fmtNum(-4.25e5), '-425k');
  assert.equal(fmtNum(12345), '12.3k');
  assert.equal(fmtNum(9999.9), '10k');
  assert.equal(fmtNum(2.5e9), '2.5G');
  assert.equal(fmtNum(0.05), '0.05');
  assert.equal(fmtNum(0.0005), '5e-4');
  assert.equal(fmtNum(0), '0');
  for (const v of [1.5e32, -4.25e5, 123456789, 0.000123, 1e-30, 3.14159]) assert.ok(fmtNum(v).length <= 7, fmtNum(v));
});

test('tick labels take the fewest digits that keep ticks apart', () => {
  assert.deepEqual(tickLabels([0, 0.5, 1, 1.5]), ['0', '0.5', '1', '1.5']);
  assert.deepEqual(tickLabels([1000.1, 1000.2, 1000.3]), ['1000.1', '1000.2', '1000.3']);
  assert.deepEqual(tickLabels([0, 2e32, 4e32]), ['0', '2e32', '4e32']);
  assert.deepEqual(tickLabels([250000, 500000, 750000]), ['250k', '500k', '750k']);
});

test('tick labels name the values they sit at, never a rounded neighbour', () => {
  assert.deepEqual(tickLabels([100, 125, 150, 175]), ['100', '125', '150', '175']);
  assert.deepEqual(tickLabels([10, 12.5, 15]), ['10', '12.5', '15']);
  assert.deepEqual(tickLabels([1, 1.25, 1.5]), ['1', '1.25', '1.5']);
  assert.deepEqual(tickLabels([0.1, 1.3, 10, 100]), ['0.1', '1.3', '10', '100']);
  for (const vals of [[0, 0.2, 0.4, 0.6], [1e-5, 2e-5, 3e-5], [120000, 125000, 130000], [-1e20, -1e10, 0, 1e10]]) {
    for (const [i, label] of tickLabels(vals).entries()) assert.ok(Math.abs(parseNum(label) - vals[i]) <= 1e-9 * Math.max(1, Math.abs(vals[i])), `${label} for ${vals[i]}`);
  }
});

test('wall-clock labels: time of day to the precision the spacing needs', () => {
  const t0 = new Date(2026, 11, 3, 12, 5, 0).getTime() / 1000;
  assert.deepEqual(timeLabels([t0, t0 + 60], 60), ['12:05', '12:06']);
  assert.deepEqual(timeLabels([t0 + 16, t0 + 17], 1), ['12:05:16', '12:05:17']);
  assert.deepEqual(timeLabels([t0 + 16, t0 + 16.5], 0.5), ['12:05:16.0', '12:05:16.5']);
  assert.equal(timeAxisTitle(t0, t0 + 3600), 'wall time, 2026-12-03');
});

test('percentiles of |x| from an exponent histogram', () => {
  // 100 values in [1, 2), 100 in [2, 4): the median is at the boundary, the 25th inside [1, 2).
  const p = histogramPercentiles([100, 100], 0, 0, [0, 25, 50, 75, 100]);
  assert.equal(p[0], 1);
  assert.ok(Math.abs(p[1] - 2 ** 0.5) < 1e-12, String(p[1]));
  assert.equal(p[2], 2);
  assert.ok(Math.abs(p[3] - 2 ** 1.5) < 1e-12);
  assert.equal(p[4], 4);
  // Zeros come first; abs max caps the top.
  const z = histogramPercentiles([10], -3, 30, [0, 50, 100], 0.2);
  assert.deepEqual([z[0], z[1]], [0, 0]);
  assert.equal(z[2], 0.2);
  assert.deepEqual(histogramPercentiles([0, 0], 0, 0, BAND_PERCENTILES), BAND_PERCENTILES.map(() => null));
  // Monotone over the band percentiles.
  const band = histogramPercentiles([3, 50, 200, 40, 1], -10, 5, BAND_PERCENTILES);
  for (let i = 1; i < band.length; i++) assert.ok(band[i] >= band[i - 1], band.join());
});

test('the user\'s series first, trainscope\'s own in collapsed sections of their own', () => {
  const tags = ['census/dict', 'sys/cpu', 'train/grad_zeroed', 'input/label_min', 'train/loss', 'train/acc', 'val/loss',
                'test/loss', 'opt/lr', 'grad/global_norm', 'custom/thing'];
  const s = sections(tags);
  assert.deepEqual(s.map((x) => x.title), ['train', 'val', 'test', 'custom', 'grad', 'opt', 'input', 'sys', 'census',
                                           'train/grad_zeroed']);
  assert.deepEqual(s[0].tags, ['train/loss', 'train/acc']);
  assert.deepEqual(s.filter((x) => x.internal).map((x) => x.title), ['input', 'sys', 'census', 'train/grad_zeroed']);
  assert.ok(isInternal('census/_frozen_importlib_external.SourceFileLoader'));
  assert.ok(!isUserSeries('train/grad_zeroed') && isUserSeries('train/loss') && !isUserSeries('opt/lr'));
});
