//! A deterministic mutation fuzzer for the reader, run as an ordinary test.
//!
//! Starting from valid files made by the writer, each case applies a few seeded mutations
//! (bit flips, random bytes, "interesting" integers over length and count fields, inserted,
//! deleted, duplicated or spliced ranges, truncation) and reads the result twice: as a file of
//! known size and as a stream of unknown size. The reader must never panic, every error must
//! carry an offset inside the input, and every success must describe tensors that fit the file.
//! Summaries are computed for every success, so odd metadata is exercised there too.
//!
//! Every one of `CASES` cases runs (about ten seconds in a debug build on two cores), so the
//! count in the README is the count tested. `GGUF_FUZZ_CASES` and `GGUF_FUZZ_SEED` run longer
//! or other campaigns.

mod common;

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::mutate::mutate;
use rigdeck_gguf::rng::SplitMix64;
use rigdeck_gguf::{GgufError, GgufFile, GgufModel, ModelSummary, ReadOptions};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

const CASES: u64 = 40_000;

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
    let mut rng = SplitMix64::new(env("GGUF_FUZZ_SEED").unwrap_or(0x6775_6666));
    let seeds = seeds();
    let started = Instant::now();
    let (mut ran, mut parsed) = (0u64, 0u64);
    for case in 0..cases {
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
    assert_eq!(ran, cases);
}
