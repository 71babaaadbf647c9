// One hub model's page: its files by quantization and its card, fetched at once, and "will it
// fit" for every GGUF quantization on a rig at a context length, which takes a few seconds on the
// real hub (headers read over the network): the page shows the files first and fills the fit
// when it arrives. A change of context or rig asks again; only the newest answer counts. On the
// live rig, the fit is asked again when the rig's free memory moves materially (rigMemory.ts: an
// engine started or stopped, a GPU came or went), once the readings settle, the old fit shown
// meanwhile.

import { api } from '../api/client';
import type { FitRequest, FitResponse, HubCard, HubModelPage, RigPreset, RigSample } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { LatestRequest, type LatestOptions } from '../placement/latest';
import { DEFAULT_CONTEXT } from './fit';
import { movedMaterially, rigMemoryOf, type RigMemory } from './rigMemory';

/** How long the live rig's readings must settle after a material move before the fit is asked
 *  again: an engine loading moves free memory over a few frames. */
export const REFIT_SETTLE_MS = 2000;

type Timers = Pick<LatestOptions<FitRequest, FitResponse>, 'setTimer' | 'clearTimer'>;

export class HubModelState {
  repo = $state('');
  page = $state.raw<HubModelPage | null>(null);
  pageError = $state.raw<Problem | null>(null);
  card = $state.raw<HubCard | null>(null);
  cardError = $state.raw<Problem | null>(null);
  fit = $state.raw<FitResponse | null>(null);
  fitBusy = $state(false);
  fitError = $state.raw<Problem | null>(null);
  context = $state(DEFAULT_CONTEXT);
  rig = $state('live');
  presets = $state.raw<RigPreset[]>([]);

  private onUnauthorized: () => void = () => {};
  private readonly runner: LatestRequest<FitRequest, FitResponse>;
  /** Answers for a page left since are dropped. */
  private generation = 0;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  /** The live rig's memory the shown fit was asked on, and the latest reading. */
  private fittedOn: RigMemory | null = null;
  private rigNow: RigMemory | null = null;
  /** The reading that (re)started the wait for the readings to settle. */
  private movedTo: RigMemory | null = null;
  private refitTimer: unknown = null;
  private readonly setTimer: (fn: () => void, ms: number) => unknown;
  private readonly clearTimer: (handle: unknown) => void;

  constructor(timers: Timers = {}) {
    this.setTimer = timers.setTimer ?? ((fn, ms) => setTimeout(fn, ms));
    this.clearTimer = timers.clearTimer ?? ((h) => clearTimeout(h as ReturnType<typeof setTimeout>));
    this.runner = new LatestRequest<FitRequest, FitResponse>({
      fetch: (req, signal) => api.hubFit(req, signal),
      onResult: (res) => {
        this.fit = res;
        this.fitError = null;
      },
      onError: (e) => this.fitFailed(e),
      onBusy: (b) => (this.fitBusy = b),
      ...timers,
    });
  }

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private problem(e: unknown): Problem | null {
    return problemOrSignOut(e, this.onUnauthorized);
  }

  /** Opens a repository: the page and the card at once, then the fit once the files are known. */
  async open(repo: string): Promise<void> {
    if (repo === this.repo && (this.page || this.pageError)) {
      // Back on the same model: a fit stopped when the page was left is asked again.
      if (this.page && !this.fit && !this.fitBusy) this.requestFit(true);
      return;
    }
    const mine = ++this.generation;
    this.runner.cancel();
    this.repo = repo;
    this.page = this.card = this.fit = null;
    this.pageError = this.cardError = this.fitError = null;
    void this.loadPresets();
    api.hubCard(repo).then(
      (card) => {
        if (mine === this.generation) this.card = card;
      },
      (e) => {
        if (mine === this.generation) this.cardError = this.problem(e);
      },
    );
    try {
      const page = await api.hubModel(repo);
      if (mine !== this.generation) return;
      this.page = page;
      this.requestFit(true);
    } catch (e) {
      if (mine === this.generation) this.pageError = this.problem(e);
    }
  }

  /** Loads the page again (after an error, or a token was set for a gated model). */
  reload(): Promise<void> {
    const repo = this.repo;
    this.repo = '';
    return this.open(repo);
  }

  private async loadPresets(): Promise<void> {
    if (this.presets.length > 0) return;
    try {
      this.presets = await api.rigs();
    } catch (e) {
      this.problem(e);
    }
  }

  /** True when the repository has a GGUF quantization to plan. */
  get hasQuants(): boolean {
    return this.page?.groups.some((g) => g.kind === 'gguf') ?? false;
  }

  requestFit(now = false): void {
    if (!this.page || !this.hasQuants) return;
    this.fittedOn = this.rigNow;
    const req: FitRequest = { repo: this.repo, revision: this.page.model.commit, rig: this.rig, context: this.context };
    if (now) void this.runner.run(req);
    else this.runner.schedule(req);
  }

  setContext(tokens: number): void {
    if (tokens === this.context) return;
    this.context = tokens;
    this.requestFit();
  }

  setRig(rig: string): void {
    if (rig === this.rig) return;
    this.rig = rig;
    this.requestFit(true);
  }

  /** A reading of the live rig (each telemetry frame): a material move from the one the fit was
   *  asked on asks again once the readings settle. */
  observeRig(sample: RigSample): void {
    const now = rigMemoryOf(sample);
    this.rigNow = now;
    if (this.rig !== 'live' || !this.page || !this.fittedOn) {
      this.fittedOn ??= now;
      return;
    }
    if (!movedMaterially(this.fittedOn, now)) return;
    // Settling: only a further material move waits longer (a slow drift does not put it off).
    if (this.refitTimer != null && this.movedTo && !movedMaterially(this.movedTo, now)) return;
    this.movedTo = now;
    if (this.refitTimer != null) this.clearTimer(this.refitTimer);
    this.refitTimer = this.setTimer(() => {
      this.refitTimer = null;
      if (this.rig === 'live') this.requestFit(true);
    }, REFIT_SETTLE_MS);
  }

  private fitFailed(e: unknown): void {
    this.fitError = this.problem(e);
    // The live rig has no reading in the first second after the daemon starts: ask again shortly.
    if (this.fitError?.code === 'no_sample_yet') {
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.retryTimer = setTimeout(() => this.requestFit(true), 1000);
    }
  }

  /** Requests in flight stop with the page; what was shown stays for a visit back. */
  dispose(): void {
    this.runner.cancel();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.refitTimer != null) this.clearTimer(this.refitTimer);
    this.refitTimer = null;
  }
}

export const hubModel = new HubModelState();
