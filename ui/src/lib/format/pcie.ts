// PCIe link badge: current generation and width against the card's maximum.
// A link of x4 or less when the card supports more (a riser, an x1 slot) changes what the card is
// good for and is red; x8 of x16 (boards sharing lanes) costs little for inference and is amber,
// matching the daemon's warning/info grading of `pcie_narrow`.
// A lower generation is usually the driver saving power while idle, so it is amber, and red only
// when the daemon's own `pcie_gen_low` finding says it is critical.

import type { Finding, PcieLink } from '../api/types';

export type BadgeTone = 'ok' | 'warn' | 'bad' | 'unknown';

export interface PcieBadge {
  text: string;
  /** Current width below the maximum width. */
  degraded: boolean;
  /** Current generation below the maximum generation. */
  genLow: boolean;
  tone: BadgeTone;
  /** Longer explanation for the tooltip. */
  title: string;
}

/** Widths at or below this are what risers and chipset slots give: red. */
const NARROW_LINK_WIDTH = 4;

export function pcieBadge(link: PcieLink, genLowFinding?: Pick<Finding, 'severity'> | null): PcieBadge {
  const { gen_current: gc, gen_max: gm, width_current: wc, width_max: wm } = link;
  if (gc == null && wc == null) {
    return { text: 'PCIe ?', degraded: false, genLow: false, tone: 'unknown', title: 'The driver does not report the PCIe link.' };
  }
  const cur = [gc != null ? `Gen${gc}` : null, wc != null ? `x${wc}` : null].filter(Boolean).join(' ');
  const degraded = wc != null && wm != null && wc < wm;
  const genLow = gc != null && gm != null && gc < gm;
  const max: string[] = [];
  if (genLow) max.push(`Gen${gm}`);
  if (degraded) max.push(`x${wm}`);
  const text = max.length ? `${cur} (max ${max.join(' ')})` : cur;

  let tone: BadgeTone = 'ok';
  if (degraded) tone = wc <= NARROW_LINK_WIDTH ? 'bad' : 'warn';
  else if (genLow) tone = genLowFinding?.severity === 'critical' ? 'bad' : 'warn';

  const parts: string[] = [`Link now ${cur}`];
  if (gm != null || wm != null) {
    parts.push(`card supports ${[gm != null ? `Gen${gm}` : null, wm != null ? `x${wm}` : null].filter(Boolean).join(' ')}`);
  }
  let title = parts.join('; ') + '.';
  if (degraded) title += ' The link is narrower than the card supports: check the slot, riser or BIOS lane split.';
  else if (genLow) title += ' GPUs lower the PCIe generation while idle to save power; under load it should go back up.';
  return { text, degraded, genLow, tone, title };
}
