//! SHA-256 whose state can be saved and restored, so a download resumed after a pause, a crash
//! or `kill -9` goes on hashing where it stopped instead of reading the received bytes again.
//! The block function is `sha2`'s (with the CPU's SHA extensions where present); only the
//! padding and the state bookkeeping are ours.

use serde::{Deserialize, Serialize};
use sha2::digest::generic_array::GenericArray;

const BLOCK: usize = 64;
const INITIAL: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumableSha256 {
    state: [u32; 8],
    /// Bytes hashed so far, including `pending`.
    length: u64,
    /// The tail that does not fill a block yet (fewer than 64 bytes).
    pending: Vec<u8>,
}

/// The saved form: what a resume journal holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sha256Checkpoint {
    pub state: [u32; 8],
    pub length: u64,
    /// Hex of the unfinished block's bytes.
    pub pending: String,
}

impl Default for ResumableSha256 {
    fn default() -> Self {
        ResumableSha256 {
            state: INITIAL,
            length: 0,
            pending: Vec::with_capacity(BLOCK),
        }
    }
}

impl ResumableSha256 {
    pub fn update(&mut self, mut data: &[u8]) {
        self.length = self.length.saturating_add(data.len() as u64);
        if !self.pending.is_empty() {
            let take = (BLOCK - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() < BLOCK {
                return;
            }
            let block = std::mem::take(&mut self.pending);
            self.compress(&block);
        }
        let whole = data.len() - data.len() % BLOCK;
        self.compress(&data[..whole]);
        self.pending.extend_from_slice(&data[whole..]);
    }

    /// Runs the block function over whole blocks (`blocks.len()` is a multiple of 64).
    fn compress(&mut self, blocks: &[u8]) {
        debug_assert_eq!(blocks.len() % BLOCK, 0);
        // SAFETY: `GenericArray<u8, U64>` is `#[repr(transparent)]` over nested `#[repr(C)]`
        // arrays of `u8` (size 64, alignment 1, no padding, every bit pattern valid), so each
        // whole 64-byte block of a byte slice is a valid value of it, and the count is rounded
        // down to whole blocks. This saves a copy of every byte downloaded.
        let blocks = unsafe {
            std::slice::from_raw_parts(
                blocks
                    .as_ptr()
                    .cast::<GenericArray<u8, sha2::digest::consts::U64>>(),
                blocks.len() / BLOCK,
            )
        };
        sha2::compress256(&mut self.state, blocks);
    }

    /// Bytes hashed so far.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The digest as lowercase hex (the hash itself is not consumed: a checkpoint taken
    /// before stays valid).
    pub fn hex_digest(&self) -> String {
        let mut last = self.clone();
        let bit_length = last.length.wrapping_mul(8);
        let mut tail = std::mem::take(&mut last.pending);
        tail.push(0x80);
        while tail.len() % BLOCK != BLOCK - 8 {
            tail.push(0);
        }
        tail.extend_from_slice(&bit_length.to_be_bytes());
        last.compress(&tail);
        last.state
            .iter()
            .map(|word| format!("{word:08x}"))
            .collect()
    }

    pub fn checkpoint(&self) -> Sha256Checkpoint {
        Sha256Checkpoint {
            state: self.state,
            length: self.length,
            pending: self.pending.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The hash a checkpoint describes; `None` when the checkpoint is inconsistent (a pending
    /// tail that is not the length's remainder, or not hex).
    pub fn restore(checkpoint: &Sha256Checkpoint) -> Option<ResumableSha256> {
        let text = checkpoint.pending.as_bytes();
        if !text.len().is_multiple_of(2) {
            return None;
        }
        let pending = text
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        if pending.len() as u64 != checkpoint.length % BLOCK as u64 {
            return None;
        }
        Some(ResumableSha256 {
            state: checkpoint.state,
            length: checkpoint.length,
            pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn reference(data: &[u8]) -> String {
        Sha256::digest(data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn matches_sha2_for_every_length_around_block_edges() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..data.len() {
            let mut hash = ResumableSha256::default();
            hash.update(&data[..len]);
            assert_eq!(hash.hex_digest(), reference(&data[..len]), "length {len}");
        }
    }

    #[test]
    fn a_restored_checkpoint_continues_the_same_hash() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        for split in [0, 1, 63, 64, 65, 4097, 9999] {
            let mut first = ResumableSha256::default();
            // Feed in uneven pieces, as network frames arrive.
            for piece in data[..split].chunks(37) {
                first.update(piece);
            }
            let saved = serde_json::to_string(&first.checkpoint()).expect("json");
            let checkpoint: Sha256Checkpoint = serde_json::from_str(&saved).expect("parse");
            let mut resumed = ResumableSha256::restore(&checkpoint).expect("restore");
            resumed.update(&data[split..]);
            assert_eq!(resumed.hex_digest(), reference(&data), "split at {split}");
        }
    }

    #[test]
    fn an_inconsistent_checkpoint_is_not_restored() {
        let mut hash = ResumableSha256::default();
        hash.update(b"abc");
        let mut checkpoint = hash.checkpoint();
        checkpoint.length = 4;
        assert!(ResumableSha256::restore(&checkpoint).is_none());
        checkpoint.length = 3;
        checkpoint.pending = "zz".repeat(3);
        assert!(ResumableSha256::restore(&checkpoint).is_none());
    }
}
