// The model library as the UI knows it: loaded once from GET /api/v1/models, then replaced by every
// `library.changed` event the WebSocket brings (models appearing, vanishing or changing on disk), and
// by the answer of a rescan. One instance for the whole app.

import { api, ApiError } from '../api/client';
import type { ModelEntry } from '../api/types';

class ModelLibrary {
  entries = $state.raw<ModelEntry[] | null>(null);
  loading = $state(false);
  rescanning = $state(false);
  error = $state<string | null>(null);
  /** When the list last changed, and why: shown so a user sees that a change on disk arrived. */
  updatedAt = $state<number | null>(null);
  updatedBy = $state<'load' | 'rescan' | 'disk' | null>(null);

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

  /** A `library.changed` event: the full new list. */
  ingest(entries: ModelEntry[]): void {
    this.set(entries, 'disk');
  }

  find(path: string): ModelEntry | null {
    return this.entries?.find((e) => e.path === path || e.files.some((f) => f.path === path)) ?? null;
  }
}

export const library = new ModelLibrary();
