// A canvas heatmap: rows (layers, units, exponent bins) x columns (step buckets). Log colour
// scale for quantities spanning decades (gradient norms, counts); non-finite cells in
// magenta so a NaN never hides as "no data".

import { Cell } from './api';
import { el, fmt, viridis } from './util';

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
}

const LABEL_WIDTH = 140;
const NONFINITE: [number, number, number] = [255, 0, 255];

export function heatmap(o: HeatmapOptions): HTMLElement {
  const wrap = el('div', { class: 'heatmap', 'data-name': o.name, 'data-rows': String(o.rows.length),
                           'data-cols': String(o.steps.length) });
  const title = el('div', { class: 'panel-title' }, o.title);
  const tip = el('div', { class: 'tip' });
  const canvas = el('canvas');
  const legend = el('div', { class: 'legend' });
  wrap.append(title, canvas, tip, legend);
  if (!o.rows.length || !o.steps.length) {
    wrap.append(el('p', { class: 'empty' }, 'No data recorded for this view.'));
    return wrap;
  }
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
  legend.textContent = `${o.valueLabel || 'value'}: ${fmt(lo)} … ${fmt(hi)}${o.log ? ' (log colour; white = 0 or not recorded)' : ''}  ·  magenta = NaN/Inf`;

  const rowH = Math.max(4, Math.min(18, Math.floor(320 / o.rows.length)));
  const draw = () => {
    const width = Math.max(300, wrap.clientWidth || 800);
    const height = rowH * o.rows.length + 18;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr;
    canvas.height = height * dpr;
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    const ctx = canvas.getContext('2d')!;
    ctx.scale(dpr, dpr);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, width, height);
    const plotW = width - LABEL_WIDTH;
    const cols = o.steps.length;
    // Cells into an ImageData at one pixel per cell, then scaled: fast for any size.
    const img = new ImageData(cols, o.rows.length);
    for (let r = 0; r < o.rows.length; r++) {
      for (let c = 0; c < cols; c++) {
        const v = o.values[r]?.[c];
        const k = (r * cols + c) * 4;
        let rgb: [number, number, number] | null = null;
        if (v === 'nonfinite') rgb = NONFINITE;
        else if (typeof v === 'number' && (!o.log || v > 0)) rgb = viridis(scale(v));
        if (rgb) {
          img.data[k] = rgb[0];
          img.data[k + 1] = rgb[1];
          img.data[k + 2] = rgb[2];
          img.data[k + 3] = 255;
        } else {
          img.data[k + 3] = 0;
        }
      }
    }
    const off = document.createElement('canvas');
    off.width = cols;
    off.height = o.rows.length;
    off.getContext('2d')!.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, LABEL_WIDTH, 0, plotW, rowH * o.rows.length);
    ctx.font = `${Math.min(11, rowH)}px sans-serif`;
    ctx.textBaseline = 'middle';
    for (let r = 0; r < o.rows.length; r++) {
      ctx.fillStyle = r === o.selectedRow ? '#d62728' : '#333';
      let label = o.rows[r];
      if (label.length > 22) label = '…' + label.slice(-21);
      if (rowH >= 8 || r % Math.ceil(8 / rowH) === 0) ctx.fillText(label, 2, r * rowH + rowH / 2);
    }
    if (o.selectedRow !== undefined && o.selectedRow >= 0) {
      ctx.strokeStyle = '#d62728';
      ctx.strokeRect(LABEL_WIDTH + 0.5, o.selectedRow * rowH + 0.5, plotW - 1, rowH - 1);
    }
    const first = o.steps[0], last = o.steps[cols - 1];
    const xOf = (step: number) => LABEL_WIDTH + ((step - first) / Math.max(1, last - first)) * plotW;
    for (const m of o.markers || []) {
      if (m.step < first || m.step > last) continue;
      ctx.strokeStyle = m.color;
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(xOf(m.step), 0);
      ctx.lineTo(xOf(m.step), rowH * o.rows.length);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.fillStyle = '#555';
    ctx.textBaseline = 'top';
    ctx.fillText(`step ${first}`, LABEL_WIDTH, rowH * o.rows.length + 4);
    const endLabel = `step ${last}`;
    ctx.fillText(endLabel, width - ctx.measureText(endLabel).width - 2, rowH * o.rows.length + 4);
  };
  const cellAt = (ev: MouseEvent) => {
    const rect = canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    const r = Math.floor(y / rowH);
    const c = Math.floor(((x - LABEL_WIDTH) / (rect.width - LABEL_WIDTH)) * o.steps.length);
    return { r, c, inside: r >= 0 && r < o.rows.length && x >= 0 };
  };
  canvas.addEventListener('mousemove', (ev) => {
    const { r, c, inside } = cellAt(ev);
    if (!inside) {
      tip.style.display = 'none';
      return;
    }
    const v = c >= 0 && c < o.steps.length ? o.values[r]?.[c] : undefined;
    tip.textContent = `${o.rows[r]}${c >= 0 && c < o.steps.length ? ` · step ${o.steps[c]} · ${fmt(v)}` : ''}`;
    tip.style.display = 'block';
    tip.style.left = ev.offsetX + 12 + 'px';
    tip.style.top = ev.offsetY + 24 + 'px';
  });
  canvas.addEventListener('mouseleave', () => (tip.style.display = 'none'));
  canvas.addEventListener('click', (ev) => {
    const { r, inside } = cellAt(ev);
    if (inside && o.onRowClick) o.onRowClick(r);
  });
  requestAnimationFrame(draw);
  new ResizeObserver(() => draw()).observe(wrap);
  return wrap;
}
