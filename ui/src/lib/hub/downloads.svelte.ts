// The download queue for the app: loaded from GET /api/v1/downloads, then kept current by the
// WebSocket's `download.state` and `download.progress` events (a `resync` loads it again), and by
// the answers of the panel's actions. One instance for the whole app.

import { api, ApiError } from '../api/client';
import type { DownloadAction, DownloadView, NewDownload } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { applyDownload, mergeFetched, removeDownload, type DownloadButton, type DownloadEventKind } from './queue';

class DownloadQueue {
  items = $state.raw<DownloadView[]>([]);
  loaded = $state(false);
  loading = $state(false);
  error = $state.raw<Problem | null>(null);
  /** The action in flight per download, so its buttons wait. */
  busy = $state.raw<Record<number, DownloadButton>>({});
  /** An action's refusal (a 409 when the state moved meanwhile), shown by its download. */
  actionError = $state.raw<(Problem & { id: number }) | null>(null);

  /** State events seen per download: an answer or a list fetched while one arrived is older. */
  private stateEvents = new Map<number, number>();
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): Problem | null {
    return problemOrSignOut(e, this.onUnauthorized);
  }

  /** Loads the list unless it is already here (the WebSocket keeps it current after that). */
  async ensure(): Promise<void> {
    if (this.loaded || this.loading) return;
    await this.load();
  }

  async load(): Promise<void> {
    this.loading = true;
    const before = new Map(this.stateEvents);
    try {
      const fetched = await api.downloads();
      const touched = new Set([...this.stateEvents.keys()].filter((id) => this.stateEvents.get(id) !== before.get(id)));
      this.items = mergeFetched(this.items, fetched, touched);
      this.loaded = true;
      this.error = null;
    } catch (e) {
      this.error = this.fail(e);
    } finally {
      this.loading = false;
    }
  }

  /** A `download.state` or `download.progress` event. */
  ingest(kind: DownloadEventKind, view: DownloadView): void {
    if (kind === 'state') this.stateEvents.set(view.id, (this.stateEvents.get(view.id) ?? 0) + 1);
    this.items = applyDownload(this.items, view, kind);
  }

  /** Events were dropped: the list again, if it is shown at all. */
  async resync(): Promise<void> {
    if (this.loaded) await this.load();
  }

  /** An action's answer, unless an event about that download came meanwhile (it is newer). */
  private async answer(id: number, button: DownloadButton, call: () => Promise<DownloadView | null>): Promise<void> {
    const seen = this.stateEvents.get(id) ?? 0;
    this.busy = { ...this.busy, [id]: button };
    this.actionError = null;
    try {
      const view = await call();
      if (view && (this.stateEvents.get(id) ?? 0) === seen) this.items = applyDownload(this.items, view, 'state');
      if (!view) this.items = removeDownload(this.items, id);
    } catch (e) {
      const p = this.fail(e);
      if (p) this.actionError = { ...p, id };
    } finally {
      const { [id]: _, ...rest } = this.busy;
      this.busy = rest;
    }
  }

  act(id: number, button: DownloadButton): Promise<void> {
    if (button === 'remove') {
      // Forgetting sends no event: the download leaves the list with the answer.
      return this.answer(id, button, () => api.forgetDownload(id).then(() => null));
    }
    return this.answer(id, button, () => api.downloadAction(id, button satisfies DownloadAction));
  }

  /** Queues a download; throws the daemon's error (an ambiguous or incomplete quantization) for
   *  the button that asked to show. */
  async start(body: NewDownload): Promise<DownloadView> {
    try {
      const view = await api.createDownload(body);
      if (!this.stateEvents.has(view.id)) this.items = applyDownload(this.items, view, 'state');
      return view;
    } catch (e) {
      if (e instanceof ApiError && e.unauthorized) this.onUnauthorized();
      throw e;
    }
  }
}

export const downloads = new DownloadQueue();
