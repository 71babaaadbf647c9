// The chart shelf: charts come and go as they are shown, and are listed in the page's order.

import { describe, expect, it } from 'vitest';
import { ChartShelf, type ShelvedChart } from './shelf';

/** An element at a place on the page: compareDocumentPosition as the DOM answers it. */
function at(place: number): Element {
  return { place, compareDocumentPosition: (other: { place: number }) => (other.place > place ? 4 : 2) } as unknown as Element;
}

const chart = (title: string, element: Element | null): ShelvedChart => ({ title, fileName: `${title}.png`, png: () => null, element: () => element });

describe('ChartShelf', () => {
  it('lists the charts shown, in the page’s order', () => {
    const shelf = new ChartShelf();
    const offC = shelf.add(chart('c', at(3)));
    shelf.add(chart('a', at(1)));
    shelf.add(chart('b', at(2)));
    expect(shelf.list().map((c) => c.title)).toEqual(['a', 'b', 'c']);
    offC();
    expect(shelf.list().map((c) => c.title)).toEqual(['a', 'b']);
  });

  it('keeps the order they came in for charts not on the page', () => {
    const shelf = new ChartShelf();
    shelf.add(chart('x', null));
    shelf.add(chart('y', null));
    expect(shelf.list().map((c) => c.title)).toEqual(['x', 'y']);
  });
});
