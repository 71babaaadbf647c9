// The Tuning half of the Benchmarks page: the tunings (GET /bench/tunes, kept current by
// `bench.tune` events that lib/telemetry/live routes here; each carries the tuning whole, trials
// and all, so the open one needs no reads of its own), the one open, and the actions: start,
// cancel, delete, save the best as a new profile. Everything comes from the daemon, so a reload
// mid-tuning shows the same. One instance for the app.

import { isAbort } from '../api/client';
import type { SavedProfile } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { placeRun } from './bench.svelte';
import { tuneApi } from './tuneClient';
import type { NewTune, TuneView } from './types';

export type TuneAction = 'cancel' | 'delete' | 'save';

export class TuneState {
  tunes = $state.raw<TuneView[] | null>(null);
  tunesError = $state.raw<Problem | null>(null);

  openId = $state<number | null>(null);
  /** Why the open tuning could not be read (it is not in the list: deleted, or a stale address). */
  openError = $state.raw<Problem | null>(null);

  starting = $state(false);
  startError = $state.raw<Problem | null>(null);
  busy = $state.raw<Record<number, TuneAction>>({});
  /** The daemon's refusal of the last action, with the tuning and the action it was about. */
  actionError = $state.raw<(Problem & { id: number; action: TuneAction }) | null>(null);
  /** The last Save's answer (the new profile's warnings and command line), by tuning. */
  saved = $state.raw<{ id: number; result: SavedProfile } | null>(null);

  private listSeq = 0;
  /** Events that came while the list was being read: applied over its answer. */
  private heldEvents: TuneView[] | null = null;
  private openSeq = 0;
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): Problem | null {
    return problemOrSignOut(e, this.onUnauthorized);
  }

  /** The open tuning as last heard of. */
  get openTune(): TuneView | null {
    return this.tunes?.find((t) => t.id === this.openId) ?? null;
  }

  // ---- The list ----

  async load(): Promise<void> {
    const mine = ++this.listSeq;
    this.heldEvents = [];
    try {
      const list = await tuneApi.list();
      if (mine !== this.listSeq) return;
      this.tunes = (this.heldEvents ?? []).reduce(placeRun, list);
      this.tunesError = null;
      this.readOpenIfMissing();
    } catch (e) {
      if (mine === this.listSeq && !isAbort(e)) this.tunesError = this.fail(e);
    } finally {
      if (mine === this.listSeq) this.heldEvents = null;
    }
  }

  /** A `bench.tune` event: the tuning whole, as it stands now. */
  ingest(view: TuneView): void {
    this.heldEvents?.push(view);
    if (this.tunes) this.tunes = placeRun(this.tunes, view);
    if (view.id === this.openId) this.openError = null;
  }

  /** The event stream fell behind or came back: what it would have said is read again. */
  resync(): void {
    if (this.tunes != null) void this.load();
  }

  // ---- The open tuning ----

  /** Shows a tuning in full (null: none); one the list lacks is read on its own. */
  open(id: number | null): void {
    if (id === this.openId) return;
    this.openSeq++;
    this.openId = id;
    this.openError = null;
    this.readOpenIfMissing();
  }

  private readOpenIfMissing(): void {
    const id = this.openId;
    if (id == null || this.tunes == null || this.openTune) return;
    const seq = ++this.openSeq;
    tuneApi.get(id).then(
      (view) => {
        if (seq === this.openSeq && this.tunes) this.tunes = placeRun(this.tunes, view);
      },
      (e: unknown) => {
        if (seq === this.openSeq && !isAbort(e)) this.openError = this.fail(e);
      },
    );
  }

  // ---- Actions ----

  /** Starts a tuning; it, or null when refused (the daemon's reason in startError). */
  async start(body: NewTune): Promise<TuneView | null> {
    if (this.starting) return null;
    this.starting = true;
    this.startError = null;
    try {
      const view = await tuneApi.start(body);
      this.tunes = placeRun(this.tunes ?? [], view);
      return view;
    } catch (e) {
      this.startError = this.fail(e);
      return null;
    } finally {
      this.starting = false;
    }
  }

  /** Stops the tuning after the trial in progress is cancelled; the trials measured are kept. */
  async cancel(id: number): Promise<boolean> {
    return this.act(id, 'cancel', async () => {
      const view = await tuneApi.cancel(id);
      if (this.tunes) this.tunes = placeRun(this.tunes, view);
    });
  }

  /** Deletes a tuning that ended (its trials' benchmark runs stay in the runs list). */
  async remove(id: number): Promise<boolean> {
    return this.act(id, 'delete', async () => {
      await tuneApi.remove(id);
      if (this.tunes) this.tunes = this.tunes.filter((t) => t.id !== id);
    });
  }

  /** Saves the best values as a new profile named `name`; the tuning is read again to show it. */
  async save(id: number, name: string): Promise<boolean> {
    return this.act(id, 'save', async () => {
      const result = await tuneApi.save(id, name);
      this.saved = { id, result };
      const view = await tuneApi.get(id);
      if (this.tunes) this.tunes = placeRun(this.tunes, view);
    });
  }

  private async act(id: number, action: TuneAction, call: () => Promise<void>): Promise<boolean> {
    if (this.busy[id]) return false;
    this.busy = { ...this.busy, [id]: action };
    this.actionError = null;
    try {
      await call();
      return true;
    } catch (e) {
      const p = this.fail(e);
      if (p) this.actionError = { ...p, id, action };
      return false;
    } finally {
      const { [id]: _, ...rest } = this.busy;
      this.busy = rest;
    }
  }
}

export const tune = new TuneState();
