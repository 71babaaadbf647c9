// One click from a model to a reply: asks the daemon to run a model (download if needed, the
// automatic placement on the live rig, a profile, a start), follows it through `model_run.state`
// events for the progress strip, and opens the chat with the model chosen once it is ready.

import { api, ApiError } from '../api/client';
import type { ModelRun, RunSource } from '../api/types';
import { chat } from '../chat/chat.svelte';
import { replaces } from './steps';

class ModelRuns {
  /** The run the progress strip shows (the newest this window started or saw). */
  current = $state.raw<ModelRun | null>(null);
  /** Why the daemon refused to start a run at all (no database, a bad request). */
  startError = $state<string | null>(null);
  /** Runs started from this window: their chat opens when ready. */
  private mine = new Set<number>();
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(handler: () => void): void {
    this.onUnauthorized = handler;
  }

  /** Starts a run; resolves once the daemon took it (the strip follows it from there). */
  async run(source: RunSource, context?: number | null): Promise<ModelRun | null> {
    this.startError = null;
    try {
      const run = await api.startModelRun(source, context);
      this.mine.add(run.id);
      this.ingest(run);
      return run;
    } catch (e) {
      if (e instanceof ApiError && e.unauthorized) this.onUnauthorized();
      else this.startError = e instanceof Error ? e.message : String(e);
      return null;
    }
  }

  /** A `model_run.state` event (or a fetched view). */
  ingest(run: ModelRun): void {
    if (!replaces(this.current, run)) return;
    const wasReady = this.current?.id === run.id && this.current.step === 'ready';
    this.current = run;
    if (run.step === 'ready' && !wasReady && run.model && this.mine.has(run.id)) {
      this.mine.delete(run.id);
      this.openChat(run.model);
    }
  }

  /** After a reconnect: the newest run, in case events were missed. */
  async refresh(): Promise<void> {
    try {
      const runs = await api.modelRuns();
      const newest = runs.at(-1);
      if (newest && this.current && newest.id >= this.current.id) this.ingest(newest);
    } catch {
      // The strip keeps what it showed; the next event corrects it.
    }
  }

  openChat(model: string): void {
    chat.startWith(model);
    window.location.hash = '#/chat';
  }

  dismiss(): void {
    this.current = null;
    this.startError = null;
  }
}

export const modelRuns = new ModelRuns();
