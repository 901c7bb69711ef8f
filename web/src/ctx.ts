// What every view shares: the URL state, the runs and per-run caches, sizes, the step range
// of the charts, and a finding's jump to the place that shows it. main.ts owns the page;
// views (web/src/views/*.ts) render into the box they are given.

import { api, ApiError, Finding, RunDetail, RunSummary } from './api';
import { codeView } from './codes';
import { familyRest, familyTag } from './groups';
import { readState, State, Tab, writeState } from './state';
import { el } from './util';

export const ctx = {
  state: readState() as State,
  runs: [] as RunSummary[],
  generation: 0,  // bumped per render; a slower, older render stops drawing
  // ?static=1: no event stream, every chart drawn at once, body[data-ready] when done (for
  // `chromium --headless --screenshot` and link previews).
  isStatic: new URLSearchParams(location.search).get('static') === '1',
  view: null as HTMLElement | null,
  rerender: (_what: 'all' | 'view') => {},
};

const details = new Map<string, RunDetail>();
const findingsOf = new Map<string, Finding[]>();

export function forget(run: string): void {
  details.delete(run);
  findingsOf.delete(run);
}

export function setState(patch: Partial<State>, what: 'all' | 'view' = 'view'): void {
  ctx.state = { ...ctx.state, ...patch };
  writeState(ctx.state);
  ctx.rerender(what);
}

export async function detail(run: string): Promise<RunDetail> {
  let d = details.get(run);
  if (!d) {
    d = await api<RunDetail>('run', { run });
    details.set(run, d);
  }
  return d;
}

export async function findings(run: string): Promise<Finding[]> {
  let f = findingsOf.get(run);
  if (!f) {
    f = (await api<{ findings: Finding[] }>('findings', { run })).findings.map((x) => ({ ...x, run }));
    findingsOf.set(run, f);
  }
  return f;
}

export function primaryRun(): string | undefined {
  return ctx.state.runs[0];
}

export function chartWidth(): number {
  return Math.max(320, Math.min(ctx.view?.clientWidth || 900, 1400) - 20);
}

export function rangeParams(): Record<string, number | undefined> {
  return ctx.state.range ? { min: ctx.state.range[0], max: ctx.state.range[1] } : {};
}

// The step axis every chart of the runs shares: the zoom, else first to last step.
export function xRange(ds: RunDetail[]): [number, number] {
  if (ctx.state.range) return ctx.state.range;
  let lo = Infinity, hi = -Infinity;
  for (const d of ds) {
    for (const s of d.series) {
      if (!s.points) continue;
      lo = Math.min(lo, s.first_step);
      hi = Math.max(hi, s.last_step);
    }
  }
  if (!Number.isFinite(lo)) return [0, 1];
  return [lo, Math.max(hi, lo + 1)];
}

export function errorBox(e: unknown): HTMLElement {
  const message = e instanceof ApiError ? `${e.status}: ${e.message}` : String(e);
  return el('p', { class: 'error' }, message);
}

export function runStart(run: string): number {
  return ctx.runs.find((r) => r.name === run)?.start_time ?? 0;
}

// Runs `tasks` at most `limit` at a time (charts of a long section do not all ask at once).
export async function pooled(tasks: (() => Promise<void>)[], limit = 4): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) await tasks[next++]();
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
}

// A finding's click: the charts move to its steps (with context either side) and to its
// layer, on the tab that shows it.
export async function jumpTo(f: Finding): Promise<void> {
  const run = f.run || primaryRun() || '';
  const d = await detail(run);
  const has = (tag: string) => d.series.some((s) => s.tag === tag);
  const width = Math.max(1, f.last_step - f.step);
  const pad = Math.max(20, width * 2, Math.round(d.max_step * 0.05));
  const range: [number, number] = [Math.max(0, f.step - pad), f.last_step + pad];
  const runsSel = ctx.state.runs.includes(run) ? ctx.state.runs : [run, ...ctx.state.runs];
  let tab: Tab = 'scalars';
  let layer = ctx.state.layer;
  const of = (family: string) => has(familyTag(family, f.location));
  const isLayer = of('grad') || of('weight') || of('act');
  if (isLayer) layer = f.location;
  // Curve findings go to the curves (with the layer picked for the other tabs); layer
  // findings to the layer's tab; resource findings to performance.
  const view = codeView(f.code);
  if (view === 'scalars' || has(f.location)) tab = 'scalars';
  else if (of('grad') || of('weight')) tab = 'gradients';
  else if (of('act')) tab = 'activations';
  else if (view === 'performance' || familyRest('mem', f.location) !== null || f.location === 'data') tab = 'performance';
  setState({ range, tab, layer, runs: runsSel }, 'all');
}
