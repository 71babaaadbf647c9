// The models in the shared Hugging Face cache (GET /api/v1/hub/cache) for the "Downloaded models"
// panel and a model page's "downloaded" line: loaded when first shown, then again when a
// download finishes, when the library changes (a deletion, or hf writing into the cache) and
// after dropped events; only the newest answer counts. Verify re-hashes a model's files against
// the hub (minutes for a big model: its buttons wait meanwhile); Delete removes a model or one
// snapshot and forgets the finished downloads whose files went with it. Also where downloads go
// (the settings' download folder). One instance for the app.

import { api } from '../api/client';
import type { CacheRemoved, CacheVerification, CachedModel, DownloadView, HubCacheListing } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { downloads } from './downloads.svelte';
import { cachedModel, downloadsOfRemoved, verifyRevision, withoutRemoved } from './housekeeping';

/** The last deletion, shown once its model has left the list. */
export interface RemovedNote {
  repo: string;
  commit: string | null;
  result: CacheRemoved;
}

/** Busy and error maps are keyed by repository, a snapshot's deletion by `repo@commit`. */
export function cacheKey(repo: string, commit?: string | null): string {
  return commit ? `${repo}@${commit}` : repo;
}

export class HubCacheState {
  listing = $state.raw<HubCacheListing | null>(null);
  loading = $state(false);
  error = $state.raw<Problem | null>(null);
  /** The settings' download folder: null for the Hugging Face cache, undefined until known. */
  downloadFolder = $state<string | null | undefined>(undefined);
  verifying = $state.raw<Record<string, boolean>>({});
  verified = $state.raw<Record<string, CacheVerification>>({});
  verifyError = $state.raw<Record<string, Problem>>({});
  removing = $state.raw<Record<string, boolean>>({});
  removeError = $state.raw<Record<string, Problem>>({});
  removed = $state.raw<RemovedNote | null>(null);

  private seq = 0;
  private destination: Promise<void> | null = null;
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): Problem | null {
    return problemOrSignOut(e, this.onUnauthorized);
  }

  /** Loads the list and where downloads go unless they are already here. */
  async ensure(): Promise<void> {
    const waits: Promise<void>[] = [];
    if (this.downloadFolder === undefined) waits.push((this.destination ??= this.loadDestination()));
    if (!this.listing && !this.loading && !this.error) waits.push(this.load());
    await Promise.all(waits);
  }

  async load(): Promise<void> {
    const mine = ++this.seq;
    this.loading = true;
    try {
      const listing = await api.hubCache();
      if (mine !== this.seq) return;
      this.listing = listing;
      this.error = null;
      this.dropStaleChecks(listing);
    } catch (e) {
      if (mine === this.seq) this.error = this.fail(e);
    } finally {
      if (mine === this.seq) this.loading = false;
    }
  }

  /** Something on disk may have changed: the list again, if it was shown at all. */
  async refresh(): Promise<void> {
    if (this.listing || this.error) await this.load();
  }

  /** A `download.state` event: a finished download is in the cache now. */
  ingestDownload(view: DownloadView): void {
    if (view.state === 'done') void this.refresh();
  }

  async loadDestination(): Promise<void> {
    try {
      this.downloadFolder = (await api.settings()).download_folder ?? null;
    } catch (e) {
      // The downloads panel then says nothing about where files go; the next visit asks again.
      this.fail(e);
    } finally {
      this.destination = null;
    }
  }

  /** The Settings page saved a download folder. */
  setDownloadFolder(folder: string | null): void {
    this.downloadFolder = folder;
  }

  find(repo: string): CachedModel | null {
    return cachedModel(this.listing, repo);
  }

  /** A verification whose snapshot is gone says nothing any more. */
  private dropStaleChecks(listing: HubCacheListing): void {
    const keep: Record<string, CacheVerification> = {};
    for (const [repo, v] of Object.entries(this.verified)) {
      if (cachedModel(listing, repo)?.snapshots.some((s) => s.commit === v.commit)) keep[repo] = v;
    }
    if (Object.keys(keep).length !== Object.keys(this.verified).length) this.verified = keep;
  }

  private without<T>(map: Record<string, T>, key: string): Record<string, T> {
    const { [key]: _, ...rest } = map;
    return rest;
  }

  async verify(repo: string): Promise<void> {
    const model = this.find(repo);
    if (!model || this.verifying[repo]) return;
    this.verifying = { ...this.verifying, [repo]: true };
    this.verified = this.without(this.verified, repo);
    this.verifyError = this.without(this.verifyError, repo);
    try {
      const v = await api.verifyCached(repo, verifyRevision(model));
      this.verified = { ...this.verified, [repo]: v };
    } catch (e) {
      const p = this.fail(e);
      if (p) this.verifyError = { ...this.verifyError, [repo]: p };
    } finally {
      this.verifying = this.without(this.verifying, repo);
    }
  }

  /** Deletes a model (or one snapshot); the list shows it gone at once and is read again. */
  async remove(repo: string, commit?: string | null): Promise<boolean> {
    const key = cacheKey(repo, commit);
    const model = this.find(repo);
    if (this.removing[key]) return false;
    this.removing = { ...this.removing, [key]: true };
    this.removeError = this.without(this.removeError, repo);
    this.removed = null;
    try {
      const result = await api.removeCached(repo, commit);
      this.removed = { repo, commit: commit ?? null, result };
      this.verified = this.without(this.verified, repo);
      if (this.listing) {
        this.seq++;
        this.loading = false;
        this.listing = withoutRemoved(this.listing, repo, commit);
      }
      if (model) await Promise.all(downloadsOfRemoved(downloads.items, model, commit).map((id) => downloads.act(id, 'remove')));
      return true;
    } catch (e) {
      const p = this.fail(e);
      if (p) this.removeError = { ...this.removeError, [repo]: p };
      return false;
    } finally {
      this.removing = this.without(this.removing, key);
      // The daemon's own list (a 404 means it was gone already).
      void this.load();
    }
  }
}

export const hubCache = new HubCacheState();
