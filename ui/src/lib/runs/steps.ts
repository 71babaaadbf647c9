// Pure helpers for one-click runs: the words and the share of the whole each step shows on the
// progress strip, and which run the strip follows.

import type { ModelRun, RunStep } from '../api/types';

const LABELS: Record<RunStep, string> = {
  checking: 'Checking',
  downloading: 'Downloading',
  planning: 'Placing',
  starting: 'Starting',
  loading: 'Loading',
  ready: 'Ready',
  failed: 'Failed',
};

export function stepLabel(step: RunStep): string {
  return LABELS[step];
}

/** The steps in order, as the strip lists them. */
export const STEPS: RunStep[] = ['checking', 'downloading', 'planning', 'starting', 'loading', 'ready'];

/** Whether `step` is done, under way or to come for a run at `run.step`. */
export function stepState(run: ModelRun, step: RunStep): 'done' | 'now' | 'todo' {
  if (run.step === 'ready') return 'done';
  const at = STEPS.indexOf(run.step === 'failed' ? lastReached(run) : run.step);
  const i = STEPS.indexOf(step);
  if (i < at) return 'done';
  return i === at ? (run.step === 'failed' ? 'todo' : 'now') : 'todo';
}

/** The step a failed run stopped at: it had a profile (placed), a download, or neither. */
function lastReached(run: ModelRun): RunStep {
  if (run.profile) return 'starting';
  if (run.download_id != null) return 'downloading';
  return 'checking';
}

/** The bar's fill, 0–1: the download and the load carry their own fraction; the other steps a
 *  fixed share, so the bar only moves forward. */
export function overallProgress(run: ModelRun): number {
  const within = run.progress ?? 0;
  switch (run.step) {
    case 'checking':
      return 0.02;
    case 'downloading':
      return 0.05 + 0.6 * within;
    case 'planning':
      return 0.67;
    case 'starting':
      return 0.72;
    case 'loading':
      return 0.75 + 0.24 * within;
    case 'ready':
      return 1;
    case 'failed':
      return 0;
  }
}

/** Whether an event's run replaces the one the strip shows: the same run, or a newer one. */
export function replaces(shown: ModelRun | null, incoming: ModelRun): boolean {
  return shown == null || incoming.id >= shown.id;
}
