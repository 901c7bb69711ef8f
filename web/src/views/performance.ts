// Performance: step time stacked by phase and throughput from the spans, the leak slope of
// a MEMORY_LEAK finding, then the mem/, perf/, time/ sections and the collapsed sys/ and
// census/ ones.
import { api, Spans } from '../api';
import { findingMarker, lineChart, stackedChart } from '../chart';
import { codeView } from '../codes';
import { ctx, chartWidth, detail, findings, jumpTo, rangeParams, xRange } from '../ctx';
import { isPerformance } from '../groups';
import { el, fmt, runColor } from '../util';
import { scalarSections } from './sections';

export const PHASE_COLORS: Record<string, string> = { data: '#d62728', forward: '#1f77b4', backward: '#2ca02c', optimizer: '#9467bd',
  comm: '#ff7f0e', other: '#bdbdbd' };
// "other": what the step's phases leave of it (the server measures steps start to start).
const PHASE_ORDER = ['data', 'forward', 'backward', 'optimizer', 'comm', 'other'];

export function stepTimeChart(spans: Spans, width: number, xr: [number, number], markers = [] as ReturnType<typeof findingMarker>[],
                              height?: number, robust = false): HTMLElement {
  const phases = [...spans.phases].sort((a, b) => (PHASE_ORDER.indexOf(a) + 1 || 99) - (PHASE_ORDER.indexOf(b) + 1 || 99));
  return stackedChart('step time by phase (mean seconds per step)', spans.step,
    phases.map((p, i) => ({ label: p, color: PHASE_COLORS[p] || runColor(i + 4), values: spans.mean[p] })), width, 'step-time',
    { xRange: xr, markers, height, robust });
}

export async function performanceView(gen: number, box: HTMLElement, run: string): Promise<void> {
  const width = chartWidth();
  const [spans, fs, d] = await Promise.all([api<Spans>('spans', { run, width: Math.round(width), ...rangeParams() }), findings(run), detail(run)]);
  if (gen !== ctx.generation) return;
  const xr = xRange([d]);
  const perfMarkers = fs.filter((f) => codeView(f.code) === 'performance')
    .map((f) => findingMarker(f, () => jumpTo(f)));
  box.append(el('div', { class: 'toolbar' }, el('b', {}, run)));
  box.append(stepTimeChart(spans, width, xr, perfMarkers, undefined, ctx.state.robust));
  box.append(lineChart('throughput (steps / s: 1 / step time, start to start)', spans.step,
    [{ label: 'steps/s', color: '#1f77b4', values: spans.step_time.map((t) => (t > 0 ? 1 / t : null)) }],
    { width, name: 'throughput', xRange: xr, yLabel: 'steps / s' }));
  for (const leak of fs.filter((f) => f.code === 'MEMORY_LEAK')) {
    box.append(el('p', { class: `leak sev-${leak.severity}` }, el('b', {}, 'Memory leak: '), leak.summary,
                  ...Object.entries(leak.evidence || {}).filter(([k]) => /slope|since|per_step/.test(k)).map(([k, v]) => ` · ${k} ${fmt(v)}`)));
  }
  // Memory, throughput and phase times open; the system and object-census series closed.
  await scalarSections(gen, box, isPerformance, (s) => ['mem', 'perf', 'time'].includes(s.key), [run]);
}
