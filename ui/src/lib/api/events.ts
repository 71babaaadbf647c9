// WebSocket client for /api/v1/events: parses the server's `{type, data}` messages, reconnects with
// exponential backoff, notices a silent connection, and tells the app when the session is gone.
// It is framework-free and takes its socket factory and timers as options so tests can drive it.

import type { BuildProgress, ChatDelta, ChatMessage, DownloadView, Hello, InstanceView, LogLine, ModelEntry, ModelRun, ServerEvent, TelemetryFrame } from './types';
import type { RunSummary, TuneView } from '../bench/types';
import type { Reference } from '../quality/types';
import { relayedPath } from '../fleet/viewing';

// ---- Message parsing ----

export type ParseResult = { ok: true; event: ServerEvent } | { ok: false; error: string };

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Checks the parts of a frame the UI indexes into, so one bad message cannot break the page. */
function frameShapeError(d: unknown): string | null {
  if (!isObject(d)) return 'telemetry.frame data is not an object';
  if (!Array.isArray(d.findings)) return 'telemetry.frame has no findings array';
  const s = d.sample;
  if (!isObject(s)) return 'telemetry.frame has no sample';
  if (typeof s.at_ms !== 'number') return 'telemetry.frame sample has no at_ms';
  if (!isObject(s.host)) return 'telemetry.frame sample has no host';
  const g = s.gpus;
  if (!isObject(g) || !Array.isArray(g.gpus) || !isObject(g.driver) || typeof g.driver.state !== 'string') {
    return 'telemetry.frame sample.gpus is malformed';
  }
  return null;
}

/** The library list must be an array of entries with a path and a name; the rest is shown as is. */
function libraryShapeError(d: unknown): string | null {
  if (!Array.isArray(d)) return 'library.changed data is not an array';
  for (const e of d) {
    if (!isObject(e) || typeof e.path !== 'string' || typeof e.name !== 'string' || !Array.isArray(e.files)) {
      return 'library.changed has an entry without path, name or files';
    }
  }
  return null;
}

/** A download's view: the panel indexes its id, state and progress numbers. */
function downloadShapeError(type: string, d: unknown): string | null {
  if (!isObject(d) || typeof d.id !== 'number' || typeof d.state !== 'string' || typeof d.repo !== 'string') {
    return `${type} needs id, repo and state`;
  }
  const p = d.progress;
  if (!isObject(p) || typeof p.total_bytes !== 'number' || typeof p.done_bytes !== 'number') {
    return `${type} needs progress with total_bytes and done_bytes`;
  }
  if (!Array.isArray(d.paths)) return `${type} needs paths`;
  return null;
}

export function parseServerMessage(text: string): ParseResult {
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch (e) {
    return { ok: false, error: `not JSON: ${(e as Error).message}` };
  }
  if (!isObject(msg) || typeof msg.type !== 'string') {
    return { ok: false, error: 'message has no string "type"' };
  }
  switch (msg.type) {
    case 'hello': {
      const d = msg.data;
      if (!isObject(d) || typeof d.telemetry_period_ms !== 'number' || typeof d.version !== 'string') {
        return { ok: false, error: 'hello needs version and telemetry_period_ms' };
      }
      return { ok: true, event: { type: 'hello', data: d as unknown as Hello } };
    }
    case 'telemetry.frame': {
      const err = frameShapeError(msg.data);
      if (err) return { ok: false, error: err };
      return { ok: true, event: { type: 'telemetry.frame', data: msg.data as TelemetryFrame } };
    }
    case 'library.changed': {
      const err = libraryShapeError(msg.data);
      if (err) return { ok: false, error: err };
      return { ok: true, event: { type: 'library.changed', data: msg.data as ModelEntry[] } };
    }
    case 'instance.state': {
      const d = msg.data;
      if (!isObject(d) || typeof d.name !== 'string' || typeof d.phase !== 'string') {
        return { ok: false, error: 'instance.state needs name and phase' };
      }
      return { ok: true, event: { type: 'instance.state', data: d as unknown as InstanceView } };
    }
    case 'instance.log': {
      const d = msg.data;
      if (!isObject(d) || typeof d.name !== 'string' || typeof d.seq !== 'number' || typeof d.text !== 'string') {
        return { ok: false, error: 'instance.log needs name, seq and text' };
      }
      return { ok: true, event: { type: 'instance.log', data: d as unknown as LogLine } };
    }
    case 'engine.build': {
      const d = msg.data;
      if (!isObject(d) || typeof d.step !== 'string') return { ok: false, error: 'engine.build needs step' };
      return { ok: true, event: { type: 'engine.build', data: d as unknown as BuildProgress } };
    }
    case 'download.state':
    case 'download.progress': {
      const err = downloadShapeError(msg.type, msg.data);
      if (err) return { ok: false, error: err };
      return { ok: true, event: { type: msg.type, data: msg.data as unknown as DownloadView } };
    }
    case 'chat.message': {
      const d = msg.data;
      if (!isObject(d) || typeof d.id !== 'number' || typeof d.conversation_id !== 'number' || typeof d.status !== 'string' || typeof d.content !== 'string') {
        return { ok: false, error: 'chat.message needs id, conversation_id, status and content' };
      }
      return { ok: true, event: { type: 'chat.message', data: d as unknown as ChatMessage } };
    }
    case 'chat.delta': {
      const d = msg.data;
      if (
        !isObject(d) ||
        typeof d.conversation_id !== 'number' ||
        typeof d.message_id !== 'number' ||
        typeof d.content_offset !== 'number' ||
        typeof d.content !== 'string' ||
        typeof d.reasoning_offset !== 'number' ||
        typeof d.reasoning !== 'string'
      ) {
        return { ok: false, error: 'chat.delta needs conversation_id, message_id, and content and reasoning with their offsets' };
      }
      return { ok: true, event: { type: 'chat.delta', data: d as unknown as ChatDelta } };
    }
    case 'bench.run': {
      const d = msg.data;
      if (!isObject(d) || typeof d.id !== 'number' || typeof d.status !== 'string' || !Array.isArray(d.steps)) {
        return { ok: false, error: 'bench.run needs id, status and steps' };
      }
      return { ok: true, event: { type: 'bench.run', data: d as unknown as RunSummary } };
    }
    case 'bench.tune': {
      const d = msg.data;
      if (!isObject(d) || typeof d.id !== 'number' || typeof d.status !== 'string' || !Array.isArray(d.trials)) {
        return { ok: false, error: 'bench.tune needs id, status and trials' };
      }
      return { ok: true, event: { type: 'bench.tune', data: d as unknown as TuneView } };
    }
    case 'quality.reference': {
      const d = msg.data;
      if (!isObject(d) || typeof d.id !== 'string' || typeof d.state !== 'string' || typeof d.created_at_ms !== 'number') {
        return { ok: false, error: 'quality.reference needs id, state and created_at_ms' };
      }
      return { ok: true, event: { type: 'quality.reference', data: d as unknown as Reference } };
    }
    case 'model_run.state': {
      const d = msg.data;
      if (!isObject(d) || typeof d.id !== 'number' || typeof d.step !== 'string' || typeof d.detail !== 'string') {
        return { ok: false, error: 'model_run.state needs id, step and detail' };
      }
      return { ok: true, event: { type: 'model_run.state', data: d as unknown as ModelRun } };
    }
    case 'resync': {
      const d = msg.data;
      if (!isObject(d) || typeof d.missed !== 'number' || typeof d.channel !== 'string') {
        return { ok: false, error: 'resync needs missed and channel' };
      }
      return { ok: true, event: { type: 'resync', data: { missed: d.missed, channel: d.channel } } };
    }
    default:
      return { ok: true, event: { type: 'other', name: msg.type } };
  }
}

// ---- Backoff ----

export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
  /** Fraction (0–1) of the delay that may be shaved off at random, so many tabs do not retry in step. */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 500, maxMs: 15_000, jitter: 0.2 };

/** Delay before reconnect attempt `attempt` (0-based): base·2^attempt, capped, minus some jitter. */
export function backoffDelayMs(
  attempt: number,
  opts: BackoffOptions = DEFAULT_BACKOFF,
  random: () => number = Math.random,
): number {
  const exp = Math.min(opts.maxMs, opts.baseMs * 2 ** Math.max(0, Math.min(attempt, 30)));
  return Math.round(exp * (1 - opts.jitter * random()));
}

/** Silence after which the socket is presumed dead: frames come once a period, so allow three. */
export function staleAfterMs(periodMs: number): number {
  return Math.max(3 * periodMs, 10_000);
}

/** ws:// or wss:// URL of the event stream for the page's own origin: the desk's own, or while
 *  `rig` is viewed that rig's, carried through the desk's relay. */
export function eventsUrl(loc: Pick<Location, 'protocol' | 'host'>, rig: string | null = null): string {
  const scheme = loc.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${loc.host}${relayedPath('/api/v1/events', rig)}`;
}

// ---- Client ----

/** connecting: first attempt; live: hello received; reconnecting: waiting or retrying;
 *  signed_out: the session is no longer valid (the client stops); stopped: stop() was called. */
export type ConnectionState = 'connecting' | 'live' | 'reconnecting' | 'signed_out' | 'stopped';

/** Close code a server may use to say "unauthorized" after the upgrade (4000 + HTTP status). */
export const CLOSE_UNAUTHORIZED = 4401;

export interface SocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  close(code?: number, reason?: string): void;
}

export interface EventClientOptions {
  url: string;
  onEvent: (event: ServerEvent) => void;
  onState: (state: ConnectionState, detail: { attempt: number; retryInMs: number | null }) => void;
  /** A rejected upgrade looks like any other close in a browser (code 1006), so after a close the
   *  client asks the HTTP API whether the session is still valid before retrying. */
  checkSession: () => Promise<'ok' | 'unauthorized' | 'unreachable'>;
  onParseError?: (error: string) => void;
  createSocket?: (url: string) => SocketLike;
  setTimer?: (fn: () => void, ms: number) => unknown;
  clearTimer?: (handle: unknown) => void;
  random?: () => number;
  backoff?: BackoffOptions;
}

export class EventClient {
  private readonly o: Required<Omit<EventClientOptions, 'onParseError'>> & Pick<EventClientOptions, 'onParseError'>;
  private socket: SocketLike | null = null;
  private attempt = 0;
  private retryTimer: unknown = null;
  private staleTimer: unknown = null;
  private periodMs = 1000;
  private stopped = false;
  private state: ConnectionState | null = null;

  constructor(opts: EventClientOptions) {
    this.o = {
      createSocket: (url) => new WebSocket(url) as unknown as SocketLike,
      setTimer: (fn, ms) => setTimeout(fn, ms),
      clearTimer: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
      random: Math.random,
      backoff: DEFAULT_BACKOFF,
      ...opts,
    };
  }

  get connectionState(): ConnectionState | null {
    return this.state;
  }

  start(): void {
    this.stopped = false;
    this.attempt = 0;
    this.connect();
  }

  /** Skips the remaining backoff wait (the user clicked "retry"). */
  retryNow(): void {
    if (this.stopped || this.socket) return;
    if (this.retryTimer !== null) this.o.clearTimer(this.retryTimer);
    this.retryTimer = null;
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    this.clearTimers();
    this.dropSocket();
    this.setState('stopped', null);
  }

  private setState(state: ConnectionState, retryInMs: number | null): void {
    this.state = state;
    this.o.onState(state, { attempt: this.attempt, retryInMs });
  }

  private connect(): void {
    // Never two sockets: retryNow() may race a pending reconnect.
    if (this.stopped || this.socket) return;
    this.setState(this.attempt === 0 ? 'connecting' : 'reconnecting', null);
    let ws: SocketLike;
    try {
      ws = this.o.createSocket(this.o.url);
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.socket = ws;
    ws.onmessage = (ev) => this.handleMessage(ev.data);
    ws.onclose = (ev) => {
      if (this.socket !== ws) return;
      this.socket = null;
      this.afterClose(ev.code);
    };
    // A failed connection also fires close; errors carry no detail worth showing.
    ws.onerror = () => {};
    ws.onopen = () => this.armStaleTimer();
    // Also covers a socket that hangs while connecting (a half-dead network path).
    this.armStaleTimer();
  }

  private handleMessage(data: unknown): void {
    if (typeof data !== 'string') return;
    const parsed = parseServerMessage(data);
    if (!parsed.ok) {
      this.o.onParseError?.(parsed.error);
      return;
    }
    const ev = parsed.event;
    if (ev.type === 'hello') {
      this.periodMs = ev.data.telemetry_period_ms;
      // Only a hello proves the stream works end to end; that is when backoff starts over.
      this.attempt = 0;
      this.setState('live', null);
    }
    this.armStaleTimer();
    this.o.onEvent(ev);
  }

  private armStaleTimer(): void {
    if (this.staleTimer !== null) this.o.clearTimer(this.staleTimer);
    this.staleTimer = this.o.setTimer(() => {
      this.staleTimer = null;
      // A half-open TCP connection can take minutes to report close; give up on it now.
      const ws = this.socket;
      this.dropSocket();
      if (ws) this.afterClose(1006);
    }, staleAfterMs(this.periodMs));
  }

  private afterClose(code: number): void {
    if (this.stopped) return;
    if (this.staleTimer !== null) {
      this.o.clearTimer(this.staleTimer);
      this.staleTimer = null;
    }
    if (code === CLOSE_UNAUTHORIZED) {
      this.signedOut();
      return;
    }
    this.setState('reconnecting', null);
    void this.o.checkSession().then((s) => {
      if (this.stopped || this.socket) return;
      if (s === 'unauthorized') this.signedOut();
      else this.scheduleReconnect();
    });
  }

  private signedOut(): void {
    this.stopped = true;
    this.clearTimers();
    this.setState('signed_out', null);
  }

  private scheduleReconnect(): void {
    if (this.stopped) return;
    if (this.retryTimer !== null) this.o.clearTimer(this.retryTimer);
    const delay = backoffDelayMs(this.attempt, this.o.backoff, this.o.random);
    this.attempt += 1;
    this.setState('reconnecting', delay);
    this.retryTimer = this.o.setTimer(() => {
      this.retryTimer = null;
      this.connect();
    }, delay);
  }

  private dropSocket(): void {
    const ws = this.socket;
    this.socket = null;
    if (!ws) return;
    ws.onopen = ws.onmessage = ws.onerror = null;
    ws.onclose = null;
    try {
      ws.close();
    } catch {
      // Already closed.
    }
  }

  private clearTimers(): void {
    if (this.retryTimer !== null) this.o.clearTimer(this.retryTimer);
    if (this.staleTimer !== null) this.o.clearTimer(this.staleTimer);
    this.retryTimer = this.staleTimer = null;
  }
}
