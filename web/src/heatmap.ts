// A canvas heatmap: rows (layers, units, exponent bins) x columns over steps. Log colour
// scale for quantities spanning decades (gradient norms, counts); non-finite cells in
// magenta so a NaN never hides as "no data".
//
// Columns sit at their steps on the chart's step range (xRange), lined up with the curves
// above and below, each as wide as the steps it stands for (stepWidth: a bucket of the
// server's grid, or one step for a sample) and never wider: a histogram taken every 100th
// step is a thin column every 100 steps, and steps with nothing recorded stay white. Row labels are HTML beside the canvas, one row at least 12 px
// tall so labels never overlap; past 40 rows the body scrolls (hundreds of parameters).

import { Cell } from './api';
import { el, fmt, fmtNum, NONFINITE_RGB, themeColor, tickLabels, viridis } from './util';
import { AXIS_FONT, PLOT_RIGHT, textWidth } from './axes';

export interface HeatmapOptions {
  title: string;
  rows: string[];
  steps: number[];  // column starts
  values: Cell[][];  // [row][column]
  log: boolean;
  domain?: [number, number];  // colour range; default from the data
  selectedRow?: number;
  markers?: { step: number; color: string }[];
  onRowClick?: (row: number) => void;
  valueLabel?: string;
  name: string;  // data-name, for tests and styling
  xRange?: [number, number];  // steps shown; default the columns' own
  stepWidth?: number;  // steps one column stands for; default the smallest gap between columns
  width?: number;  // the whole picture's width (labels, plot, right margin), as the curves' around it
}

export const LABEL_WIDTH = 150;

const MAX_BODY_HEIGHT = 480;

// "Nice" ticks (1, 2, 5 x 10^k, whole numbers when `integer`) over [lo, hi], about `count` of them.
export function niceTicks(lo: number, hi: number, count = 6, integer = false): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = Math.max(integer ? 1 : 0, [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag);
  const out: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) out.push(Math.round(t * 1e9) / 1e9);
  return out;
}

// A label shortened from the left until it fits `width` px: the end of a parameter name
// (layer4.1.conv2.weight) is what tells rows apart.
function fitLabel(label: string, width: number): string {
  if (textWidth(label) <= width) return label;
  let s = label;
  while (s.length > 2 && textWidth('…' + s) > width) s = s.slice(1);
  return '…' + s;
}

// The colour range (over the drawn values, or o.domain) and the map of a value into [0, 1].
function colourScale(o: HeatmapOptions): { lo: number; hi: number; scale: (v: number) => number } {
  let lo = Infinity, hi = -Infinity;
  for (const row of o.values) {
    for (const v of row) {
      if (typeof v !== 'number' || (o.log && v <= 0)) continue;
      lo = Math.min(lo, v);
      hi = Math.max(hi, v);
    }
  }
  if (o.domain) [lo, hi] = o.domain;
  if (!(lo <= hi)) [lo, hi] = [0, 1];
  const f = (v: number) => (o.log ? Math.log10(v) : v);
  const flo = f(o.log ? Math.max(lo, 1e-300) : lo), fhi = f(o.log ? Math.max(hi, 1e-300) : hi);
  const scale = (v: number) => (fhi > flo ? (f(v) - flo) / (fhi - flo) : 0.5);
  return { lo, hi, scale };
}

function drawRowLabels(labels: HTMLElement, o: HeatmapOptions, rowH: number): void {
  labels.style.height = rowH * o.rows.length + 'px';
  o.rows.forEach((name, r) => {
    const label = el('div', { class: r === o.selectedRow ? 'hm-label selected' : 'hm-label', title: name,
                              style: `top:${r * rowH}px;height:${rowH}px;line-height:${rowH}px` },
                     fitLabel(name, LABEL_WIDTH - 8));
    if (o.onRowClick) label.addEventListener('click', () => o.onRowClick!(r));
    labels.append(label);
  });
}

// The steps one column stands for: o.stepWidth, else the smallest gap between columns.
function columnWidth(o: HeatmapOptions): number {
  let stepWidth = o.stepWidth ?? Infinity;
  if (o.stepWidth === undefined) for (let c = 1; c < o.steps.length; c++) stepWidth = Math.min(stepWidth, o.steps[c] - o.steps[c - 1]);
  return stepWidth > 0 && Number.isFinite(stepWidth) ? stepWidth : 1;
}

// Only columns with a value (statistics taken every Nth step leave empty buckets between them).
function columnsWithValues(o: HeatmapOptions): HeatmapOptions {
  const keep = o.steps.map((_, c) => c).filter((c) => o.values.some((row) => row[c] !== null && row[c] !== undefined));
  if (!keep.length || keep.length === o.steps.length) return o;
  return { ...o, steps: keep.map((c) => o.steps[c]), values: o.values.map((row) => keep.map((c) => row[c])) };
}

// The cells as an image of one pixel per device pixel across and one per row down (then
// scaled): each pixel column takes the data column whose steps cover it; a column is at least
// 2 pixels wide so that a single sample shows.
function cellImage(o: HeatmapOptions, pixels: number, first: number, end: number, span: number, stepWidth: number,
                   scale: (v: number) => number): HTMLCanvasElement {
  const cols = o.steps.length;
  const colOf = new Int32Array(pixels).fill(-1);
  const columnSteps = Math.max(stepWidth, (2 * span) / pixels);
  let c = 0;
  for (let p = 0; p < pixels; p++) {
    const step = first + ((p + 0.5) / pixels) * span;
    while (c + 1 < cols && o.steps[c + 1] - 0.5 <= step) c++;
    const start = o.steps[c] - 0.5;
    const stop = Math.min(c + 1 < cols ? o.steps[c + 1] - 0.5 : end, start + columnSteps);
    if (step >= start && step < stop) colOf[p] = c;
  }
  const img = new ImageData(pixels, o.rows.length);
  for (let r = 0; r < o.rows.length; r++) {
    const row = o.values[r] || [];
    for (let p = 0; p < pixels; p++) {
      const k = (r * pixels + p) * 4;
      const v = colOf[p] < 0 ? undefined : row[colOf[p]];
      let rgb: [number, number, number] | null = null;
      if (v === 'nonfinite') rgb = NONFINITE_RGB;
      else if (typeof v === 'number' && (!o.log || v > 0)) rgb = viridis(scale(v));
      if (rgb) {
        img.data[k] = rgb[0];
        img.data[k + 1] = rgb[1];
        img.data[k + 2] = rgb[2];
        img.data[k + 3] = 255;
      }
    }
  }
  const off = document.createElement('canvas');
  off.width = pixels;
  off.height = o.rows.length;
  off.getContext('2d')!.putImageData(img, 0, 0);
  return off;
}

// A dashed vertical line at each marker's step (findings, the selected step).
function drawMarkers(ctx: CanvasRenderingContext2D, markers: { step: number; color: string }[], first: number,
                     end: number, plotH: number, xOf: (step: number) => number): void {
  for (const m of markers) {
    if (m.step < first || m.step > end) continue;
    ctx.strokeStyle = m.color;
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(xOf(m.step), 0);
    ctx.lineTo(xOf(m.step), plotH);
    ctx.stroke();
    ctx.setLineDash([]);
  }
}

// The step axis, in HTML under the canvas, each label centred on its step (one at the left edge
// reaches under the row labels; one that would pass the right edge is left out).
function drawStepAxis(axis: HTMLElement, first: number, end: number, plotW: number, xOf: (step: number) => number): void {
  const ticks = niceTicks(Math.ceil(first), Math.floor(end), Math.max(2, Math.floor(plotW / 110)), true);
  const text = tickLabels(ticks);
  axis.replaceChildren(...ticks.flatMap((t, i) => {
    const w = textWidth(text[i], AXIS_FONT);
    if (xOf(t) + w / 2 > plotW + 8) return [];
    return [el('span', { class: 'hm-tick', 'data-value': String(t), style: `left:${xOf(t) - w / 2}px` }, text[i])];
  }), el('span', { class: 'hm-axis-label', style: `left:${Math.max(0, plotW / 2 - 12)}px` }, 'step'));
  axis.style.width = plotW + 'px';
}

// The cell under the pointer in a tooltip; a click on a row selects it (o.onRowClick).
function listenToCells(canvas: HTMLCanvasElement, tip: HTMLElement, wrap: HTMLElement, o: HeatmapOptions, rowH: number,
                       first: number, span: number): void {
  const cols = o.steps.length;
  const cellAt = (ev: MouseEvent) => {
    const rect = canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    const r = Math.floor(y / rowH);
    const step = first + (x / rect.width) * span;
    let c = -1;
    for (let i = 0; i < cols && o.steps[i] - 0.5 <= step; i++) c = i;
    return { r, c, step, inside: r >= 0 && r < o.rows.length && x >= 0 && x <= rect.width };
  };
  canvas.addEventListener('mousemove', (ev) => {
    const { r, c, inside } = cellAt(ev);
    if (!inside) {
      tip.style.display = 'none';
      return;
    }
    const v = c >= 0 ? o.values[r]?.[c] : undefined;
    tip.textContent = `${o.rows[r]}${c >= 0 ? ` · step ${o.steps[c]} · ${fmt(v)}` : ''}`;
    tip.style.display = 'block';
    const box = wrap.getBoundingClientRect();
    tip.style.left = ev.clientX - box.left + 12 + 'px';
    tip.style.top = ev.clientY - box.top + 16 + 'px';
  });
  canvas.addEventListener('mouseleave', () => (tip.style.display = 'none'));
  canvas.addEventListener('click', (ev) => {
    const { r, inside } = cellAt(ev);
    if (inside && o.onRowClick) o.onRowClick(r);
  });
}

export function heatmap(o: HeatmapOptions): HTMLElement {
  const wrap = el('div', { class: 'heatmap', 'data-name': o.name, 'data-rows': String(o.rows.length),
                           'data-cols': String(o.steps.length) });
  const title = el('div', { class: 'panel-title' }, o.title);
  wrap.append(title);
  const anyValue = o.values.some((row) => row.some((v) => v !== null && v !== undefined));
  if (!o.rows.length || !o.steps.length || !anyValue) {
    // Said, not drawn as an empty frame: e.g. dead fractions exist for ReLU-like modules only.
    wrap.append(el('p', { class: 'empty' }, o.rows.length ? `No ${o.valueLabel || 'values'} recorded for these ${o.rows.length} rows.`
      : 'No data recorded for this view.'));
    return wrap;
  }
  const tip = el('div', { class: 'tip' });
  const canvas = el('canvas');
  const labels = el('div', { class: 'hm-labels', style: `width:${LABEL_WIDTH}px` });
  const body = el('div', { class: 'hm-body' }, labels, canvas);
  const axis = el('div', { class: 'hm-axis', style: `margin-left:${LABEL_WIDTH}px` });
  const legend = el('div', { class: 'legend' });
  wrap.append(body, axis, tip, legend);

  const { lo, hi, scale } = colourScale(o);
  legend.textContent = `${o.valueLabel || 'value'}: ${fmtNum(lo)} … ${fmtNum(hi)}${o.log ? ' (log colour; white = 0 or not recorded)' : ''}  ·  magenta = NaN/Inf`;

  const rowH = Math.max(12, Math.min(18, Math.floor(320 / o.rows.length)));
  const plotH = rowH * o.rows.length;
  if (plotH > MAX_BODY_HEIGHT) body.classList.add('scroll');
  drawRowLabels(labels, o, rowH);

  const stepWidth = columnWidth(o);
  o = columnsWithValues(o);
  const cols = o.steps.length;
  // Step s is the interval [s - 0.5, s + 0.5): a column's middle is its step, where the curves
  // around it (axes.ts xScale, the same half step of margin) draw that step's point.
  const first = (o.xRange ? Math.min(o.xRange[0], o.steps[0]) : o.steps[0]) - 0.5;
  const end = Math.max(o.xRange ? o.xRange[1] : o.steps[cols - 1] + stepWidth - 1, o.steps[cols - 1]) + 0.5;
  const span = Math.max(1, end - first);

  const draw = () => {
    const width = Math.max(300, o.width ?? (body.clientWidth || wrap.clientWidth || 800));
    const plotW = Math.max(50, width - LABEL_WIDTH - PLOT_RIGHT);
    const dpr = window.devicePixelRatio || 1;
    const pixels = Math.max(1, Math.round(plotW * dpr));
    canvas.width = pixels;
    canvas.height = Math.round(plotH * dpr);
    canvas.style.width = plotW + 'px';
    canvas.style.height = plotH + 'px';
    const ctx = canvas.getContext('2d')!;
    ctx.fillStyle = themeColor('--panel');
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    const off = cellImage(o, pixels, first, end, span, stepWidth, scale);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, 0, 0, canvas.width, canvas.height);
    ctx.scale(dpr, dpr);
    const xOf = (step: number) => ((step - first) / span) * plotW;
    if (o.selectedRow !== undefined && o.selectedRow >= 0) {
      ctx.strokeStyle = '#d62728';
      ctx.strokeRect(0.5, o.selectedRow * rowH + 0.5, plotW - 1, rowH - 1);
    }
    drawMarkers(ctx, o.markers || [], first, end, plotH, xOf);
    drawStepAxis(axis, first, end, plotW, xOf);
    wrap.dataset.x0 = String(first);
    wrap.dataset.x1 = String(end);
  };
  listenToCells(canvas, tip, wrap, o, rowH, first, span);
  let lastWidth0 = -1;
  const redraw = () => {
    const w = body.clientWidth;
    if (w === lastWidth0) return;
    lastWidth0 = w;
    draw();
  };
  new ResizeObserver(redraw).observe(body);
  // Drawn as soon as it is in the page (the observer fires then), not on a later frame.
  queueMicrotask(() => { if (wrap.isConnected) redraw(); });
  return wrap;
}
