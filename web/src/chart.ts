// Curves on uPlot: the scalar chart (runs overlaid, min/max band per decimation bucket, EMA
// smoothing with bias correction, log scale, step/wall/relative x, zoom that asks the
// server again at full fidelity, finding markers), line, stacked, percentile-band charts
// and sparklines. Their axes and scales are axes.ts's, what a user does with one chart
// (hover values, legend toggles, export, expand) chart_tools.ts's.

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { Buckets, Finding, Num } from './api';
import { XMode } from './state';
import { unitOf } from './groups';
import { emaSmooth } from './smooth';
import { chooseScale, LINEAR, LOG, noteScale, PADDING, robustBounds, robustTop, valueAxis, xAxis, xScale, YScale, yRange } from './axes';
import { chartTools, hoverValues, mergeHooks, toggles } from './chart_tools';
import { el, fmtNum, NONFINITE_COLOR } from './util';

export { emaSmooth };

export interface RunCurve {
  run: string;
  color: string;
  data: Buckets;
  start_time: number;
  xOfStep?: (step: number) => number | null;  // x = a logged scalar: its value at a step
}

export interface ScalarChartOptions {
  tag: string;
  curves: RunCurve[];
  x: XMode;
  smooth: number;
  log: boolean;
  robust?: boolean;  // y range from the 5th to the 95th percentile (W&B's "ignore outliers")
  onLog?: () => void;  // the chart's own log toggle
  findings: Finding[];
  width: number;
  onZoom: (range: [number, number] | null) => void;
  onFinding: (f: Finding) => void;
  xRange?: [number, number];  // steps shown (x = step only)
  height?: number;
}

// Points where a line cannot be seen: a series with at most 3 values (a final test/loss).
function points(values: ArrayLike<Num | undefined>): uPlot.Series.Points {
  let n = 0;
  for (let i = 0; i < values.length && n <= 3; i++) if (values[i] !== null && values[i] !== undefined) n++;
  return n <= 3 ? { show: true, size: 7 } : { show: false };
}

export interface Marker {
  step: number;
  color: string;
  code: string;
  title: string;
  run?: string;
  onClick?: () => void;
}

// A value as uPlot draws it: null a gap (NaN/Inf there), undefined joined over (not recorded).
type Drawn = number | null | undefined;

// Finding markers: a thin bar per finding at its step, over the plot; x(step) maps a step to
// the chart's x value (the step itself unless x is time).
function markerLayer(wrap: HTMLElement, markers: Marker[], x: (step: number) => number | null) {
  const bars = markers.map((mk) => {
    const m = el('div', { class: 'finding-marker', title: mk.title, 'data-code': mk.code, 'data-step': String(mk.step),
                          ...(mk.run ? { 'data-run': mk.run } : {}) });
    m.style.background = mk.color;
    if (mk.onClick) {
      m.addEventListener('click', (e) => {
        e.stopPropagation();
        mk.onClick!();
      });
    }
    return { mk, m };
  });
  return (u: uPlot) => {
    for (const { mk, m } of bars) {
      const xv = x(mk.step);
      const left = xv === null ? -1 : u.valToPos(xv, 'x');
      const visible = xv !== null && left >= 0 && left <= u.over.clientWidth;
      m.style.display = visible ? 'block' : 'none';
      m.style.left = left - 1 + 'px';
      if (!m.parentNode) u.over.append(m);
    }
    wrap.dataset.xmin = String(u.scales.x.min);
    wrap.dataset.xmax = String(u.scales.x.max);
  };
}


function xOf(c: RunCurve, i: number, mode: XMode): number | null {
  const d = c.data;
  if (mode === 'step') return d.step[i];
  if (mode.startsWith('tag:')) return c.xOfStep?.(d.step[i]) ?? null;
  const w = d.wall[i];
  if (w === null) return null;
  return mode === 'wall' ? w : w - c.start_time;
}

// The x value nearest to a step, from a run's buckets.
function xAtStep(c: RunCurve, step: number, mode: XMode): number | null {
  if (mode === 'step') return step;
  let best = -1, dist = Infinity;
  for (let i = 0; i < c.data.step.length; i++) {
    const dd = Math.abs(c.data.step[i] - step);
    if (dd < dist) [best, dist] = [i, dd];
  }
  return best < 0 ? null : xOf(c, best, mode);
}

// Step at an x value (inverse of xAtStep), for zoom ranges when x is not the step.
function stepAtX(c: RunCurve, x: number, mode: XMode): number {
  if (mode === 'step') return x;
  let best = 0, dist = Infinity;
  for (let i = 0; i < c.data.step.length; i++) {
    const xi = xOf(c, i, mode);
    if (xi === null) continue;
    const dd = Math.abs(xi - x);
    if (dd < dist) [best, dist] = [i, dd];
  }
  return c.data.step[best] ?? 0;
}

export const SEVERITY_COLOR: Record<string, string> = { critical: '#d62728', warning: '#ff7f0e', info: '#1f77b4' };

export function findingMarker(f: Finding, onClick?: () => void): Marker {
  return { step: f.step, color: SEVERITY_COLOR[f.severity] || '#888', code: f.code,
           title: `${f.code} @ ${f.step}: ${f.summary}`, onClick };
}

// One shared x axis for the runs of a chart: the union of every run's bucket positions
// (curveX: each run's, null where it has none), sorted, and each position's index.
function sharedXAxis(curves: RunCurve[], x: XMode) {
  const curveX = curves.map((c) => c.data.step.map((_, i) => xOf(c, i, x)));
  const xs = new Set<number>();
  for (const cx of curveX) for (const v of cx) if (v !== null) xs.add(v);
  const xValues = Float64Array.from(xs).sort();
  const index = new Map<number, number>();
  xValues.forEach((v, i) => index.set(v, i));
  return { curveX, xValues, index };
}

// Each finding's marker on its own run's curve (runs differ in wall time), in the run's colour
// when runs are compared; findings of runs this chart does not show are not drawn.
function findingLayers(wrap: HTMLElement, o: ScalarChartOptions, curves: RunCurve[]) {
  return o.findings.flatMap((f) => {
    const c = curves.length === 1 && !f.run ? curves[0] : curves.find((k) => k.run === f.run);
    if (!c) return [];
    const mk = { ...findingMarker(f, () => o.onFinding(f)), run: c.run };
    if (curves.length > 1) mk.color = c.color;
    return [markerLayer(wrap, [mk], (step) => xAtStep(c, step, o.x))];
  });
}

// A run's entry in the legend: its colour and name, its points and its own NaN/Inf count.
function runKey(c: RunCurve, nonfinite: number): HTMLElement {
  const key = el('span', { class: 'run-key', 'data-run': c.run },
                 el('span', { class: 'key', style: `color:${c.color}` }, `■ ${c.run}`),
                 el('span', { class: 'muted' }, ` ${c.data.points.toLocaleString()} pts `));
  if (nonfinite) key.append(el('span', { class: 'badge nonfinite' }, `${nonfinite} NaN/Inf`), ' ');
  return key;
}

export function scalarChart(o: ScalarChartOptions): HTMLElement {
  const wrap = el('div', { class: 'chart', 'data-tag': o.tag });
  const legend = el('div', { class: 'chart-legend' });
  wrap.append(el('div', { class: 'panel-title' }, o.tag), legend);
  const curves = o.curves.filter((c) => c.data.step.length);
  if (!curves.length) {
    wrap.append(el('p', { class: 'empty' }, 'No points in this range.'));
    return wrap;
  }
  const { curveX, xValues, index } = sharedXAxis(curves, o.x);
  const curveNonfinite = curves.map((c) => c.data.nonfinite.map((n) => n > 0));
  const data: (Drawn[] | Float64Array)[] = [xValues];
  const series: uPlot.Series[] = [{ label: o.x }];
  const bands: uPlot.Band[] = [];
  const bounds = o.robust ? robustBounds(curves.map((c) => c.data.last)) : null;
  const scale = bounds ? { ...chooseScale([bounds], o.log), decades: 0 } : chooseScale(curves.flatMap((c) => [c.data.min, c.data.max, c.data.last]), o.log);
  noteScale(wrap, scale, o.log);
  if (bounds) wrap.dataset.robust = bounds.join(',');
  const tipRows: { name: string; color: string; series: number }[] = [];
  let plot: uPlot | undefined;
  curves.forEach((c, k) => {
    // The run's values as drawn (drawable), placed on the shared x axis; undefined (joined
    // over) where this run has no bucket.
    const align = (values: Num[]) => {
      const out: Drawn[] = new Array(xValues.length).fill(undefined);
      drawable({ label: c.run, color: c.color, values, nonfinite: curveNonfinite[k] }, scale).forEach((v, i) => {
        const x = curveX[k][i];
        if (x !== null) out[index.get(x)!] = v;
      });
      return out;
    };
    const nonfinite = c.data.nonfinite.reduce((a, b) => a + b, 0);
    const maxIdx = data.length;
    data.push(align(c.data.max), align(c.data.min));
    series.push({ label: `${c.run} max`, stroke: 'transparent', points: { show: false } },
                { label: `${c.run} min`, stroke: 'transparent', points: { show: false } });
    bands.push({ series: [maxIdx, maxIdx + 1], fill: c.color + '30' });
    if (o.smooth > 0) {
      data.push(align(c.data.last));
      series.push({ label: `${c.run} raw`, stroke: c.color + '55', width: 1, points: { show: false } });
    }
    const smoothed = align(emaSmooth(c.data.last, o.smooth));
    tipRows.push({ name: c.run, color: c.color, series: data.length });
    data.push(smoothed);
    series.push({ label: c.run, stroke: c.color, width: 1.5, points: { ...points(smoothed), fill: c.color } });
    const own = Array.from({ length: data.length - maxIdx }, (_, k) => maxIdx + k);
    const key = runKey(c, nonfinite);
    toggles(key, own, () => plot);
    legend.append(key);
  });

  let ready = false;
  const primary = curves[0];
  const drawMarkers = findingLayers(wrap, o, curves);
  // x values -> the step range asked of the server (scales are not read back: uPlot applies
  // setScale after the hook returns).
  const zoomTo = (min: number, max: number) => {
    if (!ready) return;
    o.onZoom([Math.floor(stepAtX(primary, min, o.x)), Math.ceil(stepAtX(primary, max, o.x))]);
  };
  const opts: uPlot.Options = {
    width: o.width,
    height: o.height ?? 220,
    padding: PADDING,
    series,
    bands,
    legend: { show: false },
    cursor: { sync: { key: 'trainscope' }, drag: { x: true, y: false }, bind: { dblclick: () => () => null } },
    scales: { x: xScale(o.x === 'step' ? o.xRange : undefined, o.x === 'wall'), y: yRange(scale, false, bounds) },
    axes: [xAxis(o.x, [xValues[0], xValues[xValues.length - 1]]), valueAxis(unitOf(o.tag) || undefined, scale)],
    hooks: mergeHooks(hoverValues(wrap, (x) => (o.x === 'step' ? `step ${x}` : o.x === 'wall' ? new Date(x * 1000).toLocaleTimeString()
      : o.x === 'relative' ? `${fmtNum(x, 4)} s` : `${o.x.slice(4)} ${fmtNum(x, 6)}`), tipRows), {
      draw: [(u) => {
        for (const d of drawMarkers) d(u);
        // Buckets holding NaN/Inf: the non-finite ticks, each run at its own x.
        curves.forEach((c, k) => drawNonfinite(u, curveX[k], [{ label: c.run, color: c.color, values: [], nonfinite: curveNonfinite[k] }]));
        wrap.dataset.xmin = String(u.scales.x.min);
        wrap.dataset.xmax = String(u.scales.x.max);
      }],
      setSelect: [(u) => {
        if (u.select.width > 2) {
          // The drag zoom: ask for the selected steps again, at full resolution.
          const min = u.posToVal(u.select.left, 'x'), max = u.posToVal(u.select.left + u.select.width, 'x');
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          zoomTo(min, max);
        }
      }],
    }),
  };
  opts.cursor!.drag!.setScale = false;
  plot = new uPlot(opts, data as uPlot.AlignedData, wrap);
  chartTools(wrap, o.tag, () => plot, o.onLog);
  plot.over.addEventListener('dblclick', () => o.onZoom(null));
  ready = true;
  (wrap as HTMLElement & { plot?: uPlot }).plot = plot;
  return wrap;
}

export interface LineSeries {
  label: string;
  color: string;
  values: Num[];
  dash?: number[];
  nonfinite?: boolean[];  // steps whose value was NaN/Inf (values[i] is null there)
}

// One series' values as uPlot draws them (see Drawn): a gap where only NaN/Inf was recorded.
function drawable(l: LineSeries, scale?: YScale): Drawn[] {
  return l.values.map((v, i) => (v === null ? (l.nonfinite?.[i] ? null : undefined)
    : scale?.kind === 'log' && v <= 0 ? undefined : v));
}

// A scalar series' buckets as a line (their `last` or `max`), NaN/Inf buckets flagged; on
// the steps `xs` when given (undefined where the series has no bucket).
export function bucketLine(b: Buckets, label: string, color: string,
                           o: { pick?: 'last' | 'max'; xs?: number[]; dash?: number[] } = {}): LineSeries {
  const values = b[o.pick ?? 'last'];
  if (!o.xs) return { label, color, dash: o.dash, values, nonfinite: b.nonfinite.map((n) => n > 0) };
  const at = new Map<number, number>();
  b.step.forEach((s, i) => at.set(s, i));
  const index = o.xs.map((s) => at.get(s));
  return { label, color, dash: o.dash, values: index.map((i) => (i === undefined ? null : values[i])),
           nonfinite: index.map((i) => i !== undefined && b.nonfinite[i] > 0) };
}

// NaN/Inf steps: a tick on the top edge of the plot in the non-finite colour (none where x
// is unknown: a wall time not recorded).
function drawNonfinite(u: uPlot, x: ArrayLike<number | null>, lines: LineSeries[]) {
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = NONFINITE_COLOR;
  for (const l of lines) {
    if (!l.nonfinite) continue;
    for (let i = 0; i < x.length; i++) {
      const xi = x[i];
      if (!l.nonfinite[i] || xi === null) continue;
      const px = u.valToPos(xi, 'x', true);
      if (px >= u.bbox.left && px <= u.bbox.left + u.bbox.width) ctx.fillRect(px - 1, u.bbox.top, 2, 6 * devicePixelRatio);
    }
  }
  ctx.restore();
}

export interface LineChartOptions {
  width: number;
  name: string;
  log?: boolean;
  band?: [number, number];
  reference?: number;
  yLabel?: string;
  xRange?: [number, number];
  markers?: Marker[];
  height?: number;
  legend?: boolean;
  // Samples further apart than this many steps are not joined (a tensor taken every 100th
  // step is drawn as its samples); the data's own resolution: a bucket, or one step.
  joinSteps?: number;
  // The value axis this wide: the plot starts where a heatmap's beside it does (LABEL_WIDTH).
  alignLeft?: number;
}

// Whether a series has samples further apart than `joinSteps` (then drawn as points).
function sparse(x: ArrayLike<number>, values: ArrayLike<Num | undefined>, joinSteps?: number): boolean {
  if (joinSteps === undefined) return false;
  let prev = -1;
  for (let i = 0; i < x.length; i++) {
    if (values[i] === null || values[i] === undefined) continue;
    if (prev >= 0 && x[i] - x[prev] > joinSteps + 1e-9) return true;
    prev = i;
  }
  return false;
}

// uPlot's gaps of a series, plus one between consecutive samples further apart than
// `joinSteps`: the line is cut there (canvas pixels, as uPlot's own gaps).
function sampleGaps(joinSteps: number): uPlot.Series.GapsRefiner {
  return (u, seriesIdx, idx0, idx1, nullGaps) => {
    const xs = u.data[0], ys = u.data[seriesIdx];
    const out = [...nullGaps];
    let prev = -1;
    for (let i = idx0; i <= idx1; i++) {
      if (ys[i] === null || ys[i] === undefined) continue;
      if (prev >= 0 && xs[i] - xs[prev] > joinSteps + 1e-9) {
        out.push([Math.round(u.valToPos(xs[prev], 'x', true)) + 2, Math.round(u.valToPos(xs[i], 'x', true)) - 2]);
      }
      prev = i;
    }
    return out.sort((a, b) => a[0] - b[0]);
  };
}

function chartBox(title: string, name: string): HTMLElement {
  const wrap = el('div', { class: 'chart', 'data-name': name });
  wrap.append(el('div', { class: 'panel-title' }, title));
  return wrap;
}

function hasData(lines: { values: (Num | undefined)[] }[]): boolean {
  return lines.some((l) => l.values.some((v) => v !== null && v !== undefined));
}

// Several lines over one x axis (steps), optionally log-scaled, with an optional shaded
// horizontal band (a healthy range) and a dashed reference line.
export function lineChart(title: string, x: number[], lines: LineSeries[], opts: LineChartOptions): HTMLElement {
  const wrap = chartBox(title, opts.name);
  const anyNonfinite = lines.some((l) => l.nonfinite?.some(Boolean));
  if (!x.length || (!hasData(lines) && !anyNonfinite)) {
    wrap.append(el('p', { class: 'empty' }, 'No data recorded for this view.'));
    return wrap;
  }
  const scale = chooseScale(lines.map((l) => l.values), !!opts.log);
  noteScale(wrap, scale, !!opts.log);
  const values = lines.map((l) => drawable(l, scale));
  let plot: uPlot | undefined;
  if (opts.legend !== false) {
    const legend = el('div', { class: 'chart-legend' });
    lines.slice(0, 24).forEach((l, i) => {
      const key = el('span', { class: 'key', style: `color:${l.color}` }, `■ ${l.label} `);
      toggles(key, [i + 1], () => plot);
      legend.append(key);
    });
    if (lines.length > 24) legend.append(el('span', { class: 'muted' }, `+${lines.length - 24} more`));
    if (anyNonfinite) legend.append(el('span', { class: 'badge nonfinite' }, 'NaN/Inf'));
    wrap.append(legend);
  }
  const drawMarkers = markerLayer(wrap, opts.markers || [], (s) => s);
  const u = new uPlot({
    width: opts.width,
    height: opts.height ?? 200,
    padding: PADDING,
    legend: { show: false },
    cursor: { sync: { key: 'trainscope' } },
    scales: { x: xScale(opts.xRange), y: yRange(scale) },
    axes: [xAxis(), valueAxis(opts.yLabel, scale, opts.alignLeft)],
    series: [{}, ...lines.map((l, i) => {
      const sampled = sparse(x, values[i], opts.joinSteps);
      return { label: l.label, stroke: l.color, width: 1.25, dash: l.dash,
               ...(sampled ? { gaps: sampleGaps(opts.joinSteps!) } : {}),
               points: sampled ? { show: true, size: 5, fill: l.color } : { ...points(values[i]), fill: l.color } };
    })],
    hooks: mergeHooks(hoverValues(wrap, (v) => `step ${v}`, lines.slice(0, 24).map((l, i) => ({ name: l.label, color: l.color, series: i + 1 }))), {
      draw: [drawMarkers, (u: uPlot) => drawNonfinite(u, x, lines)],
      drawClear: [(u: uPlot) => {
        if (!opts.band && opts.reference === undefined) return;
        const ctx = u.ctx;
        ctx.save();
        if (opts.band) {
          const y0 = u.valToPos(opts.band[1], 'y', true), y1 = u.valToPos(opts.band[0], 'y', true);
          const top = Math.max(u.bbox.top, Math.min(y0, y1)), bottom = Math.min(u.bbox.top + u.bbox.height, Math.max(y0, y1));
          ctx.fillStyle = 'rgba(44,160,44,0.12)';
          if (bottom > top) ctx.fillRect(u.bbox.left, top, u.bbox.width, bottom - top);
        }
        if (opts.reference !== undefined) {
          const y = u.valToPos(opts.reference, 'y', true);
          if (y >= u.bbox.top && y <= u.bbox.top + u.bbox.height) {
            ctx.strokeStyle = 'rgba(44,160,44,0.8)';
            ctx.setLineDash([5, 4]);
            ctx.beginPath();
            ctx.moveTo(u.bbox.left, y);
            ctx.lineTo(u.bbox.left + u.bbox.width, y);
            ctx.stroke();
          }
        }
        ctx.restore();
      }],
    }),
  }, [x, ...values] as uPlot.AlignedData, wrap);
  plot = u;
  chartTools(wrap, opts.name, () => plot);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}

// Stacked areas: each layer drawn on top of the previous ones (step-time breakdown).
export function stackedChart(title: string, x: number[], layers: LineSeries[], width: number, name: string,
                             extra: { xRange?: [number, number]; markers?: Marker[]; height?: number; robust?: boolean } = {}): HTMLElement {
  const wrap = chartBox(title, name);
  if (!x.length || !hasData(layers)) {
    wrap.append(el('p', { class: 'empty' }, 'No spans recorded.'));
    return wrap;
  }
  const legend = el('div', { class: 'chart-legend' });
  const sums: Num[][] = [];
  let running: number[] = new Array(x.length).fill(0);
  for (const l of layers) {
    running = running.map((r, i) => r + (l.values[i] ?? 0));
    sums.push(running.slice());
  }
  // Drawn top-down so each fill covers the ones below it only where it is taller.
  const order = layers.map((_, i) => i).reverse();
  const series: uPlot.Series[] = [{}];
  const data: Num[][] = [x];
  for (const i of order) {
    series.push({ label: layers[i].label, stroke: layers[i].color, fill: layers[i].color + 'aa', width: 1,
                  points: { ...points(sums[i]), fill: layers[i].color } });
    data.push(sums[i]);
  }
  for (const l of layers) legend.append(el('span', { class: 'key', style: `color:${l.color}` }, `■ ${l.label} `));
  wrap.append(legend);
  const u = new uPlot({
    width, height: extra.height ?? 220, padding: PADDING, legend: { show: false }, series, cursor: { sync: { key: 'trainscope' } },
    // Areas stand on zero; "ignore outliers" tops the axis at the 95th percentile of the step
    // time (a first step's start-up no longer flattens the rest).
    scales: { x: xScale(extra.xRange), y: yRange(LINEAR, true, extra.robust ? robustTop(sums[sums.length - 1]) : null) },
    axes: [xAxis(), valueAxis('seconds / step', LINEAR)],
    hooks: mergeHooks(hoverValues(wrap, (v) => `step ${v}`, [
      ...layers.map((l, k) => ({ name: l.label, color: l.color, series: layers.length - k, value: (i: number) => l.values[i] })),
      { name: 'step', color: 'transparent', series: 1, value: (i: number) => sums[sums.length - 1][i] },
    ]), { draw: [markerLayer(wrap, extra.markers || [], (s) => s)] }),
  }, data as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}

// TensorBoard's distribution chart: nested percentile bands (outermost faintest) and the
// median line over steps. percentiles[k] is the k-th percentile row (ascending), same
// length as x; the middle row is the median.
export function bandChart(title: string, x: number[], percentiles: Num[][], opts: LineChartOptions & { color?: string;
  extra?: LineSeries[]; nonfinite?: boolean[] }): HTMLElement {
  const wrap = chartBox(title, opts.name);
  const rows = percentiles.map((r) => drawable({ label: '', color: '', values: r, nonfinite: opts.nonfinite },
                                                opts.log ? LOG : undefined));
  const flagged = { label: '', color: '', values: [], nonfinite: opts.nonfinite };
  if (!x.length || (!hasData(rows.map((v) => ({ values: v }))) && !opts.nonfinite?.some(Boolean))) {
    wrap.append(el('p', { class: 'empty' }, 'No histograms recorded for this view.'));
    return wrap;
  }
  const color = opts.color || '#e8590c';
  const scale = chooseScale(rows, !!opts.log);
  const n = rows.length, mid = Math.floor(n / 2);
  const series: uPlot.Series[] = [{}];
  const data: Drawn[][] = [x];
  const bands: uPlot.Band[] = [];
  // Samples too far apart to join: each is a column of its percentile bands around a median dot.
  const sampled = sparse(x, rows[mid], opts.joinSteps);
  for (let k = 0; k < n; k++) {
    data.push(rows[k]);
    series.push({ label: `p${k}`, stroke: k === mid ? color : 'transparent', width: k === mid ? 1.5 : 0,
                  ...(sampled ? { gaps: sampleGaps(opts.joinSteps!) } : {}),
                  points: k === mid ? (sampled ? { show: true, size: 5, fill: color } : { ...points(rows[k]), fill: color })
                    : { show: false } });
  }
  const alphaOf = (k: number) => Math.round(255 * (0.12 + 0.1 * k)).toString(16).padStart(2, '0');
  for (let k = 0; k < mid && !sampled; k++) bands.push({ series: [n - k, k + 1], fill: color + alphaOf(k) });
  // Sampled: each sample's bands as a 4-pixel column at its step.
  const columns = (u: uPlot) => {
    if (!sampled) return;
    const ctx = u.ctx;
    ctx.save();
    for (let i = 0; i < x.length; i++) {
      const px = u.valToPos(x[i], 'x', true);
      for (let k = 0; k < mid; k++) {
        const lo = rows[k][i], hi = rows[n - 1 - k][i];
        if (lo === null || lo === undefined || hi === null || hi === undefined) continue;
        const y0 = u.valToPos(hi, 'y', true), y1 = u.valToPos(lo, 'y', true);
        ctx.fillStyle = color + alphaOf(k);
        ctx.fillRect(px - 2 * devicePixelRatio, y0, 4 * devicePixelRatio, Math.max(1, y1 - y0));
      }
    }
    ctx.restore();
  };
  for (const l of opts.extra || []) {
    data.push(drawable(l, scale));
    series.push({ label: l.label, stroke: l.color, width: 1.25, dash: l.dash, points: { ...points(l.values), fill: l.color } });
  }
  const legend = el('div', { class: 'chart-legend' }, el('span', { class: 'key', style: `color:${color}` }, '■ median, bands: percentiles '),
                    ...(opts.extra || []).map((l) => el('span', { class: 'key', style: `color:${l.color}` }, `■ ${l.label} `)));
  if (opts.nonfinite?.some(Boolean)) legend.append(el('span', { class: 'badge nonfinite' }, 'NaN/Inf'));
  wrap.append(legend);
  const u = new uPlot({
    width: opts.width, height: opts.height ?? 220, padding: PADDING, legend: { show: false }, series, bands,
    cursor: { sync: { key: 'trainscope' } },
    scales: { x: xScale(opts.xRange), y: yRange(scale) },
    axes: [xAxis(), valueAxis(opts.yLabel, scale, opts.alignLeft)],
    hooks: mergeHooks(hoverValues(wrap, (v) => `step ${v}`, [
      { name: 'p100 |x|', color, series: n }, { name: 'median |x|', color, series: mid + 1 }, { name: 'p0 |x|', color, series: 1 },
      ...(opts.extra || []).map((l, k) => ({ name: l.label, color: l.color, series: n + 1 + k }))]),
    { draw: [columns, markerLayer(wrap, opts.markers || [], (s) => s), (u: uPlot) => drawNonfinite(u, x, [flagged])] }),
  }, data as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}

// A small evidence chart: one series, no axes, the finding's step marked; its range in text.
export function sparkline(x: number[], values: Num[], o: { width: number; height?: number; color?: string; mark?: number;
  markColor?: string; log?: boolean; name: string; xRange?: [number, number] }): HTMLElement {
  const wrap = el('div', { class: 'spark', 'data-name': o.name });
  const vals = values.map((v) => (v === null || (o.log && v <= 0) ? undefined : v));
  const finite = vals.filter((v): v is number => v !== undefined && Number.isFinite(v));
  if (!x.length || !finite.length) {
    wrap.append(el('span', { class: 'empty' }, 'no series'));
    return wrap;
  }
  const u = new uPlot({
    width: o.width, height: o.height ?? 48, padding: [4, 4, 4, 4], legend: { show: false }, cursor: { show: false },
    scales: { x: xScale(o.xRange), y: yRange(o.log ? LOG : LINEAR) },
    axes: [{ show: false }, { show: false }],
    series: [{}, { stroke: o.color || '#1f77b4', width: 1.25, points: { ...points(vals), fill: o.color || '#1f77b4' } }],
    hooks: {
      draw: [(u: uPlot) => {
        if (o.mark === undefined) return;
        const px = u.valToPos(o.mark, 'x', true);
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = o.markColor || '#d62728';
        ctx.lineWidth = 2;
        ctx.beginPath();
        ctx.moveTo(px, u.bbox.top);
        ctx.lineTo(px, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.restore();
      }],
    },
  }, [x, vals] as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  wrap.append(el('span', { class: 'spark-range muted' }, `${fmtNum(Math.min(...finite))} … ${fmtNum(Math.max(...finite))}`));
  return wrap;
}
