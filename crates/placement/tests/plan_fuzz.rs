//! A deterministic mutation fuzzer for the whole planning path, run as an ordinary test:
//! mutated headers of every tiny architecture (dense, MoE, MLA, sliding-window, DSA) go through
//! the reader, `shape_of`, `plan`, the solver and the flag writer, with hostile options too.
//!
//! Each case must end in a result or a typed error: no panic, at most `CASE_MEMORY` allocated at
//! once above what the test held before it (a counting allocator measures it, and refuses any
//! allocation beyond `HARD_LIMIT` so a runaway case fails at once instead of swapping), within
//! `CASE_TIME` (a hang guard, not a performance figure: cases take milliseconds).
//!
//! Half the cases mutate bytes (as the reader's fuzzer does), half set a random numeric header
//! key (block count, head counts, context, expert counts …) to an edge value and write the header
//! again, which reaches the planner far more often than byte noise does.
//! `PLAN_FUZZ_CASES` and `PLAN_FUZZ_SEED` run longer or other campaigns.

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::mutate::{interesting, mutate};
use rigdeck_gguf::rng::SplitMix64;
use rigdeck_gguf::tiny::{TinyMla, TinyModel};
use rigdeck_gguf::{
    GgufFile, GgufModel, GgufWriter, Metadata, ReadOptions, StringArray, TokenizerArrays, Value,
};
use rigdeck_placement::from_gguf::shape_of;
use rigdeck_placement::report::report;
use rigdeck_placement::rig::{preset, Margins};
use rigdeck_placement::{DeviceSpec, KvType, PlacementOptions};

/// Cases in a default run: every one of them runs, so the README can say how many.
const CASES: u64 = 12_000;
const CASE_MEMORY: usize = 256 << 20;
const HARD_LIMIT: usize = 1 << 30;
const CASE_TIME: Duration = Duration::from_secs(5);

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting live bytes and their peak.
struct Counting;

// SAFETY: every call is passed to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.alloc(layout);
        if p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grow = new_size.saturating_sub(layout.size());
        if !reserve(grow) {
            return std::ptr::null_mut();
        }
        let p = System.realloc(ptr, layout, new_size);
        if p.is_null() {
            CURRENT.fetch_sub(grow, Ordering::Relaxed);
        } else {
            CURRENT.fetch_sub(layout.size().saturating_sub(new_size), Ordering::Relaxed);
        }
        p
    }
}

/// Counts `bytes` as live unless that would pass the hard limit.
fn reserve(bytes: usize) -> bool {
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    if now > HARD_LIMIT {
        CURRENT.fetch_sub(bytes, Ordering::Relaxed);
        return false;
    }
    PEAK.fetch_max(now, Ordering::Relaxed);
    true
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A 64-token vocabulary: enough for the writers, small enough to keep headers short.
fn vocab() -> Metadata {
    let tokens: StringArray = (0..64).map(|i| format!("t{i}")).collect();
    let mut vocab = Metadata::default();
    vocab.set("tokenizer.ggml.model", Value::from("gpt2"));
    vocab.set("tokenizer.ggml.tokens", Value::from(tokens));
    vocab
}

/// One header of each architecture family the planner knows.
fn seeds() -> Vec<GgufWriter> {
    let vocab = vocab();
    let dense = TinyModel {
        n_layer: 3,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        n_ff: 128,
        random_weights: false,
        ..TinyModel::dense_runnable()
    };
    let moe = TinyModel {
        experts: Some((8, 2)),
        ..dense.clone()
    };
    let swa = TinyModel {
        n_layer: 6,
        sliding_window: Some(32),
        ..dense.clone()
    };
    let mla = TinyModel {
        experts: Some((8, 2)),
        mla: Some(TinyMla {
            kv_lora_rank: 32,
            rope_dim: 16,
            nope_dim: 16,
            v_dim: 16,
        }),
        ..dense.clone()
    };
    let mut dsa = MoeShape::small();
    dsa.vocab = 64;
    vec![
        dense.writer(&vocab),
        moe.writer(&vocab),
        swa.writer(&vocab),
        mla.writer(&vocab),
        dsa.writer(),
    ]
}

/// Sets one numeric metadata key (or one element's worth of an array key) to an edge value.
fn mutate_key(rng: &mut SplitMix64, writer: &GgufWriter) -> GgufWriter {
    let mut out = writer.clone();
    let numeric: Vec<String> = writer
        .metadata()
        .iter()
        .filter(|(_, v)| v.as_u64().is_some() || v.as_i64().is_some() || v.as_array().is_some())
        .map(|(k, _)| k.to_owned())
        .collect();
    if numeric.is_empty() {
        return out;
    }
    let key = &numeric[rng.below_usize(numeric.len())];
    let v = interesting(rng);
    let value = match rng.below(4) {
        0 => Value::U32(v as u32),
        1 => Value::U64(v),
        2 => Value::I32(v as i32),
        _ => Value::from(vec![v as u32; 1 + rng.below_usize(8)]),
    };
    out.set(key, value);
    out
}

/// Options as a user (or a hostile API client) might send them.
fn options(rng: &mut SplitMix64) -> PlacementOptions {
    const CONTEXTS: &[u32] = &[0, 1, 256, 4096, 131_072, 1 << 24, u32::MAX];
    const SLOTS: &[u32] = &[0, 1, 4, 255, u32::MAX];
    const BATCHES: &[u32] = &[1, 512, 2048, u32::MAX];
    const KV: &[KvType] = &[KvType::F16, KvType::Q8_0, KvType::Q4_0];
    let pick = |rng: &mut SplitMix64, list: &[u32]| list[rng.below_usize(list.len())];
    let mut o = PlacementOptions {
        context: pick(rng, CONTEXTS),
        parallel: pick(rng, SLOTS),
        ubatch: pick(rng, BATCHES),
        batch: pick(rng, BATCHES),
        flash_attention: rng.below(2) == 0,
        kv_unified: rng.below(2) == 0,
        cache_type_k: KV[rng.below_usize(KV.len())],
        cache_type_v: KV[rng.below_usize(KV.len())],
        ..PlacementOptions::default()
    };
    if rng.below(3) == 0 {
        o.n_gpu_layers = Some(pick(rng, &[0, 1, 2, 1000, u32::MAX]));
    }
    if rng.below(3) == 0 {
        o.overrides = vec![PlacementOptions::cpu_moe_override()];
    }
    o
}

/// How far a case got: 0 = the reader refused it, 1 = read, 2 = shaped, 3 = planned.
type Depth = usize;

/// Reader → shape → plan (as given, then solved) → flags. Any outcome but a panic is fine.
fn run_case(bytes: &[u8], options: &PlacementOptions, devices: &[DeviceSpec]) -> Depth {
    // As `load_shape` reads a model: the tokenizer's arrays only counted.
    let read = ReadOptions {
        file_name: Some("fuzz.gguf".into()),
        file_size: None,
        max_header_bytes: None,
        tokenizer_arrays: TokenizerArrays::Counted,
    };
    let Ok(file) = GgufFile::read(bytes, &read) else {
        return 0;
    };
    let Ok(model) = GgufModel::from_shards(vec![file]) else {
        return 1;
    };
    let Ok(shape) = shape_of(&model, "fuzz.gguf") else {
        return 1;
    };
    let mut depth = 2;
    for auto in [false, true] {
        if let Ok(r) = report(&shape, "/models/fuzz.gguf", devices, options, auto) {
            // A plan that says it fits must fit on every device, whatever the header claimed.
            if r.fits {
                assert!(r.plan.devices.iter().all(|d| d.overflow_bytes == 0));
            }
            let _ = serde_json::to_string(&r).unwrap();
            depth = 3;
        }
    }
    depth
}

/// One case for the worker: header bytes, options, and which rig.
type Case = (Vec<u8>, PlacementOptions, usize);

/// Runs cases on a thread of its own, so a case that hangs fails the test after `CASE_TIME`
/// instead of holding it for as long as the hang lasts.
fn spawn_worker(
    rigs: Vec<Vec<DeviceSpec>>,
) -> (Sender<Case>, Receiver<std::thread::Result<Depth>>) {
    let (cases_tx, cases_rx) = channel::<Case>();
    let (done_tx, done_rx) = channel();
    std::thread::spawn(move || {
        for (bytes, options, rig) in cases_rx {
            let devices = &rigs[rig];
            let outcome = catch_unwind(AssertUnwindSafe(|| run_case(&bytes, &options, devices)));
            if done_tx.send(outcome).is_err() {
                break;
            }
        }
    });
    (cases_tx, done_rx)
}

#[test]
fn mutated_headers_of_every_architecture_plan_or_fail_cleanly() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let cases = env("PLAN_FUZZ_CASES").unwrap_or(CASES);
    let mut rng = SplitMix64::new(env("PLAN_FUZZ_SEED").unwrap_or(0x706c_616e));
    let seeds = seeds();
    let donors: Vec<Vec<u8>> = seeds.iter().map(|w| w.header_bytes().unwrap()).collect();
    let rigs: Vec<Vec<DeviceSpec>> = ["4x3090", "cpu-minipc", "2xgh200"]
        .iter()
        .map(|id| preset(id).unwrap().devices(&Margins::default()))
        .collect();
    let n_rigs = rigs.len();
    let (worker, results) = spawn_worker(rigs);
    let started = Instant::now();
    let (mut slowest, mut peak_above) = (Duration::ZERO, 0usize);
    let mut reached = [0u64; 4];
    for case in 0..cases {
        let seed = rng.below_usize(seeds.len());
        let bytes = if rng.below(2) == 0 {
            let mut data = donors[seed].clone();
            mutate(&mut rng, &mut data, &donors);
            data
        } else {
            // A header the writer refuses becomes no bytes: the reader refuses those.
            mutate_key(&mut rng, &seeds[seed])
                .header_bytes()
                .unwrap_or_default()
        };
        let options = options(&mut rng);
        let rig = rng.below_usize(n_rigs);
        let head = format!("{:02x?}", &bytes[..bytes.len().min(64)]);
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let begun = Instant::now();
        worker.send((bytes, options.clone(), rig)).unwrap();
        let outcome = match results.recv_timeout(CASE_TIME) {
            Ok(outcome) => outcome,
            Err(_) => panic!("case {case} did not finish within {CASE_TIME:?}; header starts {head}; options {options:?}"),
        };
        let took = begun.elapsed();
        let above = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        let Ok(depth) = outcome else {
            panic!("case {case} panicked; header starts {head}; options {options:?}");
        };
        reached[depth] += 1;
        assert!(
            above <= CASE_MEMORY,
            "case {case} allocated {above} bytes at once; header starts {head}; options {options:?}"
        );
        slowest = slowest.max(took);
        peak_above = peak_above.max(above);
    }
    eprintln!(
        "plan fuzz: {cases} cases ({} refused by the reader, {} by shape_of, {} by the planner, \
         {} planned) in {:.1} s; slowest {:.1} ms, largest allocation peak {:.1} MiB",
        reached[0],
        reached[1],
        reached[2],
        reached[3],
        started.elapsed().as_secs_f64(),
        slowest.as_secs_f64() * 1e3,
        peak_above as f64 / (1 << 20) as f64
    );
}
