// Scalars: every scalar series not on the Performance view, in sections by tag prefix.
import { familyRest, isPerformance } from '../groups';
import { scalarSections } from './sections';

export async function scalarsView(gen: number, box: HTMLElement): Promise<void> {
  // Update ratios are drawn per layer on the Gradients view.
  await scalarSections(gen, box, (t) => !isPerformance(t) && familyRest('update_ratio', t) === null);
}
