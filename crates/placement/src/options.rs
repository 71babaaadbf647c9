//! The knobs of a placement, in llama-server's own terms (`-ngl`, `-ts`, `-ot`, `-c`, `-np`, …).

use serde::{Deserialize, Serialize};

/// The regex llama.cpp uses for routed-expert tensors (`common/common.h`, LLM_FFN_EXPS_REGEX).
pub const EXPERTS_REGEX: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

/// A device that can hold tensors: a GPU by its backend index (`CUDA0`…), or host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "index")]
pub enum DeviceId {
    Gpu(u32),
    Cpu,
}

impl DeviceId {
    /// The buffer-type name llama.cpp prints and `-ot` takes.
    pub fn buffer_name(self) -> String {
        match self {
            DeviceId::Gpu(i) => format!("CUDA{i}"),
            DeviceId::Cpu => "CPU".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitMode {
    None,
    Layer,
    Row,
}

/// KV cache element types llama.cpp accepts for `-ctk`/`-ctv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvType {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q5_1,
    Q5_0,
    Q4_1,
    Q4_0,
    Iq4Nl,
}

impl KvType {
    pub const ALL: [KvType; 9] = [
        KvType::F32,
        KvType::F16,
        KvType::Bf16,
        KvType::Q8_0,
        KvType::Q5_1,
        KvType::Q5_0,
        KvType::Q4_1,
        KvType::Q4_0,
        KvType::Iq4Nl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q5_1 => "q5_1",
            KvType::Q5_0 => "q5_0",
            KvType::Q4_1 => "q4_1",
            KvType::Q4_0 => "q4_0",
            KvType::Iq4Nl => "iq4_nl",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(text))
    }

    /// (elements per block, bytes per block), from ggml's type traits.
    pub fn block(self) -> (u64, u64) {
        match self {
            KvType::F32 => (1, 4),
            KvType::F16 | KvType::Bf16 => (1, 2),
            KvType::Q8_0 => (32, 34),
            KvType::Q5_1 => (32, 24),
            KvType::Q5_0 => (32, 22),
            KvType::Q4_1 => (32, 20),
            KvType::Q4_0 | KvType::Iq4Nl => (32, 18),
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block().0 > 1
    }
}

/// One `-ot` entry: tensors whose name contains a match of `pattern` go to `device`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorOverride {
    pub pattern: String,
    pub device: DeviceId,
}

/// Everything that decides placement and memory, as llama-server would be told.
/// Absent fields in JSON take the defaults below.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementOptions {
    /// `-ngl`: layers on GPUs, the output layer counting as one; `None` = all.
    pub n_gpu_layers: Option<u32>,
    /// `-ts`: proportions per GPU; empty = by each GPU's free memory, as llama.cpp does.
    pub tensor_split: Vec<f64>,
    pub split_mode: SplitMode,
    /// `-mg`: the GPU that holds everything in `-sm row` mode besides the split matrices.
    pub main_gpu: u32,
    /// `-ot`, `-cmoe` and `-ncmoe` in command-line order; the first match wins.
    pub overrides: Vec<TensorOverride>,
    /// `-c` (0 = the model's trained context).
    pub context: u32,
    /// `-np` parallel sequences (slots).
    pub parallel: u32,
    /// `-kvu`: one KV stream shared by all slots (llama-server's default).
    pub kv_unified: bool,
    pub cache_type_k: KvType,
    pub cache_type_v: KvType,
    pub flash_attention: bool,
    /// `-b` and `-ub`.
    pub batch: u32,
    pub ubatch: u32,
    /// `-nkvo` turns this off: the KV cache then stays in host memory.
    pub kv_offload: bool,
    /// `-t`; `None` = llama.cpp's default.
    pub threads: Option<u32>,
}

impl Default for PlacementOptions {
    fn default() -> Self {
        Self {
            n_gpu_layers: None,
            tensor_split: Vec::new(),
            split_mode: SplitMode::Layer,
            main_gpu: 0,
            overrides: Vec::new(),
            context: 4096,
            parallel: 1,
            kv_unified: true,
            cache_type_k: KvType::F16,
            cache_type_v: KvType::F16,
            flash_attention: true,
            batch: 2048,
            ubatch: 512,
            kv_offload: true,
            threads: None,
        }
    }
}

impl PlacementOptions {
    /// `-cmoe`: every routed expert to the CPU.
    pub fn cpu_moe_override() -> TensorOverride {
        TensorOverride {
            pattern: EXPERTS_REGEX.to_owned(),
            device: DeviceId::Cpu,
        }
    }

    /// `-ncmoe N`: the experts of the first N layers to the CPU.
    pub fn n_cpu_moe_overrides(n: u32) -> Vec<TensorOverride> {
        (0..n)
            .map(|i| TensorOverride {
                pattern: format!(r"blk\.{i}{EXPERTS_REGEX}"),
                device: DeviceId::Cpu,
            })
            .collect()
    }
}
