// What the uPlot charts (TimeChart, StackedBarChart) share: an axis in the page's palette, and a plot
// kept as wide as its box.

import type uPlot from 'uplot';

const FONT = '11px system-ui, -apple-system, "Segoe UI", sans-serif';

/** An axis with grey labels, faint grid lines and no ticks; `own` adds its size, spacing and labels. */
export function axis(own: uPlot.Axis): uPlot.Axis {
  return { stroke: '#8792a2', grid: { stroke: '#222a35', width: 1 }, ticks: { show: false }, font: FONT, ...own };
}

/** Resizes the plot to the box's width (at the chart's current height) whenever the box changes
 *  width; the returned function stops it. */
export function followWidth(plot: uPlot, box: HTMLElement, height: () => number): () => void {
  const ro = new ResizeObserver(() => {
    const w = box.clientWidth;
    if (w > 0 && Math.abs(w - plot.width) > 1) plot.setSize({ width: w, height: height() });
  });
  ro.observe(box);
  return () => ro.disconnect();
}
