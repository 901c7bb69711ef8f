// Activations: magnitude per layer over steps (mean and std of each module's output), then
// dead and saturated fractions. A sigmoid drifting into saturation shows as its std
// growing and its saturated fraction turning yellow before the loss goes NaN.
import { api, LayerMatrix } from '../api';
import { findingMarker } from '../chart';
import { ctx, chartWidth, detail, findings, jumpTo, rangeParams, setState, xRange } from '../ctx';
import { heatmap, LABEL_WIDTH } from '../heatmap';
import { el } from '../util';
import { markersOf, perLayer } from './layers';

export async function activationsView(gen: number, box: HTMLElement, run: string): Promise<void> {
  const width = chartWidth();
  const w = Math.round(width - LABEL_WIDTH);
  const [fs, d] = await Promise.all([findings(run), detail(run)]);
  const q = (metric: string) => api<LayerMatrix>('layers', { run, family: 'act', metric, width: w, ...rangeParams() });
  const [mean, std, dead, saturated] = await Promise.all([q('mean'), q('std'), q('dead_fraction'), q('saturated_fraction')]);
  if (gen !== ctx.generation) return;
  const xr = xRange([d]);
  const pick = (m: LayerMatrix) => (r: number) => setState({ layer: m.layers[r] });
  const marks = fs.filter((f) => f.severity !== 'info').map((f) => findingMarker(f, () => jumpTo(f)));
  box.append(el('div', { class: 'toolbar' }, el('b', {}, run),
                el('span', { class: 'muted' }, ' · per module output; distributions of one module on the Distributions tab')));
  box.append(perLayer(std, { title: 'activation std per module × step', name: 'act-std', width, log: true, xRange: xr,
                             valueLabel: 'std', selected: ctx.state.layer, onRowClick: pick(std), markers: marks }));
  box.append(perLayer(mean, { title: 'activation mean per module × step', name: 'act-mean', width, log: false, xRange: xr,
                              valueLabel: 'mean', selected: ctx.state.layer, onRowClick: pick(mean), markers: marks }));
  box.append(heatmap({ name: 'dead-fraction', title: 'dead fraction per module × step (units that never fire)',
                       rows: dead.layers, steps: dead.step, values: dead.values, log: false, domain: [0, 1], xRange: xr, width,
                       markers: markersOf(fs), valueLabel: 'dead fraction', selectedRow: dead.layers.indexOf(ctx.state.layer),
                       onRowClick: pick(dead) }));
  box.append(heatmap({ name: 'saturated-fraction', title: 'saturated fraction per module × step (flat tails of sigmoid/tanh)',
                       rows: saturated.layers, steps: saturated.step, values: saturated.values, log: false, domain: [0, 1], width,
                       xRange: xr, markers: markersOf(fs), valueLabel: 'saturated fraction',
                       selectedRow: saturated.layers.indexOf(ctx.state.layer), onRowClick: pick(saturated) }));
}
