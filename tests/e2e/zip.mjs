// Reads a downloaded ZIP for the browser tests: its files through the central directory (the
// page writes them stored, uncompressed), and `unzip -t`'s verdict where unzip is installed, so
// an archive the page wrote is checked by a tool that did not write it.
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

/** The archive's files by name, in its order; fails on anything but stored files. */
export function zipFiles(path) {
  const bytes = readFileSync(path);
  const end = bytes.length - 22;
  assert.equal(bytes.readUInt32LE(end), 0x06054b50, "the archive ends with its end record");
  const count = bytes.readUInt16LE(end + 10);
  let at = bytes.readUInt32LE(end + 16);
  const files = new Map();
  for (let i = 0; i < count; i++) {
    assert.equal(bytes.readUInt32LE(at), 0x02014b50, `central directory entry ${i + 1}`);
    assert.equal(bytes.readUInt16LE(at + 10), 0, "stored, not compressed");
    const size = bytes.readUInt32LE(at + 24);
    const nameLength = bytes.readUInt16LE(at + 28);
    const skip = bytes.readUInt16LE(at + 30) + bytes.readUInt16LE(at + 32);
    const local = bytes.readUInt32LE(at + 42);
    const name = bytes.subarray(at + 46, at + 46 + nameLength).toString("utf8");
    const start = local + 30 + bytes.readUInt16LE(local + 26) + bytes.readUInt16LE(local + 28);
    files.set(name, bytes.subarray(start, start + size));
    at += 46 + nameLength + skip;
  }
  return files;
}

/** `unzip -t`'s output when it accepts the archive; null when unzip is not installed. */
export function unzipTest(path) {
  if (spawnSync("sh", ["-c", "command -v unzip"]).status !== 0) return null;
  return execFileSync("unzip", ["-t", path], { encoding: "utf8" });
}

/** The PNG signature: what every chart in a report starts with. */
export const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
