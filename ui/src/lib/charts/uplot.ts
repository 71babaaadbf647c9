// What the uPlot charts (TimeChart, StackedBarChart, XYChart) share: an axis in the page's palette,
// short axis numbers, and a plot kept as wide as its box.

import type uPlot from 'uplot';

const FONT = '11px system-ui, -apple-system, "Segoe UI", sans-serif';

/** An axis with grey labels, faint grid lines and no ticks; `own` adds its size, spacing and labels. */
export function axis(own: uPlot.Axis): uPlot.Axis {
  return { stroke: '#8792a2', grid: { stroke: '#222a35', width: 1 }, ticks: { show: false }, font: FONT, ...own };
}

/** An axis label kept short: no decimals from 10 up, one below ("0.5"). */
export function axisNumber(v: number): string {
  return Math.abs(v) >= 10 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(1);
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
