// Distributions over time of any tensor family and layer, as TensorBoard's Distributions
// and Histograms dashboards: percentile bands of |x| from the exponent histograms, the
// histogram over steps as a heatmap, and the signed mean ± std from the moments.
import { api, Cell, TensorSeries } from '../api';
import { bandChart, lineChart } from '../chart';
import { ctx, chartWidth, detail, findings, rangeParams, setState, xRange } from '../ctx';
import { familyTag } from '../groups';
import { heatmap, LABEL_WIDTH } from '../heatmap';
import { BAND_PERCENTILES, histogramPercentiles } from '../percentiles';
import { el } from '../util';
import { markersOf } from './layers';

const FAMILIES: [string, string][] = [['grad', 'gradients'], ['weight', 'weights'], ['update', 'updates'],
                                      ['act', 'activations'], ['input', 'inputs']];

// The steps that carry a histogram (clients take one every Nth step), as a heatmap:
// rows = powers of two of |x|, largest on top.
export function histogramHeatmap(hist: TensorSeries, tag: string, markers: { step: number; color: string }[],
                                 xr: [number, number], width: number): HTMLElement {
  const cols = hist.step.map((_, i) => i).filter((i) => !hist.has_hist || hist.has_hist[i]);
  const bins = hist.hist?.[0]?.length ?? 0;
  const rows: string[] = [];
  for (let b = bins - 1; b >= 0; b--) rows.push(`2^${(hist.exponent_lo ?? 0) + b}`);
  const values: Cell[][] = rows.map((_, r) => cols.map((i) => hist.hist![i][bins - 1 - r] || null));
  // NaN/Inf elements have no power of two: a row of their own, on top, when any step had them.
  const nonfinite = cols.map((i) => ((hist.nan[i] ?? 0) + (hist.inf[i] ?? 0) > 0 ? 'nonfinite' as const : null));
  if (nonfinite.some((v) => v !== null)) {
    rows.unshift('NaN/Inf');
    values.unshift(nonfinite);
  }
  return heatmap({
    name: 'exponent-histogram', title: `${tag}: |x| by power of two over steps (count, log colour; ${cols.length} histograms)`,
    rows: hist.hist && cols.length ? rows : [], steps: cols.map((i) => hist.step[i]), values, log: true, markers,
    valueLabel: 'count', xRange: xr, stepWidth: 1, width,
  });
}

export async function distributionsView(gen: number, box: HTMLElement, run: string): Promise<void> {
  const [d, fs] = await Promise.all([detail(run), findings(run)]);
  if (gen !== ctx.generation) return;
  const present = FAMILIES.filter(([f]) => d.series.some((s) => s.kind === 'tensor_stats' && s.tag.startsWith(f + '/')));
  const family = present.some(([f]) => f === ctx.state.family) ? ctx.state.family : present[0]?.[0];
  if (!family) {
    box.append(el('p', { class: 'empty' }, 'No tensor statistics recorded in this run (run.watch records them).'));
    return;
  }
  const layers = d.series.filter((s) => s.kind === 'tensor_stats' && s.tag.startsWith(family + '/')).map((s) => s.tag.slice(family.length + 1));
  const layer = layers.includes(ctx.state.layer) ? ctx.state.layer : layers[0];
  const familySelect = el('select', { id: 'dist-family' }, ...present.map(([f, label]) => {
    const o = el('option', { value: f }, label);
    o.selected = f === family;
    return o;
  }));
  familySelect.addEventListener('change', () => setState({ family: familySelect.value }));
  const layerSelect = el('select', { id: 'dist-layer' }, ...layers.map((l) => {
    const o = el('option', { value: l }, l);
    o.selected = l === layer;
    return o;
  }));
  layerSelect.addEventListener('change', () => setState({ layer: layerSelect.value }));
  box.append(el('div', { class: 'toolbar' }, el('b', {}, run), ' · ', familySelect, ' · ', layerSelect));
  const width = chartWidth();
  const tag = familyTag(family, layer);
  const xr = xRange([d]);
  // Steps one point stands for at this width: samples further apart are drawn unjoined.
  const resolution = (w: number) => Math.max(1, Math.ceil((xr[1] - xr[0] + 1) / w));
  const [hist, moments] = await Promise.all([
    api<TensorSeries>('tensor_stats', { run, tag, hist: 1, width: Math.round(width - LABEL_WIDTH), ...rangeParams() }),
    api<TensorSeries>('tensor_stats', { run, tag, width: Math.round(width), ...rangeParams() }),
  ]);
  if (gen !== ctx.generation) return;
  const markers = markersOf(fs, layer).map((m) => ({ ...m, code: '', title: '' }));
  // Percentile bands at the steps with a histogram.
  const cols = hist.step.map((_, i) => i).filter((i) => hist.hist && (!hist.has_hist || hist.has_hist[i]));
  // Steps whose tensor held NaN/Inf have no percentiles: a gap, marked in the non-finite colour.
  const nonfiniteAt = (t: TensorSeries, i: number) => (t.nan[i] ?? 0) + (t.inf[i] ?? 0) > 0;
  const rows = BAND_PERCENTILES.map(() => [] as (number | null)[]);
  for (const i of cols) {
    const p = nonfiniteAt(hist, i) ? BAND_PERCENTILES.map(() => null)
      : histogramPercentiles(hist.hist![i], hist.exponent_lo ?? 0, hist.zeros[i], BAND_PERCENTILES, hist.abs_max?.[i]);
    p.forEach((v, k) => rows[k].push(v));
  }
  box.append(bandChart(`${tag}: |x| percentiles over steps (0, 7, 16, 31, 50, 69, 84, 93, 100 %; log)`,
    cols.map((i) => hist.step[i]), rows, { width, name: 'percentile-bands', log: true, xRange: xr, markers,
                                            joinSteps: resolution(Math.round(width - LABEL_WIDTH)), alignLeft: LABEL_WIDTH,
                                            nonfinite: cols.map((i) => nonfiniteAt(hist, i)) }));
  box.append(histogramHeatmap(hist, tag, markersOf(fs, layer), xr, width));
  const mean = moments.mean || [], std = moments.std || [];
  const up = mean.map((m, i) => (m === null || std[i] === null ? null : m + std[i]!));
  const down = mean.map((m, i) => (m === null || std[i] === null ? null : m - std[i]!));
  const nonfinite = moments.step.map((_, i) => nonfiniteAt(moments, i));
  box.append(lineChart(`${tag}: mean ± std over steps`, moments.step, [
    { label: 'mean', color: '#1f77b4', values: mean, nonfinite },
    { label: 'mean + std', color: '#9ecae1', values: up, dash: [4, 3], nonfinite },
    { label: 'mean − std', color: '#9ecae1', values: down, dash: [4, 3], nonfinite },
  ], { width, name: 'moments', xRange: xr, markers, joinSteps: resolution(Math.round(width)), alignLeft: LABEL_WIDTH }));
}
