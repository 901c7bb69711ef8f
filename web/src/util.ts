// Small DOM and formatting helpers.

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

export function fmt(v: unknown): string {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return String(v);
    if (v === 0) return '0';
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(2);
    return Number(v.toPrecision(4)).toString();
  }
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

// A number in at most ~7 characters, `digits` significant: plain between 1e-3 and 1e4,
// SI suffixes above (12.5k, 3.2M, 1.5G, 2T), a short exponent beyond (1.5e32, 5e-4).
const SI_UP: [number, string][] = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
function trim(m: string): string {
  return m.includes('.') ? m.replace(/0+$/, '').replace(/\.$/, '') : m;
}
// `v` (|v| in [1e-3, 1e4)) with `digits` significant digits, in positional notation.
function plain(v: number, digits: number): string {
  const rounded = Number(v.toPrecision(digits));
  const a = Math.abs(rounded);
  return trim(rounded.toFixed(a === 0 ? 0 : Math.max(0, digits - 1 - Math.floor(Math.log10(a)))));
}

export function fmtNum(v: number, digits = 3): string {
  if (!Number.isFinite(v)) return Number.isNaN(v) ? 'NaN' : v > 0 ? '∞' : '-∞';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e4 * (1 - 0.5 * 10 ** -digits) && a < 1e15) {
    for (const [scale, suffix] of SI_UP) {
      if (a >= scale * 0.99995) {
        const m = plain(v / scale, digits);
        // 999.96k rounds to 1000k: one prefix up.
        if (Math.abs(Number(m)) >= 1000 && suffix !== 'T') continue;
        return m + suffix;
      }
    }
  }
  if (a >= 1e-3 && a < 1e4) return plain(v, digits);
  const [m, e] = v.toExponential(Math.max(0, digits - 1)).split('e');
  return `${trim(m)}e${Number(e)}`;
}

// A label of fmtNum read back as a number (SI suffixes and short exponents included).
const SI_VALUE: Record<string, number> = { k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
export function parseNum(label: string): number {
  const m = /^(-?[0-9.]+(?:e-?[0-9]+)?)([kMGT]?)$/.exec(label.trim());
  return m ? Number(m[1]) * (SI_VALUE[m[2]] ?? 1) : NaN;
}

// Tick labels that name the values they sit at: the fewest significant digits with which
// every label reads back as its tick, so 125 is never labelled "130".
export function tickLabels(vals: (number | null)[]): string[] {
  const finite = vals.filter((v): v is number => v !== null && Number.isFinite(v)).sort((a, b) => a - b);
  let spacing = Infinity;
  for (let i = 1; i < finite.length; i++) if (finite[i] > finite[i - 1]) spacing = Math.min(spacing, finite[i] - finite[i - 1]);
  if (!Number.isFinite(spacing)) spacing = Math.abs(finite[0] ?? 1) || 1;
  // Within a millionth of the spacing, and of the value itself on log-like axes whose
  // spacing grows with the values.
  const close = (v: number, label: string) => Math.abs(parseNum(label) - v) <= 1e-6 * Math.min(spacing, Math.abs(v) || spacing);
  let labels: string[] = [];
  for (let digits = 1; digits <= 15; digits++) {
    labels = vals.map((v) => (v === null ? '' : fmtNum(v, digits)));
    if (vals.every((v, i) => v === null || !Number.isFinite(v) || close(v, labels[i]))) break;
  }
  return labels;
}

// Tick spacings of linear axes: 1, 2 and 5 x 10^k; on step axes whole steps only.
export const NICE_INCRS: number[] = [];
for (let e = -15; e <= 30; e++) for (const m of [1, 2, 5]) NICE_INCRS.push(Number((m * 10 ** e).toPrecision(1)));
export const STEP_INCRS = NICE_INCRS.filter((v) => v >= 1);

// Wall-clock axis ticks (seconds): round seconds, minutes, hours and days.
export const TIME_INCRS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
  60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400,
  30 * 86400, 91 * 86400, 365 * 86400];

const pad2 = (n: number) => String(n).padStart(2, '0');
// YYYY-MM-DD of a unix time, in the browser's time zone (as the tick labels).
export function localDate(unix: number): string {
  const d = new Date(unix * 1000);
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())}`;
}

// Wall-clock tick labels for ticks `incr` seconds apart: the time of day to the precision
// the spacing needs (HH:MM, HH:MM:SS, HH:MM:SS.s); dates once ticks are a day or more apart.
// The date of the range itself goes in the axis title (timeAxisTitle), once.
export function timeLabels(vals: number[], incr: number): string[] {
  return vals.map((v) => {
    const d = new Date(v * 1000);
    if (incr >= 86400) return `${d.getMonth() + 1}/${d.getDate()}`;
    const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
    if (incr >= 60 && d.getSeconds() === 0) return hm;
    const decimals = incr >= 1 ? 0 : Math.min(3, Math.ceil(-Math.log10(incr) - 1e-9));
    const sec = decimals ? (d.getSeconds() + d.getMilliseconds() / 1000).toFixed(decimals).padStart(3 + decimals, '0')
      : pad2(d.getSeconds());
    return `${hm}:${sec}`;
  });
}

export function timeAxisTitle(lo: number, hi: number): string {
  const a = localDate(lo), b = localDate(hi);
  return `wall time, ${a === b ? a : `${a} … ${b}`}`;
}

export function fmtTime(unix?: number): string {
  if (!unix) return '–';
  const d = new Date(unix * 1000);
  return d.toISOString().slice(0, 16).replace('T', ' ');
}

export function regex(text: string): RegExp | null {
  if (!text) return null;
  try {
    return new RegExp(text, 'i');
  } catch {
    return null;
  }
}

// A run's colour: stable by its position in the selection.
const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#bcbd22'];
// NaN and Inf, in every view: a colour no run ever gets (magenta, far from every palette entry).
export const NONFINITE_COLOR = '#ff00ff';
export const NONFINITE_RGB: [number, number, number] = [255, 0, 255];
export function runColor(i: number): string {
  return PALETTE[i % PALETTE.length];
}

// Viridis, sampled: heatmap colours for t in [0, 1].
const VIRIDIS = [
  [68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37],
];
export function viridis(t: number): [number, number, number] {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

export function debounce<T extends unknown[]>(fn: (...a: T) => void, ms: number): (...a: T) => void {
  let timer: number | undefined;
  return (...a: T) => {
    clearTimeout(timer);
    timer = window.setTimeout(() => fn(...a), ms);
  };
}

// Runs fn at most once per `ms`, the last call always honoured (a steady stream of events
// still refreshes every `ms`, where a debounce would wait for the stream to stop).
export function throttle(fn: () => void, ms: number): () => void {
  let last = 0;
  let timer: number | undefined;
  return () => {
    if (timer !== undefined) return;
    const wait = Math.max(0, last + ms - Date.now());
    timer = window.setTimeout(() => {
      timer = undefined;
      last = Date.now();
      fn();
    }, wait);
  };
}

// A colour of the page's theme (style.css custom properties), for what is drawn on canvases.
export function themeColor(name: '--fg' | '--grid' | '--panel' | '--soft'): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || (name === '--panel' ? '#fff' : '#222');
}

// The theme: the system's setting ('auto'), or dark or light as chosen in the header
// (kept in localStorage; ?theme=dark|light overrides it, for screenshots).
export type Theme = 'auto' | 'dark' | 'light';
export function currentTheme(): Theme {
  const asked = new URLSearchParams(location.search).get('theme') || localStorage.getItem('trainscope-theme') || 'auto';
  return asked === 'dark' || asked === 'light' ? asked : 'auto';
}
export function applyTheme(theme: Theme): void {
  if (theme === 'auto') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

export const SEVERITY_RANK: Record<string, number> = { critical: 2, warning: 1, info: 0 };
