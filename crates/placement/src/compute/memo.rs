//! What a solver has already worked out for the one model it plans many times
//! ([`remembering`]): a device holding the same layers (and the output or not) under the same
//! context and batch options gets the same graph and so the same compute buffer, which is looked
//! up instead of being built and replayed again; the same `-ot` patterns match the same tensors.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::builder::GraphBackend;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::options::{DeviceId, PlacementOptions};

use super::op_offload::{reads_from_host, FromHost};
use super::scheduler::Scheduler;

/// Everything of a device's share that its graph reads besides the model: the layers it holds,
/// whether it holds the output, the geometry and the options the builders and the formulas read.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ShareKey {
    /// The host's graph looks the tokens up and holds the inputs, a CUDA GPU's fuses
    /// ([`super::builder::replay`]).
    backend: GraphBackend,
    held: Vec<u32>,
    holds_output: bool,
    geometry: (u64, u64, u64),
    batch: (u32, u32, u32),
    kv_unified: bool,
    flash_attention: bool,
    /// K's and V's cache types, by name.
    cache_types: (&'static str, &'static str),
    /// What the scheduler changes in this device's graph: what it reads from host memory
    /// (op offload), the device of the layer before its first (the host's, another's), the
    /// GPU that runs the host's layers for this batch, and the copies of each input.
    from_host: Option<Vec<FromHost>>,
    before: Option<DeviceId>,
    host_layers_run_on: Option<DeviceId>,
    copies: u32,
}

impl ShareKey {
    fn of(
        device: DeviceId,
        layers: &LayerDevices,
        g: &ContextGeometry,
        (options, scheduler): (&PlacementOptions, &Scheduler),
    ) -> ShareKey {
        let held: Vec<u32> = (0..layers.layers.len())
            .filter(|&il| layers.layers[il] == device)
            .map(|il| il as u32)
            .collect();
        let tokens = super::builder::batch_tokens(g, options);
        let holds_output = layers.output == device;
        let first_held = held.first().map(|&il| il as usize);
        let before = super::builder::layer_before(first_held, holds_output, layers.layers.len())
            .and_then(|il| layers.layers.get(il).copied());
        ShareKey {
            backend: GraphBackend::of(device),
            held,
            holds_output,
            geometry: (g.n_ctx, g.n_ctx_seq, g.n_stream),
            batch: (options.ubatch, options.batch, options.parallel),
            kv_unified: options.kv_unified,
            flash_attention: options.flash_attention,
            cache_types: (options.cache_type_k.name(), options.cache_type_v.name()),
            from_host: reads_from_host(device, layers, &scheduler.offload, tokens),
            before,
            host_layers_run_on: scheduler
                .offload
                .target
                .filter(|_| scheduler.offload.takes_host_layers(tokens)),
            copies: scheduler.copies,
        }
    }
}

/// What one solve has worked out.
#[derive(Default)]
struct Remembered {
    /// Compute buffers by share.
    shares: HashMap<ShareKey, u64>,
    /// For each `-ot` pattern, whether each tensor's name matches it.
    matches: HashMap<String, Rc<[bool]>>,
}

thread_local! {
    /// The current solve's memo; `None` outside [`remembering`].
    static REMEMBERED: RefCell<Option<Remembered>> = const { RefCell::new(None) };
}

/// Runs `solve`, which plans one model (and only that one) many times, with what it works out
/// remembered ([`recall`], [`remembered_matches`]); forgotten when it returns or unwinds. Nested
/// calls share the outer memo.
pub(crate) fn remembering<T>(solve: impl FnOnce() -> T) -> T {
    let outermost = REMEMBERED.with(|memo| {
        let mut memo = memo.borrow_mut();
        let outermost = memo.is_none();
        if outermost {
            *memo = Some(Remembered::default());
        }
        outermost
    });
    /// Forgets the memo when the outermost call ends, even by a panic.
    struct Forget(bool);
    impl Drop for Forget {
        fn drop(&mut self) {
            if self.0 {
                REMEMBERED.with(|memo| *memo.borrow_mut() = None);
            }
        }
    }
    let _forget = Forget(outermost);
    solve()
}

/// Whether a solve's memo is active.
fn active() -> bool {
    REMEMBERED.with(|memo| memo.borrow().is_some())
}

/// The compute buffer of `device`'s share: remembered inside [`remembering`], else `estimate`d
/// (and remembered there).
pub(super) fn recall(
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    share: (&PlacementOptions, &Scheduler),
    estimate: impl FnOnce() -> u64,
) -> u64 {
    if !active() {
        return estimate();
    }
    let key = ShareKey::of(device, layers, g, share);
    let known = REMEMBERED.with(|memo| memo.borrow().as_ref()?.shares.get(&key).copied());
    if let Some(bytes) = known {
        return bytes;
    }
    let bytes = estimate();
    REMEMBERED.with(|memo| {
        if let Some(memo) = memo.borrow_mut().as_mut() {
            memo.shares.insert(key, bytes);
        }
    });
    bytes
}

/// Whether each tensor's name matches `pattern`: remembered inside [`remembering`], else
/// `find`-ed (and remembered there when found). Kept per pattern, so the lists a solver tries
/// (each a new device's pattern before the same catch-all) match each pattern once.
pub(crate) fn remembered_matches<E>(
    pattern: &str,
    find: impl FnOnce() -> Result<Vec<bool>, E>,
) -> Result<Rc<[bool]>, E> {
    if !active() {
        return find().map(Rc::from);
    }
    let known = REMEMBERED.with(|memo| memo.borrow().as_ref()?.matches.get(pattern).cloned());
    if let Some(matches) = known {
        return Ok(matches);
    }
    let matches: Rc<[bool]> = Rc::from(find()?);
    REMEMBERED.with(|memo| {
        if let Some(memo) = memo.borrow_mut().as_mut() {
            memo.matches.insert(pattern.to_owned(), Rc::clone(&matches));
        }
    });
    Ok(matches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, Plan};
    use crate::solver::solve;
    use crate::testing::{gpus, shape_of_writer, GIB};
    use crate::KvType;
    use rigdeck_gguf::fixtures::MoeShape;

    fn computes(plan: &Plan) -> Vec<u64> {
        plan.devices
            .iter()
            .map(|d| d.usage.compute_estimate_bytes)
            .collect()
    }

    #[test]
    fn a_solve_gives_the_figures_each_share_gives_alone_and_forgets_them() {
        let model = shape_of_writer(&MoeShape::small().writer()).expect("the fixture reads");
        let devices = gpus(3, 2 * GIB);
        let options = PlacementOptions {
            context: 32_768,
            cache_type_k: KvType::Q8_0,
            cache_type_v: KvType::Q8_0,
            ..Default::default()
        };
        let solution = solve(&model, &devices, &options).unwrap();
        assert!(REMEMBERED.with(|memo| memo.borrow().is_none()));
        let alone = plan(&model, &devices, &solution.options).unwrap();
        assert_eq!(computes(&solution.plan), computes(&alone));
        assert!(
            computes(&alone).iter().filter(|&&c| c > 0).count() >= 2,
            "{:?}",
            computes(&alone)
        );
    }

    #[test]
    fn remembered_override_matches_follow_the_patterns() {
        use crate::{DeviceId, TensorOverride};
        let model = shape_of_writer(&MoeShape::small().writer()).expect("the fixture reads");
        let devices = gpus(2, 80 * GIB);
        let to_cpu = |patterns: &[&str]| PlacementOptions {
            overrides: patterns
                .iter()
                .map(|&p| TensorOverride {
                    pattern: p.to_owned(),
                    device: DeviceId::Cpu,
                })
                .collect(),
            ..Default::default()
        };
        let variants = [
            to_cpu(&[r"blk\.1\.ffn_.*_exps\."]),
            to_cpu(&[r"blk\.2\.ffn_.*_exps\."]),
            to_cpu(&[r"blk\.2\.ffn_.*_exps\.", r"blk\.[12]\.ffn_.*_exps\."]),
            to_cpu(&[]),
        ];
        let placed = |plan: &Plan| (plan.tensor_devices.clone(), plan.override_hits.clone());
        let alone: Vec<_> = variants
            .iter()
            .map(|options| placed(&plan(&model, &devices, options).unwrap()))
            .collect();
        let remembered: Vec<_> = remembering(|| {
            variants
                .iter()
                .map(|options| placed(&plan(&model, &devices, options).unwrap()))
                .collect()
        });
        assert_eq!(remembered, alone);
        assert_ne!(alone[0], alone[1]);
        assert_ne!(alone[2], alone[3]);
    }

    #[test]
    fn a_remembered_share_is_not_reused_under_other_options() {
        let model = shape_of_writer(&MoeShape::small().writer()).expect("the fixture reads");
        let devices = gpus(2, 80 * GIB);
        let variants = [
            PlacementOptions::default(),
            PlacementOptions {
                ubatch: 256,
                ..Default::default()
            },
            PlacementOptions {
                parallel: 3,
                kv_unified: false,
                ..Default::default()
            },
            PlacementOptions {
                flash_attention: false,
                ..Default::default()
            },
            PlacementOptions {
                context: 8192,
                ..Default::default()
            },
            PlacementOptions {
                cache_type_k: KvType::Q4_0,
                cache_type_v: KvType::Q4_0,
                ..Default::default()
            },
        ];
        let alone: Vec<Vec<u64>> = variants
            .iter()
            .map(|options| computes(&plan(&model, &devices, options).unwrap()))
            .collect();
        let remembered: Vec<Vec<u64>> = remembering(|| {
            variants
                .iter()
                .map(|options| computes(&plan(&model, &devices, options).unwrap()))
                .collect()
        });
        assert_eq!(remembered, alone);
        let distinct: std::collections::HashSet<&Vec<u64>> = alone.iter().collect();
        assert!(distinct.len() >= 5, "{alone:?}");
    }
}
