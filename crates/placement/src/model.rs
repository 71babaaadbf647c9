//! The facts about a model that placement needs: its tensors (name, bytes, layer, role) and its
//! attention layout (with the recurrent state of SSM and linear-attention layers), independent of
//! where they were read from (a local or remote GGUF header).

use serde::{Deserialize, Serialize};

/// What a tensor is for, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorRole {
    /// `token_embd`: llama.cpp always keeps the input layer on the CPU.
    TokenEmbedding,
    /// `output`, `output_norm`: placed with the output "layer" (layer index n_layer).
    Output,
    /// Routed experts (`ffn_*_exps`): the bulk of an MoE model, read only k of E per token.
    Experts,
    /// Shared experts (`ffn_*_shexp`): read for every token.
    SharedExperts,
    /// Every other tensor of a repeating layer (attention, norms, dense FFN, router).
    Layer,
    /// Anything else outside the layers (rare: rope factors, vision bits).
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelTensor {
    pub name: String,
    pub bytes: u64,
    /// `blk.N.` → N; the output tensors count as layer `n_layer`; none for the input.
    pub layer: Option<u32>,
    pub role: TensorRole,
    /// Its element count and row length (`ne[0]`), and whether its type is quantized: what a
    /// copy of it takes in a GPU's compute buffer (op offload); 0 when not known.
    #[serde(default)]
    pub elements: u64,
    #[serde(default)]
    pub row_length: u64,
    #[serde(default)]
    pub quantized: bool,
}

/// Per-layer attention geometry, enough for the KV cache formulas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionLayout {
    /// KV heads of each layer (0 for a layer without attention, e.g. a recurrent one).
    pub head_count_kv: Vec<u32>,
    /// Query heads of each layer (for the compute-buffer estimate).
    pub head_count: Vec<u32>,
    pub key_length: u32,
    pub value_length: u32,
    /// The sliding-window layers' K and V head widths where the file gives them apart
    /// (`attention.key_length_swa`, Gemma 4: 256 beside its full layers' 512); 0 = as the
    /// others'.
    #[serde(default)]
    pub key_length_swa: u32,
    #[serde(default)]
    pub value_length_swa: u32,
    /// The last layers that keep no cache of their own, reading an earlier layer's
    /// (`attention.shared_kv_layers`: Gemma 3n, Gemma 4's E2B and E4B).
    #[serde(default)]
    pub shared_kv_layers: u32,
    /// No cache at all: a non-causal embedding model (`gemma-embedding`, the BERTs), whose
    /// attention runs over the micro-batch alone (`llama_model::create_memory` makes none).
    #[serde(default)]
    pub cacheless: bool,
    /// MLA (DeepSeek-style): the cache holds one compressed K row per token and no V.
    pub mla: bool,
    /// With MLA, a head's query and key width and its value width once decompressed
    /// (`*.attention.key_length_mla`, `value_length_mla`); 0 without MLA.
    #[serde(default)]
    pub mla_key_length: u32,
    #[serde(default)]
    pub mla_value_length: u32,
    /// Sliding-window size in tokens, when the model has sliding-window layers.
    pub sliding_window: Option<u32>,
    /// Which layers use the sliding window.
    pub swa_layers: Vec<bool>,
    /// Extra K-only cache per layer (the DSA indexer of GLM-5.x), in elements per token; 0 = none.
    pub indexer_key_length: Vec<u32>,
    /// Beside an indexer's K, a V of this width per token (MiniMax-M3's indexer cache keeps one
    /// head of the model's V width); 0 = K only.
    #[serde(default)]
    pub indexer_value_length: u32,
    /// The DSA indexer's heads and the keys it selects per query (its scores are a compute
    /// buffer term that grows with the context).
    #[serde(default)]
    pub indexer_heads: u32,
    #[serde(default)]
    pub indexer_top_k: u32,
    /// MiniMax-M3's sparse attention: tokens per block of the cache it selects
    /// (`attention.indexer.block_size`; its `indexer_top_k` counts blocks); 0 = none.
    #[serde(default)]
    pub indexer_block_size: u32,
    /// DeepSeek V4's compression of each layer's cache (`attention.compress_ratios`: 0, 4 with
    /// the lightning indexer, or 128); empty = none.
    #[serde(default)]
    pub compress_ratios: Vec<u32>,
    /// The recurrent geometry (Mamba-style SSM or gated delta net), for models with recurrent
    /// layers (`mamba`, `qwen3next`, `jamba`, …); `None` for pure transformers.
    #[serde(default)]
    pub recurrent: Option<RecurrentShape>,
    /// Which layers are recurrent: they keep a conv state and an SSM state per sequence
    /// (see [`RecurrentShape`]) instead of, or (Falcon-H1) besides, a KV cache. Empty = none.
    #[serde(default)]
    pub recurrent_layers: Vec<bool>,
}

impl AttentionLayout {
    /// Layer `il`'s K and V head widths (`llama_hparams::n_embd_head_k(il)`): a sliding layer's
    /// own where the file gives them, else the model's.
    pub fn head_lengths(&self, il: usize) -> (u32, u32) {
        let windowed =
            self.sliding_window.is_some() && self.swa_layers.get(il).copied().unwrap_or(false);
        let own = |swa: u32, all: u32| if windowed && swa > 0 { swa } else { all };
        (
            own(self.key_length_swa, self.key_length),
            own(self.value_length_swa, self.value_length),
        )
    }

    /// Layer `il`'s V row: its KV heads times their V width (`n_embd_v_gqa`).
    pub fn value_width(&self, il: usize) -> u64 {
        let heads = self.head_count_kv.get(il).copied().unwrap_or(0);
        u64::from(heads).saturating_mul(u64::from(self.head_lengths(il).1))
    }

    /// The widest layer's V row (`n_embd_v_gqa_max`): without flash attention llama.cpp stores
    /// V transposed, every layer's cache this wide.
    pub fn value_width_max(&self) -> u64 {
        (0..self.head_count_kv.len())
            .map(|il| self.value_width(il))
            .max()
            .unwrap_or(0)
    }

    /// Whether the cache holds K alone and V is read from it (MLA's latent, DeepSeek V4's
    /// compressed caches): llama.cpp then takes `-ctk` and `-ctv` as one type.
    pub fn caches_key_only(&self) -> bool {
        self.mla || !self.compress_ratios.is_empty()
    }

    /// Whether layer `il` has an indexer cache (GLM-5.x's DSA, MiniMax-M3's sparse attention).
    pub fn has_indexer(&self, il: usize) -> bool {
        self.indexer_key_length
            .get(il)
            .is_some_and(|&width| width > 0)
    }

    /// Whether layer `il` keeps a KV cache of its own (`llama_hparams::has_kv`): all but the
    /// last [`Self::shared_kv_layers`], none of a [`Self::cacheless`] model's.
    pub fn has_kv(&self, il: usize) -> bool {
        let layers = self.head_count_kv.len();
        !self.cacheless && il < layers.saturating_sub(self.shared_kv_layers as usize)
    }

    /// The layer whose cache layer `il` reads when it keeps none of its own (llama.cpp's reuse:
    /// the last sliding-window or full layer before the shared ones, by `il`'s kind); `None`
    /// for a layer with a cache of its own.
    pub fn shared_source(&self, il: usize) -> Option<usize> {
        let layers = self.head_count_kv.len();
        let first_shared = layers.saturating_sub(self.shared_kv_layers as usize);
        if !(first_shared..layers).contains(&il) {
            return None;
        }
        let windowed =
            self.sliding_window.is_some() && self.swa_layers.get(il).copied().unwrap_or(false);
        first_shared.checked_sub(if windowed { 2 } else { 1 })
    }

    /// Whether layer `il` keeps a recurrent state.
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.recurrent.is_some() && self.recurrent_layers.get(il).copied().unwrap_or(false)
    }
}

/// How a recurrent layer computes (its compute-buffer terms differ; its state is sized alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecurrentKind {
    /// A Mamba (1 or 2) selective scan: `mamba`, `mamba2`, and the SSM layers of `jamba`,
    /// `falcon-h1`, `granitehybrid`, `nemotron_h`, `plamo2`.
    Mamba,
    /// Qwen3-Next's gated delta net (`qwen3next`, `qwen35`, `qwen35moe`).
    GatedDeltaNet,
}

/// The `{arch}.ssm.*` hyperparameters of a recurrent model, as llama.cpp reads them
/// (`load_arch_hparams` of each architecture; absent keys are 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecurrentShape {
    pub kind: RecurrentKind,
    /// `ssm.conv_kernel` (d_conv).
    pub conv_kernel: u32,
    /// `ssm.inner_size` (d_inner; the value width of a gated delta net).
    pub inner_size: u32,
    /// `ssm.state_size` (d_state; the key/value head size of a gated delta net).
    pub state_size: u32,
    /// `ssm.group_count` (n_group; the key heads of a gated delta net). Mamba 1 and Jamba have
    /// none: llama.cpp does not read the key for them.
    pub group_count: u32,
    /// `ssm.time_step_rank` (dt_rank; the value heads of a gated delta net).
    pub time_step_rank: u32,
    /// `ssm.dt_b_c_rms` (FalconMamba): dt, B and C RMS-normed before the scan.
    #[serde(default)]
    pub normed_scan_parameters: bool,
}

impl RecurrentShape {
    /// Channels the causal convolution runs over: `d_inner + 2 × n_group × d_state` (for a
    /// gated delta net: Q, K and V together).
    pub fn conv_channels(&self) -> u64 {
        u64::from(self.inner_size).saturating_add(
            u64::from(self.group_count)
                .saturating_mul(u64::from(self.state_size))
                .saturating_mul(2),
        )
    }

    /// F32 elements of one sequence's conv state: `(d_conv - 1) × conv channels`
    /// (`llama_hparams::n_embd_r`; the oldest column is shifted out, so it is not kept).
    pub fn conv_state_elements(&self) -> u64 {
        u64::from(self.conv_kernel.saturating_sub(1)).saturating_mul(self.conv_channels())
    }

    /// F32 elements of one sequence's SSM state: `d_state × d_inner`
    /// (`llama_hparams::n_embd_s`; for a gated delta net head size² × value heads).
    pub fn ssm_state_elements(&self) -> u64 {
        u64::from(self.state_size).saturating_mul(u64::from(self.inner_size))
    }

    /// Bytes of one recurrent layer's state for `sequences` sequences: llama.cpp allocates an
    /// R (conv) and an S (SSM) tensor per recurrent layer, both F32 whatever `-ctk`/`-ctv` say,
    /// with `max(1, n_seq_max)` rows (`llama_model::create_memory`,
    /// `llama_memory_recurrent::llama_memory_recurrent`); the context length plays no part.
    pub fn state_bytes(&self, sequences: u32) -> u64 {
        self.conv_state_elements()
            .saturating_add(self.ssm_state_elements())
            .saturating_mul(4)
            .saturating_mul(u64::from(sequences.max(1)))
    }
}

/// Mixture-of-experts shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertShape {
    pub count: u32,
    pub used: u32,
    pub shared: u32,
    /// One expert's feed-forward width (`*.expert_feed_forward_length`); 0 when the file
    /// gives only `feed_forward_length` (Mixtral), which is then the experts' width.
    #[serde(default)]
    pub feed_forward_length: u32,
    /// The shared expert's feed-forward width (`*.expert_shared_feed_forward_length`); 0 when
    /// the file does not say.
    #[serde(default)]
    pub shared_feed_forward_length: u32,
    /// Groups the router picks among before the experts (`*.expert_group_count`, DeepSeek V3's
    /// 8) and how many it keeps (`*.expert_group_used_count`); 0 when the file does not say.
    #[serde(default)]
    pub groups: u32,
    #[serde(default)]
    pub groups_used: u32,
    /// Whether the selected experts' weights are normalized to sum to one
    /// (`*.expert_weights_norm`, read where the architecture's graph takes it from the file:
    /// `deepseek2`).
    #[serde(default)]
    pub weights_norm: bool,
    /// Whether the selected experts' weights are scaled (`*.expert_weights_scale` other than 0
    /// and 1, read where the architecture's graph takes it from the file: `deepseek2`).
    #[serde(default)]
    pub weights_scaled: bool,
}

impl ExpertShape {
    /// One routed expert's feed-forward width: `expert_feed_forward_length`, or the model's
    /// `n_ff` where the file gives none (Mixtral-style).
    pub fn width(&self, n_ff: u32) -> u64 {
        u64::from(match self.feed_forward_length {
            0 => n_ff,
            width => width,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelShape {
    pub architecture: String,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_vocab: u32,
    pub n_ff: u32,
    pub context_length: u32,
    /// How many of each key's dimensions RoPE rotates (`*.rope.dimension_count`); 0 when the
    /// header does not say. DeepSeek's older conversions need it to split a key.
    #[serde(default)]
    pub rope_dimensions: u32,
    pub attention: AttentionLayout,
    pub experts: Option<ExpertShape>,
    pub tensors: Vec<ModelTensor>,
}

impl ModelShape {
    pub fn total_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0, |sum, t| sum.saturating_add(t.bytes))
    }

    /// llama.cpp loads `token_embd` a second time as the output matrix when the model has no
    /// `output.weight` (tied embeddings), on the output layer's device.
    pub fn ties_output_to_embedding(&self) -> bool {
        !self.tensors.iter().any(|t| t.name == "output.weight")
    }

    /// Whether a tied output is a copy of its own even on the embedding's device: `gemma3n` and
    /// `gemma4` load the output before the embedding, so llama.cpp's loader finds no tensor of
    /// that name to share and allocates both.
    pub fn copies_tied_output_everywhere(&self) -> bool {
        matches!(self.architecture.as_str(), "gemma3n" | "gemma4")
    }

    /// The residual streams a layer hands the next: DeepSeek V4's hyper-connections keep
    /// several (`output_hc_fn.weight` mixes them: as wide as all of them), other models one.
    pub fn residual_streams(&self) -> u64 {
        let width = u64::from(self.n_embd).max(1);
        self.tensors
            .iter()
            .find(|t| t.name == "output_hc_fn.weight")
            .map_or(1, |t| (t.row_length / width).max(1))
    }

    pub fn embedding_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.role == TensorRole::TokenEmbedding)
            .fold(0, |sum, t| sum.saturating_add(t.bytes))
    }
}

/// Classifies a tensor by its GGUF name (`blk.12.ffn_up_exps.weight`, `output_norm.weight`, …).
pub fn classify(name: &str, n_layer: u32) -> (Option<u32>, TensorRole) {
    if let Some(rest) = name.strip_prefix("blk.") {
        let (index, tail) = rest.split_once('.').unwrap_or((rest, ""));
        if let Ok(layer) = index.parse::<u32>() {
            let role = if tail.contains("_exps") {
                TensorRole::Experts
            } else if tail.contains("_shexp") {
                TensorRole::SharedExperts
            } else {
                TensorRole::Layer
            };
            return (Some(layer), role);
        }
    }
    match name.split('.').next() {
        Some("token_embd") => (None, TensorRole::TokenEmbedding),
        // Gemma 4's projection into each layer's own embeddings goes with layer 0.
        Some("per_layer_model_proj" | "per_layer_proj_norm") => (Some(0), TensorRole::Layer),
        Some("output") | Some("output_norm") => (Some(n_layer), TensorRole::Output),
        _ => (None, TensorRole::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_layers_experts_and_the_ends() {
        assert_eq!(
            classify("blk.7.ffn_up_exps.weight", 40),
            (Some(7), TensorRole::Experts)
        );
        assert_eq!(
            classify("blk.7.ffn_gate_up_exps.weight", 40),
            (Some(7), TensorRole::Experts)
        );
        assert_eq!(
            classify("blk.7.ffn_down_shexp.weight", 40),
            (Some(7), TensorRole::SharedExperts)
        );
        assert_eq!(
            classify("blk.0.attn_q.weight", 40),
            (Some(0), TensorRole::Layer)
        );
        assert_eq!(
            classify("token_embd.weight", 40),
            (None, TensorRole::TokenEmbedding)
        );
        assert_eq!(
            classify("output.weight", 40),
            (Some(40), TensorRole::Output)
        );
        assert_eq!(
            classify("output_norm.weight", 40),
            (Some(40), TensorRole::Output)
        );
        assert_eq!(classify("rope_freqs.weight", 40), (None, TensorRole::Other));
        // Gemma 4's per-layer embeddings: the table stays with the input, its projection goes
        // with layer 0.
        assert_eq!(
            classify("per_layer_token_embd.weight", 35),
            (None, TensorRole::Other)
        );
        assert_eq!(
            classify("per_layer_model_proj.weight", 35),
            (Some(0), TensorRole::Layer)
        );
    }

    #[test]
    fn mamba_2_8b_keeps_23_75_mib_of_state_per_sequence() {
        // state-spaces/mamba-2.8b: 64 layers, d_inner 5120, d_state 16, d_conv 4, no groups.
        let mamba = RecurrentShape {
            kind: RecurrentKind::Mamba,
            conv_kernel: 4,
            inner_size: 5120,
            state_size: 16,
            group_count: 0,
            time_step_rank: 160,
            normed_scan_parameters: false,
        };
        assert_eq!(mamba.conv_state_elements(), 3 * 5120);
        assert_eq!(mamba.ssm_state_elements(), 16 * 5120);
        assert_eq!(64 * mamba.state_bytes(1), 95 << 18); // 23.75 MiB
        assert_eq!(mamba.state_bytes(4), 4 * mamba.state_bytes(1));
        assert_eq!(
            mamba.state_bytes(0),
            mamba.state_bytes(1),
            "at least one sequence"
        );
    }

    #[test]
    fn qwen3_next_linear_layers_keep_q_k_v_conv_and_a_head_size_squared_state() {
        // Qwen3-Next-80B-A3B: 16 key heads and 32 value heads of 128, conv kernel 4.
        let gdn = RecurrentShape {
            kind: RecurrentKind::GatedDeltaNet,
            conv_kernel: 4,
            inner_size: 32 * 128,
            state_size: 128,
            group_count: 16,
            time_step_rank: 32,
            normed_scan_parameters: false,
        };
        assert_eq!(gdn.conv_channels(), 2 * 16 * 128 + 32 * 128);
        assert_eq!(gdn.conv_state_elements(), 3 * 8192);
        assert_eq!(gdn.ssm_state_elements(), 128 * 128 * 32);
        assert_eq!(gdn.state_bytes(1), (24_576 + 524_288) * 4);
    }

    #[test]
    fn hostile_recurrent_widths_saturate() {
        let huge = RecurrentShape {
            kind: RecurrentKind::Mamba,
            conv_kernel: u32::MAX,
            inner_size: u32::MAX,
            state_size: u32::MAX,
            group_count: u32::MAX,
            time_step_rank: u32::MAX,
            normed_scan_parameters: false,
        };
        assert_eq!(huge.state_bytes(u32::MAX), u64::MAX);
        let none = RecurrentShape {
            conv_kernel: 0,
            ..huge
        };
        assert_eq!(none.conv_state_elements(), 0);
    }
}
