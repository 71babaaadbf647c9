// Streaming text into a reply: a `chat.delta` says where its text goes (content_offset and
// reasoning_offset, in UTF-16 units: a JavaScript string's length). A delta at the
// end of our copy is appended; one we already hold (sent again, or covered by a refetch) is
// skipped, or only its new tail appended; one past the end means deltas were dropped, and the
// conversation must be read again. Also the merging of a message read over HTTP with the copy the
// events keep: a stale answer must never undo text or a final state that arrived first.

import type { ChatDelta, ChatMessage } from '../api/types';

/** How the daemon measures text: UTF-16 code units, as JavaScript strings count them. */
export function textUnits(text: string): number {
  return text.length;
}

/** The rest of `text` after its first `units` units; null when that falls inside a character
 *  (between the halves of a surrogate pair). */
export function dropUnits(text: string, units: number): string | null {
  if (units > text.length) return null;
  const c = text.charCodeAt(units);
  if (units > 0 && units < text.length && c >= 0xdc00 && c <= 0xdfff) return null;
  return text.slice(units);
}

type Piece = { ok: true; text: string; changed: boolean } | { ok: false };

/** One field (content or reasoning): our copy and the delta's offset and text. */
function applyPiece(have: string, offset: number, text: string): Piece {
  const haveUnits = textUnits(have);
  if (offset > haveUnits) return { ok: false };
  if (text === '') return { ok: true, text: have, changed: false };
  if (offset === haveUnits) return { ok: true, text: have + text, changed: true };
  // Starts inside what we hold: only what goes past our end is new.
  const end = offset + textUnits(text);
  if (end <= haveUnits) return { ok: true, text: have, changed: false };
  const tail = dropUnits(text, haveUnits - offset);
  if (tail == null) return { ok: false };
  return { ok: true, text: have + tail, changed: true };
}

export type DeltaResult =
  | { kind: 'applied'; message: ChatMessage }
  /** Nothing new in it (a repeat, or text a refetch already brought). */
  | { kind: 'same' }
  /** Text is missing before it: read the conversation again. */
  | { kind: 'gap' };

/** Applies a delta to the reply it names. A reply no longer streaming takes no delta (its final
 *  text came with its `chat.message`). */
export function applyDelta(message: ChatMessage, delta: ChatDelta): DeltaResult {
  if (message.status !== 'streaming') return { kind: 'same' };
  const content = applyPiece(message.content, delta.content_offset, delta.content);
  const reasoning = applyPiece(message.reasoning, delta.reasoning_offset, delta.reasoning);
  if (!content.ok || !reasoning.ok) return { kind: 'gap' };
  if (!content.changed && !reasoning.changed) return { kind: 'same' };
  return { kind: 'applied', message: { ...message, content: content.text, reasoning: reasoning.text } };
}

const FINAL = new Set(['complete', 'stopped', 'error', 'interrupted']);

export function isFinal(status: string): boolean {
  return FINAL.has(status);
}

/** The copy to keep when a message arrives (an event, an action's answer, a refetch) for one we
 *  hold. A final state wins over "streaming" (a reply never goes back); between two streaming
 *  copies, the one with more text wins, field by field, as long as it extends the other. */
export function mergeMessage(held: ChatMessage | undefined, incoming: ChatMessage): ChatMessage {
  if (!held) return incoming;
  if (isFinal(incoming.status)) return incoming;
  if (isFinal(held.status)) return held;
  const longer = (a: string, b: string) => (a.length > b.length && a.startsWith(b) ? a : b);
  return { ...incoming, content: longer(held.content, incoming.content), reasoning: longer(held.reasoning, incoming.reasoning) };
}

/** The list with `m` merged in, ordered by id. */
export function upsertMessage(list: readonly ChatMessage[], m: ChatMessage): ChatMessage[] {
  const i = list.findIndex((x) => x.id === m.id);
  if (i >= 0) {
    const merged = mergeMessage(list[i], m);
    if (merged === list[i]) return list as ChatMessage[];
    const out = list.slice();
    out[i] = merged;
    return out;
  }
  const out = [...list, m];
  out.sort((a, b) => a.id - b.id);
  return out;
}

/** A refetched conversation's messages, merged with the copies we hold (which may be ahead).
 *  A message we hold that is newer than everything fetched was created after the daemon answered
 *  (its event overtook the answer) and is kept. */
export function mergeAll(held: readonly ChatMessage[], fetched: readonly ChatMessage[]): ChatMessage[] {
  const byId = new Map(held.map((m) => [m.id, m]));
  const newest = fetched.reduce((n, m) => Math.max(n, m.id), -Infinity);
  const out = fetched.map((m) => mergeMessage(byId.get(m.id), m));
  for (const m of held) if (m.id > newest) out.push(m);
  return out.sort((a, b) => a.id - b.id);
}
