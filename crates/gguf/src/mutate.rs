//! Seeded mutations of GGUF bytes for the bounded fuzzers (the reader's in this crate, the
//! whole planning path's in `rigdeck-core`): bit flips, random bytes, "interesting" integers
//! over length and count fields, inserted, deleted, duplicated or spliced ranges, truncation.

use crate::rng::SplitMix64;

/// Values that sit on the edges of the reader's and the planner's checks.
pub const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    9,
    12,
    13,
    31,
    32,
    33,
    255,
    256,
    4096,
    65535,
    1 << 20,
    64 << 20,
    (64 << 20) + 1,
    1 << 30,
    (1 << 31) - 1,
    1 << 31,
    1 << 32,
    (1 << 32) - 1,
    1 << 40,
    (1 << 62) + 1,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
    u64::MAX - 1,
];

/// One of [`INTERESTING`], chosen by `rng`.
pub fn interesting(rng: &mut SplitMix64) -> u64 {
    let i = rng.below_usize(INTERESTING.len());
    INTERESTING.get(i).copied().unwrap_or(0)
}

/// Applies one to four mutations to `data`; `donors` are other valid files to splice from.
pub fn mutate(rng: &mut SplitMix64, data: &mut Vec<u8>, donors: &[Vec<u8>]) {
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = data.len();
        let at = rng.below_usize(len.max(1)).min(len);
        match rng.below(9) {
            0 => {
                if let Some(b) = data.get_mut(at) {
                    *b ^= 1 << rng.below(8);
                }
            }
            1 => {
                if let Some(b) = data.get_mut(at) {
                    *b = rng.next_u64() as u8;
                }
            }
            2 | 3 => {
                // An interesting value over a u64 or u32 field (lengths, counts, types, dims).
                let v = interesting(rng);
                let width = if rng.below(2) == 0 { 8 } else { 4 };
                for (i, b) in v.to_le_bytes().into_iter().take(width).enumerate() {
                    if let Some(d) = data.get_mut(at + i) {
                        *d = b;
                    }
                }
            }
            4 => {
                let n = 1 + rng.below_usize(16);
                let mut ins = vec![0u8; n];
                rng.fill_bytes(&mut ins);
                data.splice(at..at, ins);
            }
            5 => {
                let end = (at + 1 + rng.below_usize(64)).min(len);
                data.drain(at..end);
            }
            6 => data.truncate(at),
            7 => {
                // Duplicate a range (repeats keys, tensor infos, array elements).
                let end = (at + 1 + rng.below_usize(256)).min(len);
                let chunk = data.get(at..end).unwrap_or_default().to_vec();
                let to = rng.below_usize(data.len() + 1).min(data.len());
                data.splice(to..to, chunk);
            }
            _ => {
                // Splice in a range from another file.
                let Some(other) = donors.get(rng.below_usize(donors.len().max(1))) else {
                    continue;
                };
                let from = rng.below_usize(other.len().max(1));
                let end = (from + 1 + rng.below_usize(256)).min(other.len());
                let piece = other.get(from..end).unwrap_or_default();
                let to = (at + piece.len()).min(len);
                data.splice(at..to, piece.iter().copied());
            }
        }
    }
}
