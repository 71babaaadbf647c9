// A conversation's messages form a tree (parent_id): an edit or a regeneration is a sibling of the
// message it replaces. The branch shown runs from the root to the active leaf (or the newest leaf),
// and "< 2/3 >" flips between siblings, landing on the newest leaf under the chosen one. Ids grow
// with time (the daemon's autoincrement), so "newest" is the largest id.

/** What the tree needs of a message. */
export interface TreeMessage {
  id: number;
  parent_id: number | null;
}

/** The children of each message (`null`: the roots), oldest first. A message whose parent is not
 *  there yet (a reply announced before the answer that brings its question) is left out until it
 *  is. */
export function childrenIndex<M extends TreeMessage>(messages: readonly M[]): Map<number | null, M[]> {
  const ids = new Set(messages.map((m) => m.id));
  const index = new Map<number | null, M[]>();
  for (const m of messages) {
    if (m.parent_id != null && !ids.has(m.parent_id)) continue;
    const parent = m.parent_id;
    const list = index.get(parent);
    if (list) list.push(m);
    else index.set(parent, [m]);
  }
  for (const list of index.values()) list.sort((a, b) => a.id - b.id);
  return index;
}

/** The newest leaf at or under `from` (every message when `from` is undefined); null when there are
 *  no messages. */
export function newestLeaf<M extends TreeMessage>(messages: readonly M[], from?: number, index = childrenIndex(messages)): number | null {
  let best: number | null = null;
  const stack: (number | null)[] = [from === undefined ? null : from];
  const seen = new Set<number | null>();
  while (stack.length > 0) {
    const at = stack.pop()!;
    if (seen.has(at)) continue;
    seen.add(at);
    const kids = index.get(at);
    if (!kids || kids.length === 0) {
      if (at != null && (best == null || at > best)) best = at;
      continue;
    }
    for (const k of kids) stack.push(k.id);
  }
  return best;
}

/** The leaf whose branch is shown: the active leaf when it is in the tree (followed down to its
 *  newest leaf, should it have replies), else the newest leaf. */
export function shownLeaf<M extends TreeMessage>(messages: readonly M[], activeLeaf: number | null, index = childrenIndex(messages)): number | null {
  if (activeLeaf != null && inTree(messages, activeLeaf)) return newestLeaf(messages, activeLeaf, index);
  return newestLeaf(messages, undefined, index);
}

/** Whether a message is there and its ancestors all are. */
function inTree<M extends TreeMessage>(messages: readonly M[], id: number): boolean {
  const byId = new Map(messages.map((m) => [m.id, m]));
  let at: number | null = id;
  for (let n = 0; at != null && n <= messages.length; n++) {
    const m = byId.get(at);
    if (!m) return false;
    at = m.parent_id;
  }
  return at == null;
}

/** The messages from the root down to `leaf`, oldest first. */
export function pathTo<M extends TreeMessage>(messages: readonly M[], leaf: number | null): M[] {
  if (leaf == null) return [];
  const byId = new Map(messages.map((m) => [m.id, m]));
  const path: M[] = [];
  let at: number | null = leaf;
  while (at != null) {
    const m = byId.get(at);
    if (!m || path.length > messages.length) break;
    path.push(m);
    at = m.parent_id;
  }
  return path.reverse();
}

/** The branch shown. */
export function visiblePath<M extends TreeMessage>(messages: readonly M[], activeLeaf: number | null): M[] {
  const index = childrenIndex(messages);
  return pathTo(messages, shownLeaf(messages, activeLeaf, index));
}

export interface Siblings {
  /** 0-based place of the message among its siblings (oldest first). */
  index: number;
  count: number;
  /** The sibling before and after, or null at either end. */
  prev: number | null;
  next: number | null;
}

/** A message's place among the messages with the same parent. */
export function siblingsOf<M extends TreeMessage>(messages: readonly M[], id: number, index = childrenIndex(messages)): Siblings {
  const m = messages.find((x) => x.id === id);
  const list = (m && index.get(m.parent_id)) || [];
  const i = list.findIndex((x) => x.id === id);
  if (i < 0) return { index: 0, count: 1, prev: null, next: null };
  return { index: i, count: list.length, prev: list[i - 1]?.id ?? null, next: list[i + 1]?.id ?? null };
}

/** The leaf to make active to show sibling `siblingId`: the newest leaf under it. */
export function leafForSibling<M extends TreeMessage>(messages: readonly M[], siblingId: number): number | null {
  return newestLeaf(messages, siblingId);
}
