// Scalar charts grouped W&B-style: one collapsible section per tag prefix, the user's own
// first, trainscope's internal series collapsed. Charts of an open section are drawn at
// once (a few requests at a time), those of a closed one when it is opened: nothing is left
// as an empty placeholder. Used by the Scalars and Performance views.

import { api, Buckets, Finding, Num, RunDetail } from '../api';
import { RunCurve, scalarChart } from '../chart';
import { ctx, chartWidth, detail, errorBox, findings, jumpTo, pooled, rangeParams, runStart, setState, xRange } from '../ctx';
import { familyRest, familyTag, Section, sections } from '../groups';
import { writeState } from '../state';
import { flatten } from '../runs';
import { el, regex, runColor } from '../util';

// Which findings belong on the chart of `tag`.
export function findingsFor(tag: string, all: Finding[]): Finding[] {
  return all.filter((f) => f.location === tag
    || (/loss/.test(tag) && (f.code.startsWith('LOSS_') || f.code === 'NONFINITE_LOSS' || f.location === 'loss'))
    || (familyRest('mem', tag) !== null && f.code === 'MEMORY_LEAK')
    || (tag === familyTag('time', 'data') && f.code === 'DATALOADER_BOTTLENECK'));
}

function isOpen(s: Section, byDefault: boolean): boolean {
  const marks = ctx.state.open.split(',');
  if (marks.includes('+' + s.title)) return true;
  if (marks.includes('-' + s.title)) return false;
  return byDefault;
}

function remember(s: Section, open: boolean, byDefault: boolean): void {
  const marks = ctx.state.open.split(',').filter((m) => m && m.slice(1) !== s.title);
  if (open !== byDefault) marks.push((open ? '+' : '-') + s.title);
  ctx.state.open = marks.join(',');
  writeState(ctx.state);
}

// x = a logged scalar (epoch, tokens): its last value at or before a step, null before its first.
function valueAtStep(b: Buckets): (step: number) => number | null {
  return (step) => {
    let lo = 0, hi = b.step.length - 1, found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (b.step[mid] <= step) [found, lo] = [mid, mid + 1];
      else hi = mid - 1;
    }
    return found < 0 ? null : b.last[found];
  };
}

// Runs grouped by a config key, as W&B's grouping: one curve per value of the key, the mean
// of its runs at each step (each run's value at or before the step, runs that have not
// reached the step left out) in a band from their min to their max.
export function groupCurves(curves: RunCurve[], key: string): RunCurve[] {
  const groups = new Map<string, RunCurve[]>();
  for (const c of curves) {
    const value = JSON.stringify(flatten(ctx.runs.find((r) => r.name === c.run)?.config || {})[key] ?? null);
    groups.set(value, [...(groups.get(value) || []), c]);
  }
  return [...groups.entries()].map(([value, members], g) => {
    const steps = [...new Set(members.flatMap((c) => c.data.step))].sort((a, b) => a - b);
    const at = members.map((c) => ({ value: valueAtStep(c.data), last: c.data.step[c.data.step.length - 1] }));
    const mean: Num[] = [], min: Num[] = [], max: Num[] = [], nonfinite: number[] = [], count: number[] = [];
    for (const s of steps) {
      const vs = at.filter((m) => s <= m.last).map((m) => m.value(s));
      const finite = vs.filter((v): v is number => v !== null && Number.isFinite(v));
      mean.push(finite.length ? finite.reduce((a, b) => a + b, 0) / finite.length : null);
      min.push(finite.length ? Math.min(...finite) : null);
      max.push(finite.length ? Math.max(...finite) : null);
      nonfinite.push(vs.length - finite.length);
      count.push(vs.length);
    }
    const data: Buckets = { tag: members[0].data.tag, points: members.reduce((a, c) => a + c.data.points, 0), begin: steps,
                            end: steps, step: steps, wall: steps.map(() => null), last: mean, min, max, count, nonfinite };
    return { run: `${key}=${value} (${members.length} run${members.length === 1 ? '' : 's'})`, color: runColor(g), data, start_time: 0 };
  });
}

// Charts whose log y the user toggled on the chart itself (the page's "log y" sets them all).
const logCharts = new Set<string>();

export async function drawScalarChart(gen: number, tag: string, slot: HTMLElement, selected: string[], ds: RunDetail[],
                                      all: Finding[]): Promise<void> {
  // Two charts a row on a wide screen, as W&B's panels.
  const full = chartWidth();
  const width = full >= 900 ? Math.floor((full - 12) / 2) - 18 : full - 18;
  try {
    const curves: RunCurve[] = [];
    const xTag = ctx.state.x.startsWith('tag:') ? ctx.state.x.slice(4) : null;
    await Promise.all(selected.map(async (run, i) => {
      if (!ds[i].series.some((s) => s.tag === tag)) return;
      const [data, xs] = await Promise.all([
        api<Buckets>('scalars', { run, tag, width: Math.round(width), ...rangeParams() }),
        xTag ? api<Buckets>('scalars', { run, tag: xTag, width: 20000, ...rangeParams() }) : null]);
      curves[i] = { run, color: runColor(ctx.state.runs.indexOf(run)), data, start_time: runStart(run),
                    xOfStep: xs ? valueAtStep(xs) : undefined };
    }));
    if (gen !== ctx.generation) return;
    if (!document.body.dataset.firstChartMs) document.body.dataset.firstChartMs = String(Math.round(performance.now()));
    const grouped = ctx.state.group && ctx.state.x === 'step';
    slot.replaceChildren(scalarChart({
      tag, curves: grouped ? groupCurves(curves.filter(Boolean), ctx.state.group) : curves.filter(Boolean),
      x: ctx.state.x, smooth: ctx.state.smooth, log: ctx.state.log !== logCharts.has(tag),
      robust: ctx.state.robust,
      onLog: () => {
        if (!logCharts.delete(tag)) logCharts.add(tag);
        drawScalarChart(gen, tag, slot, selected, ds, all);
      },
      findings: findingsFor(tag, all), width, xRange: xRange(ds),
      onZoom: (range) => setState({ range }), onFinding: jumpTo,
    }));
  } catch (e) {
    slot.replaceChildren(el('div', { class: 'panel-title' }, tag), errorBox(e));
  }
}

// Sections of the scalar tags of `selected` runs that pass `test`, into box. Resolves when
// the open sections' charts are drawn.
export async function scalarSections(gen: number, box: HTMLElement, test: (tag: string) => boolean,
                                     openByDefault: (s: Section) => boolean = (s) => !s.internal,
                                     selected = ctx.state.runs, limitPerSection = 48): Promise<void> {
  const ds = await Promise.all(selected.map(detail));
  const all = (await Promise.all(selected.map(findings))).flat();
  if (gen !== ctx.generation) return;
  const re = regex(ctx.state.tags);
  const tags = [...new Set(ds.flatMap((d) => d.series.filter((s) => s.kind === 'scalar' && s.points > 0).map((s) => s.tag)))]
    .filter(test).filter((t) => !re || re.test(t));
  if (!tags.length) {
    box.append(el('p', { class: 'empty' }, 'No scalar series match.'));
    return;
  }
  const pending: Promise<void>[] = [];
  for (const s of sections(tags)) {
    const grid = el('div', { class: 'section-grid' });
    const details = el('details', { class: s.internal ? 'section internal' : 'section', 'data-section': s.title },
                       el('summary', {}, el('b', {}, s.title), el('span', { class: 'muted' },
                         ` ${s.tags.length} chart${s.tags.length === 1 ? '' : 's'}${s.internal ? ' · recorded by trainscope' : ''}`)),
                       grid);
    box.append(details);
    let drawn = false;
    const drawAll = () => {
      if (drawn) return Promise.resolve();
      drawn = true;
      const shown = s.tags.slice(0, limitPerSection);
      const tasks = shown.map((tag) => {
        const slot = el('div', { class: 'chart-slot', 'data-tag': tag }, el('div', { class: 'panel-title' }, tag));
        grid.append(slot);
        return () => drawScalarChart(gen, tag, slot, selected, ds, all);
      });
      if (s.tags.length > shown.length) grid.append(el('p', { class: 'muted' }, `${s.tags.length - shown.length} more: narrow the tag filter.`));
      return pooled(tasks, 4);
    };
    const byDefault = openByDefault(s);
    details.open = isOpen(s, byDefault);
    if (details.open) pending.push(drawAll());
    details.addEventListener('toggle', () => {
      remember(s, details.open, byDefault);
      if (details.open) drawAll();
    });
  }
  await Promise.all(pending);
}
