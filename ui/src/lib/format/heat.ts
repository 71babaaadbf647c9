// Colour for a load value in the per-core heat strip: a dim blue-grey at idle rising through blue
// to amber and red near 100 %, so a few pinned cores stand out in a strip of 128.

export function heatColor(pct: number | null | undefined): string {
  if (pct == null || !Number.isFinite(pct)) return '#1b2129';
  const p = Math.min(100, Math.max(0, pct)) / 100;
  // Hue 215 (blue) down to 0 (red), lightness and saturation up with load.
  const hue = p < 0.6 ? 215 : 215 - ((p - 0.6) / 0.4) * 215;
  const sat = 25 + p * 60;
  const light = 18 + p * 37;
  return `hsl(${Math.round(hue)} ${Math.round(sat)}% ${Math.round(light)}%)`;
}
