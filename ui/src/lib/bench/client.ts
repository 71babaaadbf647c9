// The benchmarks API (/api/v1/bench): start a run, list and read runs, cancel, delete, export.
// Progress comes as `bench.run` events on the event stream, not through here.

import { request } from '../api/client';
import type { ExportFormat, NewRun, ProbeComparison, RunDetail, RunSummary } from './types';

const RUNS = '/api/v1/bench/runs';

/** The export's address: `/api/v1/bench/runs/12/export?format=csv`. */
export function exportPath(id: number, format: ExportFormat): string {
  return `${RUNS}/${id}/export?format=${format}`;
}

export const benchApi = {
  /** 201 with the run as listed; 400 `invalid_benchmark` names the field and the fix. */
  start: (body: NewRun) => request<RunSummary>('POST', RUNS, body),
  /** Newest first. */
  runs: (signal?: AbortSignal) => request<RunSummary[]>('GET', RUNS, undefined, signal),
  run: (id: number, signal?: AbortSignal) => request<RunDetail>('GET', `${RUNS}/${id}`, undefined, signal),
  /** 409 `not_running` when it already ended. What it measured is kept. */
  cancel: (id: number) => request<RunSummary>('POST', `${RUNS}/${id}/cancel`, {}),
  /** 204; 409 `running` while it runs (cancel it first). */
  remove: (id: number) => request<void>('DELETE', `${RUNS}/${id}`),
  /** The run as a CSV (one row per run), JSON or Markdown file's text. */
  exportRun: (id: number, format: ExportFormat) => request<string>('GET', exportPath(id, format), undefined, undefined, true),
  /** Two quality probes of one seed, question by question; 400 `not_comparable` says why not. */
  compareProbes: (base: number, other: number, signal?: AbortSignal) =>
    request<ProbeComparison>('GET', `/api/v1/bench/compare-probes?base=${base}&other=${other}`, undefined, signal),
};
