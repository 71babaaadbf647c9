// The charts a part of the page shows, gathered so they can be saved together (a run's report
// with its charts as PNGs). A component provides a shelf through Svelte's context; every
// chart's "Save PNG" button under it puts its chart on the shelf while it is shown and takes it
// off when it goes, so the shelf holds exactly what is on screen, each as its own PNG would be.

import { getContext, setContext } from 'svelte';

export interface ShelvedChart {
  title: string;
  /** The name its own "Save PNG" saves it under. */
  fileName: string;
  /** The chart as its PNG saves it; null while it has nothing drawn. */
  png: () => Promise<Blob> | null;
  /** Where it is on the page, to list the charts in the page's order. */
  element: () => Element | null;
}

/** Node.DOCUMENT_POSITION_FOLLOWING, without needing the DOM's globals. */
const DOCUMENT_POSITION_FOLLOWING = 4;

export class ChartShelf {
  private charts = new Set<ShelvedChart>();

  /** Puts a chart on the shelf; the returned function takes it off. */
  add(chart: ShelvedChart): () => void {
    this.charts.add(chart);
    return () => this.charts.delete(chart);
  }

  /** The charts in the page's order (the order they came for those not on the page). */
  list(): ShelvedChart[] {
    return [...this.charts].sort((a, b) => {
      const ea = a.element();
      const eb = b.element();
      if (!ea || !eb || ea === eb) return 0;
      return ea.compareDocumentPosition(eb) & DOCUMENT_POSITION_FOLLOWING ? -1 : 1;
    });
  }
}

const KEY = Symbol('chart-shelf');

/** A new shelf for the charts under the calling component (call it during its setup). */
export function provideChartShelf(): ChartShelf {
  return setContext(KEY, new ChartShelf());
}

/** The shelf of an enclosing component, or null where none was provided. */
export function chartShelf(): ChartShelf | null {
  return getContext<ChartShelf | undefined>(KEY) ?? null;
}
