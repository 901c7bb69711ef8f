// Curves on uPlot: the scalar chart (runs overlaid, min/max band per decimation bucket, EMA
// smoothing with bias correction, log scale, step/wall/relative x, zoom that asks the
// server again at full fidelity, finding markers), and plain line and stacked charts.

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { Buckets, Finding, Num } from './api';
import { XMode } from './state';
import { emaSmooth } from './smooth';
import { el, fmt } from './util';

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
}

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

const SEVERITY_COLOR: Record<string, string> = { critical: '#d62728', warning: '#ff7f0e', info: '#1f77b4' };

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
    data.push(align(emaSmooth(c.data.last, o.smooth)));
    series.push({ label: c.run, stroke: c.color, width: 1.5, spanGaps: true, points: { show: false } });
    legend.append(el('span', { class: 'key', style: `color:${c.color}` }, `■ ${c.run}`),
                  el('span', { class: 'muted' }, ` ${c.data.points.toLocaleString()} pts `));
  }
  if (nonfinite) legend.append(el('span', { class: 'badge critical' }, `${nonfinite} NaN/Inf`));

  const markers = o.findings.map((f) => {
    const m = el('div', { class: `finding-marker sev-${f.severity}`, title: `${f.code} @ ${f.step}: ${f.summary}`,
                          'data-code': f.code, 'data-step': String(f.step) });
    m.style.background = SEVERITY_COLOR[f.severity] || '#888';
    m.addEventListener('click', (e) => {
      e.stopPropagation();
      o.onFinding(f);
    });
    return { f, m };
  });

  let ready = false;
  const primary = curves[0];
  // x values -> the step range asked of the server (scales are not read back: uPlot applies
  // setScale after the hook returns).
  const zoomTo = (min: number, max: number) => {
    if (!ready) return;
    o.onZoom([Math.floor(stepAtX(primary.data, min, o.x, primary.start_time)),
              Math.ceil(stepAtX(primary.data, max, o.x, primary.start_time))]);
  };
  const opts: uPlot.Options = {
    width: o.width,
    height: 220,
    series,
    bands,
    legend: { show: false },
    cursor: { sync: { key: 'trainscope' }, drag: { x: true, y: false }, bind: { dblclick: () => () => null } },
    scales: { x: { time: o.x === 'wall' }, y: { distr: o.log ? 3 : 1 } },
    axes: [{ label: o.x === 'relative' ? 'seconds since start' : o.x === 'step' ? 'step' : undefined },
           { size: 60, values: (_u, vals) => vals.map((v) => fmt(v)) }],
    hooks: {
      draw: [(u) => {
        for (const { f, m } of markers) {
          // Positioned on its own run's curve (runs differ in wall time).
          const c = curves.find((k) => k.run === f.run) || primary;
          const x = xAtStep(c.data, f.step, o.x, c.start_time);
          const left = x === null ? -1 : u.valToPos(x, 'x');
          const visible = x !== null && left >= 0 && left <= u.over.clientWidth;
          m.style.display = visible ? 'block' : 'none';
          m.style.left = left - 1 + 'px';
          if (!m.parentNode) u.over.append(m);
        }
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
}

// Several lines over one x axis (steps), optionally log-scaled, with an optional shaded
// horizontal band (a healthy range) and a dashed reference line.
export function lineChart(title: string, x: number[], lines: LineSeries[], opts: {
  width: number; log?: boolean; band?: [number, number]; reference?: number; name: string; yLabel?: string;
}): HTMLElement {
  const wrap = el('div', { class: 'chart', 'data-name': opts.name });
  wrap.append(el('div', { class: 'panel-title' }, title));
  if (!x.length) {
    wrap.append(el('p', { class: 'empty' }, 'No data recorded for this view.'));
    return wrap;
  }
  const legend = el('div', { class: 'chart-legend' });
  for (const l of lines.slice(0, 24)) legend.append(el('span', { class: 'key', style: `color:${l.color}` }, `■ ${l.label} `));
  wrap.append(legend);
  const clean = (v: Num) => (opts.log && v !== null && v <= 0 ? null : v);
  const u = new uPlot({
    width: opts.width,
    height: 200,
    legend: { show: false },
    cursor: { sync: { key: 'trainscope' } },
    scales: { x: { time: false }, y: { distr: opts.log ? 3 : 1 } },
    axes: [{}, { size: 60, label: opts.yLabel, values: (_u, vals) => vals.map((v) => fmt(v)) }],
    series: [{}, ...lines.map((l) => ({ label: l.label, stroke: l.color, width: 1.25, spanGaps: true, points: { show: false } }))],
    hooks: {
      drawClear: [(u: uPlot) => {
        if (!opts.band && opts.reference === undefined) return;
        const ctx = u.ctx;
        ctx.save();
        if (opts.band) {
          const y0 = u.valToPos(opts.band[1], 'y', true), y1 = u.valToPos(opts.band[0], 'y', true);
          ctx.fillStyle = 'rgba(44,160,44,0.12)';
          ctx.fillRect(u.bbox.left, y0, u.bbox.width, y1 - y0);
        }
        if (opts.reference !== undefined) {
          const y = u.valToPos(opts.reference, 'y', true);
          ctx.strokeStyle = 'rgba(44,160,44,0.8)';
          ctx.setLineDash([5, 4]);
          ctx.beginPath();
          ctx.moveTo(u.bbox.left, y);
          ctx.lineTo(u.bbox.left + u.bbox.width, y);
          ctx.stroke();
        }
        ctx.restore();
      }],
    },
  }, [x, ...lines.map((l) => l.values.map(clean))] as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}

// Stacked areas: each layer drawn on top of the previous ones (step-time breakdown).
export function stackedChart(title: string, x: number[], layers: LineSeries[], width: number, name: string): HTMLElement {
  const wrap = el('div', { class: 'chart', 'data-name': name });
  wrap.append(el('div', { class: 'panel-title' }, title));
  if (!x.length) {
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
    series.push({ label: layers[i].label, stroke: layers[i].color, fill: layers[i].color + 'aa', width: 1, points: { show: false } });
    data.push(sums[i]);
  }
  for (const l of layers) legend.append(el('span', { class: 'key', style: `color:${l.color}` }, `■ ${l.label} `));
  wrap.append(legend);
  const u = new uPlot({
    width, height: 220, legend: { show: false }, series, cursor: { sync: { key: 'trainscope' } },
    scales: { x: { time: false } },
    axes: [{}, { size: 60, label: 'seconds / step', values: (_u, v) => v.map((s) => fmt(s)) }],
  }, data as uPlot.AlignedData, wrap);
  (wrap as HTMLElement & { plot?: uPlot }).plot = u;
  return wrap;
}
