// A ZIP archive written in the page, files stored as they are (no compression: PNGs are
// compressed already and a report's text is small), so a download can hold several files
// without a library. The format is PKWARE's APPNOTE: per file a local header and its bytes, then
// the central directory and its end record. Names are UTF-8 (flag bit 11); no ZIP64, so at most
// 65535 files and 4 GiB, far beyond a report.

export interface ZipFile {
  /** Its path in the archive, `/` between folders: "charts/ttft.png". */
  name: string;
  /** Text is stored as UTF-8. */
  data: Uint8Array | string;
}

const LOCAL_HEADER = 0x04034b50;
const CENTRAL_HEADER = 0x02014b50;
const END_OF_CENTRAL = 0x06054b50;
/** 2.0: the version a reader needs for stored files in folders. */
const VERSION = 20;
/** General purpose bit 11: the name is UTF-8. */
const UTF8_NAMES = 0x0800;
const STORED = 0;
const MAX_16 = 0xffff;
const MAX_32 = 0xffffffff;

let table: Uint32Array | null = null;

/** CRC-32's table (the reflected polynomial 0xEDB88320), made on first use. */
function crcTable(): Uint32Array {
  if (table) return table;
  table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
}

/** The CRC-32 ZIP (and PNG, gzip) checks each file with: "123456789" → 0xCBF43926. */
export function crc32(data: Uint8Array): number {
  const t = crcTable();
  let c = MAX_32;
  for (let i = 0; i < data.length; i++) c = t[(c ^ data[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ MAX_32) >>> 0;
}

/** MS-DOS time and date, as ZIP keeps them (local time, two-second steps, from 1980). */
export function dosDateTime(d: Date): { time: number; date: number } {
  const year = Math.min(2107, Math.max(1980, d.getFullYear()));
  return {
    time: (d.getHours() << 11) | (d.getMinutes() << 5) | (d.getSeconds() >> 1),
    date: ((year - 1980) << 9) | ((d.getMonth() + 1) << 5) | d.getDate(),
  };
}

interface Prepared {
  name: Uint8Array;
  data: Uint8Array;
  crc: number;
  offset: number;
}

/** The archive's bytes: the files in the order given, each stamped with `modified`. */
export function zip(files: readonly ZipFile[], modified: Date = new Date()): Uint8Array<ArrayBuffer> {
  if (files.length > MAX_16) throw new Error(`a ZIP without ZIP64 holds at most ${MAX_16} files`);
  const utf8 = new TextEncoder();
  const { time, date } = dosDateTime(modified);
  let offset = 0;
  const prepared: Prepared[] = files.map((f) => {
    const name = utf8.encode(f.name);
    const data = typeof f.data === 'string' ? utf8.encode(f.data) : f.data;
    const p = { name, data, crc: crc32(data), offset };
    offset += 30 + name.length + data.length;
    return p;
  });
  const centralStart = offset;
  const centralSize = prepared.reduce((n, p) => n + 46 + p.name.length, 0);
  const total = centralStart + centralSize + 22;
  if (total > MAX_32) throw new Error('a ZIP without ZIP64 holds at most 4 GiB');

  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let at = 0;
  const u16 = (v: number) => {
    view.setUint16(at, v, true);
    at += 2;
  };
  const u32 = (v: number) => {
    view.setUint32(at, v, true);
    at += 4;
  };
  const bytes = (b: Uint8Array) => {
    out.set(b, at);
    at += b.length;
  };
  /** The fields the local and central headers share, from "version needed" to the extra's length. */
  const common = (p: Prepared) => {
    u16(VERSION);
    u16(UTF8_NAMES);
    u16(STORED);
    u16(time);
    u16(date);
    u32(p.crc);
    u32(p.data.length);
    u32(p.data.length);
    u16(p.name.length);
    u16(0);
  };

  for (const p of prepared) {
    u32(LOCAL_HEADER);
    common(p);
    bytes(p.name);
    bytes(p.data);
  }
  for (const p of prepared) {
    u32(CENTRAL_HEADER);
    u16(VERSION); // made by: MS-DOS attributes, version 2.0
    common(p);
    u16(0); // comment length
    u16(0); // disk number
    u16(0); // internal attributes
    u32(0); // external attributes
    u32(p.offset);
    bytes(p.name);
  }
  u32(END_OF_CENTRAL);
  u16(0); // this disk
  u16(0); // the disk the central directory starts on
  u16(prepared.length);
  u16(prepared.length);
  u32(centralSize);
  u32(centralStart);
  u16(0); // comment length
  return out;
}
