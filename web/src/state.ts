// The view's state, kept in the URL fragment so a view can be shared by its link:
// #runs=a,b&tab=scalars&tags=loss&smooth=0.6&log=1&x=step&range=100:300&layer=fc1.weight

// A view's id (views/index.ts owns the list; main.ts shows the first view for an unknown one).
export type Tab = string;
// x by step, wall time, time since the run's start, or the value of a logged scalar ('tag:epoch').
export type XMode = 'step' | 'wall' | 'relative' | `tag:${string}`;

export interface State {
  runs: string[];
  tab: Tab;
  tags: string;  // regex over scalar tags
  filter: string;  // regex over run names and configs
  sort: string;  // column, '-' prefix for descending
  smooth: number;  // EMA weight in [0, 0.999]
  log: boolean;
  robust: boolean;  // y ranges ignore outliers (5th to 95th percentile)
  x: XMode;
  metric: string;  // Sweep: the final metric that colours the runs
  group: string;  // Scalars: runs grouped by this config key (mean line, min-max band); '' = each run
  range: [number, number] | null;  // step range of the charts, null = everything
  layer: string;
  family: string;  // heatmap family: grad | weight | update
  internal: boolean;  // the runs table shows trainscope's own series as columns too
  open: string;  // sections opened or closed by the user: '+key' / '-key', comma-separated
  columns: string[];  // the runs table's columns picked by the user ('c:lr', 'm:val/loss'); [] = chosen for them
}

export function readState(): State {
  const h = new URLSearchParams(location.hash.slice(1));
  const range = (h.get('range') || '').split(':').map(Number);
  const x = h.get('x') as XMode;
  return {
    runs: (h.get('runs') || '').split(',').filter(Boolean),
    tab: h.get('tab') || 'overview',
    tags: h.get('tags') || '',
    filter: h.get('filter') || '',
    sort: h.get('sort') || '-start',
    smooth: Math.min(0.999, Math.max(0, Number(h.get('smooth') || 0))),
    log: h.get('log') === '1',
    robust: h.get('robust') === '1',
    x: ['step', 'wall', 'relative'].includes(x) || x?.startsWith('tag:') ? x : 'step',
    group: h.get('group') || '',
    metric: h.get('metric') || '',
    range: range.length === 2 && range.every(Number.isFinite) && range[0] < range[1] ? [range[0], range[1]] : null,
    layer: h.get('layer') || '',
    family: h.get('family') || 'grad',
    internal: h.get('internal') === '1',
    open: h.get('open') || '',
    columns: (h.get('cols') || '').split(',').filter(Boolean),
  };
}

export function writeState(s: State): void {
  const h = new URLSearchParams();
  if (s.runs.length) h.set('runs', s.runs.join(','));
  h.set('tab', s.tab);
  if (s.tags) h.set('tags', s.tags);
  if (s.filter) h.set('filter', s.filter);
  if (s.sort !== '-start') h.set('sort', s.sort);
  if (s.smooth) h.set('smooth', String(s.smooth));
  if (s.log) h.set('log', '1');
  if (s.robust) h.set('robust', '1');
  if (s.x !== 'step') h.set('x', s.x);
  if (s.group) h.set('group', s.group);
  if (s.metric) h.set('metric', s.metric);
  if (s.range) h.set('range', `${Math.floor(s.range[0])}:${Math.ceil(s.range[1])}`);
  if (s.layer) h.set('layer', s.layer);
  if (s.family !== 'grad') h.set('family', s.family);
  if (s.internal) h.set('internal', '1');
  if (s.open) h.set('open', s.open);
  if (s.columns.length) h.set('cols', s.columns.join(','));
  const hash = '#' + h.toString();
  if (location.hash !== hash) history.replaceState(null, '', hash);
}
