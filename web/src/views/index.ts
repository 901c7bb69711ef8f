// The dashboard's views, in tab order. A view is one file in this folder: a function that
// renders the selected runs into a box (resolving once its charts are drawn), and its
// entry here. The server endpoints it reads are listed in src/server/api.h.
import { Tab } from '../state';
import { activationsView } from './activations';
import { distributionsView } from './distributions';
import { findingsView } from './findings';
import { gradientsView } from './gradients';
import { numericsView } from './numerics';
import { overviewView } from './overview';
import { performanceView } from './performance';
import { scalarsView } from './scalars';

export interface View {
  id: Tab;
  label: string;
  render: (generation: number, box: HTMLElement) => Promise<void>;
}

export const VIEWS: View[] = [
  { id: 'overview', label: 'Overview', render: overviewView },
  { id: 'scalars', label: 'Scalars', render: scalarsView },
  { id: 'distributions', label: 'Distributions', render: distributionsView },
  { id: 'gradients', label: 'Gradients', render: gradientsView },
  { id: 'activations', label: 'Activations', render: activationsView },
  { id: 'findings', label: 'Findings', render: findingsView },
  { id: 'performance', label: 'Performance', render: performanceView },
  { id: 'numerics', label: 'Numerics', render: numericsView },
];
