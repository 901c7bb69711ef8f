// The dashboard's charts against what was recorded, in headless Chromium (issue 30): runs
// whose pictures are known in advance (truth_fixture.py) are opened tab by tab and what is
// drawn is read back from the page — uPlot's tick values and labels, the heatmaps' HTML
// ticks and their canvases' pixels — and compared with the data:
//   - every tick label reads back as the value it sits at (step, wall-time, log axes), step
//     axes tick whole steps, linear axes 1-2-5 spacings;
//   - a run that holds NaN from step k: from k on every tensor view shows the non-finite
//     colour and no view draws a finite value;
//   - a tensor sampled every 100 steps: no heatmap column and no curve between samples;
//   - the charts and heatmaps of a tab put a step at the same x on the screen;
//   - values from 1 to 1e22 are drawn on a log axis (signed ones on symlog) with the data visible;
//   - several runs selected: every tab shows each, marks and badges follow their run;
//   - hover values match the API at the cursor's step; a legend click hides a run;
//   - a chart's CSV holds what was logged; its PNG is a PNG;
//   - ignore outliers, a chart's own log y, x = a logged scalar, runs grouped by config (mean, band);
//   - Sweep: parallel coordinates and the table over the runs of a sweep;
//   - Performance: the phases add up to the step, throughput is 1 / step time, units on axes.
// Run through tests/e2e/run.sh; screenshots go to <build>/test-artifacts/truth/.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { browser, build, checks, python, pythonPath, repo, run, serve } from './harness.mjs';

const artifacts = join(build, 'test-artifacts', 'truth');
mkdirSync(artifacts, { recursive: true });
const work = mkdtempSync(join(tmpdir(), 'ts-truth-'));
const logdir = join(work, 'runs');
console.log('truth: recording the fixture runs');
console.log('  ' + run(python, [join(repo, 'tests/e2e/truth_fixture.py'), logdir], { PYTHONPATH: pythonPath, OMP_NUM_THREADS: '1' }).trim().split('\n').pop());
const server = await serve(logdir);
const { page, errors, close } = await browser({ width: 1440, height: 900 });
const { check, failed, results } = checks();
const api = async (path) => (await fetch(server.base + 'api/' + path)).json();

async function open(runName, tab, extra = '') {
  await page.goto('about:blank');
  await page.goto(`${server.base}?static=1#runs=${encodeURIComponent(runName)}&tab=${tab}${extra}`);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 20000 });
  await page.screenshot({ path: join(artifacts, `${runName}-${tab}${extra.replace(/[^a-z0-9]+/gi, '-')}.png`), fullPage: true });
}

// ---- in the page ----

// Every tick of every uPlot axis and heatmap step axis: does its label name its value?
function tickAudit() {
  const SI = { k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  const num = (s) => {
    const m = /^(-?[0-9.]+(?:e-?[0-9]+)?)([kMGT]?)$/.exec(s.trim());
    return m ? Number(m[1]) * (SI[m[2]] || 1) : NaN;
  };
  const out = { axes: 0, labels: 0, kinds: [], problems: [] };
  for (const wrap of document.querySelectorAll('.chart')) {
    const u = wrap.plot;
    if (!u) continue;
    const name = wrap.dataset.tag || wrap.dataset.name;
    u.axes.forEach((axis, i) => {
      if (axis.show === false || !axis._splits || !axis._values) return;
      const sc = u.scales[axis.scale];
      const splits = axis._splits, labels = axis._values;
      const shown = splits.filter((v, j) => v != null && labels[j]);
      out.axes++;
      const kind = sc.time ? 'time' : i === 0 ? 'step' : sc.distr === 3 ? 'log' : sc.distr === 4 ? 'symlog' : 'linear';
      if (!out.kinds.includes(kind)) out.kinds.push(kind);
      let spacing = Infinity;
      for (let j = 1; j < shown.length; j++) spacing = Math.min(spacing, Math.abs(shown[j] - shown[j - 1]));
      if (!Number.isFinite(spacing)) spacing = Math.abs(shown[0]) || 1;
      splits.forEach((v, j) => {
        const text = labels[j];
        if (v == null || !text) return;
        out.labels++;
        if (sc.time) {
          const d = new Date(v * 1000);
          const t = /^(\d\d):(\d\d)(?::(\d\d(?:\.\d+)?))?$/.exec(text);
          const day = /^(\d+)\/(\d+)$/.exec(text);
          const actual = d.getHours() * 3600 + d.getMinutes() * 60 + d.getSeconds() + d.getMilliseconds() / 1000;
          if (t) {
            const said = Number(t[1]) * 3600 + Number(t[2]) * 60 + Number(t[3] || 0);
            if (Math.abs(said - actual) > 1e-3) out.problems.push(`${name}: time label "${text}" at ${d.toISOString()}`);
          } else if (!day || Number(day[1]) !== d.getMonth() + 1 || Number(day[2]) !== d.getDate()) {
            out.problems.push(`${name}: time label "${text}" at ${d.toISOString()}`);
          }
          return;
        }
        const tolerance = kind === 'log' || kind === 'symlog' ? 1e-6 * Math.abs(v) : 1e-6 * spacing;
        if (!(Math.abs(num(text) - v) <= tolerance)) out.problems.push(`${name} axis ${i} (${kind}): "${text}" at ${v}`);
      });
      if (kind === 'step' && axis.label === 'step' && shown.some((v) => !Number.isInteger(v))) {
        out.problems.push(`${name}: step ticks ${shown} not whole steps`);
      }
      if ((kind === 'linear' || kind === 'step') && shown.length >= 2) {
        const incr = shown[1] - shown[0];
        const mantissa = incr / 10 ** Math.floor(Math.log10(incr) + 1e-9);
        if (![1, 2, 5].some((m) => Math.abs(mantissa - m) < 1e-6)) out.problems.push(`${name}: ticks ${incr} apart`);
      }
    });
  }
  for (const wrap of document.querySelectorAll('.heatmap')) {
    const canvas = wrap.querySelector('canvas');
    if (!canvas) continue;
    const x0 = Number(wrap.dataset.x0), x1 = Number(wrap.dataset.x1);
    const box = canvas.getBoundingClientRect();
    const ticks = wrap.querySelectorAll('.hm-tick');
    if (ticks.length) out.axes++;
    for (const t of ticks) {
      const v = Number(t.dataset.value);
      out.labels++;
      if (num(t.textContent) !== v || !Number.isInteger(v)) out.problems.push(`${wrap.dataset.name}: step tick "${t.textContent}" at ${v}`);
      const r = t.getBoundingClientRect();
      const off = (r.left + r.right) / 2 - box.left - ((v - x0) / (x1 - x0)) * box.width;
      if (Math.abs(off) > 1.5) out.problems.push(`${wrap.dataset.name}: tick "${t.textContent}" ${off.toFixed(1)} px off its step`);
    }
  }
  return out;
}

// What each heatmap and chart draws at steps >= `from`: finite-coloured cells, non-finite
// (magenta) cells, finite values in the chart's data, magenta ticks on the chart's top edge.
function drawnFrom(from) {
  const magenta = (p) => p[0] > 200 && p[1] < 80 && p[2] > 200;
  const blank = (p) => p[3] === 0 || (p[0] > 240 && p[1] > 240 && p[2] > 240);
  const selection = (p) => p[0] > 180 && p[1] < 80 && p[2] < 80;  // the picked row's red outline
  const out = { heatmaps: [], charts: [] };
  for (const wrap of document.querySelectorAll('.heatmap')) {
    const canvas = wrap.querySelector('canvas');
    if (!canvas) continue;
    const x0 = Number(wrap.dataset.x0), x1 = Number(wrap.dataset.x1), rows = Number(wrap.dataset.rows);
    const W = canvas.width, H = canvas.height;
    const img = canvas.getContext('2d').getImageData(0, 0, W, H).data;
    const h = { name: wrap.dataset.name, columns: 0, finite: 0, magentaColumns: 0 };
    for (let p = 0; p < W; p++) {
      if (x0 + ((p + 0.5) / W) * (x1 - x0) < from) continue;
      h.columns++;
      let any = false;
      for (let r = 0; r < rows; r++) {
        const i = (Math.floor(((r + 0.5) * H) / rows) * W + p) * 4;
        const px = img.slice(i, i + 4);
        if (magenta(px)) any = true;
        else if (!blank(px) && !selection(px)) h.finite++;
      }
      if (any) h.magentaColumns++;
    }
    out.heatmaps.push(h);
  }
  for (const wrap of document.querySelectorAll('.chart')) {
    const u = wrap.plot;
    if (!u || u.scales.x.time) continue;
    const c = { name: wrap.dataset.tag || wrap.dataset.name, finite: 0, magentaTicks: 0 };
    for (let s = 1; s < u.data.length; s++) {
      u.data[0].forEach((x, i) => { if (x >= from && Number.isFinite(u.data[s][i])) c.finite++; });
    }
    const img = u.ctx.getImageData(u.bbox.left, u.bbox.top, u.bbox.width, 3).data;
    for (let p = 0; p < u.bbox.width; p++) {
      if (u.posToVal(p / devicePixelRatio, 'x') >= from && magenta(img.slice(p * 4, p * 4 + 4))) c.magentaTicks++;
    }
    out.charts.push(c);
  }
  return out;
}

// The steps at which each heatmap drew a column (any pixel not blank).
function drawnSteps() {
  const blank = (p) => p[3] === 0 || (p[0] > 240 && p[1] > 240 && p[2] > 240);
  const out = [];
  for (const wrap of document.querySelectorAll('.heatmap')) {
    const canvas = wrap.querySelector('canvas');
    if (!canvas) continue;
    const x0 = Number(wrap.dataset.x0), x1 = Number(wrap.dataset.x1);
    const W = canvas.width, H = canvas.height;
    const img = canvas.getContext('2d').getImageData(0, 0, W, H).data;
    const steps = [];
    for (let p = 0; p < W; p++) {
      for (let y = 0; y < H; y++) {
        const i = (y * W + p) * 4;
        if (!blank(img.slice(i, i + 4))) {
          steps.push(x0 + ((p + 0.5) / W) * (x1 - x0));
          break;
        }
      }
    }
    out.push({ name: wrap.dataset.name, steps, stepsPerPixel: (x1 - x0) / W });
  }
  return out;
}

// ---- the checks ----
try {
  await check('every tick label names the value it sits at (step, wall-time, relative, log, symlog, heatmap axes)', async () => {
    const kinds = new Set();
    let labels = 0;
    const problems = [];
    const pages = [['nan-at-40', 'overview'], ['nan-at-40', 'gradients'], ['nan-at-40', 'activations'],
                   ['nan-at-40', 'performance'], ['sparse-100', 'distributions'], ['explode', 'scalars'],
                   ['nan-at-40', 'scalars', '&x=wall'], ['sparse-100', 'scalars', '&x=relative'], ['explode', 'scalars', '&x=wall']];
    for (const [runName, tab, extra] of pages) {
      await open(runName, tab, extra);
      const a = await page.evaluate(tickAudit);
      a.kinds.forEach((k) => kinds.add(k));
      labels += a.labels;
      problems.push(...a.problems.map((p) => `${runName}/${tab}${extra || ''}: ${p}`));
    }
    console.log(`       ${labels} labels read back; axis kinds ${[...kinds].join(', ')}`);
    assert.deepEqual(problems, []);
    for (const k of ['step', 'time', 'linear', 'log', 'symlog']) assert.ok(kinds.has(k), `no ${k} axis was checked`);
  });

  await check('a run that holds NaN from step k: every tensor view shows it from k on, none draws a finite value', async () => {
    const loss = await api('scalars?run=nan-at-40&tag=train/loss');
    const k = loss.step[loss.nonfinite.findIndex((n) => n > 0)];
    assert.equal(k, 40, 'the fixture turns NaN at step 40');
    // Shown from step k + 1 on: the weights turn NaN after step k's update, the tensors of
    // step k itself may be read before or after it.
    const from = k + 1;
    const problems = [];
    let heatmaps = 0, charts = 0;
    for (const [tab, extra] of [['overview', ''], ['scalars', ''], ['gradients', ''], ['activations', ''],
                                ['distributions', ''], ['distributions', '&family=act&layer=1'],
                                ['distributions', '&family=update&layer=2.weight']]) {
      await open('nan-at-40', tab, extra);
      const d = await page.evaluate(drawnFrom, from);
      for (const h of d.heatmaps) {
        heatmaps++;
        if (h.finite) problems.push(`${tab}${extra}: heatmap ${h.name} draws ${h.finite} finite cells after step ${k}`);
        if (h.magentaColumns < 0.9 * h.columns) problems.push(`${tab}${extra}: heatmap ${h.name} non-finite in ${h.magentaColumns} of ${h.columns} pixel columns after step ${k}`);
      }
      for (const c of d.charts) {
        // Not tensors of the model: the schedule, clocks, memory and the batch stay finite.
        if (/^(opt\/lr|overview-lr|step-time|throughput|time\/|mem\/|train\/grad_zeroed|input\/)/.test(c.name)) continue;
        charts++;
        if (c.finite) problems.push(`${tab}${extra}: chart ${c.name} has ${c.finite} finite values after step ${k}`);
        if (!c.magentaTicks) problems.push(`${tab}${extra}: chart ${c.name} shows no NaN/Inf mark after step ${k}`);
      }
    }
    console.log(`       ${heatmaps} heatmaps and ${charts} charts read back after step ${k}`);
    assert.deepEqual(problems, []);
    assert.ok(heatmaps >= 6 && charts >= 6, `${heatmaps} heatmaps, ${charts} charts`);
  });

  // run.watch takes every statistic at each of the first 50 steps; the sparse part follows.
  await check('a tensor sampled every 100 steps: no view draws anything between samples', async () => {
    const dense = 60;
    const problems = [];
    let columns = 0;
    // The samples each view draws: histograms (has_hist), per-unit vectors, every statistic.
    const views = [['gradients', '', 'exponent-histogram', 'grad/0.weight', 'hist'], ['gradients', '', 'unit-norms', 'grad_units/0.weight', 'vectors'],
                   ['distributions', '&family=act&layer=1', 'exponent-histogram', 'act/1', 'hist'],
                   ['activations', '', 'dead-fraction', 'act/1', 'stats']];
    for (const [tab, extra, name, tag, kind] of views) {
      const stats = kind === 'vectors' ? await api(`vectors?run=sparse-100&tag=${tag}`)
        : await api(`tensor_stats?run=sparse-100&tag=${tag}${kind === 'hist' ? '&hist=1' : ''}`);
      const samples = stats.step.filter((s, i) => s >= dense && (!stats.has_hist || stats.has_hist[i]));
      // Every 100th step, and one more where watch measures the forward after a jump of the norm.
      assert.ok(samples.length >= 3 && samples.length <= 8, `${tag} samples ${samples}`);
      await open('sparse-100', tab, extra);
      const drawn = (await page.evaluate(drawnSteps)).find((h) => h.name === name);
      assert.ok(drawn, `no heatmap ${name} on ${tab}${extra}`);
      const reach = Math.max(1, 2 * drawn.stepsPerPixel) + drawn.stepsPerPixel;
      // A sample's column is its step ± 0.5 (at least 2 px wide).
      const stray = drawn.steps.filter((s) => s >= dense && !samples.some((t) => s >= t - 0.5 - drawn.stepsPerPixel && s < t - 0.5 + reach));
      if (stray.length) problems.push(`${name} (${tag}): columns at steps ${stray.slice(0, 5).map((s) => s.toFixed(1))} between samples ${samples}`);
      const shown = samples.filter((t) => drawn.steps.some((s) => s >= t - 0.5 - drawn.stepsPerPixel && s < t - 0.5 + reach));
      if (shown.length !== samples.length) problems.push(`${name} (${tag}): ${shown.length} of ${samples.length} samples drawn`);
      columns += drawn.steps.length;
    }
    // Curves of the sampled statistics: points (percentile columns) at the samples, nothing between.
    let charts = 0;
    // The steps any sampled statistic has (every 100th, and a forward measured after a jump).
    const sampledOf = async (q) => (await api(`tensor_stats?run=sparse-100&${q}`)).step;
    const sampled = [...new Set([...await sampledOf('tag=act/1'), ...await sampledOf('tag=weight/0.weight'),
                                 ...(await api('tensor_stats?run=sparse-100&tag=grad/0.weight&hist=1')).step])].filter((t) => t >= dense);
    // (The gradients' moments are taken every step: only their histograms are sampled.)
    for (const [tab, extra, names] of [['distributions', '', ['percentile-bands']],
                                       ['distributions', '&family=act&layer=1', ['percentile-bands', 'moments']],
                                       ['activations', '', ['act-std', 'act-mean']], ['gradients', '', ['update-ratio']]]) {
      await open('sparse-100', tab, extra);
      const drawn = await page.evaluate(([from, names]) => [...document.querySelectorAll('.chart[data-name]')].map((w) => {
        const u = w.plot;
        if (!u || !names.includes(w.dataset.name)) return null;
        const { left, top, width, height } = u.bbox;
        const img = u.ctx.getImageData(left, top, width, height).data;
        const steps = [];
        for (let p = 0; p < width; p++) {
          const step = u.posToVal(p / devicePixelRatio, 'x');
          if (step < from) continue;
          for (let y = 0; y < height; y++) {
            const i = (y * width + p) * 4;
            // The update ratios' healthy band and reference line (green, r = b) are no data.
            const healthyBand = Math.abs(img[i] - img[i + 2]) < 6 && img[i + 1] > 2.5 * img[i];
            if (img[i + 3] > 40 && !healthyBand && Math.max(img[i], img[i + 1], img[i + 2]) - Math.min(img[i], img[i + 1], img[i + 2]) > 60) {
              steps.push(step);
              break;
            }
          }
        }
        return { name: w.dataset.name, steps, stepsPerPixel: (u.scales.x.max - u.scales.x.min) / (width / devicePixelRatio) };
      }).filter(Boolean), [dense, names]);
      for (const c of drawn) {
        charts++;
        const near = 6 * c.stepsPerPixel;
        const stray = c.steps.filter((s) => !sampled.some((t) => Math.abs(s - t) <= near));
        if (stray.length) problems.push(`${tab}${extra}: ${c.name} drew at steps ${stray.slice(0, 5).map((s) => s.toFixed(1))}, between the samples ${sampled}`);
        if (!c.steps.length) problems.push(`${tab}${extra}: ${c.name} drew no sample after step ${dense}`);
      }
    }
    console.log(`       ${columns} drawn pixel columns, all at samples; ${charts} curve charts drawn as samples`);
    assert.deepEqual(problems, []);
    assert.ok(charts >= 5, `${charts} curve charts checked`);
  });

  await check('the charts and heatmaps of a tab put each step at the same x on the screen', async () => {
    const problems = [];
    let pictures = 0;
    for (const [runName, tab, extra] of [['nan-at-40', 'gradients', ''], ['nan-at-40', 'activations', ''],
                                         ['sparse-100', 'distributions', ''], ['sparse-100', 'distributions', '&family=act&layer=1']]) {
      await open(runName, tab, extra);
      const xs = await page.evaluate(() => {
        const out = [];
        for (const w of document.querySelectorAll('.chart[data-name]')) {
          const u = w.plot;
          if (!u) continue;
          const left = u.over.getBoundingClientRect().left;
          out.push({ name: w.dataset.name, at: (s) => left + u.valToPos(s, 'x'), range: [u.scales.x.min, u.scales.x.max] });
        }
        for (const w of document.querySelectorAll('.heatmap')) {
          const c = w.querySelector('canvas');
          if (!c) continue;
          const r = c.getBoundingClientRect(), x0 = Number(w.dataset.x0), x1 = Number(w.dataset.x1);
          out.push({ name: w.dataset.name, at: (s) => r.left + ((s - x0) / (x1 - x0)) * r.width, range: [x0, x1] });
        }
        const lo = Math.ceil(Math.max(...out.map((o) => o.range[0]))), hi = Math.floor(Math.min(...out.map((o) => o.range[1])));
        return out.map((o) => ({ name: o.name, lo: o.at(lo), hi: o.at(hi), steps: [lo, hi] }));
      });
      pictures += xs.length;
      for (const x of xs.slice(1)) {
        if (Math.abs(x.lo - xs[0].lo) > 1.5 || Math.abs(x.hi - xs[0].hi) > 1.5) {
          problems.push(`${runName}/${tab}${extra}: steps ${x.steps} at x ${x.lo.toFixed(1)}, ${x.hi.toFixed(1)} in ${x.name}, `
                        + `${xs[0].lo.toFixed(1)}, ${xs[0].hi.toFixed(1)} in ${xs[0].name}`);
        }
      }
    }
    assert.deepEqual(problems, []);
    assert.ok(pictures >= 10, `${pictures} pictures compared`);
  });

  await check('values from 1 to 1e22 are drawn on a log axis, signed ones on symlog, and the charts say so', async () => {
    await open('explode', 'scalars');
    const info = await page.evaluate(() => [...document.querySelectorAll('.chart[data-tag]')].map((w) => {
      const u = w.plot;
      const img = u.ctx.getImageData(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height).data;
      const coloured = [0, 0, 0];  // coloured pixels in the plot's top, middle and bottom thirds
      for (let i = 0; i < img.length; i += 4) {
        if (img[i + 3] > 0 && !(img[i] > 200 && img[i + 1] > 200 && img[i + 2] > 200)) {
          coloured[Math.min(2, Math.floor((3 * Math.floor(i / 4 / u.bbox.width)) / u.bbox.height))]++;
        }
      }
      return { tag: w.dataset.tag, yscale: w.dataset.yscale, min: u.scales.y.min, max: u.scales.y.max, coloured,
               note: w.querySelector('.scale-note')?.textContent || '' };
    }));
    const loss = info.find((c) => c.tag === 'train/loss'), drift = info.find((c) => c.tag === 'train/drift');
    assert.equal(loss.yscale, 'log', JSON.stringify(loss));
    assert.ok(loss.min <= 1.0001 && loss.max >= 0.999e22, JSON.stringify(loss));
    assert.ok(loss.coloured.every((n) => n > 20), `loss curve drawn in every third of the plot: ${loss.coloured}`);
    assert.match(loss.note, /log y: values span 22 decades/);
    assert.equal(drift.yscale, 'symlog', JSON.stringify(drift));
    assert.ok(drift.min <= -1e20, JSON.stringify(drift));
    assert.match(drift.note, /symlog y/);
    await open('explode', 'overview');
    assert.equal(await page.locator('.chart[data-name="overview-loss"]').getAttribute('data-yscale'), 'log');
    // And a healthy loss keeps its linear axis.
    await open('sparse-100', 'scalars');
    assert.equal(await page.locator('.chart[data-tag="train/loss"]').getAttribute('data-yscale'), 'linear');
  });

  await check('several runs selected: every tab shows each of them, and marks follow their run', async () => {
    const runs = ['nan-at-40', 'explode', 'sparse-100'];
    for (const tab of ['overview', 'distributions', 'gradients', 'activations', 'performance', 'numerics']) {
      await open(runs.join(','), tab);
      const blocks = await page.evaluate(() => [...document.querySelectorAll('.run-block')].map((b) => ({
        run: b.dataset.run, head: b.querySelector('.run-head')?.textContent || '',
        content: b.querySelectorAll('.chart, .heatmap, table, .empty, .none, .finding-group').length,
        markers: [...b.querySelectorAll('.finding-marker')].map((m) => m.dataset.code),
      })));
      assert.deepEqual(blocks.map((b) => b.run), runs, `${tab}: run blocks`);
      for (const b of blocks) {
        assert.ok(b.head.includes(b.run) && b.content > 0, `${tab}: block of ${b.run}: ${JSON.stringify(b)}`);
      }
      // A run's findings are marked in its own block only: explode's LOSS_DIVERGENCE nowhere else.
      for (const b of blocks) {
        if (b.run !== 'explode') assert.ok(!b.markers.includes('LOSS_DIVERGENCE'), `${tab}: ${b.run} shows explode's finding`);
      }
    }
    await open(runs.join(','), 'scalars');
    const charts = await page.evaluate(() => [...document.querySelectorAll('.chart[data-tag]')].map((c) => ({
      tag: c.dataset.tag,
      keys: [...c.querySelectorAll('.run-key')].map((k) => ({ run: k.dataset.run, color: k.querySelector('.key').style.color,
                                                            nonfinite: k.querySelector('.badge.nonfinite')?.textContent || '' })),
      markers: [...c.querySelectorAll('.finding-marker')].map((m) => ({ run: m.dataset.run, color: m.style.background })),
    })));
    const loss = charts.find((c) => c.tag === 'train/loss');
    assert.deepEqual(loss.keys.map((k) => k.run), runs);
    assert.match(loss.keys[0].nonfinite, /^\d+ NaN\/Inf$/, 'the NaN badge beside nan-at-40');
    assert.deepEqual(loss.keys.slice(1).map((k) => k.nonfinite), ['', ''], 'no NaN badge beside the finite runs');
    let markers = 0;
    for (const c of charts) {
      for (const m of c.markers) {
        markers++;
        const key = c.keys.find((k) => k.run === m.run);
        assert.ok(key, `${c.tag}: a marker of ${m.run}, not on this chart`);
        assert.equal(m.color, key.color, `${c.tag}: ${m.run}'s marker in its run's colour`);
      }
    }
    assert.ok(markers >= 1, 'no finding marker to check');
  });

  await check("hover shows each run's value at the cursor's step; a legend click hides and shows a run", async () => {
    await open('nan-at-40,sparse-100', 'scalars');
    const chart = page.locator('.chart[data-tag="train/loss"]');
    const over = await chart.locator('.u-over').boundingBox();
    await page.mouse.move(over.x + over.width * 0.2, over.y + over.height / 2);
    const tip = chart.locator('.hover-values');
    await tip.waitFor({ state: 'visible', timeout: 5000 });
    const text = await tip.innerText();
    const step = Number(/step (\d+)/.exec(text)?.[1]);
    assert.ok(Number.isInteger(step), text);
    for (const runName of ['nan-at-40', 'sparse-100']) {
      const b = await api(`scalars?run=${runName}&tag=train/loss&width=2000`);
      const i = b.step.indexOf(step);
      const said = new RegExp(`${runName}: (\\S+)`).exec(text)?.[1];
      assert.ok(i >= 0 && said !== undefined, `${runName} at step ${step}: ${text}`);
      // A bucket that held only NaN/Inf says so (its `last` is null in the API).
      if (b.last[i] === null) assert.equal(said, 'NaN/Inf', `${runName} at step ${step}`);
      else assert.ok(Math.abs(Number(said) - b.last[i]) <= 1e-3 * Math.abs(b.last[i]), `${runName}: "${said}" vs ${b.last[i]}`);
    }
    const shown = () => page.evaluate(() => {
      const u = document.querySelector('.chart[data-tag="train/loss"]').plot;
      return u.series.slice(1).filter((x) => x.label === 'sparse-100').map((x) => x.show);
    });
    await chart.locator('.run-key[data-run="sparse-100"]').click();
    assert.deepEqual(await shown(), [false]);
    await page.mouse.move(over.x + over.width * 0.3, over.y + over.height / 2);
    assert.ok(!(await tip.innerText()).includes('sparse-100'), 'a hidden run stays out of the hover values');
    await chart.locator('.run-key[data-run="sparse-100"]').click();
    assert.deepEqual(await shown(), [true]);
  });

  await check('ignore outliers, a chart\'s own log y, x = a logged scalar, runs grouped by a config key', async () => {
    const plotOf = (tag) => page.evaluate((t) => {
      const w = document.querySelector(`.chart[data-tag="${t}"]`), u = w.plot;
      return { y: [u.scales.y.min, u.scales.y.max], distr: u.scales.y.distr, x: [...u.data[0]], xLabel: u.axes[0].label,
               series: u.series.map((s) => s.label), data: u.data.map((d) => [...d]), yscale: w.dataset.yscale };
    }, tag);
    await open('seed-0', 'scalars');
    assert.ok((await plotOf('train/loss')).y[1] >= 1000, 'the spike sets the range');
    await open('seed-0', 'scalars', '&robust=1');
    const robust = await plotOf('train/loss');
    assert.ok(robust.y[1] < 10, `ignoring outliers, the y range ends at ${robust.y[1]}`);
    await page.locator('.chart[data-tag="train/loss"] [data-tool=log]').click();
    await page.waitForFunction(() => document.querySelector('.chart[data-tag="train/loss"]')?.plot?.scales.y.distr === 3);
    await open('seed-0', 'scalars', '&x=tag%3Aepoch');
    const byEpoch = await plotOf('train/loss');
    assert.equal(byEpoch.xLabel, 'epoch');
    assert.ok(Math.abs(byEpoch.x[byEpoch.x.length - 1] - 9.9) < 1e-9 && byEpoch.x[0] === 0, `epochs ${byEpoch.x.slice(0, 3)}…`);
    await open('seed-0,seed-1,seed-2', 'scalars', '&group=lr');
    const grouped = await plotOf('train/loss');
    const mean = grouped.series.indexOf('lr=0.1 (2 runs)'), single = grouped.series.indexOf('lr=0.01 (1 run)');
    assert.ok(mean > 0 && single > 0, grouped.series.join(', '));
    const at = grouped.x.indexOf(9);
    assert.ok(Math.abs(grouped.data[mean][at] - 1.5 / 10) < 1e-9, `mean of lr=0.1 at step 9: ${grouped.data[mean][at]}`);
    assert.ok(Math.abs(grouped.data[mean - 2][at] - 2 / 10) < 1e-9 && Math.abs(grouped.data[mean - 1][at] - 1 / 10) < 1e-9,
              'its band runs from the min to the max of its runs');
    assert.ok(Math.abs(grouped.data[single][at] - 4 / 10) < 1e-9);
  });

  await check('Sweep: parallel coordinates over the differing config keys and a final metric, and the table', async () => {
    await open('seed-0', 'sweep', '&filter=seed&metric=train%2Floss');
    const lines = await page.evaluate(() => [...document.querySelectorAll('svg.parallel .run-line')].map((l) => ({
      run: l.dataset.run, points: l.getAttribute('points').split(' ').map((p) => p.split(',').map(Number)) })));
    const axes = await page.evaluate(() => [...document.querySelectorAll('svg.parallel .axis-line')].map((a) => a.dataset.key));
    assert.deepEqual(axes, ['c:lr', 'c:seed', 'm:train/loss']);
    assert.deepEqual(lines.map((l) => l.run).sort(), ['seed-0', 'seed-1', 'seed-2']);
    // Final losses 1/100, 2/100, 4/100: higher on the metric axis (smaller y) for a larger loss.
    const yOf = (run) => lines.find((l) => l.run === run).points[2][1];
    assert.ok(yOf('seed-2') < yOf('seed-1') && yOf('seed-1') < yOf('seed-0'), lines.map((l) => `${l.run} ${l.points[2]}`).join('; '));
    assert.ok(yOf('seed-0') > yOf('seed-2'));
    // Each axis' end labels name the values its lines reach there: the lowest at the bottom.
    const ticks = await page.evaluate(() => [...document.querySelectorAll('svg.parallel .axis-tick')].map((t) => ({
      x: Number(t.getAttribute('x')), y: Number(t.getAttribute('y')), text: t.textContent })));
    const at = (x) => ticks.filter((t) => Math.abs(t.x - x) < 1).sort((a, b) => a.y - b.y).map((t) => t.text);
    const axisX = await page.evaluate(() => [...document.querySelectorAll('svg.parallel .axis-line')].map((a) => Number(a.getAttribute('x1')) + 5));
    assert.deepEqual(at(axisX[0]), ['0.1', '0.01'], 'lr axis: 0.1 on top, 0.01 at the bottom');
    assert.deepEqual(at(axisX[2]), ['0.04', '0.01'], 'train/loss axis: its final losses');
    const rows = await page.locator('table.sweep tbody tr').evaluateAll((trs) => trs.map((t) => t.dataset.run));
    assert.deepEqual(rows, ['seed-0', 'seed-1', 'seed-2'], 'lowest loss first');
  });

  await check('a chart exports its data as CSV and its picture as PNG', async () => {
    await open('explode', 'scalars');
    const chart = page.locator('.chart[data-tag="train/loss"]');
    const [csv] = await Promise.all([page.waitForEvent('download'), chart.locator('[data-tool=csv]').click()]);
    const rows = readFileSync(await csv.path(), 'utf8').trim().split('\n').map((r) => r.split(','));
    const column = rows[0].indexOf('"explode"');
    assert.ok(column > 0, rows[0].join(','));
    assert.equal(rows.length - 1, 150);
    for (const r of rows.slice(1)) {
      const step = Number(r[0]), v = Number(r[column]);
      assert.ok(Math.abs(v - 10 ** ((22 * step) / 149)) <= 1e-9 * v, `step ${step}: ${v}`);
    }
    const [png] = await Promise.all([page.waitForEvent('download'), chart.locator('[data-tool=png]').click()]);
    assert.equal(readFileSync(await png.path()).subarray(0, 4).toString('latin1'), '\x89PNG');
  });

  await check('Performance adds up: phases to the step time, throughput from step times, units on the axes', async () => {
    const spans = await api('spans?run=nan-at-40&width=400');
    assert.ok(spans.phases.includes('other'), spans.phases);
    spans.step.forEach((_, i) => {
      const sum = spans.phases.reduce((a, p) => a + spans.mean[p][i], 0);
      assert.ok(Math.abs(sum - spans.step_time[i]) <= 1e-9, `bucket ${i}: phases ${sum} vs step ${spans.step_time[i]}`);
    });
    // One step a bucket: the steps' times add up to the run's clock from first to last start.
    const n = spans.step.length;
    const clock = spans.start[n - 1] - spans.start[0];
    const summed = spans.step_time.slice(0, n - 1).reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(summed - clock) <= 1e-6 * Math.max(1, clock), `steps add to ${summed} s, the clock says ${clock} s`);
    await open('nan-at-40', 'performance');
    const drawn = await page.evaluate(() => {
      const of = (name) => document.querySelector(`.chart[data-name="${name}"]`).plot;
      const stack = of('step-time'), throughput = of('throughput');
      const rss = document.querySelector('.chart[data-tag="mem/rss"]')?.plot;
      return { top: [...stack.data[1]], steps: [...stack.data[0]], throughput: [...throughput.data[1]],
               rssLabel: rss?.axes[1].label, stepLabel: stack.axes[1].label };
    });
    drawn.top.forEach((v, i) => assert.ok(Math.abs(v - spans.step_time[i]) <= 1e-9, `stack top ${v} at ${drawn.steps[i]}`));
    drawn.throughput.forEach((v, i) => assert.ok(Math.abs(v - 1 / spans.step_time[i]) <= 1e-6 * v, `throughput ${v}`));
    assert.equal(drawn.rssLabel, 'bytes');
    // Hovering the stack: each phase's own time, and the step's, which they add up to.
    const stack = page.locator('.chart[data-name="step-time"]');
    const box = await stack.locator('.u-over').boundingBox();
    await page.mouse.move(box.x + box.width * 0.5, box.y + box.height / 2);
    const lines = (await stack.locator('.hover-values').innerText()).split('\n').filter((l) => l.includes(': '));
    const value = (l) => Number(l.split(': ')[1]);
    const phases = lines.filter((l) => !/step: /.test(l)), total = lines.find((l) => /step: /.test(l));
    assert.ok(phases.length >= 4 && total, lines.join(' | '));
    const sum = phases.reduce((a, l) => a + value(l), 0);
    assert.ok(Math.abs(sum - value(total)) <= 2e-3 * value(total), `${lines.join(' | ')}: phases add to ${sum}`);
    // "ignore outliers": the stack's axis ends at the 95th percentile of the step time.
    await open('nan-at-40', 'performance', '&robust=1');
    const top = await page.evaluate(() => document.querySelector('.chart[data-name="step-time"]').plot.scales.y.max);
    const sorted = [...spans.step_time].sort((a, b) => a - b);
    const p95 = sorted[Math.round(0.95 * (sorted.length - 1))];
    const max = sorted[sorted.length - 1];
    assert.ok(top >= p95 && top <= 1.3 * p95 && (max < 2 * p95 || top < max), `y max ${top}, p95 ${p95}, max ${max}`);
    assert.equal(drawn.stepLabel, 'seconds / step');
  });

  await check('a link to a run the logdir does not have says so', async () => {
    await open('no-such-run', 'overview');
    const text = await page.locator('#unknown-runs').textContent();
    assert.match(text, /No run named no-such-run in this logdir; showing \S+/);
  });

  await check('no errors in the browser console', async () => {
    assert.deepEqual(errors, []);
  });
} finally {
  await close();
  server.stop();
  rmSync(work, { recursive: true, force: true });
}
console.log(`truth: ${results.length - failed()} passed, ${failed()} failed; screenshots in ${artifacts}`);
process.exit(failed() ? 1 : 0);
