// PCIe badge text, the degraded (width) flag and the amber/red rule for a low generation.

import { describe, expect, it } from 'vitest';
import type { PcieLink } from '../api/types';
import { pcieBadge } from './pcie';

function link(gc: number | null, gm: number | null, wc: number | null, wm: number | null): PcieLink {
  return { gen_current: gc, gen_max: gm, width_current: wc, width_max: wm, tx_bytes_per_s: null, rx_bytes_per_s: null };
}

describe('pcieBadge', () => {
  it('reads "Gen4 x16" for a healthy link', () => {
    const b = pcieBadge(link(4, 4, 16, 16));
    expect(b.text).toBe('Gen4 x16');
    expect(b.degraded).toBe(false);
    expect(b.genLow).toBe(false);
    expect(b.tone).toBe('ok');
  });

  it('flags a narrower link red with the maximum width', () => {
    const b = pcieBadge(link(4, 4, 1, 16));
    expect(b.text).toBe('Gen4 x1 (max x16)');
    expect(b.degraded).toBe(true);
    expect(b.tone).toBe('bad');
  });

  it('shows x8 of x16 (shared lanes) amber and x4 or less red', () => {
    expect(pcieBadge(link(4, 4, 8, 16)).tone).toBe('warn');
    expect(pcieBadge(link(4, 4, 4, 16)).tone).toBe('bad');
    expect(pcieBadge(link(5, 5, 4, 8)).tone).toBe('bad');
  });

  it('shows a lower generation in amber, since idle downshift is normal', () => {
    const b = pcieBadge(link(3, 5, 16, 16));
    expect(b.text).toBe('Gen3 x16 (max Gen5)');
    expect(b.degraded).toBe(false);
    expect(b.genLow).toBe(true);
    expect(b.tone).toBe('warn');
    expect(b.title).toMatch(/idle/);
  });

  it('turns a lower generation red only when a critical finding says so', () => {
    expect(pcieBadge(link(1, 4, 16, 16), { severity: 'warning' }).tone).toBe('warn');
    expect(pcieBadge(link(1, 4, 16, 16), { severity: 'critical' }).tone).toBe('bad');
  });

  it('names both maxima when width and generation are both low', () => {
    const b = pcieBadge(link(3, 4, 8, 16));
    expect(b.text).toBe('Gen3 x8 (max Gen4 x16)');
    expect(b.degraded).toBe(true);
    expect(b.tone).toBe('warn');
  });

  it('does not call a link degraded when the maximum is unknown', () => {
    const b = pcieBadge(link(4, null, 8, null));
    expect(b.text).toBe('Gen4 x8');
    expect(b.degraded).toBe(false);
    expect(b.tone).toBe('ok');
  });

  it('says so when the driver reports no link', () => {
    const b = pcieBadge(link(null, null, null, null));
    expect(b.text).toBe('PCIe ?');
    expect(b.tone).toBe('unknown');
  });
});
