//! A deterministic mutation fuzzer for the reader, run as an ordinary test.
//!
//! Starting from valid files made by the writer, each case applies a few seeded mutations
//! (bit flips, random bytes, "interesting" integers over length and count fields, inserted,
//! deleted, duplicated or spliced ranges, truncation) and reads the result twice: as a file of
//! known size and as a stream of unknown size. The reader must never panic, every error must
//! carry an offset inside the input, and every success must describe tensors that fit the file.
//! Summaries are computed for every success, so odd metadata is exercised there too.
//!
//! Bounded in time: `CASES` cases or `BUDGET`, whichever comes first (a few seconds in a debug
//! build on two cores). `GGUF_FUZZ_CASES` and `GGUF_FUZZ_SEED` run longer or other campaigns.

mod common;

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::rng::SplitMix64;
use rigdeck_gguf::{GgufError, GgufFile, GgufModel, ModelSummary, ReadOptions};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

const CASES: u64 = 40_000;
const BUDGET: Duration = Duration::from_secs(15);

fn seeds() -> Vec<Vec<u8>> {
    let mut tiny = rigdeck_gguf::GgufWriter::new();
    tiny.set("general.architecture", "llama")
        .set("llama.block_count", 1u32)
        .add_tensor(
            "w",
            &[32],
            rigdeck_gguf::GgmlType::Q8_0,
            rigdeck_gguf::TensorData::Zeros,
        );
    let mut moe = MoeShape::small();
    moe.vocab = 64;
    vec![
        common::every_type_writer().to_bytes().unwrap(),
        tiny.to_bytes().unwrap(),
        moe.writer().header_bytes().unwrap(),
    ]
}

/// Values that sit on the edges of the reader's checks.
const INTERESTING: &[u64] = &[
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

fn mutate(rng: &mut SplitMix64, data: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = data.len();
        let at = rng.below_usize(len.max(1));
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
                let v = INTERESTING[rng.below_usize(INTERESTING.len())];
                let width = if rng.below(2) == 0 { 8 } else { 4 };
                let bytes = v.to_le_bytes();
                for (i, &b) in bytes.iter().take(width).enumerate() {
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
                let chunk = data[at..end].to_vec();
                let to = rng.below_usize(data.len() + 1);
                data.splice(to..to, chunk);
            }
            _ => {
                // Splice in a range from another seed.
                let other = &seeds[rng.below_usize(seeds.len())];
                let from = rng.below_usize(other.len());
                let end = (from + 1 + rng.below_usize(256)).min(other.len());
                let to = (at + (end - from)).min(len);
                data.splice(at..to, other[from..end].iter().copied());
            }
        }
    }
}

fn check_error(e: &GgufError, input_len: usize, case: u64) {
    let offset = e
        .offset
        .unwrap_or_else(|| panic!("case {case}: error without offset: {e}"));
    assert!(
        offset <= input_len as u64,
        "case {case}: offset {offset} beyond {input_len}: {e}"
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with("GGUF data ") && msg.len() > 20,
        "case {case}: {msg}"
    );
}

fn check_ok(f: &GgufFile, input_len: usize, case: u64) {
    assert!(
        f.header_bytes <= input_len as u64 || f.file_size.is_none(),
        "case {case}"
    );
    if f.file_size.is_some() {
        assert!(f.data_end() <= input_len as u64, "case {case}");
    }
    for t in &f.tensors {
        assert_eq!(t.offset % f.alignment, 0, "case {case}");
        assert!(t.dims.len() <= 4, "case {case}");
    }
    let summary = ModelSummary::from_file(f);
    let _ = serde_json::to_string(&summary).unwrap();
    let _ = GgufModel::from_shards(vec![f.clone()]);
}

#[test]
fn mutated_files_never_panic_and_errors_carry_offsets() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let cases = env("GGUF_FUZZ_CASES").unwrap_or(CASES);
    let budget = if env("GGUF_FUZZ_CASES").is_some() {
        Duration::MAX
    } else {
        BUDGET
    };
    let mut rng = SplitMix64::new(env("GGUF_FUZZ_SEED").unwrap_or(0x6775_6666));
    let seeds = seeds();
    let started = Instant::now();
    let (mut ran, mut parsed) = (0u64, 0u64);
    for case in 0..cases {
        if started.elapsed() > budget {
            break;
        }
        let mut data = seeds[rng.below_usize(seeds.len())].clone();
        mutate(&mut rng, &mut data, &seeds);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut ok = 0;
            match GgufFile::from_bytes(&data, None) {
                Ok(f) => {
                    check_ok(&f, data.len(), case);
                    ok += 1;
                }
                Err(e) => check_error(&e, data.len(), case),
            }
            match GgufFile::read(&data[..], &ReadOptions::default()) {
                Ok(f) => check_ok(&f, data.len(), case),
                Err(e) => check_error(&e, data.len(), case),
            }
            ok
        }));
        match outcome {
            Ok(ok) => parsed += ok,
            Err(_) => panic!(
                "case {case} panicked; input ({} bytes) starts {:02x?}",
                data.len(),
                &data[..data.len().min(64)]
            ),
        }
        ran += 1;
    }
    eprintln!(
        "gguf fuzz: {ran} cases ({parsed} still valid) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(ran >= 2_000, "only {ran} cases ran within the budget");
}
