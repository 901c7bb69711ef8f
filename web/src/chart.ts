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
import { emaSmooth } from './smooth';
import { el, fmtNum, tickLabels } from './util';

export { emaSmooth };

export interface RunCurve {
  run: string;
  color: string;
  data: Buckets;
  start_time: number;
}

export interface ScalarChartOptions {
  tag: string;
  curves: RunCurve[];
  x: XMode;
  smooth: number;
  log: boolean;
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

// The value axis: labels from tickLabels, the axis as wide as its widest label.
function valueAxis(label?: string, log = false): uPlot.Axis {
  return {
    ...(log ? { splits: logSplits, filter: (_u: uPlot, splits: number[]) => splits } : {}),
    font: AXIS_FONT, label, labelSize: label ? 18 : 0, gap: 4,
    values: (_u, vals) => tickLabels(vals),
    size: (_u, values) => (values ? Math.ceil(Math.max(16, ...values.map((v) => textWidth(String(v))))) + 10 + 4 + 6 : 40),
  };
}

function stepAxis(label = 'step', time = false): uPlot.Axis {
  return time ? { font: AXIS_FONT, label, labelSize: 16 } : {
    font: AXIS_FONT, label, labelSize: 16, values: (_u, vals) => tickLabels(vals),
    space: (_u, _i, _min, _max, dim) => Math.max(60, dim / 8),
  };
}

// A linear y range that never crosses below zero when no value is negative.
function yRange(log: boolean, fromZero = false): uPlot.Scale {
  if (log) return { distr: 3 };
  return {
    distr: 1,
    range: (_u, min, max) => {
      if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
      const [lo, hi] = uPlot.rangeNum(min, max, 0.1, true) as [number, number];
      return [min >= 0 ? (fromZero ? 0 : Math.max(0, lo)) : lo, hi];
    },
  };
}

function xScale(xRange?: [number, number], time = false): uPlot.Scale {
  if (time || !xRange) return { time };
  const [lo, hi] = xRange[0] < xRange[1] ? xRange : [xRange[0] - 1, xRange[0] + 1];
  return { time: false, range: () => [lo, hi] };
}

// Points where a line cannot be seen: a series with at most 3 values (a final test/loss).
function points(values: ArrayLike<Num>): uPlot.Series.Points {
  let n = 0;
  for (let i = 0; i < values.length && n <= 3; i++) if (values[i] !== null && values[i] !== undefined) n++;
  return n <= 3 ? { show: true, size: 7 } : { show: false };
}

export interface Marker {
  step: number;
  color: string;
  code: string;
  title: string;
  onClick?: () => void;
}

// Finding markers: a thin bar per finding at its step, over the plot; x(step) maps a step to
// the chart's x value (the step itself unless x is time).
function markerLayer(wrap: HTMLElement, markers: Marker[], x: (step: number) => number | null) {
  const bars = markers.map((mk) => {
    const m = el('div', { class: 'finding-marker', title: mk.title, 'data-code': mk.code, 'data-step': String(mk.step) });
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

const PADDING: uPlot.Padding = [10, 22, 0, 0];

function xOf(d: Buckets, i: number, mode: XMode, start: number): number | null {
  if (mode === 'step') return d.step[i];
  const w = d.wall[i];
  if (w === null) return null;
  return mode === 'wall' ? w : w - start;
}

// The x value nearest to a step, from a run's buckets.
function xAtStep(d: Buckets, step: number, mode: XMode, start: number): number | null {
  if (mode === 'step') return step;
  let best = -1, dist = Infinity;
  for (let i = 0; i < d.step.length; i++) {
    const dd = Math.abs(d.step[i] - step);
    if (dd < dist) [best, dist] = [i, dd];
  }
  return best < 0 ? null : xOf(d, best, mode, start);
}

// Step at an x value (inverse of xAtStep), for zoom ranges in wall/relative mode.
function stepAtX(d: Buckets, x: number, mode: XMode, start: number): number {
  if (mode === 'step') return x;
  let best = 0, dist = Infinity;
  for (let i = 0; i < d.step.length; i++) {
    const xi = xOf(d, i, mode, start);
    if (xi === null) continue;
    const dd = Math.abs(xi - x);
    if (dd < dist) [best, dist] = [i, dd];
  }
  return d.step[best] ?? 0;
}

export const SEVERITY_COLOR: Record<string, string> = { critical: '#d62728', warning: '#ff7f0e', info: '#1f77b4' };

export function findingMarker(f: Finding, onClick?: () => void): Marker {
  return { step: f.step, color: SEVERITY_COLOR[f.severity] || '#888', code: f.code,
           title: `${f.code} @ ${f.step}: ${f.summary}`, onClick };
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
    const x = xOf(c.data, i, o.x, c.start_time);
    if (x !== null) xs.add(x);
  }
  const xAxis = Float64Array.from(xs).sort();
  const index = new Map<number, number>();
  xAxis.forEach((x, i) => index.set(x, i));
  const data: (Num[] | Float64Array)[] = [xAxis];
  const series: uPlot.Series[] = [{ label: o.x }];
  const bands: uPlot.Band[] = [];
  const positive = (v: Num) => (o.log && v !== null && v <= 0 ? null : v);
  let nonfinite = 0;
  for (const c of curves) {
    const align = (values: Num[]) => {
      const out: Num[] = new Array(xAxis.length).fill(null);
      for (let i = 0; i < values.length; i++) {
        const x = xOf(c.data, i, o.x, c.start_time);
        if (x !== null) out[index.get(x)!] = positive(values[i]);
      }
      return out;
    };
    nonfinite += c.data.nonfinite.reduce((a, b) => a + b, 0);
    const maxIdx = data.length;
    data.push(align(c.data.max), align(c.data.min));
    series.push({ label: `${c.run} max`, stroke: 'transparent', points: { show: false } },
                { label: `${c.run} min`, stroke: 'transparent', points: { show: false } });
    bands.push({ series: [maxIdx, maxIdx + 1], fill: c.color + '30' });
    if (o.smooth > 0) {
      data.push(align(c.data.last));
      series.push({ label: `${c.run} raw`, stroke: c.color + '55', width: 1, spanGaps: true, points: { show: false } });
    }
    const smoothed = align(emaSmooth(c.data.last, o.smooth));
    data.push(smoothed);
    series.push({ label: c.run, stroke: c.color, width: 1.5, spanGaps: true, points: { ...points(smoothed), fill: c.color } });
    legend.append(el('span', { class: 'key', style: `color:${c.color}` }, `■ ${c.run}`),
                  el('span', { class: 'muted' }, ` ${c.data.points.toLocaleString()} pts `));
  }
  if (nonfinite) legend.append(el('span', { class: 'badge critical' }, `${nonfinite} NaN/Inf`));

  let ready = false;
  const primary = curves[0];
  // Each marker on its own run's curve (runs differ in wall time).
  const drawMarkers = o.findings.map((f) => {
    const c = curves.find((k) => k.run === f.run) || primary;
    return markerLayer(wrap, [findingMarker(f, () => o.onFinding(f))], (step) => xAtStep(c.data, step, o.x, c.start_time));
  });
  // x values -> the step range asked of the server (scales are not read back: uPlot applies
  // setScale after the hook returns).
  const zoomTo = (min: number, max: number) => {
    if (!ready) return;
    o.onZoom([Math.floor(stepAtX(primary.data, min, o.x, primary.start_time)),
              Math.ceil(stepAtX(primary.data, max, o.x, primary.start_time))]);
  };
  const opts: uPlot.Options = {
    width: o.width,
    height: o.height ?? 220,
    padding: PADDING,
    series,
    bands,
    legend: { show: false },
    cursor: { sync: { key: 'trainscope' }, drag: { x: true, y: false }, bind: { dblclick: () => () => null } },
    scales: { x: xScale(o.x === 'step' ? o.xRange : undefined, o.x === 'wall'), y: yRange(o.log) },
    axes: [stepAxis(o.x === 'relative' ? 'seconds since start' : o.x === 'step' ? 'step' : 'wall time', o.x === 'wall'),
           valueAxis(undefined, o.log)],
    hooks: {
      draw: [(u) => {
        for (const d of drawMarkers) d(u);
        // Buckets holding NaN/Inf: a red tick on the top edge at their steps (the curve has a gap there).
        const ctx = u.ctx;
        ctx.save();
        ctx.fillStyle = '#d62728';
        for (const c of curves) {
          for (let i = 0; i < c.data.step.length; i++) {
            if (!c.data.nonfinite[i]) continue;
            const xv = xOf(c.data, i, o.x, c.start_time);
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
    },
  };
  opts.cursor!.drag!.setScale = false;
  const plot = new uPlot(opts, data as uPlot.AlignedData, wrap);
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
}

function chartBox(title: string, name: string): HTMLElement {
  const wrap = el('div', { class: 'chart', 'data-name': name });
  wrap.append(el('div', { class: 'panel-title' }, title));
  return wrap;
}

function hasData(lines: { values: Num[] }[]): boolean {
  return lines.some((l) => l.values.some((v) => v !== null && v !== undefined));
}

// Several lines over one x axis (steps), optionally log-scaled, with an optional shaded
// horizontal band (a healthy range) and a dashed reference line.
export function lineChart(title: string, x: number[], lines: LineSeries[], opts: LineChartOptions): HTMLElement {
  const wrap = chartBox(title, opts.name);
  const clean = (v: Num) => (opts.log && v !== null && v <= 0 ? null : v);
  const values = lines.map((l) => l.values.map(clean));
  if (!x.length || !hasData(values.map((v) => ({ values: v })))) {
    wrap.append(el('p', { class: 'empty' }, 'No data recorded for this view.'));
    return wrap;
  }
  if (opts.legend !== false) {
    const legend = el('div', { class: 'chart-legend' });
    for (const l of lines.slice(0, 24)) legend.append(el('span', { class: 'key', style: `color:${l.color}` }, `■ ${l.label} `));
    if (lines.length > 24) legend.append(el('span', { class: 'muted' }, `+${lines.length - 24} more`));
    wrap.append(legend);
  }
  const drawMarkers = markerLayer(wrap, opts.markers || [], (s) => s);
  const u = new uPlot({
    width: opts.width,
    height: opts.height ?? 200,
    padding: PADDING,
    legend: { show: false },
    cursor: { sync: { key: 'trainscope' } },
    scales: { x: xScale(opts.xRange), y: yRange(!!opts.log) },
    axes: [stepAxis(), valueAxis(opts.yLabel, !!opts.log)],
    series: [{}, ...lines.map((l, i) => ({
      label: l.label, stroke: l.color, width: 1.25, spanGaps: true, dash: l.dash, points: { ...points(values[i]), fill: l.color },
    }))],
    hooks: {
      draw: [drawMarkers],
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
    },
  }, [x, ...values] as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}

// Stacked areas: each layer drawn on top of the previous ones (step-time breakdown).
export function stackedChart(title: string, x: number[], layers: LineSeries[], width: number, name: string,
                             extra: { xRange?: [number, number]; markers?: Marker[]; height?: number } = {}): HTMLElement {
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
    scales: { x: xScale(extra.xRange), y: yRange(false, true) },  // areas stand on zero
    axes: [stepAxis(), valueAxis('seconds / step')],
    hooks: { draw: [markerLayer(wrap, extra.markers || [], (s) => s)] },
  }, data as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}

// TensorBoard's distribution chart: nested percentile bands (outermost faintest) and the
// median line over steps. percentiles[k] is the k-th percentile row (ascending), same
// length as x; the middle row is the median.
export function bandChart(title: string, x: number[], percentiles: Num[][], opts: LineChartOptions & { color?: string;
  extra?: LineSeries[] }): HTMLElement {
  const wrap = chartBox(title, opts.name);
  const clean = (v: Num) => (opts.log && v !== null && v <= 0 ? null : v);
  const rows = percentiles.map((r) => r.map(clean));
  if (!x.length || !hasData(rows.map((v) => ({ values: v })))) {
    wrap.append(el('p', { class: 'empty' }, 'No histograms recorded for this view.'));
    return wrap;
  }
  const color = opts.color || '#e8590c';
  const n = rows.length, mid = Math.floor(n / 2);
  const series: uPlot.Series[] = [{}];
  const data: Num[][] = [x];
  const bands: uPlot.Band[] = [];
  for (let k = 0; k < n; k++) {
    data.push(rows[k]);
    series.push({ label: `p${k}`, stroke: k === mid ? color : 'transparent', width: k === mid ? 1.5 : 0, spanGaps: true,
                  points: k === mid ? { ...points(rows[k]), fill: color } : { show: false } });
  }
  for (let k = 0; k < mid; k++) {
    const alpha = Math.round(255 * (0.12 + 0.1 * k)).toString(16).padStart(2, '0');
    bands.push({ series: [n - k, k + 1], fill: color + alpha });
  }
  for (const l of opts.extra || []) {
    data.push(l.values.map(clean));
    series.push({ label: l.label, stroke: l.color, width: 1.25, dash: l.dash, spanGaps: true, points: { ...points(l.values), fill: l.color } });
  }
  const legend = el('div', { class: 'chart-legend' }, el('span', { class: 'key', style: `color:${color}` }, '■ median, bands: percentiles '),
                    ...(opts.extra || []).map((l) => el('span', { class: 'key', style: `color:${l.color}` }, `■ ${l.label} `)));
  wrap.append(legend);
  const u = new uPlot({
    width: opts.width, height: opts.height ?? 220, padding: PADDING, legend: { show: false }, series, bands,
    cursor: { sync: { key: 'trainscope' } },
    scales: { x: xScale(opts.xRange), y: yRange(!!opts.log) },
    axes: [stepAxis(), valueAxis(opts.yLabel, !!opts.log)],
    hooks: { draw: [markerLayer(wrap, opts.markers || [], (s) => s)] },
  }, data as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}

// A small evidence chart: one series, no axes, the finding's step marked; its range in text.
export function sparkline(x: number[], values: Num[], o: { width: number; height?: number; color?: string; mark?: number;
  markColor?: string; log?: boolean; name: string; xRange?: [number, number] }): HTMLElement {
  const wrap = el('div', { class: 'spark', 'data-name': o.name });
  const vals = values.map((v) => (o.log && v !== null && v <= 0 ? null : v));
  const finite = vals.filter((v): v is number => v !== null && Number.isFinite(v));
  if (!x.length || !finite.length) {
    wrap.append(el('span', { class: 'empty' }, 'no series'));
    return wrap;
  }
  const u = new uPlot({
    width: o.width, height: o.height ?? 48, padding: [4, 4, 4, 4], legend: { show: false }, cursor: { show: false },
    scales: { x: xScale(o.xRange), y: yRange(!!o.log) },
    axes: [{ show: false }, { show: false }],
    series: [{}, { stroke: o.color || '#1f77b4', width: 1.25, spanGaps: true, points: { ...points(vals), fill: o.color || '#1f77b4' } }],
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
