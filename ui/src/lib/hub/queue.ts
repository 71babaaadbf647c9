// The download queue as the panel shows it: how an event, a fetched list or an action's answer
// changes the list, which buttons a state offers, and the progress line's text.
//
// `download.state` events arrive in order, but `download.progress` travels on the bulk channel
// beside them, so a progress report written before a pause can arrive after the `paused` state:
// a progress report never moves a download out of a state it did not come from.

import type { DownloadProgress, DownloadView } from '../api/types';
import type { Tone } from '../engines/instances';
import { formatBandwidth, formatBytesPair, MISSING } from '../format/units';
import { formatDuration } from '../format/time';

export type DownloadEventKind = 'state' | 'progress';

/** States a progress report can come from: it is only sent while a download runs. */
const PROGRESS_FROM = new Set(['queued', 'running']);

/** Newest first: what the user just started is on top. */
export function sortDownloads(list: DownloadView[]): DownloadView[] {
  return [...list].sort((a, b) => b.id - a.id);
}

/** The list after one event (or an action's answer, which is a state). */
export function applyDownload(list: DownloadView[], view: DownloadView, kind: DownloadEventKind): DownloadView[] {
  const i = list.findIndex((d) => d.id === view.id);
  if (i < 0) return sortDownloads([...list, view]);
  const have = list[i]!;
  if (kind === 'progress' && !PROGRESS_FROM.has(have.state)) return list;
  return list.map((d, j) => (j === i ? view : d));
}

/** A fetched list, except for downloads whose state changed by an event while it was fetched
 *  (`touched`): for those the event is newer than the list. */
export function mergeFetched(current: DownloadView[], fetched: DownloadView[], touched: ReadonlySet<number>): DownloadView[] {
  const byId = new Map(fetched.map((d) => [d.id, d]));
  for (const d of current) if (touched.has(d.id)) byId.set(d.id, d);
  return sortDownloads([...byId.values()]);
}

export function removeDownload(list: DownloadView[], id: number): DownloadView[] {
  return list.filter((d) => d.id !== id);
}

export type DownloadButton = 'pause' | 'resume' | 'cancel' | 'retry' | 'remove';

/** The buttons each state offers (what the daemon allows; see crates/core/src/downloads).
 *  A paused download is cancelled (its partial files go) rather than removed with them left. */
const BUTTONS: Record<string, DownloadButton[]> = {
  queued: ['pause', 'cancel'],
  running: ['pause', 'cancel'],
  paused: ['resume', 'cancel'],
  failed: ['retry', 'remove'],
  cancelled: ['retry', 'remove'],
  done: ['remove'],
};

export function downloadButtons(state: string): DownloadButton[] {
  return BUTTONS[state] ?? [];
}

/** What is under way, for the panel's head: "1 downloading, 2 queued, 1 paused", or null when
 *  nothing is. */
export function queueSummary(list: Pick<DownloadView, 'state'>[]): string | null {
  const count = (state: string) => list.filter((d) => d.state === state).length;
  const parts = [
    [count('running'), 'downloading'],
    [count('queued'), 'queued'],
    [count('paused'), 'paused'],
  ] as const;
  const said = parts.filter(([n]) => n > 0).map(([n, what]) => `${n} ${what}`);
  return said.length > 0 ? said.join(', ') : null;
}

/** Done bytes as a percentage, or null before the size is known. */
export function progressPct(p: DownloadProgress): number | null {
  if (p.total_bytes <= 0) return null;
  return Math.min(100, Math.max(0, (p.done_bytes / p.total_bytes) * 100));
}

export function stateLabel(v: Pick<DownloadView, 'state' | 'progress'>): string {
  if (v.state === 'running') {
    const pct = progressPct(v.progress);
    return pct == null ? 'downloading' : `downloading ${Math.floor(pct)} %`;
  }
  return v.state;
}

export function stateTone(state: string): Tone {
  switch (state) {
    case 'done':
      return 'ok';
    case 'running':
      return 'info';
    case 'failed':
      return 'bad';
    case 'paused':
      return 'warn';
    default:
      return 'muted';
  }
}

/** "1.2 / 4.9 GiB". */
export function bytesText(p: DownloadProgress): string {
  return formatBytesPair(p.done_bytes, p.total_bytes);
}

/** The transfer rate while running ("48.2 MB/s"), else a dash. */
export function rateText(v: Pick<DownloadView, 'state' | 'progress'>): string {
  return v.state === 'running' && v.progress.rate_bps > 0 ? formatBandwidth(v.progress.rate_bps) : MISSING;
}

/** Time left while running ("3 min"), else a dash. */
export function etaText(v: Pick<DownloadView, 'state' | 'progress'>): string {
  const eta = v.progress.eta_s;
  return v.state === 'running' && eta != null ? `${formatDuration(eta * 1000)} left` : MISSING;
}

/** The download of one quantization of a repository that the model page shows beside its row:
 *  the newest one that is not cancelled. */
export function downloadOf(list: DownloadView[] | null, repo: string, label: string): DownloadView | null {
  return sortDownloads(list ?? []).find((d) => d.repo === repo && d.label === label && d.state !== 'cancelled') ?? null;
}
