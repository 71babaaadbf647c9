// The Quality section's state: the references and their disk budget (GET /quality/references,
// kept current by `quality.reference` events that lib/telemetry/live routes here), the corpora,
// the estimate for the record form (only the latest asked is kept), recording and deleting a
// reference, and each ready reference's frontier. KLD runs are benchmark runs: they start through
// the Benchmarks page's store and show in its runs list. One instance for the app.

import { api, isAbort } from '../api/client';
import { problemOrSignOut, type Problem } from '../api/problem';
import { qualityApi } from './client';
import type { Corpora, Frontier, NewReference, Reference, ReferenceEstimate, ReferenceListing } from './types';

/** The listing with a reference put in or replaced, newest first; the used bytes follow it. */
export function placeReference(listing: ReferenceListing, ref: Reference): ReferenceListing {
  const before = listing.references.find((r) => r.id === ref.id);
  const references = [ref, ...listing.references.filter((r) => r.id !== ref.id)].sort((a, b) => b.created_at_ms - a.created_at_ms || a.id.localeCompare(b.id));
  return { ...listing, references, used_bytes: Math.max(0, listing.used_bytes - (before?.bytes ?? 0) + ref.bytes) };
}

export class QualityState {
  listing = $state.raw<ReferenceListing | null>(null);
  listError = $state.raw<Problem | null>(null);
  corpora = $state.raw<Corpora | null>(null);
  corporaError = $state.raw<Problem | null>(null);

  estimate = $state.raw<ReferenceEstimate | null>(null);
  estimateError = $state.raw<Problem | null>(null);
  estimating = $state(false);

  recording = $state(false);
  recordError = $state.raw<Problem | null>(null);
  deleting = $state.raw<Record<string, boolean>>({});
  deleteError = $state.raw<(Problem & { id: string }) | null>(null);

  savingBudget = $state(false);
  budgetError = $state.raw<Problem | null>(null);

  /** Each reference's frontier, once read. */
  frontiers = $state.raw<Record<string, Frontier>>({});
  frontierError = $state.raw<(Problem & { id: string }) | null>(null);

  private estimateSeq = 0;
  private estimateAbort: AbortController | null = null;
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): Problem | null {
    return problemOrSignOut(e, this.onUnauthorized);
  }

  get references(): Reference[] {
    return this.listing?.references ?? [];
  }

  /** The references and the corpora; one failing leaves the other. */
  async load(): Promise<void> {
    const [listing, corpora] = await Promise.allSettled([qualityApi.references(), qualityApi.corpora()]);
    if (listing.status === 'fulfilled') {
      this.listing = listing.value;
      this.listError = null;
    } else this.listError = this.fail(listing.reason);
    if (corpora.status === 'fulfilled') {
      this.corpora = corpora.value;
      this.corporaError = null;
    } else this.corporaError = this.fail(corpora.reason);
  }

  /** A `quality.reference` event: the reference as it is now. */
  ingest(ref: Reference): void {
    if (this.listing) this.listing = placeReference(this.listing, ref);
  }

  /** The event stream fell behind or came back: what it would have said is read again. */
  resync(): void {
    if (this.listing != null) void this.load();
  }

  /** Asks what recording `body` would take; an older answer arriving late is dropped. Null
   *  forgets the estimate (the form cannot be sent as it is). */
  async estimateFor(body: NewReference | null): Promise<void> {
    const mine = ++this.estimateSeq;
    this.estimateAbort?.abort();
    this.estimateAbort = null;
    this.estimate = null;
    this.estimateError = null;
    if (body == null) {
      this.estimating = false;
      return;
    }
    const ctl = new AbortController();
    this.estimateAbort = ctl;
    this.estimating = true;
    try {
      const e = await qualityApi.estimate(body, ctl.signal);
      if (mine === this.estimateSeq) this.estimate = e;
    } catch (e) {
      if (mine === this.estimateSeq && !isAbort(e)) this.estimateError = this.fail(e);
    } finally {
      if (mine === this.estimateSeq) {
        this.estimating = false;
        this.estimateAbort = null;
      }
    }
  }

  /** Starts recording; the reference (recording), or null when refused (the reason in recordError). */
  async record(body: NewReference): Promise<Reference | null> {
    if (this.recording) return null;
    this.recording = true;
    this.recordError = null;
    try {
      const ref = await qualityApi.record(body);
      this.ingest(ref);
      return ref;
    } catch (e) {
      this.recordError = this.fail(e);
      return null;
    } finally {
      this.recording = false;
    }
  }

  /** Deletes a reference and its file. */
  async remove(id: string): Promise<boolean> {
    if (this.deleting[id]) return false;
    this.deleting = { ...this.deleting, [id]: true };
    this.deleteError = null;
    try {
      await qualityApi.remove(id);
      if (this.listing) {
        const gone = this.listing.references.find((r) => r.id === id);
        this.listing = { ...this.listing, references: this.listing.references.filter((r) => r.id !== id), used_bytes: Math.max(0, this.listing.used_bytes - (gone?.bytes ?? 0)) };
      }
      const { [id]: _, ...rest } = this.frontiers;
      this.frontiers = rest;
      return true;
    } catch (e) {
      const p = this.fail(e);
      if (p) this.deleteError = { ...p, id };
      return false;
    } finally {
      const { [id]: _, ...rest } = this.deleting;
      this.deleting = rest;
    }
  }

  /** Sets the references' disk budget (GB, a setting) and reads the listing again; false when
   *  refused (the reason in budgetError). */
  async setBudget(gb: number): Promise<boolean> {
    this.savingBudget = true;
    this.budgetError = null;
    try {
      await api.updateSettings({ quality_reference_budget_gb: gb });
      await this.load();
      return true;
    } catch (e) {
      this.budgetError = this.fail(e);
      return false;
    } finally {
      this.savingBudget = false;
    }
  }

  /** Reads a reference's frontier (again: after a KLD or speed run ended). */
  async loadFrontier(id: string): Promise<void> {
    try {
      const f = await qualityApi.frontier(id);
      this.frontiers = { ...this.frontiers, [id]: f };
      if (this.frontierError?.id === id) this.frontierError = null;
    } catch (e) {
      const p = this.fail(e);
      if (p) this.frontierError = { ...p, id };
    }
  }
}

export const quality = new QualityState();
