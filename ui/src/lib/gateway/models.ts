// The gateway page's models table and evictions as text: the state chip (with load progress),
// what a stopped model will do on the next request, idle timeout, concurrency, last use, the
// endpoint as a client on this page can reach it. All pure.

import type { GatewayEviction, GatewayModel } from '../api/types';
import { phaseLabel, phaseTone, type Tone } from '../engines/instances';
import { formatAgo, formatDuration } from '../format/time';

/** "ready", "loading 40%", "crashed"; the same words and colours as the Engines page. */
export function modelStateLabel(m: Pick<GatewayModel, 'state' | 'progress'>): string {
  return phaseLabel({ phase: m.state, progress: m.progress });
}

export function modelStateTone(m: Pick<GatewayModel, 'state'>): Tone {
  return phaseTone(m.state);
}

/** The load bar's share (0–100) while loading with a known progress, else null. */
export function loadPercent(m: Pick<GatewayModel, 'state' | 'progress'>): number | null {
  if (m.state !== 'loading' || typeof m.progress !== 'number' || !Number.isFinite(m.progress)) return null;
  return Math.round(Math.min(1, Math.max(0, m.progress)) * 100);
}

/** What a request for this model does now, for the state chip's tooltip. */
export function stateHint(m: Pick<GatewayModel, 'state' | 'on_demand'>): string {
  switch (m.state) {
    case 'ready':
      return 'Serving requests.';
    case 'starting':
    case 'loading':
      return 'Requests wait until it is ready.';
    case 'stopping':
      return m.on_demand ? 'Stopping; a request starts it again.' : 'Stopping.';
    case 'crashed':
      return 'Crashed: the Engines page says why.';
    default:
      return m.on_demand ? 'Stopped; the first request starts it.' : 'Stopped; requests are refused until it is started.';
  }
}

/** Idle timeout: "never" or "15 min". */
export function idleTtlText(ttlS: number | null | undefined): string {
  if (ttlS == null || !Number.isFinite(ttlS) || ttlS <= 0) return 'never';
  return formatDuration(ttlS * 1000);
}

/** Requests in flight against the limit: "2 / 4", or "2" when unlimited. */
export function concurrencyText(m: Pick<GatewayModel, 'in_flight' | 'max_concurrent'>): string {
  return m.max_concurrent == null ? String(m.in_flight) : `${m.in_flight} / ${m.max_concurrent}`;
}

/** True when the model is at its concurrency limit (more requests are refused with 429). */
export function atLimit(m: Pick<GatewayModel, 'in_flight' | 'max_concurrent'>): boolean {
  return m.max_concurrent != null && m.in_flight >= m.max_concurrent;
}

export function lastUsedText(atMs: number | null | undefined, nowMs: number): string {
  return atMs == null ? 'never' : formatAgo(atMs, nowMs);
}

/** "evicted qwen3-8b to load glm-4.5-air: not enough GPU memory"; an idle stop (no model
 *  needed the room) reads "stopped qwen3-8b: idle for 15 min". */
export function evictionText(e: GatewayEviction): string {
  const reason = e.reason.trim();
  const what = e.for_model ? `evicted ${e.evicted} to load ${e.for_model}` : `stopped ${e.evicted}`;
  return `${what}${reason ? `: ${reason}` : ''}`;
}

/** Newest first, at most `limit`. */
export function recentEvictions(list: readonly GatewayEviction[], limit = 10): GatewayEviction[] {
  return [...list].sort((a, b) => b.at_ms - a.at_ms).slice(0, limit);
}

/** Running models first (ready, loading, starting, stopping), then by name. */
export function sortModels(list: readonly GatewayModel[]): GatewayModel[] {
  const rank = (s: string) => (s === 'ready' ? 0 : s === 'loading' || s === 'starting' ? 1 : s === 'stopping' ? 2 : s === 'crashed' ? 3 : 4);
  return [...list].sort((a, b) => rank(a.state) - rank(b.state) || a.name.localeCompare(b.name));
}

export interface Endpoint {
  /** The base URL as a client on the page's machine uses it. */
  url: string;
  /** The gateway listens on loopback and the page is on another machine: only the rig reaches it. */
  loopbackOnly: boolean;
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);
const WILDCARD = new Set(['0.0.0.0', '::', '[::]']);

/** The host of a `host:port` bind as the daemon reports it ("0.0.0.0:7878", "[::]:7878"). */
function bindHost(bind: string | null | undefined): string | null {
  if (!bind) return null;
  const m = /^\[([^\]]*)\]:\d+$/.exec(bind) ?? /^([^:]*):\d+$/.exec(bind);
  return m ? m[1]! : null;
}

/** The base URL as a client beside this page reaches it. A wildcard host (0.0.0.0) becomes the
 *  page's host name; so does loopback when the daemon on that port listens on every address
 *  (`daemonBind` from GET /status: the daemon writes its base URL with 127.0.0.1 then). */
export function endpointFor(baseUrl: string, pageHost: string, daemonBind?: string | null): Endpoint {
  let u: URL;
  try {
    u = new URL(baseUrl);
  } catch {
    return { url: baseUrl, loopbackOnly: false };
  }
  const pageIsLocal = !pageHost || LOOPBACK.has(pageHost);
  const bound = bindHost(daemonBind);
  const samePort = daemonBind != null && daemonBind.endsWith(`:${u.port || (u.protocol === 'https:' ? '443' : '80')}`);
  const everywhere = WILDCARD.has(u.hostname) || (LOOPBACK.has(u.hostname) && bound != null && WILDCARD.has(bound) && samePort);
  if (!everywhere || pageIsLocal) {
    return { url: baseUrl, loopbackOnly: LOOPBACK.has(u.hostname) && !pageIsLocal };
  }
  u.hostname = pageHost.includes(':') && !pageHost.startsWith('[') ? `[${pageHost}]` : pageHost;
  const url = u.toString();
  return { url: baseUrl.endsWith('/') ? url : url.replace(/\/$/, ''), loopbackOnly: false };
}
