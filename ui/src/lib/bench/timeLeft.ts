// The time a running benchmark or tuning has left, in one place: the pieces already done (a
// benchmark's runs, a tuning's trials) took so long on average, and that many are left. Runs of
// one step are alike, and steps differ little in a sweep, so the mean is a fair guess; the
// estimate improves as pieces finish.

import { formatDuration } from '../format/time';
import type { RunSummary, Trial, TuneView } from './types';

/** `total` pieces, `done` of them finished in `elapsedMs` together; null before the first. */
export function timeLeftMs(done: number, total: number, elapsedMs: number): number | null {
  if (done <= 0 || total <= 0) return null;
  return Math.max(0, ((total - done) * elapsedMs) / done);
}

/** A running benchmark: its runs since it started. */
export function runTimeLeftMs(run: Pick<RunSummary, 'status' | 'runs_done' | 'runs_total' | 'started_at_ms'>, nowMs: number): number | null {
  if (run.status !== 'running') return null;
  return timeLeftMs(run.runs_done, run.runs_total, nowMs - run.started_at_ms);
}

/** A running tuning: its finished trials' mean, for the trials after the running one and what
 *  is left of that one. A walk may stop before its planned trials: an upper estimate. */
export function tuneTimeLeftMs(
  tune: Pick<TuneView, 'status' | 'trials_planned'> & { trials: Pick<Trial, 'started_at_ms' | 'finished_at_ms'>[] },
  nowMs: number,
): number | null {
  if (tune.status !== 'running') return null;
  const finished = tune.trials.filter((t) => t.finished_at_ms != null);
  const took = finished.reduce((sum, t) => sum + ((t.finished_at_ms ?? t.started_at_ms) - t.started_at_ms), 0);
  const later = timeLeftMs(finished.length, tune.trials_planned, took);
  if (later == null) return null;
  const running = tune.trials.find((t) => t.finished_at_ms == null);
  if (!running) return later;
  const mean = took / finished.length;
  // The running trial is one of those left: its mean less what it has done, at least nothing.
  return later - mean + Math.max(0, mean - (nowMs - running.started_at_ms));
}

/** "under a minute left", "about 3 min left"; '' when unknown. */
export function formatTimeLeft(ms: number | null): string {
  if (ms == null) return '';
  if (ms < 60_000) return 'under a minute left';
  const rounded = Math.round(ms / 60_000) * 60_000;
  return `about ${formatDuration(rounded)} left`;
}
