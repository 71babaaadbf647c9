//! What llama.cpp's scheduler (`ggml_backend_sched`) adds to each device's share of the graph
//! beyond its own layers: op offload ([`super::op_offload`]), and pipeline parallelism, which
//! keeps several copies of every input each device receives so that micro-batches overlap.

use crate::layers::LayerDevices;
use crate::model::ModelShape;
use crate::options::{DeviceId, PlacementOptions, SplitMode};

use super::op_offload::OpOffload;

/// The copies pipeline parallelism keeps of each input (`GGML_SCHED_MAX_COPIES`).
const PIPELINE_COPIES: u32 = 4;

/// How the scheduler runs one plan's graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Scheduler {
    pub(crate) offload: OpOffload,
    /// The copies of each input a device's (and the host's) buffer holds: 1, or with pipeline
    /// parallelism [`PIPELINE_COPIES`].
    pub(crate) copies: u32,
}

impl Scheduler {
    /// For a plan over `devices` (in llama.cpp's order) that puts each tensor of `model` on
    /// `tensor_devices` and each layer on `layers`.
    pub(crate) fn of(
        model: &ModelShape,
        devices: &[DeviceId],
        layers: &LayerDevices,
        tensor_devices: &[DeviceId],
        options: &PlacementOptions,
    ) -> Scheduler {
        Scheduler {
            offload: OpOffload::of(model, devices, layers, tensor_devices, options),
            copies: match pipeline_parallel(devices, layers, options) {
                true => PIPELINE_COPIES,
                false => 1,
            },
        }
    }
}

/// `llama_context`'s condition: more than one offload device (one holding nothing counts),
/// every layer and the output on them, split by layer, the cache with its layers, and no
/// tensor sent elsewhere by `-ot` (CUDA and RPC devices have the events it needs).
fn pipeline_parallel(
    devices: &[DeviceId],
    layers: &LayerDevices,
    options: &PlacementOptions,
) -> bool {
    let offload_devices = devices.iter().filter(|d| d.is_offload()).count();
    let all_offloaded = layers.output.is_offload() && layers.layers.iter().all(|d| d.is_offload());
    offload_devices > 1
        && all_offloaded
        && options.split_mode == SplitMode::Layer
        && options.kv_offload
        && options.overrides.is_empty()
}
