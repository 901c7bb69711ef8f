// A run's overview, the first page: what happened (health, status, the worst finding in one
// line), the findings grouped by kind worst first, each with a small chart of its evidence
// and a link to the place that shows it, and the four curves that tell most stories (loss
// and validation loss, learning rate, global gradient norm, step time by phase) with the
// findings marked at their steps.
import { api, Buckets, Finding, RunDetail, Spans, TensorSeries } from '../api';
import { bucketLine, findingMarker, lineChart, Marker, sparkline } from '../chart';
import { ctx, chartWidth, detail, findings, jumpTo, rangeParams, xRange } from '../ctx';
import { familyTag, isUserSeries } from '../groups';
import { el, fmt, fmtTime, SEVERITY_RANK } from '../util';
import { stepTimeChart } from './performance';

export interface FindingGroup {
  code: string;
  severity: Finding['severity'];
  findings: Finding[];  // by step
  count: number;  // occurrences, counting those the doctor already merged by location
  locations: string[];
}

// One group per code, worst first (severity, then occurrences, then the earliest step).
export function groupFindings(all: Finding[]): FindingGroup[] {
  const by = new Map<string, FindingGroup>();
  for (const f of all) {
    let g = by.get(f.code);
    if (!g) {
      g = { code: f.code, severity: f.severity, findings: [], count: 0, locations: [] };
      by.set(f.code, g);
    }
    g.findings.push(f);
    if (SEVERITY_RANK[f.severity] > SEVERITY_RANK[g.severity]) g.severity = f.severity;
    const merged = Number((f.evidence as Record<string, unknown>)?.count) || 1;
    g.count += merged;
    const locs = (f.evidence as Record<string, unknown>)?.locations;
    for (const l of [f.location, ...(Array.isArray(locs) ? locs.map(String) : [])]) if (l && !g.locations.includes(l)) g.locations.push(l);
  }
  const groups = [...by.values()];
  for (const g of groups) g.findings.sort((a, b) => a.step - b.step);
  return groups.sort((a, b) => SEVERITY_RANK[b.severity] - SEVERITY_RANK[a.severity] || b.count - a.count
    || a.findings[0].step - b.findings[0].step);
}

function scalarTags(d: RunDetail): string[] {
  return d.series.filter((s) => s.kind === 'scalar' && s.points > 0).map((s) => s.tag);
}

export function lossTags(d: RunDetail): { loss?: string; val?: string } {
  const tags = scalarTags(d);
  const loss = tags.find((t) => t === 'train/loss') || tags.find((t) => /loss/.test(t) && !/^(val|valid|test|eval)/.test(t));
  const val = tags.find((t) => t === 'val/loss') || tags.find((t) => /^(val|valid|eval)[^/]*\/.*loss/.test(t));
  return { loss, val };
}

function lrTag(d: RunDetail): string | undefined {
  const tags = scalarTags(d);
  return tags.find((t) => t === familyTag('opt', 'lr')) || tags.find((t) => /(^|\/)(lr|learning_rate)(\/|$)/.test(t));
}

function gradNormTag(d: RunDetail): string | undefined {
  const tags = scalarTags(d);
  return tags.find((t) => t === familyTag('grad', 'global_norm')) || tags.find((t) => /grad.*norm/.test(t));
}

// The series that shows a finding's evidence, and how to read it.
function evidenceSource(f: Finding, d: RunDetail): { kind: 'scalar' | 'tensor'; tag: string; metric?: keyof TensorSeries;
                                                       log: boolean } | null {
  const has = (tag: string) => d.series.some((s) => s.tag === tag && s.points > 0);
  const { loss } = lossTags(d);
  if (f.location && has(f.location) && d.series.find((s) => s.tag === f.location)?.kind === 'scalar') {
    return { kind: 'scalar', tag: f.location, log: false };
  }
  const dataWait = familyTag('time', 'data'), rss = familyTag('mem', 'rss'), ratio = familyTag('update_ratio', f.location);
  if (f.code === 'DATALOADER_BOTTLENECK' && has(dataWait)) return { kind: 'scalar', tag: dataWait, log: false };
  if (/UPDATE_RATIO/.test(f.code) && has(ratio)) return { kind: 'scalar', tag: ratio, log: true };
  if (f.code === 'MEMORY_LEAK' && has(rss)) return { kind: 'scalar', tag: rss, log: false };
  const act = familyTag('act', f.location);
  if (f.location && has(act)) {
    const metric = /SATUR/.test(f.code) ? 'saturated_fraction' : /DEAD/.test(f.code) ? 'dead_fraction' : 'l2_norm';
    return { kind: 'tensor', tag: act, metric, log: metric === 'l2_norm' };
  }
  for (const family of ['grad', 'update', 'weight']) {
    const tag = familyTag(family, f.location);
    if (f.location && has(tag)) return { kind: 'tensor', tag, metric: 'l2_norm', log: true };
  }
  if (/GRAD/.test(f.code) && gradNormTag(d)) return { kind: 'scalar', tag: gradNormTag(d)!, log: true };
  if (/LR/.test(f.code) && lrTag(d)) return { kind: 'scalar', tag: lrTag(d)!, log: false };
  return loss ? { kind: 'scalar', tag: loss, log: false } : null;
}

async function evidenceChart(run: string, f: Finding, d: RunDetail, xr: [number, number]): Promise<HTMLElement> {
  const src = evidenceSource(f, d);
  const color = f.severity === 'critical' ? '#d62728' : f.severity === 'warning' ? '#ff7f0e' : '#1f77b4';
  const opts = { width: 260, height: 46, name: 'evidence', mark: f.step, markColor: color, xRange: xr };
  if (!src) return el('span', { class: 'muted' }, 'no series to show');
  let spark: HTMLElement;
  if (src.kind === 'scalar') {
    const b = await api<Buckets>('scalars', { run, tag: src.tag, width: 130 });
    spark = sparkline(b.step, b.max, { ...opts, log: src.log });
  } else {
    const t = await api<TensorSeries>('tensor_stats', { run, tag: src.tag, width: 130 });
    spark = sparkline(t.step, (t[src.metric!] as (number | null)[]) || [], { ...opts, log: src.log });
  }
  return el('div', { class: 'evidence-chart' }, spark, el('div', { class: 'muted small' }, src.tag + (src.metric && src.metric !== 'l2_norm' ? ` ${src.metric}` : '')));
}

// The user's final metrics, losses first: where the run ended up.
function finalLine(final: Record<string, number | string | null>): HTMLElement | null {
  const keys = Object.keys(final).filter(isUserSeries)
    .sort((a, b) => Number(!/loss/.test(a)) - Number(!/loss/.test(b)) || a.localeCompare(b)).slice(0, 6);
  if (!keys.length) return null;
  return el('div', { class: 'muted final' }, 'final: ' + keys.map((k) => `${k} ${fmt(final[k])}`).join(' · '));
}

function headline(groups: FindingGroup[], status: string, steps: number): string {
  const worst = groups[0];
  if (status === 'crashed') return worst ? `Crashed; ${worst.code.toLowerCase().replace(/_/g, ' ')} at step ${worst.findings[0].step}.` : 'Crashed.';
  if (!worst || worst.severity === 'info') return `No problems found in ${steps + 1} steps.`;
  return `${worst.findings[0].summary} (${worst.code}, step ${worst.findings[0].step}).`;
}

export async function overviewView(gen: number, box: HTMLElement, run: string): Promise<void> {
  const [d, fs] = await Promise.all([detail(run), findings(run)]);
  if (gen !== ctx.generation) return;
  const summary = ctx.runs.find((r) => r.name === run);
  const groups = groupFindings(fs);
  const xr = xRange([d]);
  const status = summary?.status || d.meta.status;
  const meta = d.meta as RunDetail['meta'] & { end_time?: number; exit_reason?: string; exception?: string };
  const duration = meta.end_time && meta.start_time ? meta.end_time - meta.start_time : undefined;
  const health = summary?.health || 'unknown';
  box.append(el('section', { id: 'health', class: `health ${health}` },
    el('div', { class: 'health-head' }, el('span', { class: `badge ${health}` }, health), el('b', {}, run),
       el('span', { class: 'muted' }, ` · ${status} · ${fmt(d.max_step + 1)} steps · started ${fmtTime(meta.start_time)}`
         + (duration !== undefined ? ` · ran ${duration >= 5400 ? fmt(duration / 3600) + ' h' : duration >= 120 ? fmt(duration / 60) + ' min'
           : fmt(duration) + ' s'}` : '') + (meta.exit_reason ? ` · exit: ${meta.exit_reason}` : ''))),
    el('div', { class: 'headline' }, headline(groups, status, d.max_step)),
    d.damage ? el('div', { class: 'damage', id: 'damage' }, `Damaged store: ${d.damage.summary}. `
      + 'The charts show what could be read.') : null,
    finalLine(summary?.final || {}),
    meta.exception ? el('pre', { class: 'exception' }, String(meta.exception)) : null));

  // Findings, grouped.
  const list = el('div', { id: 'finding-groups' });
  box.append(el('div', { class: 'panel-title' }, groups.length ? `Findings: ${groups.length} kind${groups.length === 1 ? '' : 's'}, worst first`
    : 'Findings: none'), list);
  if (!groups.length) list.append(el('p', { class: 'none' }, 'Nothing found: the doctor is happy with this run.'));
  const evidence: Promise<void>[] = [];
  for (const g of groups.slice(0, 20)) {
    const first = g.findings[0];
    const steps = g.findings.length > 1 || first.last_step !== first.step
      ? `steps ${first.step}–${Math.max(...g.findings.map((f) => f.last_step))}` : `step ${first.step}`;
    const chartSlot = el('div', { class: 'evidence-slot' });
    const link = el('a', { href: '#', class: 'jump' }, 'Show →');
    link.addEventListener('click', (e) => {
      e.preventDefault();
      jumpTo(first);
    });
    list.append(el('div', { class: `finding-group sev-${g.severity}`, 'data-code': g.code, 'data-count': String(g.count) },
      el('div', { class: 'group-text' },
         el('div', { class: 'finding-head' }, el('span', { class: `badge ${g.severity}` }, g.severity), el('b', {}, g.code),
            el('span', { class: 'muted' }, ` ×${g.count} · ${steps}`)),
         el('div', {}, first.summary),
         g.locations.length ? el('div', { class: 'muted small' }, 'in ' + g.locations.slice(0, 6).join(', ')
           + (g.locations.length > 6 ? ` and ${g.locations.length - 6} more` : '')) : null,
         link),
      chartSlot));
    evidence.push(evidenceChart(run, first, d, xr).then((c) => { chartSlot.replaceChildren(c); },
      () => { chartSlot.replaceChildren(el('span', { class: 'muted' }, 'evidence not readable')); }));
  }
  if (groups.length > 20) list.append(el('p', { class: 'muted' }, `${groups.length - 20} more kinds on the Findings tab.`));

  // The four curves.
  const markers: Marker[] = fs.filter((f) => f.severity !== 'info').map((f) => findingMarker(f, () => jumpTo(f)));
  const full = chartWidth();
  const width = full >= 900 ? Math.floor((full - 12) / 2) - 18 : full - 18;
  const grid = el('div', { class: 'overview-grid' });
  box.append(el('div', { class: 'panel-title' }, 'The run in four curves'), grid);
  const slot = (name: string) => {
    const s = el('div', { class: 'chart-slot', 'data-curve': name });
    grid.append(s);
    return s;
  };
  const lossSlot = slot('loss'), lrSlot = slot('lr'), normSlot = slot('grad-norm'), timeSlot = slot('step-time');
  const { loss, val } = lossTags(d);
  const series = (tag?: string) => (tag ? api<Buckets>('scalars', { run, tag, width, ...rangeParams() }) : Promise.resolve(null));
  const missing = (title: string, what: string) => el('div', { class: 'chart' }, el('div', { class: 'panel-title' }, title),
                                                      el('p', { class: 'empty' }, what));
  const curves = (async () => {
    const [lossB, valB, lrB, normB, spans] = await Promise.all([
      series(loss), series(val), series(lrTag(d)), series(gradNormTag(d)),
      api<Spans>('spans', { run, width, ...rangeParams() })]);
    if (gen !== ctx.generation) return;
    // Validation points sit at their own steps: both series on one x of their union.
    const xs = [...new Set([...(lossB?.step || []), ...(valB?.step || [])])].sort((a, b) => a - b);
    if (lossB || valB) {
      lossSlot.replaceChildren(lineChart('loss' + (val ? ' and validation loss' : ''), xs, [
        ...(lossB ? [bucketLine(lossB, loss!, '#1f77b4', { xs })] : []),
        ...(valB ? [bucketLine(valB, val!, '#ff7f0e', { xs, dash: [6, 3] })] : []),
      ], { width, name: 'overview-loss', xRange: xr, markers }));
    } else lossSlot.replaceChildren(missing('loss', 'No loss series (log one as train/loss).'));
    lrSlot.replaceChildren(lrB ? lineChart(`learning rate (${lrTag(d)})`, lrB.step, [bucketLine(lrB, lrTag(d)!, '#9467bd')],
      { width, name: 'overview-lr', xRange: xr, markers }) : missing('learning rate', 'No learning-rate series (run.watch(model, optimizer) records opt/lr).'));
    normSlot.replaceChildren(normB ? lineChart(`global gradient norm (${gradNormTag(d)})`, normB.step,
      [bucketLine(normB, gradNormTag(d)!, '#2ca02c', { pick: 'max' })], { width, name: 'overview-grad-norm', xRange: xr, markers, log: true })
      : missing('global gradient norm', 'No gradient norm recorded (run.watch records grad/global_norm).'));
    timeSlot.replaceChildren(spans.step.length ? stepTimeChart(spans, width, xr, markers)
      : missing('step time by phase', 'No step spans recorded (iterate the data through run.data()).'));
  })();
  await Promise.all([curves, ...evidence]);
}
