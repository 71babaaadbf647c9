// Model facts as text for the library: parameters, context, attention layout, experts and the
// quantization histogram. Everything here comes from the model's own header; a fact the header
// does not have renders as an em dash.

import type { ModelSummary, PerLayer, TypeUsage } from '../api/types';
import { MISSING } from './units';

/** 743_911_218_432 → "743.9 B", 8_030_261_248 → "8.0 B", 135_000_000 → "135 M". */
export function formatParams(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n) || n <= 0) return MISSING;
  if (n >= 1e12) return `${(n / 1e12).toFixed(2)} T`;
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)} B`;
  if (n >= 1e6) return `${Math.round(n / 1e6)} M`;
  return `${Math.round(n / 1e3)} K`;
}

/** Integers with thin grouping: 202752 → "202 752". */
export function formatCount(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return MISSING;
  return Math.round(n)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, '\u202f');
}

/** Trained context as tokens and the familiar short form: "202 752 (198 K)". */
export function formatContext(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n) || n <= 0) return MISSING;
  const k = n / 1024;
  return Number.isInteger(k) || n >= 8192 ? `${formatCount(n)} (${Math.round(k)} K)` : formatCount(n);
}

/** One number for all layers, or "min–max" over layers. */
export function formatPerLayer(v: PerLayer | null | undefined): string {
  if (v == null) return MISSING;
  if (typeof v === 'number') return String(v);
  if (v.length === 0) return MISSING;
  const lo = Math.min(...v);
  const hi = Math.max(...v);
  return lo === hi ? String(lo) : `${lo}–${hi} (per layer)`;
}

/** "64 heads / 1 KV head · MLA (KV rank 512, Q rank 2048) · sliding window 4096 (every 6th full)". */
export function formatAttention(m: ModelSummary): string {
  const parts: string[] = [];
  if (m.head_count != null) {
    const kv = m.head_count_kv;
    const kvText = kv == null ? null : formatPerLayer(kv);
    parts.push(kvText == null ? `${formatPerLayer(m.head_count)} heads` : `${formatPerLayer(m.head_count)} heads / ${kvText} KV`);
  }
  if (m.mla?.active) {
    const r: string[] = [];
    if (m.mla.kv_lora_rank != null) r.push(`KV rank ${m.mla.kv_lora_rank}`);
    if (m.mla.q_lora_rank != null) r.push(`Q rank ${m.mla.q_lora_rank}`);
    parts.push(r.length ? `MLA (${r.join(', ')})` : 'MLA');
  }
  if (m.sliding_window != null) {
    let sw = `sliding window ${formatCount(m.sliding_window)}`;
    const p = m.sliding_window_pattern;
    if (p && 'period' in p) sw += ` (every ${ordinal(p.period)} layer full)`;
    else if (p && 'per_layer' in p) sw += ` (${p.per_layer.filter(Boolean).length} of ${p.per_layer.length} layers)`;
    parts.push(sw);
  }
  return parts.length ? parts.join(' · ') : MISSING;
}

function ordinal(n: number): string {
  const s = n % 100 >= 11 && n % 100 <= 13 ? 'th' : (['th', 'st', 'nd', 'rd'][n % 10] ?? 'th');
  return `${n}${s}`;
}

/** "256 total · 8 active · 1 shared · first 3 layers dense", or null for a dense model. */
export function formatExperts(m: ModelSummary): string | null {
  const e = m.experts;
  if (!e || e.count <= 0) return null;
  const parts = [`${e.count} total`];
  if (e.used != null) parts.push(`${e.used} active`);
  if (e.shared != null && e.shared > 0) parts.push(`${e.shared} shared`);
  if (e.leading_dense_blocks) parts.push(`first ${e.leading_dense_blocks} layer${e.leading_dense_blocks === 1 ? '' : 's'} dense`);
  return parts.join(' · ');
}

/** Approximate bits per weight of a ggml type, for the histogram's colours (from the name:
 *  Q4_K → 4.5, IQ2_XXS → 2.06, F16 → 16). */
export function typeBits(t: string): number {
  const u = t.toUpperCase();
  if (u === 'F32') return 32;
  if (u === 'F16' || u === 'BF16') return 16;
  if (u === 'F64') return 64;
  if (u === 'MXFP4' || u === 'NVFP4') return 4.25;
  if (u.startsWith('TQ1')) return 1.69;
  if (u.startsWith('TQ2')) return 2.06;
  const m = /^I?Q(\d)/.exec(u);
  if (!m) return 8;
  const b = Number(m[1]);
  if (u.includes('XXS')) return b + 0.06;
  if (u.includes('XS')) return b + 0.3;
  if (u.includes('_S') || u.includes('_M')) return b + 0.4;
  return b + 0.5;
}

/** A colour per type, from warm (few bits) to cool (many), so mixed quantizations read at a glance. */
export function typeColor(t: string): string {
  const bits = typeBits(t);
  if (bits >= 16) return '#6e7b8f';
  // 1.5 bits → hue 8 (red-orange), 8.5 bits → hue 210 (blue).
  const x = Math.min(1, Math.max(0, (bits - 1.5) / 7));
  const hue = Math.round(8 + x * 202);
  return `hsl(${hue} 62% 56%)`;
}

export interface QuantSlice {
  type: string;
  bytes: number;
  tensors: number;
  /** Share of the tensor bytes, percent. */
  pct: number;
  color: string;
}

/** The per-type histogram as bar slices by bytes, largest first (the order the daemon sends). */
export function quantSlices(q: TypeUsage[]): QuantSlice[] {
  const total = q.reduce((a, t) => a + t.bytes, 0);
  if (total <= 0) return [];
  return q.map((t) => ({ type: t.ggml_type, bytes: t.bytes, tensors: t.tensors, pct: (t.bytes / total) * 100, color: typeColor(t.ggml_type) }));
}

export function formatBpw(bpw: number | null | undefined): string {
  if (bpw == null || !Number.isFinite(bpw)) return MISSING;
  return `${bpw.toFixed(2)} bpw`;
}

/** The last path component: what a user recognises. */
export function baseName(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const i = trimmed.lastIndexOf('/');
  return i >= 0 ? trimmed.slice(i + 1) : trimmed;
}
