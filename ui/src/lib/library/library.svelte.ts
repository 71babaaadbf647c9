// The model library as the UI knows it: loaded once from GET /api/v1/models, then replaced by every
// `library.changed` event the WebSocket brings (models appearing, vanishing or changing on disk), and
// by the answer of a rescan. One instance for the whole app. Beside it, the memory planner's records
// on this rig (GET /api/v1/plan/calibration), for the "estimate off by x %" badges.

import { api, ApiError } from '../api/client';
import type { Calibration, ModelEntry } from '../api/types';

class ModelLibrary {
  entries = $state.raw<ModelEntry[] | null>(null);
  loading = $state(false);
  rescanning = $state(false);
  error = $state<string | null>(null);
  /** When the list last changed, and why: shown so a user sees that a change on disk arrived. */
  updatedAt = $state<number | null>(null);
  updatedBy = $state<'load' | 'rescan' | 'disk' | null>(null);
  /** This rig's planner records, newest check first; empty until read, or when there are none. */
  calibrations = $state.raw<Calibration[]>([]);
  /** When they were read: "2 h ago" counts from there. */
  calibrationsAt = $state(0);

  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): void {
    if (e instanceof ApiError && e.unauthorized) this.onUnauthorized();
    else this.error = e instanceof Error ? e.message : String(e);
  }

  private set(entries: ModelEntry[], by: 'load' | 'rescan' | 'disk'): void {
    this.entries = entries;
    this.updatedAt = Date.now();
    this.updatedBy = by;
  }

  /** Loads the list unless it is already here (the WebSocket keeps it current after that). */
  async ensure(): Promise<void> {
    if (this.entries || this.loading) return;
    await this.load();
  }

  async load(): Promise<void> {
    this.loading = true;
    this.error = null;
    try {
      this.set(await api.models(), 'load');
    } catch (e) {
      this.fail(e);
    } finally {
      this.loading = false;
    }
  }

  async rescan(): Promise<void> {
    this.rescanning = true;
    this.error = null;
    try {
      this.set(await api.rescanModels(), 'rescan');
    } catch (e) {
      this.fail(e);
    } finally {
      this.rescanning = false;
    }
  }

  /** Reads the planner's records again. No event announces a new one (dry runs on the Plan page,
   *  engines measured after load add them), so the Models page asks each time it opens. */
  async loadCalibrations(): Promise<void> {
    try {
      this.calibrations = await api.planCalibrations();
      this.calibrationsAt = Date.now();
    } catch (e) {
      // The badges are extra: a failure keeps the last list rather than putting the library's
      // error (with its "Try again" that reloads the models) on the page.
      if (e instanceof ApiError && e.unauthorized) this.onUnauthorized();
    }
  }

  /** A `library.changed` event: the full new list. */
  ingest(entries: ModelEntry[]): void {
    this.set(entries, 'disk');
  }

  find(path: string): ModelEntry | null {
    return this.entries?.find((e) => e.path === path || e.files.some((f) => f.path === path)) ?? null;
  }
}

export const library = new ModelLibrary();
