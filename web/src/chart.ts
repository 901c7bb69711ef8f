// Curves on uPlot: the scalar chart (runs overlaid, min/max band per decimation bucket, EMA
// smoothing with bias correction, log scale, step/wall/relative x, zoom that asks the
// server again at full fidelity, finding markers), line, stacked, percentile-band charts
// and sparklines. Every chart: tick labels as short as they can be (util.tickLabels) in an
// axis sized to its widest label, a step axis over the run's steps (xRange) so charts line
// up, points drawn where a series has too few to make a line, and a linear axis of values
// that are never negative starting at 0 (no learning rate below zero).

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { Buckets, Finding, Num } from './api';
import { XMode } from './state';
import { unitOf } from './groups';
import { emaSmooth } from './smooth';
import { el, fmtNum, NICE_INCRS, NONFINITE_COLOR, STEP_INCRS, themeColor, tickLabels, TIME_INCRS, timeAxisTitle, timeLabels } from './util';

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

export const AXIS_FONT = '11px system-ui, -apple-system, "Segoe UI", sans-serif';
let measureCtx: CanvasRenderingContext2D | null = null;
export function textWidth(text: string, font = AXIS_FONT): number {
  measureCtx ??= document.createElement('canvas').getContext('2d')!;
  measureCtx.font = font;
  return measureCtx.measureText(text).width;
}

// Log-axis ticks and grid at whole decades (uPlot's default draws every 1..9 x 10^k, a
// striped background); with less than two decades in view, 1, 2, 5 x 10^k.
function logSplits(_u: uPlot, _i: number, min: number, max: number): number[] {
  if (!(min > 0) || !(max > min)) return [min, max];
  const lo = Math.floor(Math.log10(min)), hi = Math.ceil(Math.log10(max));
  const out: number[] = [];
  const mults = hi - lo >= 3 ? [1] : [1, 2, 5];
  const every = Math.max(1, Math.ceil((hi - lo) / 6));
  for (let e = lo; e <= hi; e += every) for (const m of mults) {
    const v = m * 10 ** e;
    if (v >= min * (1 - 1e-9) && v <= max * (1 + 1e-9)) out.push(v);
  }
  return out.length >= 2 ? out : [min, max];
}

// How a value axis is drawn: linear; log when every value is positive and they span more
// than two decades (the report's rule, cli/report_command.cc); symlog (asinh) when signed
// values reach three decades past their median magnitude (a diverging activation mean).
export interface YScale {
  kind: 'linear' | 'log' | 'symlog';
  linthresh: number;  // symlog: linear within ±linthresh
  decades: number;
}

export function chooseScale(series: ArrayLike<Num | undefined>[], forceLog = false): YScale {
  let lo = Infinity, hi = -Infinity, nonPositive = false;
  const magnitudes: number[] = [];
  for (const values of series) {
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v === null || v === undefined || !Number.isFinite(v)) continue;
      if (v <= 0) nonPositive = true;
      else {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      if (v !== 0) magnitudes.push(Math.abs(v));
    }
  }
  if (forceLog) return { kind: 'log', linthresh: 1, decades: hi > lo ? Math.log10(hi / lo) : 0 };
  if (!nonPositive) {
    const decades = hi > lo ? Math.log10(hi / lo) : 0;
    return { kind: decades > 2 ? 'log' : 'linear', linthresh: 1, decades };
  }
  if (magnitudes.length < 2) return { kind: 'linear', linthresh: 1, decades: 0 };
  magnitudes.sort((a, b) => a - b);
  const median = magnitudes[magnitudes.length >> 1], top = magnitudes[magnitudes.length - 1];
  const decades = Math.log10(top / median);
  // Linear within the power of ten below the median magnitude (a round tick where it bends).
  return { kind: decades > 3 ? 'symlog' : 'linear', linthresh: 10 ** Math.floor(Math.log10(median)), decades };
}

const LINEAR: YScale = { kind: 'linear', linthresh: 1, decades: 0 };
const LOG: YScale = { kind: 'log', linthresh: 1, decades: 0 };

// The 5th and 95th percentiles of the finite values: a y range that outliers do not stretch.
export function robustBounds(series: ArrayLike<Num | undefined>[]): [number, number] | null {
  const all: number[] = [];
  for (const values of series) for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v !== null && v !== undefined && Number.isFinite(v)) all.push(v);
  }
  if (all.length < 5) return null;
  all.sort((a, b) => a - b);
  const at = (q: number) => all[Math.min(all.length - 1, Math.max(0, Math.round(q * (all.length - 1))))];
  const lo = at(0.05), hi = at(0.95);
  return hi > lo ? [lo, hi] : null;
}

// [0, the 95th percentile] of a stack's top, for "ignore outliers" on stacked areas.
function robustTop(top: Num[]): [number, number] | null {
  const b = robustBounds([top]);
  return b ? [0, b[1]] : null;
}

// Says on the chart that its axis is not linear, and why.
function noteScale(wrap: HTMLElement, scale: YScale, forced: boolean) {
  wrap.dataset.yscale = scale.kind;
  if (scale.kind === 'linear' || forced) return;
  const title = wrap.querySelector('.panel-title');
  title?.append(el('span', { class: 'muted scale-note' },
    ` · ${scale.kind} y: values span ${Math.round(scale.decades)} decades`));
}

// Symlog ticks and grid: 0 and ±10^k at whole decades from the linear threshold out, at most
// about 4 each side (uPlot's default draws a line at every 1..9 x 10^k).
function symlogSplits(u: uPlot, _i: number, min: number, max: number): number[] {
  const linthresh = (u.scales.y as uPlot.Scale & { asinh?: number }).asinh ?? 1;
  const side = (limit: number) => {
    if (!(limit >= linthresh)) return [];
    const lo = Math.floor(Math.log10(linthresh)), hi = Math.floor(Math.log10(limit));
    const every = Math.max(1, Math.ceil((hi - lo + 1) / 4));
    const out: number[] = [];
    for (let e = hi; e >= lo; e -= every) out.push(10 ** e);
    return out;
  };
  const ticks = [...side(-min).map((v) => -v), ...(min <= 0 && max >= 0 ? [0] : []), ...side(max).reverse()];
  return ticks.length >= 2 ? ticks : [min, max];
}

// Ticks at least 14 px apart (0 kept first): asinh squeezes the decades near zero together.
function spacedOut(u: uPlot, splits: number[]): (number | null)[] {
  const kept: number[] = [];
  const order = splits.map((v, i) => i).sort((a, b) => Math.abs(splits[a]) - Math.abs(splits[b]));
  const out: (number | null)[] = splits.map(() => null);
  for (const i of order) {
    const px = u.valToPos(splits[i], 'y');
    if (kept.every((k) => Math.abs(k - px) >= 14)) {
      kept.push(px);
      out[i] = splits[i];
    }
  }
  return out;
}

// The value axis: labels from tickLabels at 1-2-5 spacings, the axis as wide as its widest label.
function valueAxis(label: string | undefined, scale: YScale, fixedSize?: number): uPlot.Axis {
  return {
    ...(scale.kind === 'log' ? { splits: logSplits, filter: (_u: uPlot, splits: number[]) => splits }
      : scale.kind === 'symlog' ? { splits: symlogSplits, filter: spacedOut }
        : { incrs: NICE_INCRS }),
    font: AXIS_FONT, label, labelSize: label ? 18 : 0, gap: 4, ...themed(),
    values: (_u, vals) => tickLabels(vals),
    size: fixedSize !== undefined ? fixedSize - (label ? 18 : 0) : ((_u, values) => (values ? Math.ceil(Math.max(16, ...values.map((v) => textWidth(String(v))))) + 10 + 4 + 6 : 40)),
  };
}

// Axis text, grid and ticks in the page's theme (read when the chart is made; a theme change redraws).
function themed(): Partial<uPlot.Axis> {
  const grid = themeColor('--grid');
  return { stroke: themeColor('--fg'), grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
}

// The x axis: whole steps at 1-2-5 spacings; wall time as times of day with the date once,
// in the axis title; relative time in seconds.
function xAxis(mode: XMode = 'step', span?: [number, number]): uPlot.Axis {
  const label = mode === 'step' ? 'step' : mode === 'relative' ? 'seconds since start' : mode.startsWith('tag:') ? mode.slice(4) : '';
  const space = (_u: uPlot, _i: number, _min: number, _max: number, dim: number) => Math.max(60, dim / 8);
  if (mode === 'wall') {
    return { ...themed(), font: AXIS_FONT, label: span ? timeAxisTitle(span[0], span[1]) : 'wall time', labelSize: 16, space,
             incrs: TIME_INCRS, values: (_u, vals, _a, _s, incr) => timeLabels(vals, incr) };
  }
  return { ...themed(), font: AXIS_FONT, label, labelSize: 16, space,
           incrs: mode === 'step' ? STEP_INCRS : NICE_INCRS, values: (_u, vals) => tickLabels(vals) };
}

// A linear y range that never crosses below zero when no value is negative.
function yRange(scale: YScale, fromZero = false, bounds: [number, number] | null = null): uPlot.Scale {
  if (scale.kind === 'log') return bounds && bounds[0] > 0 ? { distr: 3, range: () => bounds } : { distr: 3 };
  if (scale.kind === 'symlog') return { distr: 4, asinh: scale.linthresh };
  return {
    distr: 1,
    range: (_u, dataMin, dataMax) => {
      const [min, max] = bounds ?? [dataMin, dataMax];
      if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
      const [lo, hi] = uPlot.rangeNum(min, max, 0.1, true) as [number, number];
      return [min >= 0 ? (fromZero ? 0 : Math.max(0, lo)) : lo, hi];
    },
  };
}

function xScale(xRange?: [number, number], time = false): uPlot.Scale {
  // Points logged within one clock tick: a second either side, not uPlot's years.
  if (time || !xRange) return { time, range: (_u, min, max) => (min < max ? [min, max] : [min - 1, max + 1]) };
  // Half a step of margin each side: a heatmap column is its step ± 0.5 (heatmap.ts), so the
  // curves' points sit at their columns' middles.
  const [lo, hi] = xRange[0] < xRange[1] ? xRange : [xRange[0] - 1, xRange[0] + 1];
  return { time: false, range: () => [lo - 0.5, hi + 0.5] };
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

// Right of the plot: room for the last step label (heatmaps keep the same margin, to line up).
export const PLOT_RIGHT = 22;
const PADDING: uPlot.Padding = [10, PLOT_RIGHT, 0, 0];

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

// Values at the cursor, as W&B's tooltip: the x value and each shown series' value at the
// cursor's index, beside the cursor, on the chart the mouse is over (the others follow its
// crosshair through the cursor sync but keep quiet).
function hoverValues(wrap: HTMLElement, label: (x: number) => string,
                     rows: { name: string; color: string; series: number }[]): uPlot.Hooks.Arrays {
  const tip = el('div', { class: 'tip hover-values' });
  let inside = false;
  return {
    ready: [(u: uPlot) => {
      u.over.append(tip);
      u.over.addEventListener('mouseenter', () => (inside = true));
      u.over.addEventListener('mouseleave', () => { inside = false; tip.style.display = 'none'; });
    }],
    setCursor: [(u: uPlot) => {
      const i = u.cursor.idx;
      if (!inside || i === null || i === undefined) {
        tip.style.display = 'none';
        return;
      }
      const lines = rows.filter((r) => u.series[r.series].show !== false).map((r) => {
        const v = u.data[r.series][i];
        return el('div', {}, el('span', { style: `color:${r.color}` }, '■ '), `${r.name}: `,
                  el('b', {}, v === null ? 'NaN/Inf' : v === undefined ? '–' : fmtNum(v, 4)));
      });
      tip.replaceChildren(el('div', { class: 'muted-light' }, label(u.data[0][i])), ...lines);
      tip.style.display = 'block';
      const left = u.cursor.left ?? 0, top = u.cursor.top ?? 0;
      tip.style.left = Math.min(left + 12, u.over.clientWidth - tip.offsetWidth) + 'px';
      tip.style.top = Math.max(0, top - tip.offsetHeight - 8) + 'px';
    }],
  };
}

// A legend entry that hides or shows its series when clicked (W&B, TensorBoard).
function toggles(key: HTMLElement, series: number[], plot: () => uPlot | undefined) {
  key.classList.add('toggle');
  key.title = 'click to hide or show';
  key.addEventListener('click', () => {
    const u = plot();
    if (!u) return;
    const show = u.series[series[0]].show === false;
    for (const i of series) u.setSeries(i, { show });
    key.classList.toggle('hidden', !show);
  });
}

// A chart's own tools, at the right of its title: its data as CSV (x and every series, as
// drawn), its canvas as PNG, and expand (full width, taller) and back.
function chartTools(wrap: HTMLElement, name: string, plot: () => uPlot | undefined, onLog?: () => void) {
  const save = (href: string, file: string) => {
    const a = el('a', { href, download: file });
    document.body.append(a);
    a.click();
    a.remove();
  };
  const file = name.replace(/[^A-Za-z0-9_.-]+/g, '_');
  const csv = el('button', { class: 'tool', 'data-tool': 'csv', title: 'the data as CSV' }, 'CSV');
  csv.addEventListener('click', () => {
    const u = plot();
    if (!u) return;
    const head = u.series.map((x, i) => (i === 0 ? 'x' : String(x.label ?? `series ${i}`)));
    const rows = [head.map((h) => JSON.stringify(h)).join(',')];
    for (let i = 0; i < u.data[0].length; i++) {
      rows.push(u.data.map((col) => { const v = col[i]; return v === null ? 'nan' : v === undefined ? '' : String(v); }).join(','));
    }
    save(URL.createObjectURL(new Blob([rows.join('\n') + '\n'], { type: 'text/csv' })), file + '.csv');
  });
  const png = el('button', { class: 'tool', 'data-tool': 'png', title: 'the chart as PNG' }, 'PNG');
  png.addEventListener('click', () => { const u = plot(); if (u) save(u.ctx.canvas.toDataURL('image/png'), file + '.png'); });
  const expand = el('button', { class: 'tool', 'data-tool': 'expand', title: 'expand or shrink' }, '⤢');
  let small: { width: number; height: number } | null = null;
  expand.addEventListener('click', () => {
    const u = plot();
    if (!u) return;
    if (small) {
      u.setSize(small);
      small = null;
    } else {
      small = { width: u.width, height: u.height };
      u.setSize({ width: Math.max(u.width, (wrap.closest('.tab-body') as HTMLElement | null)?.clientWidth ?? u.width) - 24,
                  height: Math.round(u.height * 2) });
    }
    wrap.classList.toggle('expanded', small !== null);
  });
  const log = el('button', { class: 'tool', 'data-tool': 'log', title: 'log y on this chart, or back' }, 'log');
  log.addEventListener('click', () => onLog?.());
  wrap.querySelector('.panel-title')?.append(el('span', { class: 'tools' }, ...(onLog ? [log] : []), csv, png, expand));
}

function mergeHooks(...all: uPlot.Hooks.Arrays[]): uPlot.Hooks.Arrays {
  const out: Record<string, unknown[]> = {};
  for (const h of all) for (const [k, fns] of Object.entries(h)) (out[k] ??= []).push(...(fns as unknown[]));
  return out as uPlot.Hooks.Arrays;
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
  // One shared x axis: the union of every run's bucket positions (null where a run has none).
  const xs = new Set<number>();
  for (const c of curves) for (let i = 0; i < c.data.step.length; i++) {
    const x = xOf(c, i, o.x);
    if (x !== null) xs.add(x);
  }
  const xValues = Float64Array.from(xs).sort();
  const index = new Map<number, number>();
  xValues.forEach((x, i) => index.set(x, i));
  const data: (Drawn[] | Float64Array)[] = [xValues];
  const series: uPlot.Series[] = [{ label: o.x }];
  const bands: uPlot.Band[] = [];
  const bounds = o.robust ? robustBounds(curves.map((c) => c.data.last)) : null;
  const scale = bounds ? { ...chooseScale([bounds], o.log), decades: 0 } : chooseScale(curves.flatMap((c) => [c.data.min, c.data.max, c.data.last]), o.log);
  noteScale(wrap, scale, o.log);
  if (bounds) wrap.dataset.robust = bounds.join(',');
  const tipRows: { name: string; color: string; series: number }[] = [];
  let plot: uPlot | undefined;
  for (const c of curves) {
    // A gap (null) where a bucket held only NaN/Inf; joined over (undefined) where this run
    // has no bucket or the value cannot sit on a log axis.
    const align = (values: Num[]) => {
      const out: Drawn[] = new Array(xValues.length).fill(undefined);
      for (let i = 0; i < values.length; i++) {
        const x = xOf(c, i, o.x);
        if (x === null) continue;
        const v = values[i];
        out[index.get(x)!] = v === null ? (c.data.nonfinite[i] ? null : undefined)
          : scale.kind === 'log' && v <= 0 ? undefined : v;
      }
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
    const key = el('span', { class: 'run-key', 'data-run': c.run },
                   el('span', { class: 'key', style: `color:${c.color}` }, `■ ${c.run}`),
                   el('span', { class: 'muted' }, ` ${c.data.points.toLocaleString()} pts `));
    // The run's own NaN/Inf count, beside its name.
    if (nonfinite) key.append(el('span', { class: 'badge nonfinite' }, `${nonfinite} NaN/Inf`), ' ');
    toggles(key, own, () => plot);
    legend.append(key);
  }

  let ready = false;
  const primary = curves[0];
  // Each marker on its own run's curve (runs differ in wall time), in the run's colour when
  // runs are compared; findings of runs this chart does not show are not drawn.
  const drawMarkers = o.findings.flatMap((f) => {
    const c = curves.length === 1 && !f.run ? primary : curves.find((k) => k.run === f.run);
    if (!c) return [];
    const mk = { ...findingMarker(f, () => o.onFinding(f)), run: c.run };
    if (curves.length > 1) mk.color = c.color;
    return [markerLayer(wrap, [mk], (step) => xAtStep(c, step, o.x))];
  });
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
        // Buckets holding NaN/Inf: a tick on the top edge at their steps, in the non-finite
        // colour (the curve has a gap where a bucket held nothing else).
        const ctx = u.ctx;
        ctx.save();
        ctx.fillStyle = NONFINITE_COLOR;
        for (const c of curves) {
          for (let i = 0; i < c.data.step.length; i++) {
            if (!c.data.nonfinite[i]) continue;
            const xv = xOf(c, i, o.x);
            if (xv === null) continue;
            const px = u.valToPos(xv, 'x', true);
            if (px >= u.bbox.left && px <= u.bbox.left + u.bbox.width) ctx.fillRect(px - 1, u.bbox.top, 2, 6 * devicePixelRatio);
          }
        }
        ctx.restore();
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

// NaN/Inf steps: a tick on the top edge of the plot in the non-finite colour.
function drawNonfinite(u: uPlot, x: ArrayLike<number>, lines: LineSeries[]) {
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = NONFINITE_COLOR;
  for (const l of lines) {
    if (!l.nonfinite) continue;
    for (let i = 0; i < x.length; i++) {
      if (!l.nonfinite[i]) continue;
      const px = u.valToPos(x[i], 'x', true);
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
    hooks: { draw: [markerLayer(wrap, extra.markers || [], (s) => s)] },
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
    hooks: { draw: [columns, markerLayer(wrap, opts.markers || [], (s) => s), (u: uPlot) => drawNonfinite(u, x, [flagged])] },
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
