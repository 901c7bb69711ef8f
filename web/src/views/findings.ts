// Findings: every finding of the selected runs, worst first, with evidence, ranked causes
// and actions; "Show on charts" moves the charts to its steps on the tab that shows it.
import { Finding } from '../api';
import { ctx, findings, jumpTo } from '../ctx';
import { el, fmt, SEVERITY_RANK } from '../util';

export function findingCard(f: Finding): HTMLElement {
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
    f.causes.length ? el('div', {}, el('small', { title: 'each cause is judged on its own evidence (docs/doctor.md): causes can act together, so the confidences need not add up to 100 %' },
                                         'likely causes (each judged on its own; they need not add to 100 %)'), causes) : null,
    f.actions.length ? el('div', {}, el('small', {}, 'what to do'), actions) : null,
    el('button', { class: 'jump' }, 'Show on charts →'));
  card.querySelector('.jump')!.addEventListener('click', () => jumpTo(f));
  return card;
}

export async function findingsView(gen: number, box: HTMLElement): Promise<void> {
  const all = (await Promise.all(ctx.state.runs.map(findings))).flat();
  if (gen !== ctx.generation) return;
  all.sort((a, b) => SEVERITY_RANK[b.severity] - SEVERITY_RANK[a.severity] || a.step - b.step);
  box.append(el('div', { class: 'panel-title' }, `${all.length} findings, worst first`));
  if (!all.length) box.append(el('p', { class: 'none' }, 'Nothing found: the doctor is happy with these runs.'));
  const list = el('div', { id: 'findings' });
  for (const f of all) list.append(findingCard(f));
  box.append(list);
}
