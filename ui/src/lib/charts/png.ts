// A chart as a PNG file: its canvas (uPlot's, or one the page drew) on the page's background with
// the chart's title above and its legend below, so the picture explains itself once it leaves
// the page.

export interface LegendItem {
  label: string;
  color: string;
  dashed?: boolean;
}

export interface PlacedLegendItem {
  item: LegendItem;
  x: number;
  y: number;
}

const BACKGROUND = '#10141a';
const TEXT = '#d7dde5';
const MUTED = '#8792a2';
const FONT = 'system-ui, -apple-system, "Segoe UI", sans-serif';

/** Legend entries left to right, wrapping to a new row when one would pass `width`; sizes in
 *  CSS pixels (`measure` gives a label's width). Returns the entries' places and the height. */
export function legendLayout(items: readonly LegendItem[], width: number, measure: (text: string) => number, pad = 10): { placed: PlacedLegendItem[]; height: number } {
  const swatch = 18;
  const gap = 16;
  const row = 18;
  const placed: PlacedLegendItem[] = [];
  let x = pad;
  let y = 0;
  for (const item of items) {
    const w = swatch + measure(item.label) + gap;
    if (x > pad && x + w > width - pad) {
      x = pad;
      y += row;
    }
    placed.push({ item, x, y });
    x += w;
  }
  return { placed, height: items.length === 0 ? 0 : y + row };
}

/** The chart with its title and legend, as PNG data. */
export function chartPng(source: HTMLCanvasElement, title: string, legend: readonly LegendItem[]): Promise<Blob> {
  const scale = source.clientWidth > 0 ? source.width / source.clientWidth : 1;
  const cssWidth = source.width / scale;
  const cssHeight = source.height / scale;
  const canvas = document.createElement('canvas');
  const ctx = canvas.getContext('2d');
  if (!ctx) return Promise.reject(new Error('this browser cannot draw a PNG'));
  ctx.font = `11px ${FONT}`;
  const { placed, height: legendHeight } = legendLayout(legend, cssWidth, (t) => ctx.measureText(t).width);
  const titleHeight = 26;
  canvas.width = Math.round(cssWidth * scale);
  canvas.height = Math.round((titleHeight + cssHeight + legendHeight + 10) * scale);

  ctx.scale(scale, scale);
  ctx.fillStyle = BACKGROUND;
  ctx.fillRect(0, 0, cssWidth, canvas.height / scale);
  ctx.fillStyle = TEXT;
  ctx.font = `600 13px ${FONT}`;
  ctx.textBaseline = 'middle';
  ctx.fillText(title, 10, titleHeight / 2);
  ctx.drawImage(source, 0, titleHeight, cssWidth, cssHeight);

  ctx.font = `11px ${FONT}`;
  const top = titleHeight + cssHeight + 4;
  for (const { item, x, y } of placed) {
    const mid = top + y + 9;
    ctx.strokeStyle = item.color;
    ctx.lineWidth = 2;
    ctx.setLineDash(item.dashed ? [4, 3] : []);
    ctx.beginPath();
    ctx.moveTo(x, mid);
    ctx.lineTo(x + 14, mid);
    ctx.stroke();
    ctx.fillStyle = MUTED;
    ctx.fillText(item.label, x + 18, mid);
  }

  return new Promise((resolve, reject) => canvas.toBlob((b) => (b ? resolve(b) : reject(new Error('the PNG could not be made'))), 'image/png'));
}
