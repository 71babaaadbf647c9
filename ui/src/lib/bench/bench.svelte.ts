// The Benchmarks page's state: the runs (GET /bench/runs, kept current by `bench.run` events that
// lib/telemetry/live routes here), the open run in full (read again after each event for it, at
// most one read in flight and at most one a second), the runs picked to compare, the targets to
// pick from (ready instances, launch profiles and their gateway names), and the actions: start,
// cancel, delete. While the open run runs, the live stream's telemetry frames extend its stored
// telemetry until the next read. Everything comes from the daemon, so a reload mid-run shows the
// same. One instance for the app.

import { api, isAbort } from '../api/client';
import type { InstanceView, LaunchProfile, TelemetryFrame } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { benchApi } from './client';
import { framePoint, MAX_LIVE_POINTS } from './telemetry';
import type { NewRun, RunDetail, RunSummary, TelemetryPoint } from './types';

/** Reads of the open run are at least this far apart (a busy run sends an event per run). */
export const DETAIL_SPACING_MS = 1000;

/** The list with a run (or a tuning) put in, or replaced, newest first. */
export function placeRun<T extends Pick<RunSummary, 'id' | 'started_at_ms'>>(list: readonly T[], run: T): T[] {
  return [run, ...list.filter((r) => r.id !== run.id)].sort((a, b) => b.started_at_ms - a.started_at_ms || b.id - a.id);
}

export type RunAction = 'cancel' | 'delete';

export class BenchState {
  runs = $state.raw<RunSummary[] | null>(null);
  runsError = $state.raw<Problem | null>(null);

  openId = $state<number | null>(null);
  detail = $state.raw<RunDetail | null>(null);
  detailError = $state.raw<Problem | null>(null);
  /** Telemetry of the open, running run from the live stream since the last read. */
  liveTelemetry = $state.raw<TelemetryPoint[]>([]);

  /** Run ids picked to compare, in the order picked (the first is the baseline). */
  picked = $state.raw<number[]>([]);

  starting = $state(false);
  startError = $state.raw<Problem | null>(null);
  busy = $state.raw<Record<number, RunAction>>({});
  actionError = $state.raw<(Problem & { id: number }) | null>(null);

  instances = $state.raw<InstanceView[] | null>(null);
  profiles = $state.raw<LaunchProfile[] | null>(null);
  targetsError = $state.raw<Problem | null>(null);

  private listSeq = 0;
  /** Events that came while the list was being read: applied over its answer. */
  private heldEvents: RunSummary[] | null = null;
  private detailSeq = 0;
  private detailAbort: AbortController | null = null;
  private detailTimer: ReturnType<typeof setTimeout> | null = null;
  private readAgain = false;
  private lastDetailAt = 0;
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): Problem | null {
    return problemOrSignOut(e, this.onUnauthorized);
  }

  /** The open run's list entry (kept current by events; its status is newer than the detail's). */
  get openSummary(): RunSummary | null {
    return this.runs?.find((r) => r.id === this.openId) ?? null;
  }

  /** The picked runs that are still listed, in pick order. */
  get pickedRuns(): RunSummary[] {
    const list = this.runs ?? [];
    return this.picked.map((id) => list.find((r) => r.id === id)).filter((r): r is RunSummary => r != null);
  }

  /** Whether a read of the open run is on its way. */
  get detailLoading(): boolean {
    return this.detailAbort != null;
  }

  // ---- The list ----

  async load(): Promise<void> {
    const mine = ++this.listSeq;
    this.heldEvents = [];
    try {
      const list = await benchApi.runs();
      if (mine !== this.listSeq) return;
      this.runs = (this.heldEvents ?? []).reduce(placeRun, list);
      this.runsError = null;
    } catch (e) {
      if (mine === this.listSeq && !isAbort(e)) this.runsError = this.fail(e);
    } finally {
      if (mine === this.listSeq) this.heldEvents = null;
    }
  }

  /** A `bench.run` event: the run's new list entry; the open run is read again soon. */
  ingest(run: RunSummary): void {
    this.heldEvents?.push(run);
    if (this.runs) this.runs = placeRun(this.runs, run);
    if (run.id === this.openId) this.readDetailSoon();
  }

  /** A live telemetry frame: kept for the open run while it runs. */
  ingestFrame(frame: TelemetryFrame): void {
    const run = this.openSummary ?? this.detail;
    if (!run || run.id !== this.openId || run.status !== 'running') return;
    const point = framePoint(frame, run.started_at_ms);
    if (point.t_ms < 0) return;
    const list = this.liveTelemetry.length >= MAX_LIVE_POINTS ? this.liveTelemetry.slice(1) : this.liveTelemetry;
    this.liveTelemetry = [...list, point];
  }

  /** The event stream fell behind or came back: what it would have said is read again. */
  resync(): void {
    if (this.runs != null) void this.load();
    this.readDetailSoon();
  }

  // ---- The open run ----

  /** Shows a run in full (null: none). Opening the one shown reads nothing. */
  open(id: number | null): void {
    if (id != null && id === this.openId && (this.detail?.id === id || this.detailLoading)) return;
    this.detailSeq++;
    this.detailAbort?.abort();
    this.detailAbort = null;
    if (this.detailTimer) clearTimeout(this.detailTimer);
    this.detailTimer = null;
    this.readAgain = false;
    this.openId = id;
    this.detail = null;
    this.detailError = null;
    this.liveTelemetry = [];
    if (id != null) void this.readDetail();
  }

  /** Reads the open run again soon: at most one read in flight (another follows it when asked
   *  meanwhile), at most one a second. */
  readDetailSoon(): void {
    if (this.openId == null) return;
    if (this.detailLoading) {
      this.readAgain = true;
      return;
    }
    if (this.detailTimer) return;
    const wait = Math.max(0, this.lastDetailAt + DETAIL_SPACING_MS - Date.now());
    this.detailTimer = setTimeout(() => {
      this.detailTimer = null;
      void this.readDetail();
    }, wait);
  }

  private async readDetail(): Promise<void> {
    const id = this.openId;
    if (id == null) return;
    const seq = this.detailSeq;
    const ctl = new AbortController();
    this.detailAbort = ctl;
    this.lastDetailAt = Date.now();
    try {
      const d = await benchApi.run(id, ctl.signal);
      if (seq !== this.detailSeq) return;
      this.detail = d;
      this.detailError = null;
      const last = d.telemetry.reduce((m, p) => Math.max(m, p.t_ms), -Infinity);
      this.liveTelemetry = this.liveTelemetry.filter((p) => p.t_ms > last);
    } catch (e) {
      if (seq === this.detailSeq && !isAbort(e)) this.detailError = this.fail(e);
    } finally {
      if (this.detailAbort === ctl) {
        this.detailAbort = null;
        if (this.readAgain) {
          this.readAgain = false;
          this.readDetailSoon();
        }
      }
    }
  }

  // ---- Targets ----

  /** The instances and profiles to pick a target from; one failing leaves the other. */
  async loadTargets(): Promise<void> {
    const [instances, profiles] = await Promise.allSettled([api.instances(), api.profiles()]);
    let problem: Problem | null = null;
    if (instances.status === 'fulfilled') this.instances = instances.value;
    else problem = this.fail(instances.reason);
    if (profiles.status === 'fulfilled') this.profiles = profiles.value;
    else problem = this.fail(profiles.reason) ?? problem;
    this.targetsError = problem;
  }

  // ---- Actions ----

  /** Starts a benchmark; its list entry, or null when refused (the reason in startError). */
  async start(body: NewRun): Promise<RunSummary | null> {
    if (this.starting) return null;
    this.starting = true;
    this.startError = null;
    try {
      const run = await benchApi.start(body);
      this.runs = placeRun(this.runs ?? [], run);
      return run;
    } catch (e) {
      this.startError = this.fail(e);
      return null;
    } finally {
      this.starting = false;
    }
  }

  async cancel(id: number): Promise<boolean> {
    return this.act(id, 'cancel', async () => {
      const run = await benchApi.cancel(id);
      if (this.runs) this.runs = placeRun(this.runs, run);
    });
  }

  /** Deletes a run that ended; it leaves the list, the comparison and the detail. */
  async remove(id: number): Promise<boolean> {
    return this.act(id, 'delete', async () => {
      await benchApi.remove(id);
      if (this.runs) this.runs = this.runs.filter((r) => r.id !== id);
      this.picked = this.picked.filter((x) => x !== id);
      if (this.openId === id) this.open(null);
    });
  }

  private async act(id: number, action: RunAction, call: () => Promise<void>): Promise<boolean> {
    if (this.busy[id]) return false;
    this.busy = { ...this.busy, [id]: action };
    this.actionError = null;
    try {
      await call();
      return true;
    } catch (e) {
      const p = this.fail(e);
      if (p) this.actionError = { ...p, id };
      return false;
    } finally {
      const { [id]: _, ...rest } = this.busy;
      this.busy = rest;
    }
  }

  /** Picks a run to compare, or unpicks it. */
  togglePick(id: number): void {
    this.picked = this.picked.includes(id) ? this.picked.filter((x) => x !== id) : [...this.picked, id];
  }

  clearPicks(): void {
    this.picked = [];
  }
}

export const bench = new BenchState();
