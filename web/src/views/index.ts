// The dashboard's views, in tab order. A view is one file in this folder: a function that
// renders into a box (resolving once its charts are drawn), and its entry here. A view of
// one run (perRun) is drawn once per selected run, each in its own block under the run's
// name and colour; the others (Scalars, Findings) show the selected runs together. The server endpoints it reads are listed in src/server/api.h.
import { Tab } from '../state';
import { activationsView } from './activations';
import { distributionsView } from './distributions';
import { findingsView } from './findings';
import { gradientsView } from './gradients';
import { numericsView } from './numerics';
import { overviewView } from './overview';
import { performanceView } from './performance';
import { ranksView } from './ranks';
import { scalarsView } from './scalars';
import { sweepView } from './sweep';

export interface View {
  id: Tab;
  label: string;
  render: (generation: number, box: HTMLElement, run: string) => Promise<void>;
  perRun: boolean;
}

export const VIEWS: View[] = [
  { id: 'overview', label: 'Overview', render: overviewView, perRun: true },
  { id: 'scalars', label: 'Scalars', render: scalarsView, perRun: false },
  { id: 'distributions', label: 'Distributions', render: distributionsView, perRun: true },
  { id: 'gradients', label: 'Gradients', render: gradientsView, perRun: true },
  { id: 'activations', label: 'Activations', render: activationsView, perRun: true },
  { id: 'findings', label: 'Findings', render: findingsView, perRun: false },
  { id: 'performance', label: 'Performance', render: performanceView, perRun: true },
  { id: 'numerics', label: 'Numerics', render: numericsView, perRun: true },
  { id: 'ranks', label: 'Ranks', render: ranksView, perRun: false },
  { id: 'sweep', label: 'Sweep', render: sweepView, perRun: false },
];
