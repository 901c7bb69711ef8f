// Gradients: the layer x step heatmap of gradient (weight, update) norms, the picked
// layer's exponent histogram over steps, update/weight ratios, per-unit gradient norms.
import { api, LayerMatrix, TensorSeries, Vectors } from '../api';
import { ctx, chartWidth, detail, findings, rangeParams, setState, xRange } from '../ctx';
import { familyRest, familyTag } from '../groups';
import { heatmap, LABEL_WIDTH } from '../heatmap';
import { el } from '../util';
import { histogramHeatmap } from './distributions';
import { layerNames, markersOf, perLayer } from './layers';

export async function gradientsView(gen: number, box: HTMLElement, run: string): Promise<void> {
  const state = ctx.state;
  const family = ['grad', 'weight', 'update'].includes(state.family) ? state.family : 'grad';
  const [layers, fs, d] = await Promise.all([layerNames(run, family), findings(run), detail(run)]);
  if (gen !== ctx.generation) return;
  const layer = layers.includes(state.layer) ? state.layer : layers[0] || '';
  const familySelect = el('select', { id: 'family' }, ...['grad', 'weight', 'update'].map((f) => {
    const o = el('option', { value: f }, f === 'grad' ? 'gradients' : f === 'weight' ? 'weights' : 'updates');
    o.selected = f === family;
    return o;
  }));
  familySelect.addEventListener('change', () => setState({ family: familySelect.value }));
  box.append(el('div', { class: 'toolbar' }, el('b', {}, run), ' · ', familySelect, ` · layer: `,
                el('b', { id: 'layer-name' }, layer || '–'), el('span', { class: 'muted' }, ' (click a heatmap row to pick a layer)')));
  const width = chartWidth();
  const w = Math.round(width - LABEL_WIDTH);
  const xr = xRange([d]);
  const [matrix, hist, ratio] = await Promise.all([
    api<LayerMatrix>('layers', { run, family, metric: 'l2_norm', width: w, ...rangeParams() }),
    layer ? api<TensorSeries>('tensor_stats', { run, tag: familyTag(family, layer), hist: 1, width: w, ...rangeParams() }) : null,
    api<LayerMatrix>('layers', { run, family: 'update_ratio', width: w, ...rangeParams() }),
  ]);
  if (gen !== ctx.generation) return;
  box.append(heatmap({
    name: 'layer-norms', title: `${family} L2 norm per layer × step (log colour)`, rows: matrix.layers, steps: matrix.step,
    values: matrix.values, log: true, selectedRow: matrix.layers.indexOf(layer), markers: markersOf(fs), xRange: xr, width,
    valueLabel: '‖x‖₂', onRowClick: (r) => setState({ layer: matrix.layers[r] }),
  }));
  if (hist) box.append(histogramHeatmap(hist, familyTag(family, layer), markersOf(fs, layer), xr, width));
  if (ratio.layers.length) {
    box.append(perLayer(ratio, {
      title: 'update / weight norm ratio per layer (healthy band 1e-4…1e-2, 1e-3 dashed)', name: 'update-ratio', width,
      log: true, band: [1e-4, 1e-2], reference: 1e-3, xRange: xr, valueLabel: '‖Δw‖/‖w‖', selected: layer,
      onRowClick: (r) => setState({ layer: ratio.layers[r] }),
    }));
  }
  const unitsTag = familyTag('grad_units', layer);
  if (d.series.some((s) => s.tag === unitsTag)) {
    const v = await api<Vectors>('vectors', { run, tag: unitsTag, width: w, ...rangeParams() });
    if (gen !== ctx.generation) return;
    const rows = Array.from({ length: v.units }, (_, u) => `unit ${u}`);
    const values = rows.map((_, u) => v.values.map((row) => row[u] ?? null));
    box.append(heatmap({ name: 'unit-norms', title: `${unitsTag}: gradient norm per unit × step (log colour)`, rows,
                         steps: v.step, values, log: true, valueLabel: '‖g_unit‖', xRange: xr, stepWidth: 1, width }));
  } else {
    const units = d.series.map((s) => familyRest('grad_units', s.tag)).filter((u): u is string => u !== null);
    box.append(el('p', { class: 'muted' }, units.length ? `Per-unit gradient norms are recorded for: ${units.join(', ')}.`
      : 'No per-unit gradient norms recorded (grad_units/<param>).'));
  }
}
