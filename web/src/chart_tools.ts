// What a user does with one chart: read the values at the cursor, hide a series from its
// legend, take its data (CSV) or picture (PNG), expand it, toggle its own log axis.

import uPlot from 'uplot';
import { el, fmtNum } from './util';

// Values at the cursor, as W&B's tooltip: the x value and each shown series' value at the
// cursor's index, beside the cursor, on the chart the mouse is over (the others follow its
// crosshair through the cursor sync but keep quiet).
// A row's value is its series' datum at the cursor unless `value` says otherwise (a stacked
// area's own share, not the running sum it is drawn at).
export interface HoverRow {
  name: string;
  color: string;
  series: number;
  value?: (i: number) => number | null | undefined;
}

export function hoverValues(wrap: HTMLElement, label: (x: number) => string, rows: HoverRow[]): uPlot.Hooks.Arrays {
  const tip = el('div', { class: 'tip hover-values' });
  let inside = false;
  return {
    ready: [(u: uPlot) => {
      u.over.append(tip);
      u.over.addEventListener('mouseenter', () => (inside = true));
      u.over.addEventListener('mouseleave', () => { inside = false; tip.style.display = 'none'; });
    }],
    setCursor: [(u: uPlot) => {
      const i = u.cursor.idx;
      if (!inside || i === null || i === undefined) {
        tip.style.display = 'none';
        return;
      }
      const lines = rows.filter((r) => u.series[r.series].show !== false).map((r) => {
        const v = r.value ? r.value(i) : u.data[r.series][i];
        return el('div', {}, el('span', { style: `color:${r.color}` }, '■ '), `${r.name}: `,
                  el('b', {}, v === null ? 'NaN/Inf' : v === undefined ? '–' : fmtNum(v, 4)));
      });
      tip.replaceChildren(el('div', { class: 'muted-light' }, label(u.data[0][i])), ...lines);
      tip.style.display = 'block';
      const left = u.cursor.left ?? 0, top = u.cursor.top ?? 0;
      tip.style.left = Math.min(left + 12, u.over.clientWidth - tip.offsetWidth) + 'px';
      tip.style.top = Math.max(0, top - tip.offsetHeight - 8) + 'px';
    }],
  };
}

// A legend entry that hides or shows its series when clicked (W&B, TensorBoard).
export function toggles(key: HTMLElement, series: number[], plot: () => uPlot | undefined) {
  key.classList.add('toggle');
  key.title = 'click to hide or show';
  key.addEventListener('click', () => {
    const u = plot();
    if (!u) return;
    const show = u.series[series[0]].show === false;
    for (const i of series) u.setSeries(i, { show });
    key.classList.toggle('hidden', !show);
  });
}

// A chart's own tools, at the right of its title: its data as CSV (x and every series, as
// drawn), its canvas as PNG, and expand (full width, taller) and back.
export function chartTools(wrap: HTMLElement, name: string, plot: () => uPlot | undefined, onLog?: () => void) {
  const save = (href: string, file: string) => {
    const a = el('a', { href, download: file });
    document.body.append(a);
    a.click();
    a.remove();
  };
  const file = name.replace(/[^A-Za-z0-9_.-]+/g, '_');
  const csv = el('button', { class: 'tool', 'data-tool': 'csv', title: 'the data as CSV' }, 'CSV');
  csv.addEventListener('click', () => {
    const u = plot();
    if (!u) return;
    const head = u.series.map((x, i) => (i === 0 ? 'x' : String(x.label ?? `series ${i}`)));
    const rows = [head.map((h) => JSON.stringify(h)).join(',')];
    for (let i = 0; i < u.data[0].length; i++) {
      rows.push(u.data.map((col) => { const v = col[i]; return v === null ? 'nan' : v === undefined ? '' : String(v); }).join(','));
    }
    save(URL.createObjectURL(new Blob([rows.join('\n') + '\n'], { type: 'text/csv' })), file + '.csv');
  });
  const png = el('button', { class: 'tool', 'data-tool': 'png', title: 'the chart as PNG' }, 'PNG');
  png.addEventListener('click', () => { const u = plot(); if (u) save(u.ctx.canvas.toDataURL('image/png'), file + '.png'); });
  const expand = el('button', { class: 'tool', 'data-tool': 'expand', title: 'expand or shrink' }, '⤢');
  let small: { width: number; height: number } | null = null;
  expand.addEventListener('click', () => {
    const u = plot();
    if (!u) return;
    if (small) {
      u.setSize(small);
      small = null;
    } else {
      small = { width: u.width, height: u.height };
      u.setSize({ width: Math.max(u.width, (wrap.closest('.tab-body') as HTMLElement | null)?.clientWidth ?? u.width) - 24,
                  height: Math.round(u.height * 2) });
    }
    wrap.classList.toggle('expanded', small !== null);
  });
  const log = el('button', { class: 'tool', 'data-tool': 'log', title: 'log y on this chart, or back' }, 'log');
  log.addEventListener('click', () => onLog?.());
  wrap.querySelector('.panel-title')?.append(el('span', { class: 'tools' }, ...(onLog ? [log] : []), csv, png, expand));
}

export function mergeHooks(...all: uPlot.Hooks.Arrays[]): uPlot.Hooks.Arrays {
  const out: Record<string, unknown[]> = {};
  for (const h of all) for (const [k, fns] of Object.entries(h)) (out[k] ??= []).push(...(fns as unknown[]));
  return out as uPlot.Hooks.Arrays;
}
