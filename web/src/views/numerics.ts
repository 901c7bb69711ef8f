// Numerics: what fits where. Each recorded tensor (rows, worst first) against each format
// (columns), a cell coloured by the fraction of its values the format loses (overflow +
// flushed to zero), from the exponent histograms; /api/numerics (docs/numerics.md).
import { api } from '../api';
import { ctx } from '../ctx';
import { el, fmtNum, viridis } from '../util';

interface FitMatrix {
  formats: string[];
  loss_scale_exponent: number;
  rows: { tag: string; family: string; layer: string; step_first: number; step_last: number;
          lost: number[]; overflow: number[]; underflow: number[]; subnormal: number[] }[];
}

const pct = (x: number) => (x === 0 ? '0' : x < 1e-4 ? '<0.01 %' : `${fmtNum(100 * x)} %`);

export async function numericsView(gen: number, box: HTMLElement, run: string): Promise<void> {
  const family = el('select', {}, ...['all', 'grad', 'act', 'weight', 'update'].map((f) => el('option', { value: f }, f)));
  const scale = el('input', { type: 'number', value: '0', min: '-64', max: '64', step: '1', title: 'loss scale 2^k on gradients' });
  const table = el('div', { class: 'numerics-table' });
  box.append(el('div', { class: 'toolbar' }, el('b', {}, run), ' family ', family, ' gradients × 2^', scale), table);
  const draw = async () => {
    const m = await api<FitMatrix>('numerics', { run, loss_scale: scale.value || '0' });
    if (gen !== ctx.generation) return;
    const rows = m.rows.filter((r) => family.value === 'all' || r.family === family.value);
    table.replaceChildren();
    if (!rows.length) {
      table.append(el('p', { class: 'none' }, 'No exponent histograms recorded for these tensors (run.watch records them every histograms_every steps).'));
      return;
    }
    const head = el('tr', {}, el('th', {}, 'tensor'), el('th', {}, 'steps'), ...m.formats.map((f) => el('th', {}, f)));
    const body = rows.map((r) => el('tr', {}, el('td', {}, r.tag), el('td', {}, `${r.step_first}–${r.step_last}`),
      ...m.formats.map((_, i) => {
        // log colour: 1e-6 of the values lost is already visible, all of them is the top
        const t = r.lost[i] > 0 ? Math.min(1, (Math.log10(r.lost[i]) + 6) / 6) : 0;
        const [cr, cg, cb] = viridis(t);
        return el('td', { class: 'fit', style: `background: rgb(${cr}, ${cg}, ${cb}); color: ${t > 0.6 ? '#000' : '#fff'}`,
          title: `overflow ${pct(r.overflow[i])} · flushed to zero ${pct(r.underflow[i])} · subnormal ${pct(r.subnormal[i])}` },
          pct(r.lost[i]));
      })));
    table.append(el('table', { class: 'runs numerics' }, el('thead', {}, head), el('tbody', {}, ...body)));
  };
  family.addEventListener('change', () => void draw());
  scale.addEventListener('change', () => void draw());
  await draw();
}
