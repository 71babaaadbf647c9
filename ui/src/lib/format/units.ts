// Pure formatters for the raw units the daemon sends (bytes, mW, m°C, B/s, MHz, %).
// `null` means "the hardware does not report it" and always renders as an em dash.

export const MISSING = '—';

const BINARY_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** Memory sizes in binary units: 25125220352 → "23.4 GiB". */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes == null || !Number.isFinite(bytes)) return MISSING;
  if (bytes < 0) return '-' + formatBytes(-bytes);
  if (bytes < 1024) return `${Math.round(bytes)} B`;
  let v = bytes;
  let u = 0;
  // One unit up per factor of 1024, so the number before the point stays below 1024.
  while (v >= 1024 && u < BINARY_UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  // Rounding can push 1023.96 up to "1024.0"; show that as the next unit instead.
  if (Number(v.toFixed(1)) >= 1024 && u < BINARY_UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${BINARY_UNITS[u]}`;
}

/** Per-process VRAM reads best as whole MiB, the way nvidia-smi prints it. */
export function formatMiB(bytes: number | null | undefined): string {
  if (bytes == null || !Number.isFinite(bytes)) return MISSING;
  return `${Math.round(bytes / 1024 / 1024)} MiB`;
}

/** "used / total" with the unit once: "23.4 / 24.0 GiB" when both land in the same unit. */
export function formatBytesPair(used: number | null, total: number | null): string {
  const a = formatBytes(used);
  const b = formatBytes(total);
  const ua = a.split(' ')[1];
  const ub = b.split(' ')[1];
  if (ua && ua === ub) return `${a.split(' ')[0]} / ${b}`;
  return `${a} / ${b}`;
}

function watts(mw: number): string {
  const w = mw / 1000;
  return Math.abs(w) >= 10 ? String(Math.round(w)) : w.toFixed(1);
}

/** Milliwatts to watts: 180000 → "180 W", 5300 → "5.3 W". */
export function formatPower(mw: number | null | undefined): string {
  if (mw == null || !Number.isFinite(mw)) return MISSING;
  return `${watts(mw)} W`;
}

/** Draw against limit: "180 / 350 W". */
export function formatPowerPair(mw: number | null, limitMw: number | null): string {
  if (mw == null) return MISSING;
  if (limitMw == null) return formatPower(mw);
  return `${watts(mw)} / ${watts(limitMw)} W`;
}

/** Milli-degrees Celsius: 55000 → "55 °C". */
export function formatTemperature(mc: number | null | undefined): string {
  if (mc == null || !Number.isFinite(mc)) return MISSING;
  return `${Math.round(mc / 1000)} °C`;
}

export function formatPercent(pct: number | null | undefined): string {
  if (pct == null || !Number.isFinite(pct)) return MISSING;
  return `${Math.round(pct)} %`;
}

const DECIMAL_RATE_UNITS = ['B/s', 'kB/s', 'MB/s', 'GB/s', 'TB/s'];

/** Link and memory bandwidth in decimal units, as vendors quote it: 936e9 → "936 GB/s". */
export function formatBandwidth(bytesPerS: number | null | undefined): string {
  if (bytesPerS == null || !Number.isFinite(bytesPerS)) return MISSING;
  let v = bytesPerS;
  let u = 0;
  while (v >= 1000 && u < DECIMAL_RATE_UNITS.length - 1) {
    v /= 1000;
    u++;
  }
  if (Number(v.toPrecision(3)) >= 1000 && u < DECIMAL_RATE_UNITS.length - 1) {
    v /= 1000;
    u++;
  }
  const digits = u === 0 || Number(v.toFixed(1)) >= 100 ? 0 : 1;
  return `${v.toFixed(digits)} ${DECIMAL_RATE_UNITS[u]}`;
}

export function formatMHz(mhz: number | null | undefined): string {
  if (mhz == null || !Number.isFinite(mhz)) return MISSING;
  return `${Math.round(mhz)} MHz`;
}

/** Current against maximum clock: "1695 / 2100 MHz". */
export function formatClockPair(mhz: number | null, maxMhz: number | null): string {
  if (mhz == null && maxMhz == null) return MISSING;
  if (maxMhz == null) return formatMHz(mhz);
  return `${mhz == null ? MISSING : Math.round(mhz)} / ${Math.round(maxMhz)} MHz`;
}

/** Share of a whole in percent, clamped to 0–100; null when the whole is unknown or zero. */
export function fraction(part: number | null | undefined, whole: number | null | undefined): number | null {
  if (part == null || whole == null || whole <= 0) return null;
  return Math.min(100, Math.max(0, (part / whole) * 100));
}
