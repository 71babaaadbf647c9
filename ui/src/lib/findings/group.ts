// Findings arrive as one flat list per frame. The panel counts them all and shows those about the
// host, worst first; each GPU card shows the ones about that GPU, and the PCIe badge asks whether a
// pcie_gen_low finding exists.

import type { Finding, Severity } from '../api/types';

const RANK: Record<Severity, number> = { critical: 0, warning: 1, info: 2 };

/** Worst first; ties keep the daemon's order (Array.prototype.sort is stable). */
export function sortBySeverity(findings: readonly Finding[]): Finding[] {
  return [...findings].sort((a, b) => (RANK[a.severity] ?? 3) - (RANK[b.severity] ?? 3));
}

export interface GroupedFindings {
  /** Findings with no GPU (RAM, swap…). */
  host: Finding[];
  /** Per GPU index, worst first. */
  byGpu: Map<number, Finding[]>;
  all: Finding[];
}

export function groupFindings(findings: readonly Finding[]): GroupedFindings {
  const all = sortBySeverity(findings);
  const host: Finding[] = [];
  const byGpu = new Map<number, Finding[]>();
  for (const f of all) {
    if (f.gpu_index == null) {
      host.push(f);
      continue;
    }
    const list = byGpu.get(f.gpu_index);
    if (list) list.push(f);
    else byGpu.set(f.gpu_index, [f]);
  }
  return { host, byGpu, all };
}

export function worstSeverity(findings: readonly Finding[]): Severity | null {
  return sortBySeverity(findings)[0]?.severity ?? null;
}

export function findRule(findings: readonly Finding[] | undefined, rule: string): Finding | null {
  return findings?.find((f) => f.rule === rule) ?? null;
}
