// The numbers beside a reply: the live decode rate while it streams (tokens over the last few
// seconds of `chat.delta` events), how long the model reasoned, how much of the model's context the
// conversation fills, and the short forms the page shows them in.

import type { ChatMessage, MessageStats } from '../api/types';

export interface RateSample {
  /** Since the request began (the delta's elapsed_ms). */
  elapsedMs: number;
  tokens: number;
}

/** Samples older than this behind the newest do not count: the rate follows the last seconds. */
export const RATE_WINDOW_MS = 3000;

/** Adds a sample, keeping those within the window (and always the one just before it, so the
 *  window is never empty after a pause). */
export function pushSample(samples: readonly RateSample[], s: RateSample, windowMs = RATE_WINDOW_MS): RateSample[] {
  const out = samples.filter((x) => x.elapsedMs <= s.elapsedMs);
  out.push(s);
  let first = 0;
  while (first < out.length - 2 && s.elapsedMs - out[first + 1]!.elapsedMs >= windowMs) first++;
  return out.slice(first);
}

/** Tokens per second over the samples; null until they span a quarter of a second. */
export function liveTokensPerSecond(samples: readonly RateSample[]): number | null {
  if (samples.length < 2) return null;
  const a = samples[0]!;
  const b = samples[samples.length - 1]!;
  const dt = b.elapsedMs - a.elapsedMs;
  if (dt < 250 || b.tokens < a.tokens) return null;
  return ((b.tokens - a.tokens) * 1000) / dt;
}

export interface ContextUse {
  used: number;
  total: number;
  /** 0–1 (capped). */
  fraction: number;
}

/** How much of the context the shown branch fills: the prompt and reply tokens of its last reply
 *  that has them; a reply still streaming adds its tokens so far to the one before it. Null when
 *  the context size or every count is unknown. */
export function contextUse(path: readonly ChatMessage[], context: number | null, liveTokens: number | null = null): ContextUse | null {
  if (context == null || context <= 0) return null;
  let used: number | null = null;
  for (let i = path.length - 1; i >= 0; i--) {
    const m = path[i]!;
    if (m.role !== 'assistant') continue;
    const s = m.stats;
    if (s?.prompt_tokens != null) {
      used = s.prompt_tokens + (s.completion_tokens ?? 0);
      break;
    }
    if (m.status === 'streaming' && i === path.length - 1 && liveTokens != null) {
      // The prompt of this reply is at least the conversation before it, counted further up.
      const before = contextUse(path.slice(0, i), context);
      used = (before?.used ?? 0) + liveTokens;
      break;
    }
  }
  if (used == null) return null;
  return { used, total: context, fraction: Math.min(1, used / context) };
}

/** Seconds of reasoning: the daemon's figure, else what was seen live, else an estimate from the
 *  reply's duration shared by characters. `estimated` says which. */
export function reasoningSeconds(
  m: Pick<ChatMessage, 'reasoning' | 'content' | 'stats'>,
  seenMs: number | null = null,
): { seconds: number; estimated: boolean } | null {
  if (!m.reasoning) return null;
  const s: Partial<MessageStats> = m.stats ?? {};
  if (s.reasoning_ms != null) return { seconds: s.reasoning_ms / 1000, estimated: false };
  if (seenMs != null) return { seconds: seenMs / 1000, estimated: false };
  if (s.duration_ms == null) return null;
  const decodeMs = Math.max(0, s.duration_ms - (s.ttft_ms ?? 0));
  const share = m.reasoning.length / (m.reasoning.length + m.content.length);
  return { seconds: ((s.ttft_ms ?? 0) + decodeMs * share) / 1000, estimated: true };
}

/** "340 ms", "2.4 s", "1 min 12 s". */
export function formatMs(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** "42.1 tok/s" (no decimals from 100 up). */
export function formatTps(tps: number | null | undefined): string {
  if (tps == null || !Number.isFinite(tps)) return '—';
  return `${tps >= 100 ? Math.round(tps) : tps.toFixed(1)} tok/s`;
}

/** "812", "12.3k", "131k". */
export function formatTokens(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return '—';
  if (n < 1000) return String(Math.round(n));
  if (n < 100_000) return `${(n / 1000).toFixed(1).replace(/\.0$/, '')}k`;
  return `${Math.round(n / 1000)}k`;
}

/** "Thought for 12.3 s" (with "about" when estimated); "Thinking…" while it still is. */
export function thoughtLabel(r: { seconds: number; estimated: boolean } | null, thinking: boolean): string {
  if (thinking) return r ? `Thinking… ${r.seconds.toFixed(1)} s` : 'Thinking…';
  if (!r) return 'Thoughts';
  return `Thought for ${r.estimated ? 'about ' : ''}${r.seconds.toFixed(1)} s`;
}

export interface ReplyEnding {
  /** The chip beside the model's name. */
  label: string;
  /** What happened, in a sentence. */
  note: string;
}

/** How a finished reply ended when it did not end by itself: stopped by the user, or at its
 *  length limit (the engine's finish reason `length`). Null for a reply that ended by itself, one
 *  still streaming, and errors (shown apart). */
export function replyEnding(message: Pick<ChatMessage, 'status' | 'content' | 'stats'>): ReplyEnding | null {
  if (message.status === 'stopped') {
    return {
      label: 'stopped by you',
      note: `Stopped by you${message.content ? '; the text so far is kept' : ' before any text'}.`,
    };
  }
  if (message.status === 'complete' && message.stats?.finish_reason === 'length') {
    const limit = message.stats.max_tokens ?? message.stats.completion_tokens;
    const tokens = limit != null ? ` (${limit} tokens)` : '';
    return {
      label: `stopped: length limit${tokens}`,
      note: `The reply reached its length limit${tokens}: raise Max tokens in the settings for longer replies.`,
    };
  }
  return null;
}
