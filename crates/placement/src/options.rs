//! The knobs of a placement, in llama-server's own terms (`-ngl`, `-ts`, `-ot`, `-c`, `-np`, …).

use serde::{Deserialize, Serialize};

/// The regex llama.cpp uses for routed-expert tensors (`common/common.h`, LLM_FFN_EXPS_REGEX).
pub const EXPERTS_REGEX: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

/// A device that can hold tensors: a GPU by its backend index (`CUDA0`…), host memory, or a
/// device another box lends over llama.cpp's RPC backend, numbered as llama.cpp numbers them
/// (`RPC0`, `RPC1`, … across the `--rpc` servers in order, each server's devices in turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "index")]
pub enum DeviceId {
    Gpu(u32),
    Cpu,
    Rpc(u32),
}

impl DeviceId {
    /// The buffer-type name llama.cpp prints and `-ot` takes, for a device of this box. A lent
    /// device's buffer type also names its server (`RPC0[host:port]`): see
    /// [`PlacementOptions::buffer_name`].
    pub fn buffer_name(self) -> String {
        match self {
            DeviceId::Gpu(i) => format!("CUDA{i}"),
            DeviceId::Cpu => "CPU".to_owned(),
            DeviceId::Rpc(i) => format!("RPC{i}"),
        }
    }

    /// The device name `-dev` takes (`ggml_backend_dev_name`): `CUDA0`, `RPC0`.
    pub fn device_name(self) -> String {
        self.buffer_name()
    }

    /// Where layers can be offloaded: a local GPU or a lent device (llama.cpp counts both as
    /// GPU-type devices in `-dev`, `-ts` and `-mg`).
    pub fn is_offload(self) -> bool {
        matches!(self, DeviceId::Gpu(_) | DeviceId::Rpc(_))
    }

    pub fn is_lent(self) -> bool {
        matches!(self, DeviceId::Rpc(_))
    }
}

/// One `--rpc` server: its `host:port` and how many devices it lends. llama.cpp numbers the
/// lent devices `RPC0…` across the servers in order (`ggml_backend_rpc_add_server`), while a
/// buffer type is named by the device's index on its own server (`RPC0[host:port]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RpcServer {
    pub endpoint: String,
    #[serde(default = "one")]
    pub devices: u32,
}

fn one() -> u32 {
    1
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
    /// `--no-op-offload` turns this off: a GPU then never runs an operation on weights in host
    /// memory (with it on, llama.cpp's scheduler runs those of a batch of 32 or more on the
    /// first GPU, each weight copied into its compute buffer).
    pub op_offload: bool,
    /// `-t`; `None` = llama.cpp's default.
    pub threads: Option<u32>,
    /// `--rpc`: servers lending devices from other boxes, in order.
    pub rpc_servers: Vec<RpcServer>,
    /// `-dev`: the offload devices in the order `-ts` and the layer split follow; empty =
    /// llama.cpp's own order, lent devices first, then this box's GPUs (`llama_model_load`).
    pub devices: Vec<DeviceId>,
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
            op_offload: true,
            threads: None,
            rpc_servers: Vec::new(),
            devices: Vec::new(),
        }
    }
}

impl PlacementOptions {
    /// The server of lent device `RPC{index}` and the device's index on that server.
    pub fn rpc_server_of(&self, index: u32) -> Option<(&RpcServer, u32)> {
        let mut first = 0u32;
        for server in &self.rpc_servers {
            if index < first.saturating_add(server.devices) {
                return Some((server, index - first));
            }
            first = first.saturating_add(server.devices);
        }
        None
    }

    /// How many devices the `--rpc` servers lend.
    pub fn lent_devices(&self) -> u32 {
        self.rpc_servers
            .iter()
            .fold(0, |n, s| n.saturating_add(s.devices))
    }

    /// The buffer-type name `-ot` takes for `device`: a lent one as ggml-rpc names it,
    /// `RPC{index on its server}[host:port]`; `None` for a lent device no `--rpc` server lends.
    pub fn buffer_name(&self, device: DeviceId) -> Option<String> {
        match device {
            DeviceId::Rpc(i) => self
                .rpc_server_of(i)
                .map(|(server, local)| format!("RPC{local}[{}]", server.endpoint)),
            other => Some(other.buffer_name()),
        }
    }

    /// The lent device an `-ot` buffer name `RPC{k}[host:port]` means, by the `--rpc` servers.
    pub fn lent_device_of_buffer(&self, name: &str) -> Option<DeviceId> {
        let rest = name.strip_prefix("RPC")?;
        let (local, endpoint) = rest.strip_suffix(']')?.split_once('[')?;
        let local: u32 = local.parse().ok()?;
        let mut first = 0u32;
        for server in &self.rpc_servers {
            if server.endpoint == endpoint && local < server.devices {
                return Some(DeviceId::Rpc(first.saturating_add(local)));
            }
            first = first.saturating_add(server.devices);
        }
        None
    }

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
