// The Usage view's state: the chosen range (last hour, day or week) and the daemon's report for
// it (GET /api/v1/gateway/usage), read again every few seconds while the view is on screen. A
// range switch aborts the read in flight; only the newest answer counts. One instance for the app.

import { api, isAbort } from '../api/client';
import type { GatewayUsage } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { usageWindow, type UsageRange } from './usage';
import { poll, type Visibility } from './poll';

export const USAGE_POLL_MS = 10_000;

export class UsageState {
  range = $state<UsageRange>('hour');
  report = $state.raw<GatewayUsage | null>(null);
  /** The window the report covers (its range and instants). */
  window = $state.raw<{ range: UsageRange; from_ms: number; to_ms: number } | null>(null);
  loading = $state(false);
  error = $state.raw<Problem | null>(null);

  private seq = 0;
  private inFlight: AbortController | null = null;
  private onUnauthorized: () => void = () => {};

  constructor(private readonly now: () => number = () => Date.now()) {}

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  /** The report shown is for another range than the one picked (a switch is loading). */
  get stale(): boolean {
    return this.window != null && this.window.range !== this.range;
  }

  async load(): Promise<void> {
    const mine = ++this.seq;
    this.inFlight?.abort();
    const ctl = new AbortController();
    this.inFlight = ctl;
    const range = this.range;
    const w = usageWindow(range, this.now());
    this.loading = true;
    try {
      const r = await api.gatewayUsage(w.from_ms, w.to_ms, ctl.signal);
      if (mine !== this.seq) return;
      this.report = r;
      this.window = { range, ...w };
      this.error = null;
    } catch (e) {
      if (mine !== this.seq || isAbort(e)) return;
      this.error = problemOrSignOut(e, this.onUnauthorized);
    } finally {
      if (mine === this.seq) {
        this.loading = false;
        this.inFlight = null;
      }
    }
  }

  setRange(r: UsageRange): void {
    if (r === this.range) return;
    this.range = r;
    void this.load();
  }

  watch(intervalMs = USAGE_POLL_MS, visibility?: Visibility): () => void {
    const stop = poll(() => this.load(), intervalMs, visibility);
    return () => {
      stop();
      this.inFlight?.abort();
    };
  }
}

export const usage = new UsageState();
