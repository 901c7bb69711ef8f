// The axes and scales every chart shares: tick spacings and labels (1-2-5, whole steps, wall
// time with the date in the title), log and symlog chosen by the data and said on the chart,
// outlier-robust ranges, the theme's colours, and the margins that line charts up with heatmaps.

import uPlot from 'uplot';
import { Num } from './api';
import { XMode } from './state';
import { el, NICE_INCRS, STEP_INCRS, themeColor, tickLabels, TIME_INCRS, timeAxisTitle, timeLabels } from './util';

export const AXIS_FONT = '11px system-ui, -apple-system, "Segoe UI", sans-serif';
let measureCtx: CanvasRenderingContext2D | null = null;
export function textWidth(text: string, font = AXIS_FONT): number {
  measureCtx ??= document.createElement('canvas').getContext('2d')!;
  measureCtx.font = font;
  return measureCtx.measureText(text).width;
}

// Log-axis ticks and grid at whole decades (uPlot's default draws every 1..9 x 10^k, a
// striped background); with less than two decades in view, 1, 2, 5 x 10^k.
export function logSplits(_u: uPlot, _i: number, min: number, max: number): number[] {
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

export const LINEAR: YScale = { kind: 'linear', linthresh: 1, decades: 0 };
export const LOG: YScale = { kind: 'log', linthresh: 1, decades: 0 };

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
export function robustTop(top: Num[]): [number, number] | null {
  const b = robustBounds([top]);
  return b ? [0, b[1]] : null;
}

// Says on the chart that its axis is not linear, and why.
export function noteScale(wrap: HTMLElement, scale: YScale, forced: boolean) {
  wrap.dataset.yscale = scale.kind;
  if (scale.kind === 'linear' || forced) return;
  const title = wrap.querySelector('.panel-title');
  title?.append(el('span', { class: 'muted scale-note' },
    ` · ${scale.kind} y: values span ${Math.round(scale.decades)} decades`));
}

// Symlog ticks and grid: 0 and ±10^k at whole decades from the linear threshold out, at most
// about 4 each side (uPlot's default draws a line at every 1..9 x 10^k).
export function symlogSplits(u: uPlot, _i: number, min: number, max: number): number[] {
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
export function spacedOut(u: uPlot, splits: number[]): (number | null)[] {
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
export function valueAxis(label: string | undefined, scale: YScale, fixedSize?: number): uPlot.Axis {
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
export function themed(): Partial<uPlot.Axis> {
  const grid = themeColor('--grid');
  return { stroke: themeColor('--fg'), grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
}

// The x axis: whole steps at 1-2-5 spacings; wall time as times of day with the date once,
// in the axis title; relative time in seconds.
export function xAxis(mode: XMode = 'step', span?: [number, number]): uPlot.Axis {
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
export function yRange(scale: YScale, fromZero = false, bounds: [number, number] | null = null): uPlot.Scale {
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

export function xScale(xRange?: [number, number], time = false): uPlot.Scale {
  // Points logged within one clock tick: a second either side, not uPlot's years.
  if (time || !xRange) return { time, range: (_u, min, max) => (min < max ? [min, max] : [min - 1, max + 1]) };
  // Half a step of margin each side: a heatmap column is its step ± 0.5 (heatmap.ts), so the
  // curves' points sit at their columns' middles.
  const [lo, hi] = xRange[0] < xRange[1] ? xRange : [xRange[0] - 1, xRange[0] + 1];
  return { time: false, range: () => [lo - 0.5, hi + 0.5] };
}

// Right of the plot: room for the last step label (heatmaps keep the same margin, to line up).
export const PLOT_RIGHT = 22;
export const PADDING: uPlot.Padding = [10, PLOT_RIGHT, 0, 0];
