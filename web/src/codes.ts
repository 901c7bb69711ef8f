// What a finding code means for the dashboard, from the doctor's knowledge base
// (data/knowledge/knowledge.json, which the C++ doctor and report compile in): the view it
// belongs to. The bundle keeps only these fields of the file (web/build.mjs).
import knowledge from '../../data/knowledge/knowledge.json';

export type CodeView = 'scalars' | 'gradients' | 'activations' | 'performance';

const VIEWS = new Map<string, CodeView>();
for (const [code, info] of Object.entries(knowledge.codes as Record<string, { view?: string }>)) {
  if (info.view) VIEWS.set(code, info.view as CodeView);
}

// The view a finding of this code belongs to, or undefined: the view of its location.
export function codeView(code: string): CodeView | undefined {
  return VIEWS.get(code);
}
