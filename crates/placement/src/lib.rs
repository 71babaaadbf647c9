//! The placement planner: which GPU (or CPU RAM) each layer and each block of experts goes to,
//! and the memory every device then needs, following llama.cpp's own rules.

pub mod ceiling;
mod compute;
pub mod correction;
pub mod flags;
pub mod from_gguf;
pub mod kv;
pub mod layers;
pub mod link;
pub mod model;
pub mod options;
pub mod plan;
pub mod report;
pub mod rig;
pub mod solver;
#[cfg(test)]
pub(crate) mod testing;
pub mod verdict;

pub use correction::Correction;
pub use model::{AttentionLayout, ExpertShape, ModelShape, ModelTensor, TensorRole};
pub use options::{DeviceId, KvType, PlacementOptions, RpcServer, SplitMode, TensorOverride};
pub use plan::{plan, DevicePlan, DeviceSpec, DeviceUsage, Plan, PlanError};
