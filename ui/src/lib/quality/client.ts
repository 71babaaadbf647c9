// The quality API (/api/v1/quality): the corpora, the references (list, estimate, record, delete)
// and one reference's frontier. A reference's progress comes as `quality.reference` events; a KLD
// measurement is a benchmark run (lib/bench/client's start with a NewKldRun).

import { request } from '../api/client';
import type { Corpora, Frontier, NewReference, Reference, ReferenceEstimate, ReferenceListing } from './types';

const QUALITY = '/api/v1/quality';

/** The frontier's address: `/api/v1/quality/frontier?reference=ab12`. */
export function frontierPath(reference: string): string {
  return `${QUALITY}/frontier?${new URLSearchParams({ reference }).toString()}`;
}

export const qualityApi = {
  corpora: (signal?: AbortSignal) => request<Corpora>('GET', `${QUALITY}/corpora`, undefined, signal),
  references: (signal?: AbortSignal) => request<ReferenceListing>('GET', `${QUALITY}/references`, undefined, signal),
  /** What recording would take (tokens, bytes, budget left); `problem` set when it cannot. */
  estimate: (body: NewReference, signal?: AbortSignal) => request<ReferenceEstimate>('POST', `${QUALITY}/references/estimate`, body, signal),
  /** 202 with the reference, recording. */
  record: (body: NewReference) => request<Reference>('POST', `${QUALITY}/references`, body),
  /** 204; the logits file goes with it. */
  remove: (id: string) => request<void>('DELETE', `${QUALITY}/references/${encodeURIComponent(id)}`),
  frontier: (reference: string, signal?: AbortSignal) => request<Frontier>('GET', frontierPath(reference), undefined, signal),
};
