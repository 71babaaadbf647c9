// llama.cpp's dry run of the plan on show, asked in the background: it takes seconds (the daemon
// runs `llama-fit-params`), so the page shows our estimate at once and this fills in when the
// answer comes. A new plan asks again after a pause (debounced); an answer for an older plan is
// dropped, and asking for the plan already answered costs nothing.

import { api, ApiError } from '../api/client';
import type { DryRunRequest, DryRunResponse } from '../api/types';
import { problemOf, type Problem } from '../engines/engines.svelte';
import { LatestRequest, type LatestOptions } from './latest';

export const DRY_RUN_DEBOUNCE_MS = 500;

type Timers = Pick<LatestOptions<DryRunRequest, DryRunResponse>, 'setTimer' | 'clearTimer'>;

export class DryRunCheck {
  /** The newest answer (kept while the next is asked, so the table does not flicker). */
  result = $state.raw<DryRunResponse | null>(null);
  /** True from a change until its answer is in. */
  busy = $state(false);
  /** The request itself failed (a bad model or placement: 4xx), verbatim from the daemon. */
  error = $state.raw<Problem | null>(null);

  private onUnauthorized: () => void;
  private readonly runner: LatestRequest<DryRunRequest, DryRunResponse>;
  /** The body last asked for, as JSON: the same one again is not asked. */
  private asked = '';
  /** Model and rig of `result`: another model or rig clears it at once. */
  private subject = '';

  constructor(onUnauthorized: () => void = () => {}, timers: Timers = {}) {
    this.onUnauthorized = onUnauthorized;
    this.runner = new LatestRequest<DryRunRequest, DryRunResponse>({
      fetch: (req, signal) => api.dryRun(req, signal),
      onResult: (res) => {
        this.result = res;
        this.error = null;
      },
      onError: (e) => {
        if (e instanceof ApiError && e.unauthorized) {
          this.onUnauthorized();
          return;
        }
        this.result = null;
        this.error = problemOf(e);
      },
      onBusy: (b) => (this.busy = b),
      delayMs: DRY_RUN_DEBOUNCE_MS,
      ...timers,
    });
  }

  /** Follows the plan on show: asks for its dry run unless that one was the last asked; null
   *  (no plan) forgets everything. */
  follow(body: DryRunRequest | null): void {
    if (!body) {
      this.runner.cancel();
      this.asked = this.subject = '';
      this.result = this.error = null;
      return;
    }
    const key = JSON.stringify(body);
    if (key === this.asked) return;
    this.asked = key;
    const subject = JSON.stringify([body.model, body.rig ?? 'live']);
    if (subject !== this.subject) {
      this.subject = subject;
      this.result = this.error = null;
    }
    this.runner.schedule(body);
  }

  /** Stops a request in flight (the page is left); the next `follow` asks again. */
  dispose(): void {
    this.runner.cancel();
    this.asked = '';
  }
}

let shared: DryRunCheck | null = null;

/** One for the placement editor, beside its shared editor. */
export function sharedDryRun(onUnauthorized: () => void): DryRunCheck {
  shared ??= new DryRunCheck(onUnauthorized);
  return shared;
}
