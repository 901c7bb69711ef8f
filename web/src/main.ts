// The trainscope dashboard: runs table, then one tab at a time (scalars, gradients,
// activations, findings, performance) for the selected runs. State lives in the URL
// fragment; the server's event stream keeps the view live.

import {
  api, ApiError, Buckets, captureToken, events, Finding, LayerMatrix, LiveEvent, RunDetail, RunSummary, Spans,
  TensorSeries, Vectors,
} from './api';
import { lineChart, RunCurve, scalarChart, stackedChart } from './chart';
import { heatmap } from './heatmap';
import { runsTable } from './runs';
import { readState, State, Tab, writeState } from './state';
import { el, fmt, regex, runColor, SEVERITY_RANK, throttle } from './util';
import './style.css';

captureToken();
let state: State = readState();
let runs: RunSummary[] = [];
const details = new Map<string, RunDetail>();
const findingsOf = new Map<string, Finding[]>();
let generation = 0;  // bumped per render; a slower, older render stops drawing

const app = document.getElementById('app')!;
const tabs = document.getElementById('tabs')!;
const runsBox = el('div', { id: 'runs-box' });
const controls = el('div', { id: 'controls' });
const view = el('div', { id: 'view' });
app.replaceChildren(runsBox, controls, view);

function setState(patch: Partial<State>, what: 'all' | 'view' = 'view'): void {
  state = { ...state, ...patch };
  writeState(state);
  if (what === 'all') renderRuns();
  renderTabs();
  renderView();
}

async function detail(run: string): Promise<RunDetail> {
  let d = details.get(run);
  if (!d) {
    d = await api<RunDetail>('run', { run });
    details.set(run, d);
  }
  return d;
}

async function findings(run: string): Promise<Finding[]> {
  let f = findingsOf.get(run);
  if (!f) {
    f = (await api<{ findings: Finding[] }>('findings', { run })).findings.map((x) => ({ ...x, run }));
    findingsOf.set(run, f);
  }
  return f;
}

async function loadRuns(): Promise<void> {
  runs = (await api<{ runs: RunSummary[] }>('runs')).runs;
  const known = new Set(runs.map((r) => r.name));
  const kept = state.runs.filter((r) => known.has(r));
  if (!kept.length && runs.length) {
    const latest = [...runs].sort((a, b) => (b.start_time ?? 0) - (a.start_time ?? 0))[0];
    kept.push(latest.name);
  }
  if (kept.join() !== state.runs.join()) {
    state.runs = kept;
    writeState(state);
  }
}

function renderRuns(): void {
  runsBox.replaceChildren(runsTable(runs, state, {
    onSelect: (selected) => setState({ runs: selected, range: null }, 'all'),
    onState: (patch) => setState(patch, 'all'),
  }));
}

const TAB_LABELS: Record<Tab, string> = {
  scalars: 'Scalars', gradients: 'Gradients', activations: 'Activations', findings: 'Findings', performance: 'Performance',
};

function renderTabs(): void {
  tabs.replaceChildren(...(Object.keys(TAB_LABELS) as Tab[]).map((t) => {
    const b = el('button', { class: t === state.tab ? 'tab active' : 'tab', 'data-tab': t }, TAB_LABELS[t]);
    b.addEventListener('click', () => setState({ tab: t }));
    return b;
  }));
}

function renderControls(): void {
  const tags = el('input', { id: 'tag-filter', type: 'search', placeholder: 'tags (regex)', value: state.tags });
  tags.addEventListener('change', () => setState({ tags: tags.value }));
  const smooth = el('input', { id: 'smooth', type: 'range', min: '0', max: '0.99', step: '0.01', value: String(state.smooth) });
  const smoothValue = el('span', { class: 'muted' }, state.smooth.toFixed(2));
  smooth.addEventListener('input', () => (smoothValue.textContent = Number(smooth.value).toFixed(2)));
  smooth.addEventListener('change', () => setState({ smooth: Number(smooth.value) }));
  const log = el('input', { id: 'log', type: 'checkbox' });
  log.checked = state.log;
  log.addEventListener('change', () => setState({ log: log.checked }));
  const x = el('select', { id: 'xmode' }, ...['step', 'wall', 'relative'].map((m) => {
    const o = el('option', { value: m }, m === 'wall' ? 'wall time' : m === 'relative' ? 'relative time' : 'step');
    o.selected = state.x === m;
    return o;
  }));
  x.addEventListener('change', () => setState({ x: x.value as State['x'] }));
  const reset = el('button', { id: 'reset-zoom' }, 'Reset zoom');
  reset.toggleAttribute('disabled', !state.range);
  reset.addEventListener('click', () => setState({ range: null }));
  const range = el('span', { id: 'range', class: 'muted' },
                   state.range ? `steps ${state.range[0]}–${state.range[1]}` : 'all steps');
  controls.replaceChildren(el('label', {}, 'smoothing ', smooth, smoothValue), el('label', {}, log, ' log y'),
                           el('label', {}, 'x ', x), tags, reset, range);
}

function chartWidth(): number {
  return Math.max(320, Math.min(view.clientWidth || 900, 1400) - 8);
}

function rangeParams(): Record<string, number | undefined> {
  return state.range ? { min: state.range[0], max: state.range[1] } : {};
}

function errorBox(e: unknown): HTMLElement {
  const message = e instanceof ApiError ? `${e.status}: ${e.message}` : String(e);
  return el('p', { class: 'error' }, message);
}

// Which findings belong on the chart of `tag`.
function findingsFor(tag: string, all: Finding[]): Finding[] {
  return all.filter((f) => f.location === tag
    || (/loss/.test(tag) && (f.code.startsWith('LOSS_') || f.code === 'NONFINITE_LOSS' || f.location === 'loss'))
    || (tag.startsWith('mem/') && f.code === 'MEMORY_LEAK'));
}

const ORDER = [/^train\/loss$/, /loss/, /^val\//, /^train\//, /^opt\//];
function tagRank(t: string): number {
  const i = ORDER.findIndex((re) => re.test(t));
  return i < 0 ? ORDER.length : i;
}

async function scalarCharts(gen: number, tagTest: (t: string) => boolean, box: HTMLElement, limit = 24,
                            rank: (t: string) => number = tagRank): Promise<void> {
  const selected = state.runs;
  const ds = await Promise.all(selected.map(detail));
  const allFindings = (await Promise.all(selected.map(findings))).flat();
  if (gen !== generation) return;
  const re = regex(state.tags);
  const tags = [...new Set(ds.flatMap((d) => d.series.filter((s) => s.kind === 'scalar').map((s) => s.tag)))]
    .filter(tagTest).filter((t) => !re || re.test(t))
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  if (!tags.length) {
    box.append(el('p', { class: 'empty' }, 'No scalar series match.'));
    return;
  }
  const width = chartWidth();
  const draw = async (tag: string, slot: HTMLElement) => {
    try {
      const curves: RunCurve[] = [];
      await Promise.all(selected.map(async (run, i) => {
        if (!ds[i].series.some((s) => s.tag === tag)) return;
        const data = await api<Buckets>('scalars', { run, tag, width: Math.round(width), ...rangeParams() });
        curves[i] = { run, color: runColor(i), data, start_time: runs.find((r) => r.name === run)?.start_time ?? 0 };
      }));
      if (gen !== generation) return;
      if (!document.body.dataset.firstChartMs) document.body.dataset.firstChartMs = String(Math.round(performance.now()));
      slot.replaceChildren(scalarChart({
        tag, curves: curves.filter(Boolean), x: state.x, smooth: state.smooth, log: state.log,
        findings: findingsFor(tag, allFindings), width,
        onZoom: (range) => setState({ range }), onFinding: jumpTo,
      }));
    } catch (e) {
      slot.replaceChildren(el('div', { class: 'panel-title' }, tag), errorBox(e));
    }
  };
  // The first charts at once (the page's first paint), the rest as they scroll into view.
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      observer.unobserve(entry.target);
      draw((entry.target as HTMLElement).dataset.tag!, entry.target as HTMLElement);
    }
  }, { rootMargin: '300px' });
  tags.slice(0, limit).forEach((tag, i) => {
    const slot = el('div', { class: 'chart-slot', 'data-tag': tag }, el('div', { class: 'panel-title' }, tag));
    box.append(slot);
    if (i < 4) draw(tag, slot);
    else observer.observe(slot);
  });
  if (tags.length > limit) box.append(el('p', { class: 'muted' }, `${tags.length - limit} more series: narrow the tag filter.`));
}

function primaryRun(): string | undefined {
  return state.runs[0];
}

async function layerNames(run: string, family: string): Promise<string[]> {
  const d = await detail(run);
  return d.series.filter((s) => s.kind === 'tensor_stats' && s.tag.startsWith(family + '/')).map((s) => s.tag.slice(family.length + 1));
}

function markersOf(fs: Finding[], layer?: string) {
  const colors: Record<string, string> = { critical: '#d62728', warning: '#ff7f0e', info: '#1f77b4' };
  return fs.filter((f) => !layer || !f.location || f.location === layer || f.code.startsWith('LOSS'))
    .map((f) => ({ step: f.step, color: colors[f.severity] }));
}

async function gradientsView(gen: number, box: HTMLElement): Promise<void> {
  const run = primaryRun();
  if (!run) return;
  const family = ['grad', 'weight', 'update'].includes(state.family) ? state.family : 'grad';
  const layers = await layerNames(run, family);
  const fs = await findings(run);
  const d = await detail(run);
  if (gen !== generation) return;
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
  const w = Math.round(width - 140);
  const [matrix, hist, ratio] = await Promise.all([
    api<LayerMatrix>('layers', { run, family, metric: 'l2_norm', width: w, ...rangeParams() }),
    layer ? api<TensorSeries>('tensor_stats', { run, tag: `${family}/${layer}`, hist: 1, width: w, ...rangeParams() }) : null,
    api<LayerMatrix>('layers', { run, family: 'update_ratio', width: Math.round(width), ...rangeParams() }),
  ]);
  if (gen !== generation) return;
  box.append(heatmap({
    name: 'layer-norms', title: `${family} L2 norm per layer × step (log colour)`, rows: matrix.layers, steps: matrix.step,
    values: matrix.values, log: true, selectedRow: matrix.layers.indexOf(layer), markers: markersOf(fs),
    valueLabel: '‖x‖₂', onRowClick: (r) => setState({ layer: matrix.layers[r] }),
  }));
  if (hist && hist.hist && hist.exponent_lo !== undefined) {
    // Only the steps that carry a histogram (clients may take one every Nth step).
    const cols = hist.step.map((_, i) => i).filter((i) => !hist.has_hist || hist.has_hist[i]);
    const bins = hist.hist[0]?.length ?? 0;
    const rows: string[] = [];
    for (let b = bins - 1; b >= 0; b--) rows.push(`2^${hist.exponent_lo + b}`);
    const values = rows.map((_, r) => cols.map((i) => hist.hist![i][bins - 1 - r] || null));
    box.append(heatmap({
      name: 'exponent-histogram', title: `${family}/${layer}: |x| by power of two over steps (count, log colour)`,
      rows, steps: cols.map((i) => hist.step[i]), values, log: true, markers: markersOf(fs, layer), valueLabel: 'count',
    }));
  }
  if (ratio.layers.length) {
    const lines = ratio.layers.slice(0, 12).map((l, i) => ({
      label: l, color: runColor(i), values: ratio.values[i].map((v) => (typeof v === 'number' ? v : null)),
    }));
    box.append(lineChart('update / weight norm ratio per layer (healthy band 1e-4…1e-2, 1e-3 dashed)', ratio.step, lines,
                         { width, log: true, band: [1e-4, 1e-2], reference: 1e-3, name: 'update-ratio' }));
  }
  const unitsTag = `grad_units/${layer}`;
  if (d.series.some((s) => s.tag === unitsTag)) {
    const v = await api<Vectors>('vectors', { run, tag: unitsTag, width: w, ...rangeParams() });
    if (gen !== generation) return;
    const rows = Array.from({ length: v.units }, (_, u) => `unit ${u}`);
    const values = rows.map((_, u) => v.values.map((row) => row[u] ?? null));
    box.append(heatmap({ name: 'unit-norms', title: `${unitsTag}: gradient norm per unit × step (log colour)`, rows,
                         steps: v.step, values, log: true, valueLabel: '‖g_unit‖' }));
  } else {
    const units = d.series.filter((s) => s.tag.startsWith('grad_units/')).map((s) => s.tag.slice(11));
    box.append(el('p', { class: 'muted' }, units.length ? `Per-unit gradient norms are recorded for: ${units.join(', ')}.`
      : 'No per-unit gradient norms recorded (grad_units/<param>).'));
  }
}

async function activationsView(gen: number, box: HTMLElement): Promise<void> {
  const run = primaryRun();
  if (!run) return;
  const width = chartWidth();
  const w = Math.round(width - 140);
  const fs = await findings(run);
  const [dead, saturated] = await Promise.all([
    api<LayerMatrix>('layers', { run, family: 'act', metric: 'dead_fraction', width: w, ...rangeParams() }),
    api<LayerMatrix>('layers', { run, family: 'act', metric: 'saturated_fraction', width: w, ...rangeParams() }),
  ]);
  if (gen !== generation) return;
  box.append(el('div', { class: 'toolbar' }, el('b', {}, run)));
  box.append(heatmap({ name: 'dead-fraction', title: 'dead fraction per module × step (units that never fire)',
                       rows: dead.layers, steps: dead.step, values: dead.values, log: false, domain: [0, 1],
                       markers: markersOf(fs), valueLabel: 'dead fraction', selectedRow: dead.layers.indexOf(state.layer) }));
  box.append(heatmap({ name: 'saturated-fraction', title: 'saturated fraction per module × step (flat tails of sigmoid/tanh)',
                       rows: saturated.layers, steps: saturated.step, values: saturated.values, log: false, domain: [0, 1],
                       markers: markersOf(fs), valueLabel: 'saturated fraction', selectedRow: saturated.layers.indexOf(state.layer) }));
}

function findingCard(f: Finding): HTMLElement {
  const evidence = el('table', { class: 'evidence' });
  for (const [k, v] of Object.entries(f.evidence || {})) evidence.append(el('tr', {}, el('td', {}, k), el('td', {}, fmt(v))));
  const causes = el('ul', { class: 'causes' }, ...f.causes.map((c) => el('li', {},
    el('span', { class: 'bar', style: `width:${Math.round(c.confidence * 60)}px` }), ` ${c.id} (${Math.round(c.confidence * 100)} %)`)));
  const actions = el('ul', { class: 'actions' }, ...f.actions.map((a) => el('li', {}, a)));
  const card = el('div', { class: `finding sev-${f.severity}`, 'data-code': f.code, 'data-step': String(f.step), tabindex: '0' },
    el('div', { class: 'finding-head' }, el('span', { class: `badge ${f.severity}` }, f.severity), el('b', {}, f.code),
       el('span', { class: 'muted' }, ` ${f.run} · step ${f.step}${f.last_step !== f.step ? '–' + f.last_step : ''}`
         + (f.location ? ` · ${f.location}` : ''))),
    el('div', {}, f.summary),
    Object.keys(f.evidence || {}).length ? el('details', {}, el('summary', {}, 'evidence'), evidence) : null,
    f.causes.length ? el('div', {}, el('small', {}, 'likely causes'), causes) : null,
    f.actions.length ? el('div', {}, el('small', {}, 'what to do'), actions) : null,
    el('button', { class: 'jump' }, 'Show on charts →'));
  card.querySelector('.jump')!.addEventListener('click', () => jumpTo(f));
  return card;
}

// A finding's click: the charts move to its steps (with context either side) and to its
// layer, on the tab that shows that layer.
async function jumpTo(f: Finding): Promise<void> {
  const run = f.run || primaryRun() || '';
  const d = await detail(run);
  const has = (tag: string) => d.series.some((s) => s.tag === tag);
  const width = Math.max(1, f.last_step - f.step);
  const pad = Math.max(20, width * 2, Math.round(d.max_step * 0.05));
  const range: [number, number] = [Math.max(0, f.step - pad), f.last_step + pad];
  const runsSel = state.runs.includes(run) ? state.runs : [run, ...state.runs];
  let tab: Tab = 'scalars';
  let layer = state.layer;
  const isLayer = has(`grad/${f.location}`) || has(`weight/${f.location}`) || has(`act/${f.location}`);
  if (isLayer) layer = f.location;
  // Curve findings go to the curves (with the layer picked for the other tabs); layer
  // findings to the layer's tab; resource findings to performance.
  const curveFinding = /^(LOSS_|NONFINITE_LOSS|NEGATIVE_LOSS|OVERFITTING|METRIC_|LR_ANOMALY)/.test(f.code);
  if (curveFinding || has(f.location)) tab = 'scalars';
  else if (has(`grad/${f.location}`) || has(`weight/${f.location}`)) tab = 'gradients';
  else if (has(`act/${f.location}`)) tab = 'activations';
  else if (f.location.startsWith('mem/') || ['DATALOADER_BOTTLENECK', 'THROUGHPUT_DROP', 'LOW_MFU', 'STRAGGLER'].includes(f.code)) tab = 'performance';
  setState({ range, tab, layer, runs: runsSel }, 'all');
}

async function findingsView(gen: number, box: HTMLElement): Promise<void> {
  const all = (await Promise.all(state.runs.map(findings))).flat();
  if (gen !== generation) return;
  all.sort((a, b) => SEVERITY_RANK[b.severity] - SEVERITY_RANK[a.severity] || a.step - b.step);
  box.append(el('div', { class: 'panel-title' }, `${all.length} findings, worst first`));
  if (!all.length) box.append(el('p', { class: 'empty' }, 'Nothing found: the doctor is happy with these runs.'));
  const list = el('div', { id: 'findings' });
  for (const f of all) list.append(findingCard(f));
  box.append(list);
}

const PHASE_COLORS: Record<string, string> = { data: '#d62728', forward: '#1f77b4', backward: '#2ca02c', optimizer: '#9467bd', comm: '#ff7f0e' };

async function performanceView(gen: number, box: HTMLElement): Promise<void> {
  const run = primaryRun();
  if (!run) return;
  const width = chartWidth();
  const [spans, fs] = await Promise.all([api<Spans>('spans', { run, width: Math.round(width), ...rangeParams() }), findings(run)]);
  if (gen !== generation) return;
  const order = ['data', 'forward', 'backward', 'optimizer', 'comm'];
  const phases = [...spans.phases].sort((a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99));
  box.append(el('div', { class: 'toolbar' }, el('b', {}, run)));
  box.append(stackedChart('step time by phase (mean seconds per step)', spans.step,
    phases.map((p, i) => ({ label: p, color: PHASE_COLORS[p] || runColor(i + 4), values: spans.mean[p] })), width, 'step-time'));
  box.append(lineChart('throughput (steps / s, from the step spans)', spans.step,
    [{ label: 'steps/s', color: '#1f77b4', values: spans.step_time.map((t) => (t > 0 ? 1 / t : null)) }],
    { width, name: 'throughput' }));
  for (const leak of fs.filter((f) => f.code === 'MEMORY_LEAK')) {
    box.append(el('p', { class: `leak sev-${leak.severity}` }, el('b', {}, 'Memory leak: '), leak.summary,
                  ...Object.entries(leak.evidence || {}).filter(([k]) => /slope|since|per_step/.test(k)).map(([k, v]) => ` · ${k} ${fmt(v)}`)));
  }
  // Memory first (with the leak), then throughput, phase times, system, object census.
  const families = ['mem/', 'perf/', 'time/', 'sys/', 'census/'];
  await scalarCharts(gen, (t) => families.some((f) => t.startsWith(f)), box, 24,
                     (t) => families.findIndex((f) => t.startsWith(f)));
}

async function renderView(): Promise<void> {
  const gen = ++generation;
  renderControls();
  const box = el('div', { class: 'tab-body', 'data-tab': state.tab });
  // A live redraw must not make the page jump: keep the old height until the new view is in.
  view.style.minHeight = view.offsetHeight + 'px';
  view.replaceChildren(box);
  setTimeout(() => { if (gen === generation) view.style.minHeight = ''; }, 1500);
  if (!state.runs.length) {
    box.append(el('p', { class: 'empty' }, runs.length ? 'Select a run above.' : 'No runs in this logdir yet; they appear here as they start.'));
    return;
  }
  try {
    // Resource series live on the performance tab, update ratios on the gradients tab.
    if (state.tab === 'scalars') await scalarCharts(gen, (t) => !/^(mem|sys|perf|time|census|update_ratio)\//.test(t), box);
    else if (state.tab === 'gradients') await gradientsView(gen, box);
    else if (state.tab === 'activations') await activationsView(gen, box);
    else if (state.tab === 'findings') await findingsView(gen, box);
    else await performanceView(gen, box);
  } catch (e) {
    if (gen === generation) box.append(errorBox(e));
  }
}

// Live: a changed run refreshes the table (at most once a second) and, when it is on screen
// and the view is not zoomed into the past, the charts.
const refreshRuns = throttle(async () => {
  await loadRuns();
  renderRuns();
}, 1000);
const refreshView = throttle(() => renderView(), 2000);
function onEvent(e: LiveEvent): void {
  if (e.type === 'hello') return;
  if (e.run) {
    details.delete(e.run);
    findingsOf.delete(e.run);
  }
  refreshRuns();
  if (e.run && state.runs.includes(e.run) && !state.range) refreshView();
}

window.addEventListener('hashchange', () => {
  state = readState();
  renderRuns();
  renderTabs();
  renderView();
});

async function main(): Promise<void> {
  try {
    await loadRuns();
  } catch (e) {
    app.replaceChildren(errorBox(e), el('p', {}, e instanceof ApiError && e.status === 401
      ? 'This server needs a token: open the link `trainscope serve` printed (…/#token=…).' : ''));
    return;
  }
  writeState(state);
  renderRuns();
  renderTabs();
  renderView();
  const live = document.getElementById('live')!;
  events(onEvent, (on) => live.classList.toggle('on', on));
}

main();
