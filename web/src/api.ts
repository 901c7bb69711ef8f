// The JSON API (src/server/api.h), with the token when the server asks for one.

const TOKEN_KEY = 'trainscope.token';

// A token arrives once in the URL fragment (#token=...) and is kept for the tab's session,
// then removed from the address bar so a shared link never carries it.
export function captureToken(): void {
  const hash = new URLSearchParams(location.hash.slice(1));
  const token = hash.get('token');
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    hash.delete('token');
    history.replaceState(null, '', '#' + hash.toString());
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

export async function api<T>(endpoint: string, params: Record<string, string | number | undefined> = {}): Promise<T> {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) query.set(k, String(v));
  const headers: Record<string, string> = {};
  const t = token();
  if (t) headers['Authorization'] = 'Bearer ' + t;
  const res = await fetch(`api/${endpoint}?${query}`, { headers });
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new ApiError(res.status, body.error || res.statusText);
  return body as T;
}

// Server-sent events; EventSource cannot send headers, so the token goes in the query.
export function events(onEvent: (e: LiveEvent) => void, onState: (live: boolean) => void): EventSource {
  const t = token();
  const source = new EventSource('api/events' + (t ? '?token=' + encodeURIComponent(t) : ''));
  source.onopen = () => onState(true);
  source.onerror = () => onState(false);
  source.onmessage = (m) => {
    try {
      onEvent(JSON.parse(m.data));
    } catch {
      /* a malformed event is skipped */
    }
  };
  return source;
}

export type Num = number | null;

export interface LiveEvent {
  type: 'run' | 'removed' | 'hello';
  run?: string;
  status?: string;
  max_step?: number;
  findings?: number;
  new?: boolean;
}

export interface RunSummary {
  name: string;
  status: string;
  health: 'critical' | 'warning' | 'ok' | 'damaged' | 'unknown';
  findings?: { critical: number; warning: number; info: number };
  start_time?: number;
  end_time?: number;
  heartbeat?: number;
  max_step?: number;
  series?: number;
  config?: Record<string, unknown>;
  final?: Record<string, number | string | null>;
  error?: string;
  damage?: Damage;
}

export interface SeriesInfo {
  tag: string;
  kind: 'scalar' | 'tensor_stats' | 'span' | 'vector';
  points: number;
  first_step: number;
  last_step: number;
  last_value: Num;
}

// What a whole read of a damaged store skipped (the server adds it to every answer about
// that run; absent for a whole store).
export interface Damage {
  records: number;
  series: string[];
  summary: string;
}

export interface RunDetail {
  meta: { name: string; start_time: number; status: string; config: unknown };
  max_step: number;
  series: SeriesInfo[];
  damage?: Damage;
}

export interface Buckets {
  tag: string;
  points: number;
  begin: number[];
  end: number[];
  step: number[];
  wall: Num[];
  last: Num[];
  min: Num[];
  max: Num[];
  count: number[];
  nonfinite: number[];
}

export interface TensorSeries {
  tag: string;
  step: number[];
  wall: number[];
  points?: number;
  l2_norm: Num[];
  mean?: Num[];
  std?: Num[];
  min?: Num[];
  max?: Num[];
  abs_max?: Num[];
  // Then one key per measured statistic (data/tensor_stats.json: dead_fraction,
  // saturated_fraction ...), a value per step, null where not measured.
  [measured: string]: unknown;
  nan: number[];
  inf: number[];
  zeros: number[];
  numel: number[];
  exponent_lo?: number;
  exponent_hi?: number;
  hist?: number[][];
  has_hist?: boolean[];
}

export type Cell = number | null | 'nonfinite';

export interface LayerMatrix {
  family: string;
  metric: string;
  layers: string[];
  step: number[];
  values: Cell[][];
}

export interface Vectors {
  tag: string;
  units: number;
  step: number[];
  values: Cell[][];
}

export interface Spans {
  phases: string[];
  step: number[];
  start: number[];
  mean: Record<string, number[]>;
  step_time: number[];
}

export interface Finding {
  code: string;
  severity: 'critical' | 'warning' | 'info';
  step: number;
  last_step: number;
  location: string;
  summary: string;
  evidence: Record<string, unknown>;
  causes: { id: string; confidence: number }[];
  actions: string[];
  run?: string;  // added by the UI
}

// /api/ranks: the ranks of a data-parallel run side by side (src/server/rank_view.h).
export interface RankRow {
  rank: number;
  run: string;
  status: string;
  steps: number;
  step_time: Num;  // median seconds
  step_time_source: string;
  steps_per_second: Num;
  phases: Record<string, Num>;  // median seconds of each rank-local phase
}

export interface RankSeries {
  role: 'loss' | 'grad_norm';
  tag: string;
  values: Num[][];  // [rank][bucket]: the mean
  median: Num[];  // over the ranks
  spread: Num[];  // (max - min) / |median| over the ranks
}

export interface RankView {
  run: string;
  ranks: RankRow[];
  step: number[];
  step_time: Num[][];  // [rank][bucket]
  series: RankSeries[];
  layers?: { family: string; metric: string; names: string[]; values: Num[][]; ratio: Num[][]; nonfinite: number[][] };
  findings: (Finding & { rank: number; ranks: number[] })[];
  unreadable: { rank: number; run: string; error: string }[];  // ranks whose store could not be read
}
