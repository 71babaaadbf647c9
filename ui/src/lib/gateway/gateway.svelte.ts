// The Gateway page's state: the endpoint and its models (GET /api/v1/gateway) and the API keys
// (GET /api/v1/keys), read again every few seconds while the page is on screen; creating a key
// (its secret held until the page is left, shown once) and revoking one. Answers to reads asked
// before a create or revoke are older than its answer and are dropped. One instance for the app.

import { api, isAbort } from '../api/client';
import type { ApiKeyView, CreatedApiKey, GatewayView } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { sortKeys, upsertKey } from './keys';
import { poll, type Visibility } from './poll';

export const GATEWAY_POLL_MS = 3000;

export class GatewayState {
  view = $state.raw<GatewayView | null>(null);
  viewError = $state.raw<Problem | null>(null);
  keys = $state.raw<ApiKeyView[] | null>(null);
  keysError = $state.raw<Problem | null>(null);
  /** The key just created, with its secret: the only time the secret is known. */
  created = $state.raw<CreatedApiKey | null>(null);
  creating = $state(false);
  createError = $state.raw<Problem | null>(null);
  revoking = $state.raw<Record<number, boolean>>({});
  revokeError = $state.raw<(Problem & { id: number }) | null>(null);

  private viewSeq = 0;
  private keysSeq = 0;
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): Problem | null {
    return problemOrSignOut(e, this.onUnauthorized);
  }

  /** The keys newest first, revoked ones last. */
  get sortedKeys(): ApiKeyView[] {
    return sortKeys(this.keys ?? []);
  }

  async loadView(): Promise<void> {
    const mine = ++this.viewSeq;
    try {
      const v = await api.gateway();
      if (mine !== this.viewSeq) return;
      this.view = v;
      this.viewError = null;
    } catch (e) {
      if (mine === this.viewSeq && !isAbort(e)) this.viewError = this.fail(e);
    }
  }

  async loadKeys(): Promise<void> {
    const mine = ++this.keysSeq;
    try {
      const list = await api.keys();
      if (mine !== this.keysSeq) return;
      this.keys = list;
      this.keysError = null;
    } catch (e) {
      if (mine === this.keysSeq) this.keysError = this.fail(e);
    }
  }

  /** Both reads; one failing leaves the other shown. */
  async load(): Promise<void> {
    await Promise.all([this.loadView(), this.loadKeys()]);
  }

  /** Reads now and every few seconds while the tab is visible; the returned function stops
   *  that and forgets a shown secret (leaving the page is the end of "shown once"). */
  watch(intervalMs = GATEWAY_POLL_MS, visibility?: Visibility): () => void {
    const stop = poll(() => this.load(), intervalMs, visibility);
    return () => {
      stop();
      this.forgetSecret();
    };
  }

  async createKey(name: string): Promise<boolean> {
    if (this.creating) return false;
    this.creating = true;
    this.createError = null;
    this.created = null;
    try {
      const c = await api.createKey(name.trim());
      // A list asked for before this answer does not have the new key.
      this.keysSeq++;
      this.keys = upsertKey(this.keys ?? [], c.key);
      this.created = c;
      return true;
    } catch (e) {
      this.createError = this.fail(e);
      return false;
    } finally {
      this.creating = false;
    }
  }

  forgetSecret(): void {
    this.created = null;
  }

  async revokeKey(id: number): Promise<boolean> {
    if (this.revoking[id]) return false;
    this.revoking = { ...this.revoking, [id]: true };
    this.revokeError = null;
    try {
      const k = await api.revokeKey(id);
      this.keysSeq++;
      this.keys = upsertKey(this.keys ?? [], k);
      if (this.created?.key.id === id) this.created = null;
      return true;
    } catch (e) {
      const p = this.fail(e);
      if (p) this.revokeError = { ...p, id };
      return false;
    } finally {
      const { [id]: _, ...rest } = this.revoking;
      this.revoking = rest;
    }
  }
}

export const gateway = new GatewayState();
