// Ranks: the ranks of a data-parallel run side by side (each records into <run>/rank-<r>;
// selecting any rank shows its run). The ranks compared (STRAGGLER, RANK_DIVERGENCE), a
// table of each rank's step time, throughput and rank-local phases, the step time, loss and
// gradient norm per rank with their spread over the ranks, and each layer's gradient norm per
// rank against the ranks' median: a slow rank is a row, a diverging replica a line and a column.
import { api, Num, RankSeries, RankView } from '../api';
import { findingMarker, lineChart, LineSeries, Marker } from '../chart';
import { ctx, chartWidth, setState } from '../ctx';
import { heatmap } from '../heatmap';
import { el, fmtNum, runColor } from '../util';
import { findingCard } from './findings';

// Up to this many ranks are drawn as lines; more as a heatmap of ranks over steps.
const MAX_LINES = 16;
// Layers shown in the layer x rank table, the ones whose ranks differ most first.
const MAX_LAYER_ROWS = 60;

// The data-parallel run a run belongs to: its parent when it is named <run>/rank-<r>.
export function groupOf(run: string): string | null {
  const m = /^(.+)\/rank-\d{1,9}$/.exec(run);
  return m ? m[1] : null;
}

const ms = (s: Num | undefined) => (typeof s === 'number' ? fmtNum(s * 1e3, 3) : '–');

function rankTable(view: RankView): HTMLElement {
  const phases = [...new Set(view.ranks.flatMap((r) => Object.keys(r.phases)))].sort();
  const named = new Map<number, string[]>();
  for (const f of view.findings) if (f.rank >= 0) named.set(f.rank, [...new Set([...(named.get(f.rank) || []), f.code])]);
  const body = el('tbody');
  for (const r of view.ranks) {
    const codes = named.get(r.rank) || [];
    const row = el('tr', { 'data-rank': String(r.rank), class: codes.length ? 'named' : '', title: `open ${r.run}` },
      el('td', {}, `rank ${r.rank}`, ...codes.map((c) => el('span', { class: 'badge warning', 'data-code': c }, c))),
      el('td', {}, r.status), el('td', { class: 'num' }, String(r.steps)),
      el('td', { class: 'num', 'data-col': 'step_time' }, ms(r.step_time)),
      el('td', { class: 'num', 'data-col': 'steps_per_second' }, typeof r.steps_per_second === 'number' ? fmtNum(r.steps_per_second, 3) : '–'),
      ...phases.map((p) => el('td', { class: 'num', 'data-col': p }, ms(r.phases[p]))));
    row.addEventListener('click', () => setState({ runs: [r.run], tab: 'overview', range: null }, 'all'));
    body.append(row);
  }
  const source = [...new Set(view.ranks.map((r) => r.step_time_source).filter(Boolean))].join(', ');
  return el('div', { class: 'table-wrap' }, el('table', { class: 'runs ranks' },
    el('thead', {}, el('tr', {}, el('th', {}, 'rank'), el('th', {}, 'status'), el('th', {}, 'steps'),
                     el('th', { title: `median; from ${source || 'nothing recorded'}` }, 'step time (ms)'), el('th', {}, 'steps / s'),
                     ...phases.map((p) => el('th', { title: 'median ms per step of this rank-local phase' }, `${p} (ms)`)))),
    body));
}

// Each rank's value over the median of the ranks' values in the same bucket.
function overMedian(values: Num[][]): Num[][] {
  const median = values[0]?.map((_, b) => {
    const at = values.map((row) => row[b]).filter((v): v is number => typeof v === 'number').sort((x, y) => x - y);
    return at.length ? (at.length % 2 ? at[(at.length - 1) / 2] : (at[at.length / 2 - 1] + at[at.length / 2]) / 2) : null;
  }) || [];
  return values.map((row) => row.map((v, b) => (typeof v === 'number' && median[b] ? v / median[b]! : null)));
}

// One value per rank over the steps: lines for a few ranks; for many, a heatmap of ranks,
// each cell the rank's value over the ranks' median there (the odd rank is a stripe whatever
// the curve does).
function perRank(view: RankView, title: string, name: string, values: Num[][], o: { width: number; log: boolean;
  xRange: [number, number]; markers: Marker[]; unit: string }): HTMLElement {
  if (view.ranks.length <= MAX_LINES) {
    const lines: LineSeries[] = view.ranks.map((r, i) => ({ label: `rank ${r.rank}`, color: runColor(i), values: values[i] }));
    return lineChart(title, view.step, lines, { width: o.width, name, log: o.log, xRange: o.xRange, markers: o.markers, yLabel: o.unit });
  }
  return heatmap({ name, title: `${title}, over the ranks' median`, rows: view.ranks.map((r) => `rank ${r.rank}`), steps: view.step,
                   values: overMedian(values), log: true, width: o.width, xRange: o.xRange, valueLabel: `${o.unit} / median of the ranks`,
                   markers: o.markers.map((m) => ({ step: m.step, color: m.color })) });
}

function seriesCharts(view: RankView, s: RankSeries, width: number, xRange: [number, number], markers: Marker[]): HTMLElement[] {
  const what = s.role === 'loss' ? 'loss' : 'gradient norm';
  return [
    perRank(view, `${what} per rank (${s.tag}; mean per step bucket)`, `rank-${s.role}`, s.values,
            { width, log: ctx.state.log, xRange, markers, unit: s.tag }),
    lineChart(`rank-to-rank spread of the ${what}: (max − min) / |median| over the ranks`, view.step,
              [{ label: 'spread', color: '#d62728', values: s.spread }],
              { width, name: `rank-spread-${s.role}`, xRange, markers, yLabel: 'spread' }),
  ];
}

// Each layer's norm per rank over the ranks' median: 1 for replicas that agree. Cells are
// coloured by how far from 1 (log2), in either direction.
function layerTable(view: RankView): HTMLElement | null {
  const layers = view.layers;
  if (!layers || !layers.names.length) return null;
  const far = (row: Num[]) => Math.max(0, ...row.map((v) => (typeof v === 'number' && v > 0 ? Math.abs(Math.log2(v)) : 0)));
  const order = layers.names.map((_, i) => i).sort((a, b) => far(layers.ratio[b]) - far(layers.ratio[a]) || a - b).slice(0, MAX_LAYER_ROWS);
  const body = el('tbody');
  for (const i of order) {
    body.append(el('tr', { 'data-layer': layers.names[i] }, el('td', {}, layers.names[i]), ...view.ranks.map((r, k) => {
      const ratio = layers.ratio[i][k], value = layers.values[i][k], bad = layers.nonfinite[i][k];
      const strength = typeof ratio === 'number' && ratio > 0 ? Math.min(1, Math.abs(Math.log2(ratio)) / 3) : 0;
      const cell = el('td', { class: 'num', 'data-rank': String(r.rank), 'data-ratio': typeof ratio === 'number' ? String(ratio) : '',
                              title: `rank ${r.rank}: median ${layers.metric} ${typeof value === 'number' ? fmtNum(value, 4) : '–'}` +
                                     (bad ? `, ${bad} non-finite points` : '') },
                      bad ? 'NaN/Inf' : typeof ratio === 'number' ? `×${fmtNum(ratio, 3)}` : '–');
      if (strength > 0.02) cell.style.background = `rgba(214, 39, 40, ${(0.15 + 0.6 * strength).toFixed(2)})`;
      return cell;
    })));
  }
  const shown = order.length < layers.names.length ? ` (the ${order.length} of ${layers.names.length} layers whose ranks differ most)` : '';
  return el('div', { class: 'chart', 'data-name': 'rank-layers' },
    el('div', { class: 'panel-title' }, `${layers.family}/ ${layers.metric} per layer and rank, over the ranks' median (median over the steps)${shown}`),
    el('div', { class: 'table-wrap' }, el('table', { class: 'runs rank-layers' },
      el('thead', {}, el('tr', {}, el('th', {}, 'layer'), ...view.ranks.map((r) => el('th', { class: 'num' }, `rank ${r.rank}`)))), body)));
}

async function groupBlock(gen: number, box: HTMLElement, group: string): Promise<void> {
  const width = chartWidth();
  const family = ['grad', 'weight', 'update', 'act'].includes(ctx.state.family) ? ctx.state.family : 'grad';
  const view = await api<RankView>('ranks', { run: group, family, width: Math.min(1000, Math.round(width / 2)) });
  if (gen !== ctx.generation) return;
  const block = el('section', { class: 'rank-group', 'data-group': group });
  box.append(block);
  block.append(el('div', { class: 'toolbar' }, el('b', {}, group), ` · ${view.ranks.length} ranks`));
  for (const u of view.unreadable || []) {
    block.append(el('p', { class: 'error', 'data-unreadable': String(u.rank) }, `rank ${u.rank} (${u.run}) could not be read and is left out: ${u.error}`));
  }
  const runOf = (rank: number) => view.ranks.find((r) => r.rank === rank)?.run || view.ranks[0]?.run;
  const findings = view.findings.map((f) => ({ ...f, run: runOf(f.rank >= 0 ? f.rank : (f.ranks[0] ?? 0)) }));
  block.append(el('div', { class: 'panel-title' }, findings.length ? `The ranks compared: ${findings.length} findings`
    : 'The ranks compared: no straggler, no diverging rank'));
  for (const f of findings) block.append(findingCard(f));
  block.append(rankTable(view));
  const xRange: [number, number] = ctx.state.range || [view.step[0] ?? 0, Math.max((view.step[view.step.length - 1] ?? 0), (view.step[0] ?? 0) + 1)];
  const markers = findings.map((f) => findingMarker(f));
  block.append(perRank(view, 'step time per rank (seconds; mean per step bucket)', 'rank-step-time', view.step_time,
                       { width, log: false, xRange, markers: markers.filter((m) => m.code === 'STRAGGLER'), unit: 'seconds' }));
  for (const s of view.series) block.append(...seriesCharts(view, s, width, xRange, markers.filter((m) => m.code !== 'STRAGGLER')));
  const layers = layerTable(view);
  if (layers) block.append(layers);
}

export async function ranksView(gen: number, box: HTMLElement): Promise<void> {
  const groups = [...new Set(ctx.state.runs.map(groupOf).filter((g): g is string => g !== null))];
  const alone = ctx.state.runs.filter((r) => groupOf(r) === null);
  for (const run of alone) {
    box.append(el('p', { class: 'empty', 'data-run': run }, `${run} is not a rank of a data-parallel run: the ranks of one record into <run>/rank-<r> ` +
                                                          '(trainscope.init under torch.distributed does this); select one of them.'));
  }
  await Promise.all(groups.map((g) => groupBlock(gen, box, g)));
}
