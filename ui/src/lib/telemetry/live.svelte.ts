// The app's live telemetry state: the latest frame, the 15-minute point buffer and the connection
// state, fed by the /api/v1/events WebSocket (never by polling; a viewed rig's, through the desk's relay).
// One instance for the whole app.

import { EventClient, eventsUrl, type ConnectionState } from '../api/events';
import { probeSession } from '../api/client';
import type { DownloadView, Hello, ModelEntry, TelemetryFrame } from '../api/types';
import { appendFrame, emptyBuffer, type SeriesBuffer } from './series';
import { library } from '../library/library.svelte';
import { engines } from '../engines/engines.svelte';
import { downloads } from '../hub/downloads.svelte';
import { hubCache } from '../hub/cache.svelte';
import { chat } from '../chat/chat.svelte';
import { bench } from '../bench/bench.svelte';
import { tune } from '../bench/tune.svelte';
import { quality } from '../quality/quality.svelte';
import { modelRuns } from '../runs/modelRuns.svelte';
import { viewedRig } from '../fleet/viewing';

/** A pause longer than three periods is a gap in the charts, not a straight line. */
export function gapThresholdMs(periodMs: number): number {
  return Math.max(3 * periodMs, 3_000);
}

class LiveTelemetry {
  frame = $state.raw<TelemetryFrame | null>(null);
  buffer = $state.raw<SeriesBuffer>(emptyBuffer());
  hello = $state.raw<Hello | null>(null);
  connection = $state<ConnectionState>('connecting');
  retryInMs = $state<number | null>(null);
  /** Last message the UI could not read; shown discreetly, never fatal. */
  parseError = $state<string | null>(null);
  /** How often the daemon said we fell behind (each time, the view was fetched again). */
  resyncs = $state(0);

  private client: EventClient | null = null;

  start(onSignedOut: () => void): void {
    if (this.client) return;
    this.client = new EventClient({
      url: eventsUrl(window.location, viewedRig),
      checkSession: probeSession,
      onState: (state, detail) => {
        this.connection = state;
        this.retryInMs = detail.retryInMs;
        if (state === 'signed_out') {
          this.client = null;
          onSignedOut();
        }
      },
      onEvent: (ev) => {
        if (ev.type === 'hello') this.helloed(ev.data);
        else if (ev.type === 'chat.delta') chat.ingestDelta(ev.data);
        else if (ev.type === 'chat.message') chat.ingestMessage(ev.data);
        else if (ev.type === 'bench.run') bench.ingest(ev.data);
        else if (ev.type === 'bench.tune') tune.ingest(ev.data);
        else if (ev.type === 'quality.reference') quality.ingest(ev.data);
        else if (ev.type === 'model_run.state') modelRuns.ingest(ev.data);
        else if (ev.type === 'telemetry.frame') this.ingest(ev.data);
        else if (ev.type === 'library.changed') this.libraryChanged(ev.data);
        else if (ev.type === 'instance.state') engines.upsert(ev.data);
        else if (ev.type === 'instance.log') engines.ingestLog(ev.data);
        else if (ev.type === 'engine.build') engines.ingestBuild(ev.data);
        else if (ev.type === 'download.state') this.downloadState(ev.data);
        else if (ev.type === 'download.progress') downloads.ingest('progress', ev.data);
        else if (ev.type === 'resync') this.resync();
      },
      onParseError: (err) => {
        this.parseError = err;
        console.warn('rigdeck: ignored an event:', err);
      },
    });
    this.client.start();
  }

  /** The stream (re)started: a reply written (or a benchmark run, a tuning) while it was down is read again. */
  private helloed(hello: Hello): void {
    this.hello = hello;
    chat.resync();
    bench.resync();
    tune.resync();
    quality.resync();
    void modelRuns.refresh();
  }

  ingest(frame: TelemetryFrame): void {
    const period = this.hello?.telemetry_period_ms ?? 1000;
    this.buffer = appendFrame(this.buffer, frame, { gapMs: gapThresholdMs(period) });
    this.frame = frame;
    bench.ingestFrame(frame);
  }

  /** The library changed on disk: a deletion, a finished download or hf writing into the cache. */
  private libraryChanged(entries: ModelEntry[]): void {
    library.ingest(entries);
    void hubCache.refresh();
  }

  /** A download changed state; a finished one is in the cache now. */
  private downloadState(view: DownloadView): void {
    downloads.ingest('state', view);
    hubCache.ingestDownload(view);
  }

  /** Events were dropped for us: everything shown that events keep current is fetched again. */
  resync(): void {
    this.resyncs += 1;
    void engines.resync();
    void downloads.resync();
    void hubCache.refresh();
    if (library.entries) void library.load();
    chat.resync();
    bench.resync();
    tune.resync();
    quality.resync();
    void modelRuns.refresh();
  }

  retryNow(): void {
    this.client?.retryNow();
  }

  stop(): void {
    const c = this.client;
    this.client = null;
    c?.stop();
  }
}

export const live = new LiveTelemetry();
