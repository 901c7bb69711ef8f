// The runs table: health badges from the findings, config and final-metric columns (a few
// chosen, or the user's pick from every key), sortable, filtered by a regex, several
// selected to compare, folded away to give the charts the screen; a diff of two runs' configs.

import { RunSummary } from './api';
import { State } from './state';
import { internalPrefixes, isUserSeries, unitOf } from './groups';
import { el, fmt, fmtTime, regex } from './util';

// Nested config objects become dotted keys: {"optim": {"lr": 1}} -> "optim.lr".
export function flatten(obj: unknown, prefix = '', out: Record<string, unknown> = {}): Record<string, unknown> {
  if (obj && typeof obj === 'object' && !Array.isArray(obj)) {
    for (const [k, v] of Object.entries(obj as Record<string, unknown>)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) {
    out[prefix] = obj;
  }
  return out;
}

const METRIC_PREFERENCE = [/^val\//, /^test\//, /^train\//, /^eval\//];

// Columns: the config keys that differ between runs first (what a comparison is about),
// then the final values of the user's own metrics, losses and accuracies first; trainscope's
// own series (census/, sys/, input/, train/grad_zeroed, opt/, grad/ ...) only when asked.
// `all` lists every candidate for the column picker; config and metrics are those shown:
// the user's pick, else the 4 most telling of each.
function pickColumns(runs: RunSummary[], internal: boolean, picked: string[]):
    { config: string[]; metrics: string[]; all: { config: string[]; metrics: string[] } } {
  const configCount = new Map<string, Set<string>>();
  const metricCount = new Map<string, number>();
  for (const r of runs) {
    for (const [k, v] of Object.entries(flatten(r.config || {}))) {
      if (!configCount.has(k)) configCount.set(k, new Set());
      configCount.get(k)!.add(JSON.stringify(v));
    }
    for (const k of Object.keys(r.final || {})) if (internal || isUserSeries(k)) metricCount.set(k, (metricCount.get(k) || 0) + 1);
  }
  // Config keys that differ between runs first: they are what a comparison is about.
  const allConfig = [...configCount.keys()]
    .sort((a, b) => (configCount.get(b)!.size - configCount.get(a)!.size) || a.localeCompare(b));
  const rank = (k: string) => {
    const i = METRIC_PREFERENCE.findIndex((re) => re.test(k));
    return (i < 0 ? METRIC_PREFERENCE.length : i) * 3 + (/loss/.test(k) ? 0 : /acc/.test(k) ? 1 : 2);
  };
  const allMetrics = [...metricCount.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const all = { config: allConfig, metrics: allMetrics };
  if (picked.length) {
    return { config: allConfig.filter((k) => picked.includes('c:' + k)), metrics: allMetrics.filter((k) => picked.includes('m:' + k)), all };
  }
  return { config: allConfig.slice(0, 4), metrics: allMetrics.slice(0, internal ? 40 : 4), all };
}

// The column picker: every config key and final metric, ticked when shown.
function columnPicker(all: { config: string[]; metrics: string[] }, shown: Set<string>, onPick: (keys: string[]) => void): HTMLElement {
  const picker = el('details', { class: 'column-picker' }, el('summary', {}, 'columns'));
  const list = el('div', { class: 'column-list' });
  const boxes: [string, HTMLInputElement][] = [];
  const add = (key: string, label: string) => {
    const box = el('input', { type: 'checkbox', 'data-key': key });
    box.checked = shown.has(key);
    box.addEventListener('change', () => onPick(boxes.filter(([, b]) => b.checked).map(([k]) => k)));
    boxes.push([key, box]);
    list.append(el('label', {}, box, ' ', label));
  };
  all.config.forEach((k) => add('c:' + k, `config ${k}`));
  all.metrics.forEach((k) => add('m:' + k, k));
  const auto = el('button', { title: 'the columns trainscope picks' }, 'automatic');
  auto.addEventListener('click', () => onPick([]));
  picker.append(list, auto);
  return picker;
}

const FOLDED_KEY = 'trainscope-runs-folded';

export interface RunsTableHandlers {
  onSelect: (runs: string[]) => void;
  onState: (patch: Partial<State>) => void;
}

export function runsTable(runs: RunSummary[], state: State, h: RunsTableHandlers): HTMLElement {
  const wrap = el('section', { id: 'runs' });
  const filterInput = el('input', { id: 'run-filter', type: 'search', placeholder: 'filter runs (regex over name and config)',
                                    value: state.filter });
  const re = regex(state.filter);
  filterInput.classList.toggle('bad', !!state.filter && !re);
  filterInput.addEventListener('change', () => h.onState({ filter: filterInput.value }));
  const selected = new Set(state.runs);
  const diffButton = el('button', { id: 'diff-config' }, 'Diff config of 2 selected');
  diffButton.toggleAttribute('disabled', selected.size !== 2);
  const internalBox = el('input', { id: 'internal-columns', type: 'checkbox' });
  internalBox.checked = state.internal;
  internalBox.addEventListener('change', () => h.onState({ internal: internalBox.checked }));
  const { config, metrics, all } = pickColumns(runs, state.internal, state.columns);
  const shownKeys = new Set([...config.map((k) => 'c:' + k), ...metrics.map((k) => 'm:' + k)]);
  const folded = localStorage.getItem(FOLDED_KEY) === '1';
  const fold = el('button', { id: 'fold-runs', title: 'fold the runs table away (the charts get the screen)' }, folded ? '▸ runs' : '▾ runs');
  fold.addEventListener('click', () => {
    localStorage.setItem(FOLDED_KEY, folded ? '0' : '1');
    h.onState({});
  });
  const toolbar = el('div', { class: 'toolbar' }, fold, filterInput, diffButton,
                     el('label', { title: `${internalPrefixes().join(', ')} as columns` }, internalBox, ' trainscope\'s own series'),
                     columnPicker(all, shownKeys, (keys) => h.onState({ columns: keys })),
                     el('span', { class: 'muted' }, `${runs.length} runs · ${selected.size} selected`));
  wrap.append(toolbar);
  if (folded) wrap.classList.add('folded');
  const shown = runs.filter((r) => !re || re.test(r.name) || re.test(JSON.stringify(r.config || {})));
  const columns: { key: string; label: string; value: (r: RunSummary) => unknown }[] = [
    { key: 'name', label: 'run', value: (r) => r.name },
    { key: 'health', label: 'health', value: (r) => ({ critical: 4, damaged: 3, warning: 2, ok: 1 } as Record<string, number>)[r.health] || 0 },
    { key: 'status', label: 'status', value: (r) => r.status },
    { key: 'step', label: 'last step', value: (r) => r.max_step ?? 0 },
    { key: 'start', label: 'started', value: (r) => r.start_time ?? 0 },
    ...config.map((k) => ({ key: 'c:' + k, label: k, value: (r: RunSummary) => flatten(r.config || {})[k] })),  // th.config: italic
    // A final value's unit beside its name (mem/rss (bytes), time/step (seconds)).
    ...metrics.map((k) => ({ key: 'm:' + k, label: unitOf(k) ? `${k} (${unitOf(k)})` : k, value: (r: RunSummary) => r.final?.[k] })),
  ];
  const desc = state.sort.startsWith('-');
  const sortKey = state.sort.replace(/^-/, '');
  const col = columns.find((c) => c.key === sortKey) || columns[4];
  shown.sort((a, b) => {
    const va = col.value(a), vb = col.value(b);
    const cmp = typeof va === 'number' && typeof vb === 'number' ? va - vb
      : va === undefined ? 1 : vb === undefined ? -1 : String(va).localeCompare(String(vb));
    return desc ? -cmp : cmp;
  });
  const head = el('tr', {}, el('th', {}, ''));
  for (const c of columns) {
    const th = el('th', { class: 'sortable', 'data-key': c.key, title: `sort by ${c.label}` },
                  c.label + (c.key === sortKey ? (desc ? ' ▼' : ' ▲') : ''));
    th.addEventListener('click', () => h.onState({ sort: (c.key === sortKey && !desc ? '-' : '') + c.key }));
    if (c.key.startsWith('c:')) th.classList.add('config');
    if (c.key.startsWith('m:')) th.classList.add('metric');
    head.append(th);
  }
  const body = el('tbody');
  for (const r of shown) {
    const box = el('input', { type: 'checkbox', 'aria-label': `select ${r.name}` });
    box.checked = selected.has(r.name);
    box.addEventListener('change', () => {
      if (box.checked) selected.add(r.name);
      else selected.delete(r.name);
      h.onSelect(runs.map((x) => x.name).filter((n) => selected.has(n)));
    });
    const badge = el('span', { class: `badge ${r.health}`, title: r.findings
      ? `${r.findings.critical} critical, ${r.findings.warning} warning, ${r.findings.info} info` : r.error || '' }, r.health);
    const name = el('a', { href: '#', class: 'run-name' }, r.name);
    name.addEventListener('click', (e) => {
      e.preventDefault();
      h.onSelect([r.name]);
    });
    const tr = el('tr', { 'data-run': r.name, class: selected.has(r.name) ? 'selected' : '' },
                  el('td', {}, box), el('td', {}, name),
                  // A damaged store says so beside a worse health too.
                  el('td', {}, badge, r.damage && r.health !== 'damaged'
                    ? el('span', { class: 'badge damaged', title: r.damage.summary }, 'damaged') : null),
                  el('td', {}, r.status),
                  el('td', { class: 'num' }, fmt(r.max_step)), el('td', {}, fmtTime(r.start_time)));
    const flat = flatten(r.config || {});
    for (const k of config) tr.append(el('td', { class: 'num' }, fmt(flat[k])));
    for (const k of metrics) tr.append(el('td', { class: 'num' }, fmt(r.final?.[k])));
    body.append(tr);
  }
  wrap.append(el('div', { class: 'table-wrap' }, el('table', { class: 'runs' }, el('thead', {}, head), body)));
  const diff = el('div', { id: 'config-diff' });
  diffButton.addEventListener('click', () => {
    const [a, b] = runs.filter((r) => selected.has(r.name));
    diff.replaceChildren(configDiff(a, b));
  });
  wrap.append(diff);
  return wrap;
}

export function configDiff(a: RunSummary, b: RunSummary): HTMLElement {
  const fa = flatten(a.config || {}), fb = flatten(b.config || {});
  const keys = [...new Set([...Object.keys(fa), ...Object.keys(fb)])].sort();
  const rows = keys.filter((k) => JSON.stringify(fa[k]) !== JSON.stringify(fb[k]));
  const table = el('table', { class: 'diff' },
                   el('tr', {}, el('th', {}, 'key'), el('th', {}, a.name), el('th', {}, b.name)));
  for (const k of rows) table.append(el('tr', {}, el('td', {}, k), el('td', {}, fmt(fa[k])), el('td', {}, fmt(fb[k]))));
  return el('div', {}, el('div', { class: 'panel-title' },
                          rows.length ? `${rows.length} of ${keys.length} config keys differ` : 'Configs are identical'),
            rows.length ? table : '');
}
