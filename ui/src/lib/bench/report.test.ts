// The report ZIP: chart paths without the run's prefix and never colliding, the Markdown's
// "Charts" section, charts that could not be drawn left out, and the archive holding report.md
// and the PNGs as given.

import { describe, expect, it } from 'vitest';
import { chartPaths, reportMarkdown, reportZip, shelvedPngs } from './report';
import type { ShelvedChart } from '../charts/shelf';

const text = new TextDecoder();

/** The files of a stored (uncompressed) ZIP, by walking its local headers. */
function files(bytes: Uint8Array): Map<string, Uint8Array> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Map<string, Uint8Array>();
  let at = 0;
  while (view.getUint32(at, true) === 0x04034b50) {
    const size = view.getUint32(at + 22, true);
    const nameLength = view.getUint16(at + 26, true);
    const extra = view.getUint16(at + 28, true);
    const name = text.decode(bytes.subarray(at + 30, at + 30 + nameLength));
    const start = at + 30 + nameLength + extra;
    out.set(name, bytes.subarray(start, start + size));
    at = start + size;
  }
  return out;
}

describe('chartPaths', () => {
  it('drops the run’s prefix and keeps names unique', () => {
    expect(chartPaths(['benchmark-12-tiny-ttft.png', 'benchmark-12-tiny-pp-depth.png', 'benchmark-12-tiny-ttft.png', 'other.png', 'benchmark-12-tiny.png'], 'benchmark-12-tiny')).toEqual([
      'charts/ttft.png',
      'charts/pp-depth.png',
      'charts/ttft-2.png',
      'charts/other.png',
      'charts/benchmark-12-tiny.png',
    ]);
  });
});

describe('reportMarkdown', () => {
  it('adds a Charts section with each chart’s picture', () => {
    const md = reportMarkdown('# tiny\n\n| a |\n|---|\n\n', [
      { title: 'TTFT per step', path: 'charts/ttft.png' },
      { title: 'tok/s [pp]\nagainst depth', path: 'charts/pp-depth.png' },
    ]);
    expect(md).toBe(
      '# tiny\n\n| a |\n|---|\n\n## Charts\n\n### TTFT per step\n\n![TTFT per step](charts/ttft.png)\n\n### tok/s [pp] against depth\n\n![tok/s \\[pp\\] against depth](charts/pp-depth.png)\n',
    );
  });

  it('leaves the text as it is without a chart', () => {
    expect(reportMarkdown('# tiny\n', [])).toBe('# tiny\n');
  });
});

describe('shelvedPngs', () => {
  it('keeps the charts that made a PNG, in order', async () => {
    const png = new Blob([Uint8Array.from([1, 2, 3])], { type: 'image/png' });
    const chart = (title: string, make: () => Promise<Blob> | null): ShelvedChart => ({ title, fileName: `${title}.png`, png: make, element: () => null });
    const got = await shelvedPngs([
      chart('a', () => Promise.resolve(png)),
      chart('empty', () => null),
      chart('broken', () => Promise.reject(new Error('the PNG could not be made'))),
      chart('b', () => Promise.resolve(png)),
    ]);
    expect(got.map((c) => c.title)).toEqual(['a', 'b']);
    expect(got[0]).toEqual({ title: 'a', fileName: 'a.png', png });
  });
});

describe('reportZip', () => {
  it('holds report.md with its Charts section, then each PNG', async () => {
    const png = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 9, 9]);
    const bytes = await reportZip('# tiny speed\n', [{ title: 'TTFT per step', fileName: 'benchmark-3-tiny-speed-ttft.png', png: new Blob([png]) }], 'benchmark-3-tiny-speed');
    const got = files(bytes);
    expect([...got.keys()]).toEqual(['report.md', 'charts/ttft.png']);
    expect(text.decode(got.get('report.md'))).toBe('# tiny speed\n\n## Charts\n\n### TTFT per step\n\n![TTFT per step](charts/ttft.png)\n');
    expect([...got.get('charts/ttft.png')!]).toEqual([...png]);
  });
});
