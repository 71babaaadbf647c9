//! Tiny recurrent and hybrid language models for sizing tests: tensors named and shaped exactly as
//! llama.cpp's loader requires them (`load_arch_tensors` of `src/models/mamba.cpp` and
//! `src/models/qwen3next.cpp`), a real tokenizer copied from one of llama.cpp's
//! `models/ggml-vocab-*.gguf` files, and zero weights (a sparse file: a model large enough for a
//! 1 % memory comparison costs no disk). They are for `llama-fit-params`, which sizes them
//! without running them.
//!
//! - [`TinyMamba`]: `mamba` (Mamba 1), every layer recurrent: no attention, no KV cache, only a
//!   per-sequence conv state and SSM state.
//! - [`TinyQwen3Next`]: `qwen3next`, a hybrid: gated-delta-net (recurrent) layers with a full
//!   attention layer every `full_attention_interval` layers, MoE feed-forward with a shared
//!   expert on every layer.

use std::path::Path;

use crate::error::GgufError;
use crate::read::GgufFile;
use crate::types::GgmlType;
use crate::value::{Array, Metadata, Value};
use crate::write::{GgufWriter, TensorData};

/// A `mamba` model. llama.cpp supports only an expansion factor of 2, so the inner size is
/// always `2 × n_embd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TinyMamba {
    pub name: String,
    pub n_layer: u64,
    pub n_embd: u64,
    /// `ssm.state_size`: the SSM state per inner channel.
    pub d_state: u64,
    /// `ssm.conv_kernel`: the causal convolution's width (the conv state keeps `d_conv - 1`).
    pub d_conv: u64,
    /// `ssm.time_step_rank`.
    pub dt_rank: u64,
    pub context_length: u64,
}

/// Which of Qwen's hybrids of gated delta net and gated full attention a [`TinyQwen3Next`] is
/// written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QwenHybrid {
    /// `qwen3next`: beta and alpha from one `ssm_ba` projection; routed and shared experts.
    Qwen3Next,
    /// `qwen35moe` (Qwen3.5 MoE): separate `ssm_beta` and `ssm_alpha`, M-RoPE sections.
    Qwen35Moe,
    /// `qwen35` (Qwen3.5 dense): as `qwen35moe` with a dense feed-forward of `n_ff`.
    Qwen35,
}

impl QwenHybrid {
    pub fn architecture(self) -> &'static str {
        match self {
            QwenHybrid::Qwen3Next => "qwen3next",
            QwenHybrid::Qwen35Moe => "qwen35moe",
            QwenHybrid::Qwen35 => "qwen35",
        }
    }
}

/// A `qwen3next` model (Qwen3-Next's hybrid of gated delta net and gated full attention), or
/// one of its Qwen3.5 successors ([`QwenHybrid`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TinyQwen3Next {
    pub name: String,
    pub hybrid: QwenHybrid,
    pub n_layer: u64,
    pub n_embd: u64,
    /// Full-attention geometry: query heads, KV heads and the head size (K and V alike).
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    /// Every `full_attention_interval`-th layer (1-based) is a full attention layer.
    pub full_attention_interval: u64,
    /// The linear-attention geometry, as the converter writes it: `ssm.conv_kernel`,
    /// `ssm.state_size` (the key and value head size), `ssm.group_count` (key heads) and
    /// `ssm.time_step_rank` (value heads); `ssm.inner_size` is value heads × head size.
    pub conv_kernel: u64,
    pub linear_head_dim: u64,
    pub linear_key_heads: u64,
    pub linear_value_heads: u64,
    /// `(experts, used)`, the routed experts' and the shared expert's hidden size.
    pub experts: (u64, u64),
    pub expert_ff: u64,
    pub shared_ff: u64,
    /// The linear layers as older conversions wrote them: one `ssm_in` projection with Q, K,
    /// V and z interleaved per key head, instead of `attn_qkv` and `attn_gate`.
    pub legacy_ssm_in: bool,
    /// The experts' gate and up projections in one `ffn_gate_up_exps` tensor.
    pub fused_gate_up: bool,
    /// `feed_forward_length` as Qwen's config carries it (the dense size; llama.cpp uses the
    /// expert sizes above, except for the dense `qwen35`).
    pub n_ff: u64,
    pub context_length: u64,
}

/// Tensor writers shared by both models: zeros, F16 matrices and F32 vectors (and the small
/// SSM tensors converters keep in F32: the convolution, A, D, biases, norms).
struct Sink<'a> {
    w: &'a mut GgufWriter,
}

impl Sink<'_> {
    fn f16(&mut self, name: &str, dims: &[u64]) {
        self.w
            .add_tensor(name, dims, GgmlType::F16, TensorData::Zeros);
    }

    fn f32(&mut self, name: &str, dims: &[u64]) {
        self.w
            .add_tensor(name, dims, GgmlType::F32, TensorData::Zeros);
    }
}

/// The number of tokens of a vocabulary file's tokenizer.
fn vocab_size(vocab: &Metadata) -> u64 {
    vocab
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or(0, |t| t.len() as u64)
}

/// Every `tokenizer.*` key of `vocab`.
fn copy_tokenizer(w: &mut GgufWriter, vocab: &Metadata) {
    for (key, value) in vocab.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.set(key, value.clone());
    }
}

fn u(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl TinyMamba {
    /// Writes the model; the tokenizer (every `tokenizer.*` key) comes from `vocab`.
    pub fn write(&self, vocab: &Path, out: &Path) -> Result<u64, GgufError> {
        let vocab = GgufFile::open(vocab)?;
        self.writer(&vocab.metadata).write_to_path(out)
    }

    pub fn d_inner(&self) -> u64 {
        2 * self.n_embd
    }

    /// The model as a writer, metadata as `conversion/mamba.py` writes it (head count 0: no
    /// attention), tensors as `llama_model_mamba::load_arch_tensors` loads them.
    pub fn writer(&self, vocab: &Metadata) -> GgufWriter {
        let n_vocab = vocab_size(vocab);
        let mut w = GgufWriter::new();
        let a = "mamba";
        w.set("general.architecture", a);
        w.set("general.name", self.name.as_str());
        w.set("general.file_type", 1u32);
        w.set(&format!("{a}.context_length"), u(self.context_length));
        w.set(&format!("{a}.embedding_length"), u(self.n_embd));
        w.set(&format!("{a}.feed_forward_length"), 0u32);
        w.set(&format!("{a}.attention.head_count"), 0u32);
        w.set(&format!("{a}.block_count"), u(self.n_layer));
        w.set(&format!("{a}.ssm.conv_kernel"), u(self.d_conv));
        w.set(&format!("{a}.ssm.inner_size"), u(self.d_inner()));
        w.set(&format!("{a}.ssm.state_size"), u(self.d_state));
        w.set(&format!("{a}.ssm.time_step_rank"), u(self.dt_rank));
        w.set(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5f32);
        w.set(&format!("{a}.ssm.dt_b_c_rms"), false);
        copy_tokenizer(&mut w, vocab);
        let (e, inner, state) = (self.n_embd, self.d_inner(), self.d_state);
        let mut t = Sink { w: &mut w };
        t.f16("token_embd.weight", &[e, n_vocab]);
        for i in 0..self.n_layer {
            let n = |name: &str| format!("blk.{i}.{name}");
            t.f32(&n("attn_norm.weight"), &[e]);
            t.f16(&n("ssm_in.weight"), &[e, 2 * inner]);
            t.f32(&n("ssm_conv1d.weight"), &[self.d_conv, inner]);
            t.f32(&n("ssm_conv1d.bias"), &[inner]);
            t.f16(&n("ssm_x.weight"), &[inner, self.dt_rank + 2 * state]);
            t.f16(&n("ssm_dt.weight"), &[self.dt_rank, inner]);
            t.f32(&n("ssm_dt.bias"), &[inner]);
            // No ".weight" suffix for A and D.
            t.f32(&n("ssm_a"), &[state, inner]);
            t.f32(&n("ssm_d"), &[inner]);
            t.f16(&n("ssm_out.weight"), &[inner, e]);
        }
        t.f32("output_norm.weight", &[e]);
        t.f16("output.weight", &[e, n_vocab]);
        w
    }
}

impl TinyQwen3Next {
    /// Qwen3-Next's layout at a chosen size: a full attention layer every third (16 query and
    /// 2 KV heads of 256), 128-wide linear heads with a 4-tap convolution, 4 of 16 experts and
    /// a shared one of 512.
    pub fn with_linear_heads(
        n_layer: u64,
        n_embd: u64,
        linear_key_heads: u64,
        linear_value_heads: u64,
    ) -> TinyQwen3Next {
        TinyQwen3Next {
            name: "qwen3next".into(),
            hybrid: QwenHybrid::Qwen3Next,
            n_layer,
            n_embd,
            n_head: 16,
            n_head_kv: 2,
            head_dim: 256,
            full_attention_interval: 3,
            conv_kernel: 4,
            linear_head_dim: 128,
            linear_key_heads,
            linear_value_heads,
            experts: (16, 4),
            expert_ff: 512,
            shared_ff: 512,
            legacy_ssm_in: false,
            fused_gate_up: false,
            n_ff: 5120,
            context_length: 262_144,
        }
    }

    /// Writes the model; the tokenizer (every `tokenizer.*` key) comes from `vocab`.
    pub fn write(&self, vocab: &Path, out: &Path) -> Result<u64, GgufError> {
        let vocab = GgufFile::open(vocab)?;
        self.writer(&vocab.metadata).write_to_path(out)
    }

    /// Whether layer `il` is a linear-attention (recurrent) layer, as llama.cpp derives it from
    /// `full_attention_interval` (`llama_model_qwen3next::load_arch_hparams`).
    pub fn is_recurrent(&self, il: u64) -> bool {
        !(il + 1).is_multiple_of(self.full_attention_interval.max(1))
    }

    /// The model as a writer, metadata as `conversion/qwen.py` (`Qwen3NextModel`,
    /// `Qwen3_5MoeTextModel`, `Qwen3_5TextModel`) writes it, tensors as the architecture's
    /// `load_arch_tensors` loads them (by default the fused `attn_qkv` and `attn_gate` form of
    /// the linear layers, separate expert gate and up).
    pub fn writer(&self, vocab: &Metadata) -> GgufWriter {
        let n_vocab = vocab_size(vocab);
        let (n_expert, used) = self.experts;
        let moe = self.hybrid != QwenHybrid::Qwen35;
        let mut w = GgufWriter::new();
        let a = self.hybrid.architecture();
        let key = |suffix: &str| format!("{a}.{suffix}");
        w.set("general.architecture", a);
        w.set("general.name", self.name.as_str());
        w.set("general.file_type", 1u32);
        w.set(&key("block_count"), u(self.n_layer));
        w.set(&key("context_length"), u(self.context_length));
        w.set(&key("embedding_length"), u(self.n_embd));
        w.set(&key("feed_forward_length"), u(self.n_ff));
        w.set(&key("attention.head_count"), u(self.n_head));
        w.set(&key("attention.head_count_kv"), u(self.n_head_kv));
        w.set(&key("attention.key_length"), u(self.head_dim));
        w.set(&key("attention.value_length"), u(self.head_dim));
        w.set(&key("attention.layer_norm_rms_epsilon"), 1e-6f32);
        w.set(&key("rope.freq_base"), 10_000_000.0f32);
        // Qwen3-Next rotates a quarter of each head.
        w.set(&key("rope.dimension_count"), u(self.head_dim / 4));
        if moe {
            w.set(&key("expert_count"), u(n_expert));
            w.set(&key("expert_used_count"), u(used));
            w.set(&key("expert_feed_forward_length"), u(self.expert_ff));
            w.set(&key("expert_shared_feed_forward_length"), u(self.shared_ff));
        }
        if self.hybrid != QwenHybrid::Qwen3Next {
            // Qwen3.5's interleaved M-RoPE sections, as the converter's default writes them.
            w.set(
                &key("rope.dimension_sections"),
                Value::Array(Array::I32(vec![11, 11, 10, 0])),
            );
        }
        w.set(&key("ssm.conv_kernel"), u(self.conv_kernel));
        w.set(&key("ssm.state_size"), u(self.linear_head_dim));
        w.set(&key("ssm.group_count"), u(self.linear_key_heads));
        w.set(&key("ssm.time_step_rank"), u(self.linear_value_heads));
        w.set(
            &key("ssm.inner_size"),
            u(self.linear_head_dim * self.linear_value_heads),
        );
        w.set(
            &key("full_attention_interval"),
            u(self.full_attention_interval),
        );
        copy_tokenizer(&mut w, vocab);

        let (e, hd) = (self.n_embd, self.head_dim);
        let key_dim = self.linear_head_dim * self.linear_key_heads;
        let value_dim = self.linear_head_dim * self.linear_value_heads;
        let conv_dim = 2 * key_dim + value_dim;
        let mut t = Sink { w: &mut w };
        t.f16("token_embd.weight", &[e, n_vocab]);
        for i in 0..self.n_layer {
            let n = |name: &str| format!("blk.{i}.{name}");
            t.f32(&n("attn_norm.weight"), &[e]);
            t.f32(&n("post_attention_norm.weight"), &[e]);
            if self.is_recurrent(i) {
                if self.legacy_ssm_in {
                    t.f16(&n("ssm_in.weight"), &[e, conv_dim + value_dim]);
                } else {
                    t.f16(&n("attn_qkv.weight"), &[e, conv_dim]);
                    t.f16(&n("attn_gate.weight"), &[e, value_dim]);
                }
                t.f32(&n("ssm_conv1d.weight"), &[self.conv_kernel, conv_dim]);
                t.f32(&n("ssm_dt.bias"), &[self.linear_value_heads]);
                t.f32(&n("ssm_a"), &[self.linear_value_heads]);
                if self.hybrid == QwenHybrid::Qwen3Next {
                    t.f16(&n("ssm_ba.weight"), &[e, 2 * self.linear_value_heads]);
                } else {
                    t.f16(&n("ssm_beta.weight"), &[e, self.linear_value_heads]);
                    t.f16(&n("ssm_alpha.weight"), &[e, self.linear_value_heads]);
                }
                t.f32(&n("ssm_norm.weight"), &[self.linear_head_dim]);
                t.f16(&n("ssm_out.weight"), &[value_dim, e]);
            } else {
                // The query projection carries the output gate too (2 × heads × head size).
                t.f16(&n("attn_q.weight"), &[e, 2 * hd * self.n_head]);
                t.f16(&n("attn_k.weight"), &[e, hd * self.n_head_kv]);
                t.f16(&n("attn_v.weight"), &[e, hd * self.n_head_kv]);
                t.f16(&n("attn_output.weight"), &[hd * self.n_head, e]);
                t.f32(&n("attn_q_norm.weight"), &[hd]);
                t.f32(&n("attn_k_norm.weight"), &[hd]);
            }
            if !moe {
                t.f16(&n("ffn_gate.weight"), &[e, self.n_ff]);
                t.f16(&n("ffn_up.weight"), &[e, self.n_ff]);
                t.f16(&n("ffn_down.weight"), &[self.n_ff, e]);
                continue;
            }
            t.f32(&n("ffn_gate_inp.weight"), &[e, n_expert]);
            if self.fused_gate_up {
                t.f16(
                    &n("ffn_gate_up_exps.weight"),
                    &[e, 2 * self.expert_ff, n_expert],
                );
            } else {
                t.f16(&n("ffn_gate_exps.weight"), &[e, self.expert_ff, n_expert]);
                t.f16(&n("ffn_up_exps.weight"), &[e, self.expert_ff, n_expert]);
            }
            t.f16(&n("ffn_down_exps.weight"), &[self.expert_ff, e, n_expert]);
            t.f32(&n("ffn_gate_inp_shexp.weight"), &[e]);
            t.f16(&n("ffn_gate_shexp.weight"), &[e, self.shared_ff]);
            t.f16(&n("ffn_up_shexp.weight"), &[e, self.shared_ff]);
            t.f16(&n("ffn_down_shexp.weight"), &[self.shared_ff, e]);
        }
        t.f32("output_norm.weight", &[e]);
        t.f16("output.weight", &[e, n_vocab]);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Array, StringArray, Value};

    fn vocab(n: usize) -> Metadata {
        let mut w = GgufWriter::new();
        let tokens: StringArray = (0..n).map(|i| format!("t{i}")).collect();
        w.set("tokenizer.ggml.model", "gpt2");
        w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
        w.metadata().clone()
    }

    #[test]
    fn mamba_has_the_tensors_llama_cpp_loads() {
        let m = TinyMamba {
            name: "m".into(),
            n_layer: 2,
            n_embd: 64,
            d_state: 16,
            d_conv: 4,
            dt_rank: 4,
            context_length: 1024,
        };
        let bytes = m.writer(&vocab(10)).to_bytes().unwrap();
        let file = GgufFile::from_bytes(&bytes, Some("m.gguf")).unwrap();
        let dims = |name: &str| {
            file.tensors
                .iter()
                .find(|t| t.name == name)
                .map(|t| t.dims.clone())
        };
        assert_eq!(dims("blk.1.ssm_in.weight"), Some(vec![64, 256]));
        assert_eq!(dims("blk.1.ssm_a"), Some(vec![16, 128]));
        assert_eq!(dims("blk.0.ssm_x.weight"), Some(vec![128, 36]));
        assert_eq!(dims("output.weight"), Some(vec![64, 10]));
        assert_eq!(file.metadata.get_u32("mamba.ssm.inner_size"), Some(128));
    }

    #[test]
    fn qwen3next_has_full_attention_every_interval() {
        let q = TinyQwen3Next {
            name: "q".into(),
            hybrid: QwenHybrid::Qwen3Next,
            n_layer: 6,
            n_embd: 64,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 32,
            full_attention_interval: 3,
            conv_kernel: 4,
            linear_head_dim: 16,
            linear_key_heads: 2,
            linear_value_heads: 4,
            experts: (4, 2),
            expert_ff: 32,
            shared_ff: 32,
            legacy_ssm_in: false,
            fused_gate_up: false,
            n_ff: 128,
            context_length: 4096,
        };
        let recurrent: Vec<bool> = (0..6).map(|il| q.is_recurrent(il)).collect();
        assert_eq!(recurrent, vec![true, true, false, true, true, false]);
        let bytes = q.writer(&vocab(10)).to_bytes().unwrap();
        let file = GgufFile::from_bytes(&bytes, Some("q.gguf")).unwrap();
        let has = |name: &str| file.tensors.iter().any(|t| t.name == name);
        assert!(has("blk.2.attn_q.weight") && !has("blk.2.attn_qkv.weight"));
        assert!(has("blk.0.attn_qkv.weight") && !has("blk.0.attn_q.weight"));
        // conv channels: 2 × key heads × head size + value heads × head size.
        let conv = file
            .tensors
            .iter()
            .find(|t| t.name == "blk.0.ssm_conv1d.weight")
            .map(|t| t.dims.clone());
        assert_eq!(conv, Some(vec![4, 2 * 32 + 64]));
    }
}
