// The ZIP writer: CRC-32 against its published check value, DOS dates, and archives read back the
// way an unzip tool reads them — from the end record through the central directory to each local
// header — with every size, offset, name and checksum consistent and the bytes intact.

import { describe, expect, it } from 'vitest';
import { crc32, dosDateTime, zip } from './zip';

const utf8 = new TextEncoder();
const text = new TextDecoder();

interface ReadEntry {
  name: string;
  data: Uint8Array;
  crc: number;
  flags: number;
  method: number;
  time: number;
  date: number;
}

/** Reads an archive as unzip does, checking each structure's signature and that the central
 *  directory and the local headers agree. */
function unzip(bytes: Uint8Array): ReadEntry[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.length - 22;
  expect(view.getUint32(end, true)).toBe(0x06054b50);
  const count = view.getUint16(end + 10, true);
  expect(view.getUint16(end + 8, true)).toBe(count);
  const size = view.getUint32(end + 12, true);
  let at = view.getUint32(end + 16, true);
  expect(at + size).toBe(end);
  const entries: ReadEntry[] = [];
  for (let i = 0; i < count; i++) {
    expect(view.getUint32(at, true)).toBe(0x02014b50);
    const flags = view.getUint16(at + 8, true);
    const method = view.getUint16(at + 10, true);
    const time = view.getUint16(at + 12, true);
    const date = view.getUint16(at + 14, true);
    const crc = view.getUint32(at + 16, true);
    const compressed = view.getUint32(at + 20, true);
    const length = view.getUint32(at + 24, true);
    expect(compressed).toBe(length);
    const nameLength = view.getUint16(at + 28, true);
    const extra = view.getUint16(at + 30, true);
    const comment = view.getUint16(at + 32, true);
    const local = view.getUint32(at + 42, true);
    const name = text.decode(bytes.subarray(at + 46, at + 46 + nameLength));
    at += 46 + nameLength + extra + comment;

    expect(view.getUint32(local, true)).toBe(0x04034b50);
    expect(view.getUint16(local + 6, true)).toBe(flags);
    expect(view.getUint32(local + 14, true)).toBe(crc);
    expect(view.getUint32(local + 22, true)).toBe(length);
    const localName = view.getUint16(local + 26, true);
    const localExtra = view.getUint16(local + 28, true);
    expect(text.decode(bytes.subarray(local + 30, local + 30 + localName))).toBe(name);
    const start = local + 30 + localName + localExtra;
    entries.push({ name, data: bytes.subarray(start, start + length), crc, flags, method, time, date });
  }
  expect(at).toBe(end);
  return entries;
}

describe('crc32', () => {
  it('gives the published check value and the empty input’s', () => {
    expect(crc32(utf8.encode('123456789'))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array())).toBe(0);
    expect(crc32(utf8.encode('The quick brown fox jumps over the lazy dog'))).toBe(0x414fa339);
  });
});

describe('dosDateTime', () => {
  it('packs local time in two-second steps from 1980', () => {
    expect(dosDateTime(new Date(2025, 10, 24, 13, 45, 31))).toEqual({ time: (13 << 11) | (45 << 5) | 15, date: (45 << 9) | (11 << 5) | 24 });
    expect(dosDateTime(new Date(1970, 0, 1, 0, 0, 0)).date).toBe((0 << 9) | (1 << 5) | 1);
  });
});

describe('zip', () => {
  const when = new Date(2025, 10, 24, 13, 45, 30);
  const png = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 255, 7]);

  it('stores each file whole, with its name, checksum and date, in the order given', () => {
    const bytes = zip(
      [
        { name: 'report.md', data: '# tiny speed\n\n![TTFT per step](charts/ttft.png)\n' },
        { name: 'charts/ttft.png', data: png },
      ],
      when,
    );
    const entries = unzip(bytes);
    expect(entries.map((e) => e.name)).toEqual(['report.md', 'charts/ttft.png']);
    expect(text.decode(entries[0]!.data)).toBe('# tiny speed\n\n![TTFT per step](charts/ttft.png)\n');
    expect([...entries[1]!.data]).toEqual([...png]);
    for (const e of entries) {
      expect(e.crc).toBe(crc32(e.data));
      expect(e.method).toBe(0);
      expect(e.flags).toBe(0x0800);
      expect(e.time).toBe(dosDateTime(when).time);
      expect(e.date).toBe(dosDateTime(when).date);
    }
    // Headers and directory exactly: nothing between or after the records.
    expect(bytes.length).toBe(30 * 2 + 9 + 15 + 46 * 2 + 9 + 15 + 22 + entries[0]!.data.length + png.length);
  });

  it('writes names as UTF-8', () => {
    const [e] = unzip(zip([{ name: 'charts/débit-°C.png', data: 'x' }], when));
    expect(e!.name).toBe('charts/débit-°C.png');
  });

  it('makes an empty archive of the end record alone', () => {
    const bytes = zip([], when);
    expect(bytes.length).toBe(22);
    expect(unzip(bytes)).toEqual([]);
  });

  it('has the known bytes for a one-file archive', () => {
    const bytes = zip([{ name: 'a.txt', data: 'hi' }], new Date(1980, 0, 1, 0, 0, 0));
    const hex = [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');
    // crc32("hi") = 0xd8932aac; date 1980-01-01 = 0x0021; time 0.
    expect(hex).toBe(
      '504b0304' + '1400' + '0008' + '0000' + '0000' + '2100' + 'ac2a93d8' + '02000000' + '02000000' + '0500' + '0000' + '612e747874' + '6869' +
        '504b0102' + '1400' + '1400' + '0008' + '0000' + '0000' + '2100' + 'ac2a93d8' + '02000000' + '02000000' + '0500' + '0000' + '0000' + '0000' + '0000' + '00000000' + '00000000' + '612e747874' +
        '504b0506' + '0000' + '0000' + '0100' + '0100' + '33000000' + '25000000' + '0000',
    );
  });
});
