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

// Tick labels: the fewest significant digits (2..6) that keep distinct ticks distinct.
export function tickLabels(vals: (number | null)[]): string[] {
  const distinct = new Set(vals.filter((v) => v !== null)).size;
  let labels: string[] = [];
  for (let digits = 2; digits <= 6; digits++) {
    labels = vals.map((v) => (v === null ? '' : fmtNum(v, digits)));
    if (new Set(labels.filter(Boolean)).size >= distinct) break;
  }
  return labels;
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
const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];
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

export const SEVERITY_RANK: Record<string, number> = { critical: 2, warning: 1, info: 0 };
