// Helpers of the per-layer views (Gradients, Activations, Distributions).
import { Finding, LayerMatrix } from '../api';
import { lineChart, Marker, SEVERITY_COLOR } from '../chart';
import { detail } from '../ctx';
import { heatmap, LABEL_WIDTH } from '../heatmap';
import { runColor } from '../util';

export async function layerNames(run: string, family: string): Promise<string[]> {
  const d = await detail(run);
  return d.series.filter((s) => s.kind === 'tensor_stats' && s.tag.startsWith(family + '/')).map((s) => s.tag.slice(family.length + 1));
}

export function markersOf(fs: Finding[], layer?: string) {
  return fs.filter((f) => !layer || !f.location || f.location === layer || f.code.startsWith('LOSS'))
    .map((f) => ({ step: f.step, color: SEVERITY_COLOR[f.severity] }));
}

// Up to 12 layers as lines over steps; more than that as a heatmap (a chart of 500 lines
// says nothing).
export function perLayer(m: LayerMatrix, o: { title: string; name: string; width: number; log: boolean; xRange: [number, number];
  band?: [number, number]; reference?: number; valueLabel: string; selected?: string; onRowClick?: (r: number) => void;
  markers?: Marker[] }): HTMLElement {
  if (m.layers.length <= 12) {
    const lines = m.layers.map((l, i) => ({
      label: l, color: runColor(i), values: m.values[i].map((v) => (typeof v === 'number' ? v : null)),
      nonfinite: m.values[i].map((v) => v === 'nonfinite'),
    }));
    // A tensor's statistics are taken every Nth step: samples a bucket or more apart are points.
    const bucket = m.step.length > 1 ? m.step[1] - m.step[0] : 1;
    return lineChart(o.title, m.step, lines, { width: o.width, log: o.log, band: o.band, reference: o.reference, name: o.name,
                                               xRange: o.xRange, markers: o.markers, joinSteps: bucket, alignLeft: LABEL_WIDTH });
  }
  return heatmap({ name: o.name, title: o.title, rows: m.layers, steps: m.step, values: m.values, log: o.log, width: o.width,
                   valueLabel: o.valueLabel, xRange: o.xRange, selectedRow: o.selected ? m.layers.indexOf(o.selected) : undefined,
                   onRowClick: o.onRowClick, markers: o.markers?.map((mk) => ({ step: mk.step, color: mk.color })) });
}
