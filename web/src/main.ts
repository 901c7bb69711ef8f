// The trainscope dashboard: runs table, then one view at a time (views/index.ts) for the
// selected runs. State lives in the URL fragment; the server's event stream keeps the view
// live, except with ?static=1 (no stream; body[data-ready="1"] once every chart is drawn)
// for headless screenshots and link previews.

import { api, ApiError, captureToken, events, LiveEvent, RunSummary } from './api';
import { ctx, detail, errorBox, forget, setState } from './ctx';
import { isUserSeries } from './groups';
import { flatten, runsTable } from './runs';
import { readState, State, writeState } from './state';
import { applyTheme, currentTheme, debounce, el, runColor, Theme, throttle } from './util';
import { VIEWS } from './views';
import './style.css';

captureToken();
applyTheme(currentTheme());

const app = document.getElementById('app')!;
const tabs = document.getElementById('tabs')!;
// The theme toggle: the system's setting, dark, light; canvases are redrawn in the new colours.
const THEMES: Theme[] = ['auto', 'dark', 'light'];
const themeButton = el('button', { id: 'theme', title: 'colour theme' });
const showTheme = () => (themeButton.textContent = `theme: ${currentTheme()}`);
themeButton.addEventListener('click', () => {
  const next = THEMES[(THEMES.indexOf(currentTheme()) + 1) % THEMES.length];
  localStorage.setItem('trainscope-theme', next);
  applyTheme(next);
  showTheme();
  ctx.rerender('all');
});
showTheme();
document.getElementById('top')?.append(themeButton);
const runsBox = el('div', { id: 'runs-box' });
const controls = el('div', { id: 'controls' });
const view = el('div', { id: 'view' });
app.replaceChildren(runsBox, controls, view);
ctx.view = view;
if (ctx.isStatic) document.body.classList.add('static');

// Runs the link named that the logdir does not have: said above the view, not silently
// replaced by the latest run.
let unknownRuns: string[] = [];

async function loadRuns(): Promise<void> {
  ctx.runs = (await api<{ runs: RunSummary[] }>('runs')).runs;
  const known = new Set(ctx.runs.map((r) => r.name));
  const kept = ctx.state.runs.filter((r) => known.has(r));
  const unknown = ctx.state.runs.filter((r) => !known.has(r));
  if (unknown.length) unknownRuns = unknown;
  if (!kept.length && ctx.runs.length) {
    const latest = [...ctx.runs].sort((a, b) => (b.start_time ?? 0) - (a.start_time ?? 0))[0];
    kept.push(latest.name);
  }
  if (kept.join() !== ctx.state.runs.join()) {
    ctx.state.runs = kept;
    writeState(ctx.state);
  }
}

function renderRuns(): void {
  runsBox.replaceChildren(runsTable(ctx.runs, ctx.state, {
    onSelect: (selected) => {
      unknownRuns = [];
      setState({ runs: selected, range: null }, 'all');
    },
    onState: (patch) => setState(patch, 'all'),
  }));
}

function renderTabs(): void {
  tabs.replaceChildren(...VIEWS.map((v) => {
    const b = el('button', { class: v.id === ctx.state.tab ? 'tab active' : 'tab', 'data-tab': v.id }, v.label);
    b.addEventListener('click', () => setState({ tab: v.id }));
    return b;
  }));
}

function renderControls(): void {
  const state = ctx.state;
  // The tag filter applies as one types (the controls are redrawn with the view: the
  // field keeps its focus and caret).
  const tags = el('input', { id: 'tag-filter', type: 'search', placeholder: 'tags (regex)', value: state.tags });
  const typing = document.activeElement?.id === 'tag-filter' ? (document.activeElement as HTMLInputElement).selectionStart : null;
  tags.addEventListener('input', debounce(() => setState({ tags: tags.value }), 300));
  const smooth = el('input', { id: 'smooth', type: 'range', min: '0', max: '0.99', step: '0.01', value: String(state.smooth) });
  const smoothValue = el('span', { class: 'muted' }, state.smooth.toFixed(2));
  smooth.addEventListener('input', () => (smoothValue.textContent = Number(smooth.value).toFixed(2)));
  smooth.addEventListener('change', () => setState({ smooth: Number(smooth.value) }));
  const log = el('input', { id: 'log', type: 'checkbox' });
  log.checked = state.log;
  log.addEventListener('change', () => setState({ log: log.checked }));
  const robust = el('input', { id: 'robust', type: 'checkbox' });
  robust.checked = state.robust;
  robust.addEventListener('change', () => setState({ robust: robust.checked }));
  const option = (value: string, label: string) => {
    const o = el('option', { value }, label);
    o.selected = state.x === value;
    return o;
  };
  const x = el('select', { id: 'xmode' }, option('step', 'step'), option('wall', 'wall time'), option('relative', 'relative time'));
  // Or any scalar the selected runs logged (epoch, tokens ...): added once their series are known.
  Promise.all(state.runs.map(detail)).then((ds) => {
    const tags = [...new Set(ds.flatMap((d) => d.series.filter((s) => s.kind === 'scalar' && isUserSeries(s.tag)).map((s) => s.tag)))].sort();
    const current = state.x.startsWith('tag:') ? [state.x.slice(4)] : [];
    for (const tag of [...new Set([...current, ...tags])].slice(0, 60)) x.append(option('tag:' + tag, tag));
  }).catch(() => {});
  x.addEventListener('change', () => setState({ x: x.value as State['x'] }));
  // Group the selected runs by a config key in which they differ (Scalars, x = step).
  const keys = new Map<string, Set<string>>();
  for (const r of ctx.runs.filter((r) => state.runs.includes(r.name))) {
    for (const [k, v] of Object.entries(flatten(r.config || {}))) keys.set(k, (keys.get(k) || new Set()).add(JSON.stringify(v)));
  }
  const group = el('select', { id: 'group', title: 'runs with the same value: mean line, min-max band' },
                   el('option', { value: '' }, 'no grouping'),
                   ...[...keys].filter(([k, vs]) => vs.size > 1 || k === state.group).map(([k]) => {
                     const o = el('option', { value: k }, k);
                     o.selected = state.group === k;
                     return o;
                   }));
  group.addEventListener('change', () => setState({ group: group.value }));
  const reset = el('button', { id: 'reset-zoom' }, 'Reset zoom');
  reset.toggleAttribute('disabled', !state.range);
  reset.addEventListener('click', () => setState({ range: null }));
  const range = el('span', { id: 'range', class: 'muted' },
                   state.range ? `steps ${state.range[0]}–${state.range[1]}` : 'all steps');
  controls.replaceChildren(el('label', {}, 'smoothing ', smooth, smoothValue), el('label', {}, log, ' log y'),
                           el('label', { title: 'y ranges from the 5th to the 95th percentile' }, robust, ' ignore outliers'),
                           el('label', {}, 'x ', x), el('label', {}, 'group by ', group), tags, reset, range);
  if (typing !== null) {
    tags.focus();
    tags.setSelectionRange(typing, typing);
  }
}

async function renderView(): Promise<void> {
  const gen = ++ctx.generation;
  delete document.body.dataset.ready;
  renderControls();
  const box = el('div', { class: 'tab-body', 'data-tab': ctx.state.tab });
  // A live redraw must not make the page jump: keep the old height until the new view is in.
  view.style.minHeight = view.offsetHeight + 'px';
  view.replaceChildren(...(unknownRuns.length ? [el('p', { id: 'unknown-runs', class: 'error' },
    `No run named ${unknownRuns.join(', ')} in this logdir${ctx.state.runs.length ? `; showing ${ctx.state.runs.join(', ')}` : ''}.`)] : []), box);
  setTimeout(() => { if (gen === ctx.generation) view.style.minHeight = ''; }, 1500);
  if (!ctx.state.runs.length) {
    box.append(el('p', { class: 'empty' }, ctx.runs.length ? 'Select a run above.' : 'No runs in this logdir yet; they appear here as they start.'));
  } else {
    const v = VIEWS.find((x) => x.id === ctx.state.tab) || VIEWS[0];
    // Several runs: a view of one run once per run, each block headed by the run's name in
    // its colour (the colour its curves have on Scalars).
    const runs = v.perRun ? ctx.state.runs : [ctx.state.runs[0]];
    await Promise.all(runs.map(async (run, i) => {
      let block: HTMLElement = box;
      if (v.perRun && runs.length > 1) {
        block = el('section', { class: 'run-block', 'data-run': run, style: `border-left-color:${runColor(i)}` },
                   el('h3', { class: 'run-head', style: `color:${runColor(i)}` }, `■ ${run}`));
        box.append(block);
      }
      try {
        await v.render(gen, block, run);
      } catch (e) {
        if (gen === ctx.generation) block.append(errorBox(e));
      }
    }));
  }
  if (gen === ctx.generation) {
    view.style.minHeight = '';
    document.body.dataset.ready = '1';
  }
}

ctx.rerender = (what) => {
  if (what === 'all') renderRuns();
  renderTabs();
  renderView();
};

// Live: a changed run refreshes the table (at most once a second) and, when it is on screen
// and the view is not zoomed into the past, the charts.
const refreshRuns = throttle(async () => {
  await loadRuns();
  renderRuns();
}, 1000);
const refreshView = throttle(() => renderView(), 2000);
function onEvent(e: LiveEvent): void {
  if (e.type === 'hello') return;
  if (e.run) forget(e.run);
  refreshRuns();
  if (e.run && ctx.state.runs.includes(e.run) && !ctx.state.range) refreshView();
}

// The tab a link names, when it names a view; else the first view.
function withKnownTab(state: State): State {
  if (!VIEWS.some((v) => v.id === state.tab)) state.tab = VIEWS[0].id;
  return state;
}

window.addEventListener('hashchange', () => {
  ctx.state = withKnownTab(readState());
  renderRuns();
  renderTabs();
  renderView();
});

async function main(): Promise<void> {
  ctx.state = withKnownTab(ctx.state);
  try {
    await loadRuns();
  } catch (e) {
    app.replaceChildren(errorBox(e), el('p', {}, e instanceof ApiError && e.status === 401
      ? 'This server needs a token: open the link `trainscope serve` printed (…/#token=…).' : ''));
    document.body.dataset.ready = '1';
    return;
  }
  writeState(ctx.state);
  renderRuns();
  renderTabs();
  renderView();
  if (ctx.isStatic) return;  // a picture of the run as it is: no event stream
  const live = document.getElementById('live')!;
  events(onEvent, (on) => live.classList.toggle('on', on));
}

main();
