// One reference's frontier: every measured profile's decode speed against its Mean KLD, so the
// profiles that trade the least quality for the most speed stand out. A profile is on the frontier
// when no other is both at least as fast and at least as close to the reference (and better in
// one). Profiles without a speed run cannot be placed: they are listed apart.

import type { FrontierPoint } from './types';

/** A profile that can be drawn: it has a decode speed. */
export type PlacedPoint = FrontierPoint & { decode_tps: number };

export interface FrontierView {
  /** Drawn, by Mean KLD (closest to the reference first). */
  placed: PlacedPoint[];
  /** Measured for KLD but with no speed run yet, by name. */
  unplaced: FrontierPoint[];
  /** The placed profiles nothing beats on both speed and KLD. */
  front: Set<string>;
}

function placed(p: FrontierPoint): p is PlacedPoint {
  return p.decode_tps != null && Number.isFinite(p.decode_tps);
}

/** `a` is at least as good as `b` on both figures and better on one. */
function dominates(a: PlacedPoint, b: PlacedPoint): boolean {
  const noWorse = a.mean <= b.mean && a.decode_tps >= b.decode_tps;
  return noWorse && (a.mean < b.mean || a.decode_tps > b.decode_tps);
}

/** The placed points no other point dominates. */
export function paretoFront(points: readonly PlacedPoint[]): Set<string> {
  return new Set(points.filter((p) => !points.some((q) => q !== p && dominates(q, p))).map((p) => p.profile));
}

export function frontierView(points: readonly FrontierPoint[]): FrontierView {
  const drawn = points.filter(placed).sort((a, b) => a.mean - b.mean || a.profile.localeCompare(b.profile));
  const unplaced = points.filter((p) => !placed(p)).sort((a, b) => a.profile.localeCompare(b.profile));
  return { placed: drawn, unplaced, front: paretoFront(drawn) };
}

/** The chart's axes: Mean KLD from 0 (the reference itself) and tok/s from 0, each with room. */
export function frontierRanges(points: readonly PlacedPoint[]): { x: [number, number]; y: [number, number] } {
  const maxX = Math.max(0, ...points.map((p) => p.mean + Math.max(0, p.mean_unc)));
  const minX = Math.min(0, ...points.map((p) => p.mean));
  const maxY = Math.max(0, ...points.map((p) => p.decode_tps));
  return { x: [minX, maxX > 0 ? maxX * 1.15 : 1e-3], y: [0, maxY > 0 ? maxY * 1.15 : 1] };
}
