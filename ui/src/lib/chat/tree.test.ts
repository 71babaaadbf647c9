// The branch tree: the shown path to the active (or newest) leaf, and the "< 2/3 >" siblings.

import { describe, expect, it } from 'vitest';
import { msg } from '../../test/chat';
import { childrenIndex, leafForSibling, newestLeaf, pathTo, shownLeaf, siblingsOf, visiblePath } from './tree';

// 1 user → 2 reply → 3 user → 4 reply
//                        ↘ 5 reply (regenerated)
// 1 → 6 user (edit of 3) → 7 reply
const tree = [msg(1, null), msg(2, 1), msg(3, 2), msg(4, 3), msg(5, 3, 'assistant'), msg(6, 2, 'user'), msg(7, 6, 'assistant')];
const ids = (ms: { id: number }[]) => ms.map((m) => m.id);

describe('the shown branch', () => {
  it('runs to the newest leaf when no leaf is chosen', () => {
    expect(newestLeaf(tree)).toBe(7);
    expect(ids(visiblePath(tree, null))).toEqual([1, 2, 6, 7]);
  });
  it('runs to the active leaf', () => {
    expect(ids(visiblePath(tree, 4))).toEqual([1, 2, 3, 4]);
    expect(ids(visiblePath(tree, 5))).toEqual([1, 2, 3, 5]);
  });
  it('follows an active leaf that got replies down to its newest leaf', () => {
    expect(shownLeaf(tree, 3)).toBe(5);
    expect(ids(visiblePath(tree, 2))).toEqual([1, 2, 6, 7]);
  });
  it('ignores an active leaf that is not there', () => {
    expect(ids(visiblePath(tree, 99))).toEqual([1, 2, 6, 7]);
  });
  it('is empty without messages', () => {
    expect(visiblePath([], null)).toEqual([]);
    expect(pathTo([], null)).toEqual([]);
  });
  it('does not depend on the order messages come in', () => {
    expect(ids(visiblePath([...tree].reverse(), 4))).toEqual([1, 2, 3, 4]);
  });
  it('leaves out a message whose parent is not there yet', () => {
    const orphan = [msg(1, null), msg(2, 1), msg(9, 8), msg(10, 9)];
    expect(childrenIndex(orphan).get(null)!.map((m) => m.id)).toEqual([1]);
    expect(ids(visiblePath(orphan, null))).toEqual([1, 2]);
    expect(ids(visiblePath(orphan, 10))).toEqual([1, 2]);
  });
});

describe('siblings', () => {
  it('place a message among the versions with its parent, oldest first', () => {
    expect(siblingsOf(tree, 4)).toEqual({ index: 0, count: 2, prev: null, next: 5 });
    expect(siblingsOf(tree, 5)).toEqual({ index: 1, count: 2, prev: 4, next: null });
    expect(siblingsOf(tree, 3)).toEqual({ index: 0, count: 2, prev: null, next: 6 });
    expect(siblingsOf(tree, 6)).toEqual({ index: 1, count: 2, prev: 3, next: null });
    expect(siblingsOf(tree, 1)).toEqual({ index: 0, count: 1, prev: null, next: null });
  });
  it('count roots as siblings of each other (an edited first message)', () => {
    const roots = [msg(1, null), msg(2, 1), msg(3, null, 'user'), msg(4, 3, 'assistant')];
    expect(siblingsOf(roots, 3)).toEqual({ index: 1, count: 2, prev: 1, next: null });
  });
  it('flip to the newest leaf under the chosen sibling', () => {
    expect(leafForSibling(tree, 3)).toBe(5);
    expect(leafForSibling(tree, 6)).toBe(7);
    expect(leafForSibling(tree, 4)).toBe(4);
    expect(ids(visiblePath(tree, leafForSibling(tree, 3)))).toEqual([1, 2, 3, 5]);
  });
  it('say nothing of a message that is not there', () => {
    expect(siblingsOf(tree, 42)).toEqual({ index: 0, count: 1, prev: null, next: null });
  });
});
