// Sweep: the runs in the table (its filter applies) as W&B's parameter views — parallel
// coordinates over the config keys in which they differ and one final metric, each run a
// line coloured by that metric, then the same as a sortable table.
import { RunSummary } from '../api';
import { ctx, setState } from '../ctx';
import { isUserSeries } from '../groups';
import { flatten } from '../runs';
import { el, fmt, fmtNum, regex, tickLabels, viridis } from '../util';

const SVG = 'http://www.w3.org/2000/svg';
function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>, text?: string) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

interface Axis {
  key: string;  // 'c:lr' or 'm:val/loss'
  label: string;
  value: (r: RunSummary) => unknown;
  position: (v: unknown) => number | null;  // 0 (bottom) .. 1 (top)
  ticks: [number, string][];
}

// A numeric axis (log when positive over more than two decades) or a categorical one.
function axisOf(key: string, label: string, value: (r: RunSummary) => unknown, runs: RunSummary[]): Axis {
  const values = runs.map(value).filter((v) => v !== undefined && v !== null);
  const numbers = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  if (numbers.length === values.length && numbers.length) {
    let lo = Math.min(...numbers), hi = Math.max(...numbers);
    const log = lo > 0 && hi / lo > 100;
    const f = (v: number) => (log ? Math.log10(v) : v);
    if (hi === lo) [lo, hi] = [lo - 1, hi + 1];
    const position = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? (f(v) - f(lo)) / (f(hi) - f(lo)) : null);
    const ends = [lo, hi];
    return { key, label: label + (log ? ' (log)' : ''), value, position, ticks: ends.map((v, i) => [position(v)!, tickLabels(ends)[i]]) };
  }
  const categories = [...new Set(values.map((v) => JSON.stringify(v)))].sort();
  const position = (v: unknown) => {
    const i = categories.indexOf(JSON.stringify(v));
    return i < 0 ? null : categories.length === 1 ? 0.5 : i / (categories.length - 1);
  };
  return { key, label, value, position, ticks: categories.map((c) => [position(JSON.parse(c))!, fmt(JSON.parse(c))]) };
}

export async function sweepView(gen: number, box: HTMLElement): Promise<void> {
  const re = regex(ctx.state.filter);
  const runs = ctx.runs.filter((r) => !re || re.test(r.name) || re.test(JSON.stringify(r.config || {})));
  if (gen !== ctx.generation) return;
  const configs = new Map(runs.map((r) => [r.name, flatten(r.config || {})]));
  const keys = [...new Set(runs.flatMap((r) => Object.keys(configs.get(r.name)!)))]
    .filter((k) => new Set(runs.map((r) => JSON.stringify(configs.get(r.name)![k]))).size > 1).slice(0, 10);
  const metrics = [...new Set(runs.flatMap((r) => Object.keys(r.final || {})))].filter(isUserSeries).sort();
  const metric = metrics.includes(ctx.state.metric) ? ctx.state.metric
    : metrics.find((m) => /^val.*loss/.test(m)) || metrics.find((m) => /loss/.test(m)) || metrics[0];
  const pick = el('select', { id: 'sweep-metric' }, ...metrics.map((m) => {
    const o = el('option', { value: m }, m);
    o.selected = m === metric;
    return o;
  }));
  pick.addEventListener('change', () => setState({ metric: pick.value }));
  box.append(el('div', { class: 'toolbar' }, `${runs.length} runs (the table's filter applies) · colour and last axis: `, pick,
                el('span', { class: 'muted' }, ` · ${keys.length} config keys differ`)));
  if (runs.length < 2 || !metric) {
    box.append(el('p', { class: 'empty' }, 'A sweep needs two runs or more with a final metric.'));
    return;
  }
  const axes = [...keys.map((k) => axisOf('c:' + k, k, (r) => configs.get(r.name)![k], runs)),
                axisOf('m:' + metric, metric, (r) => r.final?.[metric], runs)];
  const width = Math.max(480, Math.min(ctx.view?.clientWidth || 900, 1400) - 40), height = 300, top = 36, bottom = 36;
  const x = (i: number) => 60 + (i * (width - 140)) / Math.max(1, axes.length - 1);
  const y = (p: number) => top + (1 - p) * (height - top - bottom);
  const plot = svg('svg', { width, height, class: 'parallel', 'data-axes': axes.length });
  const colour = axes[axes.length - 1];
  for (const r of runs) {
    const points = axes.map((a, i) => {
      const p = a.position(a.value(r));
      return p === null ? null : `${x(i).toFixed(1)},${y(p).toFixed(1)}`;
    });
    const c = colour.position(colour.value(r));
    const [red, green, blue] = c === null ? [150, 150, 150] : viridis(c);
    const line = svg('polyline', { points: points.filter(Boolean).join(' '), fill: 'none', 'stroke-width': 2,
                                   stroke: `rgb(${red | 0},${green | 0},${blue | 0})`, 'data-run': r.name, class: 'run-line' });
    line.append(svg('title', {}, `${r.name}: ${metric} ${fmt(r.final?.[metric])}`));
    plot.append(line);
  }
  axes.forEach((a, i) => {
    plot.append(svg('line', { x1: x(i), x2: x(i), y1: y(0), y2: y(1), class: 'axis-line', 'data-key': a.key }));
    plot.append(svg('text', { x: x(i), y: 16, 'text-anchor': 'middle', class: 'axis-name' }, a.label));
    for (const [p, text] of a.ticks) plot.append(svg('text', { x: x(i) + 5, y: y(p) + 4, class: 'axis-tick' }, text));
  });
  box.append(el('div', { class: 'chart', 'data-name': 'parallel-coordinates' },
                 el('div', { class: 'panel-title' }, `parallel coordinates: ${keys.length} config keys and ${metric}`), plot));
  // The table: runs sorted by the metric, best (lowest loss, highest otherwise) first.
  const lower = /loss|error|perplexity/.test(metric);
  const sorted = [...runs].sort((a, b) => {
    const va = a.final?.[metric], vb = b.final?.[metric];
    if (typeof va !== 'number') return 1;
    if (typeof vb !== 'number') return -1;
    return lower ? va - vb : vb - va;
  });
  const table = el('table', { class: 'runs sweep' }, el('thead', {}, el('tr', {}, el('th', {}, 'run'),
    ...keys.map((k) => el('th', { class: 'config' }, k)), el('th', { class: 'metric' }, metric))));
  const body = el('tbody');
  for (const r of sorted) {
    const v = r.final?.[metric];
    body.append(el('tr', { 'data-run': r.name }, el('td', {}, r.name), ...keys.map((k) => el('td', { class: 'num' }, fmt(configs.get(r.name)![k]))),
                   el('td', { class: 'num' }, typeof v === 'number' ? fmtNum(v, 4) : fmt(v))));
  }
  table.append(body);
  box.append(el('div', { class: 'table-wrap' }, table));
}
