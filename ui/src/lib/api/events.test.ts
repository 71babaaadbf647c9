// WebSocket client: message parsing, backoff schedule, reconnect, stale and sign-out handling.

import { describe, expect, it } from 'vitest';
import { frame, gpu } from '../../test/frames';
import {
  backoffDelayMs,
  CLOSE_UNAUTHORIZED,
  DEFAULT_BACKOFF,
  EventClient,
  eventsUrl,
  parseServerMessage,
  staleAfterMs,
  type ConnectionState,
  type SocketLike,
} from './events';
import type { ServerEvent } from './types';

describe('parseServerMessage', () => {
  it('reads hello', () => {
    const r = parseServerMessage('{"type":"hello","data":{"version":"0.1.0","telemetry_period_ms":1000}}');
    expect(r).toEqual({ ok: true, event: { type: 'hello', data: { version: '0.1.0', telemetry_period_ms: 1000 } } });
  });

  it('reads a telemetry frame', () => {
    const f = frame(1_763_700_000_000, [gpu(0)]);
    const r = parseServerMessage(JSON.stringify({ type: 'telemetry.frame', data: f }));
    expect(r.ok).toBe(true);
    if (r.ok && r.event.type === 'telemetry.frame') {
      expect(r.event.data.sample.at_ms).toBe(1_763_700_000_000);
      expect(r.event.data.sample.gpus.gpus[0]!.name).toBe('NVIDIA GeForce RTX 3090');
    } else {
      throw new Error('expected a telemetry.frame');
    }
  });

  it('reads a no-driver frame', () => {
    const f = frame(1, []);
    f.sample.gpus.driver = { state: 'no_driver', message: 'no NVIDIA driver found' };
    const r = parseServerMessage(JSON.stringify({ type: 'telemetry.frame', data: f }));
    expect(r.ok && r.event.type === 'telemetry.frame' && r.event.data.sample.gpus.driver.state).toBe('no_driver');
  });

  it('reads library.changed with the full model list', () => {
    const entry = { path: '/m/glm/GLM-5.2-IQ2-00001-of-00006.gguf', name: 'GLM-5.2', format: 'gguf', folder: '/m', files: [], size_bytes: 1, gguf: null, safetensors: null, problem: null };
    const r = parseServerMessage(JSON.stringify({ type: 'library.changed', data: [entry] }));
    expect(r).toEqual({ ok: true, event: { type: 'library.changed', data: [entry] } });
    expect(parseServerMessage('{"type":"library.changed","data":[]}')).toEqual({ ok: true, event: { type: 'library.changed', data: [] } });
  });

  it('rejects a malformed library list', () => {
    expect(parseServerMessage('{"type":"library.changed","data":{}}')).toEqual({ ok: false, error: 'library.changed data is not an array' });
    expect(parseServerMessage('{"type":"library.changed","data":[{"name":"x"}]}').ok).toBe(false);
  });

  it('reads download state and progress, and rejects a download without its numbers', () => {
    const v = {
      id: 7, repo: 'org/m', revision: 'main', label: 'Q4_K_M', files: 1, state: 'running', error: null,
      progress: { total_bytes: 10, done_bytes: 4, files_total: 1, files_done: 0, current: 'm.gguf', rate_bps: 2, eta_s: 3 },
      paths: [], created_ms: 1,
    };
    expect(parseServerMessage(JSON.stringify({ type: 'download.state', data: v }))).toEqual({ ok: true, event: { type: 'download.state', data: v } });
    expect(parseServerMessage(JSON.stringify({ type: 'download.progress', data: v }))).toEqual({ ok: true, event: { type: 'download.progress', data: v } });
    expect(parseServerMessage('{"type":"download.state","data":{"id":"7"}}')).toEqual({ ok: false, error: 'download.state needs id, repo and state' });
    expect(parseServerMessage(JSON.stringify({ type: 'download.progress', data: { ...v, progress: null } }))).toEqual({
      ok: false,
      error: 'download.progress needs progress with total_bytes and done_bytes',
    });
    expect(parseServerMessage(JSON.stringify({ type: 'download.state', data: { ...v, paths: null } })).ok).toBe(false);
  });

  it('reads a resync (events were dropped) and rejects a malformed one', () => {
    expect(parseServerMessage('{"type":"resync","data":{"missed":12,"channel":"bulk"}}')).toEqual({
      ok: true,
      event: { type: 'resync', data: { missed: 12, channel: 'bulk' } },
    });
    expect(parseServerMessage('{"type":"resync","data":{}}')).toEqual({ ok: false, error: 'resync needs missed and channel' });
  });

  it('passes unknown event types through without failing', () => {
    expect(parseServerMessage('{"type":"engine.started","data":{}}')).toEqual({ ok: true, event: { type: 'other', name: 'engine.started' } });
  });

  it('rejects text that is not JSON or has no type', () => {
    expect(parseServerMessage('not json').ok).toBe(false);
    expect(parseServerMessage('[1,2]').ok).toBe(false);
    expect(parseServerMessage('{"data":{}}').ok).toBe(false);
  });

  it('rejects malformed hello and frame payloads', () => {
    expect(parseServerMessage('{"type":"hello","data":{"version":"1"}}').ok).toBe(false);
    expect(parseServerMessage('{"type":"telemetry.frame","data":{"findings":[]}}').ok).toBe(false);
    const noGpus = { sample: { at_ms: 1, gpus: { driver: { state: 'ready' } }, host: {} }, findings: [] };
    const r = parseServerMessage(JSON.stringify({ type: 'telemetry.frame', data: noGpus }));
    expect(r).toEqual({ ok: false, error: 'telemetry.frame sample.gpus is malformed' });
  });
});

describe('backoff schedule', () => {
  it('doubles from 500 ms and caps at 15 s without jitter', () => {
    const schedule = Array.from({ length: 8 }, (_, i) => backoffDelayMs(i, DEFAULT_BACKOFF, () => 0));
    expect(schedule).toEqual([500, 1000, 2000, 4000, 8000, 15000, 15000, 15000]);
  });
  it('shaves off at most the jitter fraction', () => {
    expect(backoffDelayMs(3, DEFAULT_BACKOFF, () => 1)).toBe(3200);
    expect(backoffDelayMs(3, DEFAULT_BACKOFF, () => 0.5)).toBe(3600);
  });
  it('survives absurd attempt numbers', () => {
    expect(backoffDelayMs(10_000, DEFAULT_BACKOFF, () => 0)).toBe(15000);
  });
  it('calls a connection stale after three periods, at least 10 s', () => {
    expect(staleAfterMs(1000)).toBe(10_000);
    expect(staleAfterMs(60_000)).toBe(180_000);
  });
});

describe('eventsUrl', () => {
  it('follows the page scheme', () => {
    expect(eventsUrl({ protocol: 'http:', host: '127.0.0.1:7878' })).toBe('ws://127.0.0.1:7878/api/v1/events');
    expect(eventsUrl({ protocol: 'https:', host: 'rig.lan' })).toBe('wss://rig.lan/api/v1/events');
  });

  it('reaches a viewed rig’s events through the desk’s relay', () => {
    expect(eventsUrl({ protocol: 'http:', host: '127.0.0.1:7878' }, 'tower')).toBe(
      'ws://127.0.0.1:7878/api/v1/fleet/peers/tower/api/v1/events',
    );
  });
});

// ---- EventClient against a scripted socket and a manual clock ----

class FakeSocket implements SocketLike {
  onopen: SocketLike['onopen'] = null;
  onmessage: SocketLike['onmessage'] = null;
  onclose: SocketLike['onclose'] = null;
  onerror: SocketLike['onerror'] = null;
  closed = false;
  constructor(public url: string) {}
  close(): void {
    this.closed = true;
  }
  open(): void {
    this.onopen?.({});
  }
  send(obj: unknown): void {
    this.onmessage?.({ data: typeof obj === 'string' ? obj : JSON.stringify(obj) });
  }
  serverClose(code = 1006): void {
    this.onclose?.({ code, reason: '' });
  }
}

class ManualTimers {
  now = 0;
  private next = 1;
  timers = new Map<number, { at: number; fn: () => void }>();
  set = (fn: () => void, ms: number): number => {
    const id = this.next++;
    this.timers.set(id, { at: this.now + ms, fn });
    return id;
  };
  clear = (h: unknown): void => {
    this.timers.delete(h as number);
  };
  /** Pending delays from now, sorted. */
  pending(): number[] {
    return [...this.timers.values()].map((t) => t.at - this.now).sort((a, b) => a - b);
  }
  advance(ms: number): void {
    const end = this.now + ms;
    for (;;) {
      const due = [...this.timers.entries()].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.timers.delete(due[0]);
      this.now = due[1].at;
      due[1].fn();
    }
    this.now = end;
  }
}

const flush = () => new Promise<void>((r) => setTimeout(r, 0));

function setup(session: 'ok' | 'unauthorized' | 'unreachable' = 'unreachable') {
  const sockets: FakeSocket[] = [];
  const states: ConnectionState[] = [];
  const events: ServerEvent[] = [];
  const errors: string[] = [];
  const timers = new ManualTimers();
  const ctl = { session };
  const client = new EventClient({
    url: 'ws://rig/api/v1/events',
    createSocket: (url) => {
      const s = new FakeSocket(url);
      sockets.push(s);
      return s;
    },
    setTimer: timers.set,
    clearTimer: timers.clear,
    random: () => 0,
    checkSession: async () => ctl.session,
    onState: (s) => states.push(s),
    onEvent: (e) => events.push(e),
    onParseError: (e) => errors.push(e),
  });
  return { client, sockets, states, events, errors, timers, ctl };
}

const HELLO = { type: 'hello', data: { version: '0.1.0', telemetry_period_ms: 1000 } };

describe('EventClient', () => {
  it('goes live on hello and delivers frames', () => {
    const { client, sockets, states, events } = setup();
    client.start();
    expect(states).toEqual(['connecting']);
    sockets[0]!.open();
    sockets[0]!.send(HELLO);
    sockets[0]!.send({ type: 'telemetry.frame', data: frame(5, [gpu(0)]) });
    expect(states.at(-1)).toBe('live');
    expect(events.map((e) => e.type)).toEqual(['hello', 'telemetry.frame']);
  });

  it('reports unreadable messages without dropping the connection', () => {
    const { client, sockets, states, errors } = setup();
    client.start();
    sockets[0]!.send(HELLO);
    sockets[0]!.send('{oops');
    expect(errors).toHaveLength(1);
    expect(states.at(-1)).toBe('live');
    expect(sockets[0]!.closed).toBe(false);
  });

  it('reconnects with growing delays while the daemon is down', async () => {
    const { client, sockets, states, timers } = setup('unreachable');
    client.start();
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      sockets.at(-1)!.serverClose(1006);
      await flush();
      delays.push(timers.pending()[0]!);
      timers.advance(delays.at(-1)!);
    }
    expect(delays).toEqual([500, 1000, 2000, 4000, 8000, 15000]);
    expect(sockets).toHaveLength(7);
    expect(states).toContain('reconnecting');
  });

  it('starts the backoff over after a hello', async () => {
    const { client, sockets, timers } = setup('ok');
    client.start();
    for (let i = 0; i < 3; i++) {
      sockets.at(-1)!.serverClose();
      await flush();
      timers.advance(timers.pending()[0]!);
    }
    sockets.at(-1)!.send(HELLO);
    sockets.at(-1)!.serverClose();
    await flush();
    expect(timers.pending()).toEqual([500]);
  });

  it('stops and reports signed_out when the session is gone after a close', async () => {
    const { client, sockets, states, timers } = setup('unauthorized');
    client.start();
    sockets[0]!.send(HELLO);
    sockets[0]!.serverClose(1006);
    await flush();
    expect(states.at(-1)).toBe('signed_out');
    expect(timers.pending()).toEqual([]);
    expect(client.connectionState).toBe('signed_out');
  });

  it('treats close code 4401 as signed out without asking', () => {
    const { client, sockets, states } = setup('ok');
    client.start();
    sockets[0]!.serverClose(CLOSE_UNAUTHORIZED);
    expect(states.at(-1)).toBe('signed_out');
  });

  it('gives up on a silent connection and reconnects', async () => {
    const { client, sockets, states, timers } = setup('ok');
    client.start();
    sockets[0]!.open();
    sockets[0]!.send(HELLO);
    timers.advance(9_999);
    expect(sockets[0]!.closed).toBe(false);
    timers.advance(1);
    expect(sockets[0]!.closed).toBe(true);
    expect(states.at(-1)).toBe('reconnecting');
    await flush();
    timers.advance(500);
    expect(sockets).toHaveLength(2);
  });

  it('gives up on a socket that never finishes connecting', async () => {
    const { client, sockets, timers } = setup('unreachable');
    client.start();
    timers.advance(10_000);
    expect(sockets[0]!.closed).toBe(true);
    await flush();
    timers.advance(500);
    expect(sockets).toHaveLength(2);
  });

  it('keeps a connection that receives frames', () => {
    const { client, sockets, timers } = setup('ok');
    client.start();
    sockets[0]!.send(HELLO);
    for (let i = 0; i < 30; i++) {
      timers.advance(1000);
      sockets[0]!.send({ type: 'telemetry.frame', data: frame(i + 1, []) });
    }
    expect(sockets[0]!.closed).toBe(false);
    expect(sockets).toHaveLength(1);
  });

  it('retryNow skips the wait but never opens two sockets', async () => {
    const { client, sockets, timers } = setup('unreachable');
    client.start();
    sockets[0]!.serverClose();
    await flush();
    expect(timers.pending()).toEqual([500]);
    client.retryNow();
    expect(sockets).toHaveLength(2);
    client.retryNow();
    expect(sockets).toHaveLength(2);
    // The cancelled 500 ms retry must not fire a third socket.
    timers.advance(600);
    expect(sockets).toHaveLength(2);
  });

  it('stop() closes the socket and cancels timers', async () => {
    const { client, sockets, states, timers } = setup('ok');
    client.start();
    sockets[0]!.send(HELLO);
    client.stop();
    expect(sockets[0]!.closed).toBe(true);
    expect(states.at(-1)).toBe('stopped');
    expect(timers.pending()).toEqual([]);
  });
});

describe('engine events', () => {
  it('reads instance.state, instance.log and engine.build', () => {
    const st = parseServerMessage(JSON.stringify({ type: 'instance.state', data: { name: 'q', phase: 'ready', pid: 1 } }));
    expect(st.ok && st.event.type).toBe('instance.state');
    const log = parseServerMessage(JSON.stringify({ type: 'instance.log', data: { name: 'q', seq: 3, at_ms: 1, stream: 'stderr', text: 'hi' } }));
    expect(log.ok && log.event.type).toBe('instance.log');
    const b = parseServerMessage(JSON.stringify({ type: 'engine.build', data: { build_id: 'x', step: 'compile', fraction: 0.5, line: 'l' } }));
    expect(b.ok && b.event.type).toBe('engine.build');
  });
  it('refuses malformed ones', () => {
    expect(parseServerMessage(JSON.stringify({ type: 'instance.state', data: { phase: 'ready' } })).ok).toBe(false);
    expect(parseServerMessage(JSON.stringify({ type: 'instance.log', data: { name: 'q', text: 'x' } })).ok).toBe(false);
    expect(parseServerMessage(JSON.stringify({ type: 'engine.build', data: {} })).ok).toBe(false);
  });
});

describe('chat events', () => {
  it('reads chat.message and chat.delta', () => {
    const m = parseServerMessage(
      JSON.stringify({ type: 'chat.message', data: { id: 2, conversation_id: 1, parent_id: 1, role: 'assistant', content: '', status: 'streaming' } }),
    );
    expect(m.ok && m.event.type).toBe('chat.message');
    const d = parseServerMessage(
      JSON.stringify({
        type: 'chat.delta',
        data: { conversation_id: 1, message_id: 2, content_offset: 0, content: 'Hi', reasoning_offset: 0, reasoning: '', completion_tokens: 1, elapsed_ms: 40, status_line: null },
      }),
    );
    expect(d.ok && d.event.type).toBe('chat.delta');
  });
  it('refuses malformed ones', () => {
    expect(parseServerMessage(JSON.stringify({ type: 'chat.message', data: { id: 2, status: 'streaming' } })).ok).toBe(false);
    expect(parseServerMessage(JSON.stringify({ type: 'chat.delta', data: { conversation_id: 1, message_id: 2, content: 'x' } })).ok).toBe(false);
  });
});
