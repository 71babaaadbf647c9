// The hub search as the Hub view keeps it: text, format and sort, and the latest answer. Typing
// is debounced and a request still running when a newer one starts is dropped, so the list always
// matches the box. Kept for the app, so the results are still there on the way back from a model.

import { api, ApiError } from '../api/client';
import type { HubFormat, HubModelSummary, HubSearchQuery, HubSort } from '../api/types';
import { problemOf, type Problem } from '../engines/engines.svelte';
import { LatestRequest, type LatestOptions } from '../placement/latest';

/** Typing pauses this long before the hub is asked. */
export const SEARCH_DEBOUNCE_MS = 300;
export const SEARCH_LIMIT = 40;

type Timers = Pick<LatestOptions<HubSearchQuery, HubModelSummary[]>, 'setTimer' | 'clearTimer'>;

export class HubSearch {
  text = $state('');
  /** null: any format. */
  format = $state<HubFormat | null>(null);
  sort = $state<HubSort>('downloads');
  results = $state.raw<HubModelSummary[] | null>(null);
  busy = $state(false);
  error = $state.raw<Problem | null>(null);
  /** The query the results answer. */
  answered = $state.raw<HubSearchQuery | null>(null);

  private onUnauthorized: () => void = () => {};
  private readonly runner: LatestRequest<HubSearchQuery, HubModelSummary[]>;

  constructor(timers: Timers = {}) {
    this.runner = new LatestRequest<HubSearchQuery, HubModelSummary[]>({
      fetch: (q, signal) => api.hubSearch(q, signal),
      onResult: (res, q) => {
        this.results = res;
        this.answered = q;
        this.error = null;
      },
      onError: (e) => {
        if (e instanceof ApiError && e.unauthorized) this.onUnauthorized();
        else this.error = problemOf(e);
      },
      onBusy: (b) => (this.busy = b),
      delayMs: SEARCH_DEBOUNCE_MS,
      ...timers,
    });
  }

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private query(): HubSearchQuery {
    return { text: this.text, format: this.format, sort: this.sort, limit: SEARCH_LIMIT };
  }

  /** The first visit lists the most downloaded models; later visits keep what was there. */
  ensure(): void {
    if (this.results == null && !this.busy) void this.runner.run(this.query());
  }

  setText(text: string): void {
    if (text === this.text) return;
    this.text = text;
    this.runner.schedule(this.query());
  }

  setFormat(format: HubFormat | null): void {
    this.format = format;
    void this.runner.run(this.query());
  }

  setSort(sort: HubSort): void {
    this.sort = sort;
    void this.runner.run(this.query());
  }

  /** Enter in the box, or "Try again": now, without waiting for the debounce. */
  now(): void {
    void this.runner.run(this.query());
  }
}

export const hubSearch = new HubSearch();
