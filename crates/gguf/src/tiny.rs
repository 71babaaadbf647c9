//! Tiny but real language models for tests: tensors laid out as llama.cpp's `llama` architecture
//! expects (dense, or Mixtral-style MoE) or as `gemma3` (sliding-window attention on five of every
//! six layers, output tied to the embedding), small random weights, and a real tokenizer copied from
//! one of llama.cpp's `models/ggml-vocab-*.gguf` files. llama-server loads them and answers
//! (with gibberish); `llama-fit-params` measures them. Zero weights make sparse files, so a
//! model large enough for a 1 % memory comparison costs no disk.

use std::path::Path;

use crate::error::GgufError;
use crate::read::GgufFile;
use crate::rng::SplitMix64;
use crate::types::GgmlType;
use crate::value::Metadata;
use crate::write::{GgufWriter, TensorData};

/// The shape of a tiny model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TinyModel {
    pub name: String,
    pub n_layer: u64,
    pub n_embd: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub n_ff: u64,
    pub context_length: u64,
    /// `Some((experts, used))` makes a Mixtral-style MoE.
    pub experts: Option<(u64, u64)>,
    /// `Some(window)` makes a Gemma 3 model with that sliding window (experts are then ignored).
    pub sliding_window: Option<u64>,
    /// `Some` makes a DeepSeek-style model (`deepseek2`): multi-head latent attention, a leading
    /// dense layer, then MoE layers with one shared expert (`experts` must be set).
    pub mla: Option<TinyMla>,
    /// Random small weights (a model that runs) or zeros (a sparse file, for sizing only).
    pub random_weights: bool,
}

/// The latent attention of a tiny `deepseek2` model (head sizes as DeepSeek's converter writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TinyMla {
    /// The compressed KV width: what the cache stores per token, with the rope part.
    pub kv_lora_rank: u64,
    pub rope_dim: u64,
    /// Per-head K width without rope, and per-head V width, after decompression.
    pub nope_dim: u64,
    pub v_dim: u64,
}

impl TinyMla {
    /// DeepSeek-V3's latent attention: a 512-wide latent with 64 rope dimensions, 128-wide
    /// heads for the key's other part and for the value.
    pub fn deepseek_v3() -> TinyMla {
        TinyMla {
            kv_lora_rank: 512,
            rope_dim: 64,
            nope_dim: 128,
            v_dim: 128,
        }
    }
}

impl TinyModel {
    /// A dense model small enough to load and answer in a second on a CPU.
    pub fn dense_runnable() -> TinyModel {
        TinyModel {
            name: "rigdeck-tiny".into(),
            n_layer: 4,
            n_embd: 256,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 512,
            context_length: 4096,
            experts: None,
            sliding_window: None,
            mla: None,
            random_weights: true,
        }
    }

    /// Writes the model; the tokenizer (every `tokenizer.*` key) comes from `vocab`.
    pub fn write(&self, vocab: &Path, out: &Path) -> Result<u64, GgufError> {
        let vocab = GgufFile::open(vocab)?;
        self.writer(&vocab.metadata).write_to_path(out)
    }

    /// The model as a writer; the tokenizer (every `tokenizer.*` key) comes from `vocab`, the
    /// metadata of a vocabulary file (or any tokenizer keys a test makes up).
    pub fn writer(&self, vocab: &Metadata) -> GgufWriter {
        let n_vocab = vocab
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .map_or(0, |t| t.len() as u64);
        let mut w = GgufWriter::new();
        self.metadata(&mut w);
        for (key, value) in vocab.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
            w.set(key, value.clone());
        }
        let mut rng = SplitMix64::new(0x5eed);
        let mut tensor = |w: &mut GgufWriter, name: &str, dims: &[u64]| {
            let data = if self.random_weights {
                TensorData::Bytes(small_f16(dims.iter().product(), &mut rng))
            } else {
                TensorData::Zeros
            };
            w.add_tensor(name, dims, GgmlType::F16, data);
        };
        let (e, kv) = (self.n_embd, self.n_embd / self.n_head * self.n_head_kv);
        tensor(&mut w, "token_embd.weight", &[e, n_vocab]);
        if let Some(mla) = self.mla {
            self.deepseek2_tensors(&mut w, &mut tensor, mla, n_vocab);
            return w;
        }
        if self.sliding_window.is_some() {
            let head = self.n_embd / self.n_head;
            for i in 0..self.n_layer {
                attention(&mut w, &mut tensor, i, e, kv);
                norm(&mut w, &format!("blk.{i}.attn_q_norm.weight"), head);
                norm(&mut w, &format!("blk.{i}.attn_k_norm.weight"), head);
                norm(&mut w, &format!("blk.{i}.post_attention_norm.weight"), e);
                norm(&mut w, &format!("blk.{i}.ffn_norm.weight"), e);
                dense_ffn(&mut w, &mut tensor, i, e, self.n_ff);
                norm(&mut w, &format!("blk.{i}.post_ffw_norm.weight"), e);
            }
            // No output.weight: llama.cpp ties the output to token_embd (and loads it twice).
            norm(&mut w, "output_norm.weight", e);
            return w;
        }
        for i in 0..self.n_layer {
            attention(&mut w, &mut tensor, i, e, kv);
            norm(&mut w, &format!("blk.{i}.ffn_norm.weight"), e);
            match self.experts {
                None => {
                    dense_ffn(&mut w, &mut tensor, i, e, self.n_ff);
                }
                Some((n_expert, _)) => {
                    router(&mut w, &format!("blk.{i}.ffn_gate_inp.weight"), e, n_expert);
                    tensor(
                        &mut w,
                        &format!("blk.{i}.ffn_gate_exps.weight"),
                        &[e, self.n_ff, n_expert],
                    );
                    tensor(
                        &mut w,
                        &format!("blk.{i}.ffn_up_exps.weight"),
                        &[e, self.n_ff, n_expert],
                    );
                    tensor(
                        &mut w,
                        &format!("blk.{i}.ffn_down_exps.weight"),
                        &[self.n_ff, e, n_expert],
                    );
                }
            }
        }
        norm(&mut w, "output_norm.weight", e);
        tensor(&mut w, "output.weight", &[e, n_vocab]);
        w
    }

    fn metadata(&self, w: &mut GgufWriter) {
        if let Some(mla) = self.mla {
            return self.deepseek2_metadata(w, mla);
        }
        if let Some(window) = self.sliding_window {
            return self.gemma3_metadata(w, window);
        }
        w.set("general.architecture", "llama");
        w.set("general.name", self.name.as_str());
        w.set("general.file_type", 1u32); // mostly F16
        w.set("llama.block_count", self.n_layer as u32);
        w.set("llama.context_length", self.context_length as u32);
        w.set("llama.embedding_length", self.n_embd as u32);
        w.set("llama.feed_forward_length", self.n_ff as u32);
        w.set("llama.attention.head_count", self.n_head as u32);
        w.set("llama.attention.head_count_kv", self.n_head_kv as u32);
        w.set(
            "llama.rope.dimension_count",
            (self.n_embd / self.n_head) as u32,
        );
        w.set("llama.rope.freq_base", 10_000.0f32);
        w.set("llama.attention.layer_norm_rms_epsilon", 1e-5f32);
        if let Some((n_expert, used)) = self.experts {
            w.set("llama.expert_count", n_expert as u32);
            w.set("llama.expert_used_count", used as u32);
        }
    }
}

impl TinyModel {
    /// Expert count and use of a `deepseek2` model (it has no dense-only form).
    fn deepseek2_experts(&self) -> (u64, u64) {
        self.experts.unwrap_or((8, 2))
    }

    fn deepseek2_metadata(&self, w: &mut GgufWriter, mla: TinyMla) {
        let (n_expert, used) = self.deepseek2_experts();
        let u = |v: u64| v as u32;
        w.set("general.architecture", "deepseek2");
        w.set("general.name", self.name.as_str());
        w.set("general.file_type", 1u32);
        w.set("deepseek2.block_count", u(self.n_layer));
        w.set("deepseek2.context_length", u(self.context_length));
        w.set("deepseek2.embedding_length", u(self.n_embd));
        w.set("deepseek2.feed_forward_length", u(self.n_ff * 4));
        w.set("deepseek2.attention.head_count", u(self.n_head));
        // As converted for MLA: one shared latent "head" of kv_lora_rank (+ rope) per token.
        w.set("deepseek2.attention.head_count_kv", 1u32);
        w.set(
            "deepseek2.attention.key_length",
            u(mla.kv_lora_rank + mla.rope_dim),
        );
        w.set("deepseek2.attention.value_length", u(mla.kv_lora_rank));
        w.set(
            "deepseek2.attention.key_length_mla",
            u(mla.nope_dim + mla.rope_dim),
        );
        w.set("deepseek2.attention.value_length_mla", u(mla.v_dim));
        w.set("deepseek2.attention.q_lora_rank", 0u32);
        w.set("deepseek2.attention.kv_lora_rank", u(mla.kv_lora_rank));
        w.set("deepseek2.attention.layer_norm_rms_epsilon", 1e-6f32);
        w.set("deepseek2.rope.dimension_count", u(mla.rope_dim));
        w.set("deepseek2.rope.freq_base", 10_000.0f32);
        w.set("deepseek2.leading_dense_block_count", 1u32);
        w.set("deepseek2.expert_count", u(n_expert));
        w.set("deepseek2.expert_used_count", u(used));
        w.set("deepseek2.expert_shared_count", 1u32);
        w.set("deepseek2.expert_feed_forward_length", u(self.n_ff));
        w.set("deepseek2.expert_weights_scale", 1.0f32);
        w.set("deepseek2.expert_gating_func", 1u32); // softmax
    }

    /// The tensors after `token_embd` that `llama_model_deepseek2` loads for MLA with
    /// `q_lora_rank` 0.
    fn deepseek2_tensors(
        &self,
        w: &mut GgufWriter,
        tensor: &mut TensorSink<'_>,
        mla: TinyMla,
        n_vocab: u64,
    ) {
        let (e, heads, ff) = (self.n_embd, self.n_head, self.n_ff);
        let (n_expert, _) = self.deepseek2_experts();
        for i in 0..self.n_layer {
            let t = |name: &str| format!("blk.{i}.{name}.weight");
            norm(w, &t("attn_norm"), e);
            norm(w, &t("attn_kv_a_norm"), mla.kv_lora_rank);
            tensor(w, &t("attn_q"), &[e, heads * (mla.nope_dim + mla.rope_dim)]);
            tensor(
                w,
                &t("attn_kv_a_mqa"),
                &[e, mla.kv_lora_rank + mla.rope_dim],
            );
            tensor(w, &t("attn_k_b"), &[mla.nope_dim, mla.kv_lora_rank, heads]);
            tensor(w, &t("attn_v_b"), &[mla.kv_lora_rank, mla.v_dim, heads]);
            tensor(w, &t("attn_output"), &[heads * mla.v_dim, e]);
            norm(w, &t("ffn_norm"), e);
            if i == 0 {
                dense_ffn(w, tensor, i, e, ff * 4);
                continue;
            }
            router(w, &t("ffn_gate_inp"), e, n_expert);
            tensor(w, &t("ffn_gate_exps"), &[e, ff, n_expert]);
            tensor(w, &t("ffn_up_exps"), &[e, ff, n_expert]);
            tensor(w, &t("ffn_down_exps"), &[ff, e, n_expert]);
            tensor(w, &t("ffn_gate_shexp"), &[e, ff]);
            tensor(w, &t("ffn_up_shexp"), &[e, ff]);
            tensor(w, &t("ffn_down_shexp"), &[ff, e]);
        }
        norm(w, "output_norm.weight", e);
        tensor(w, "output.weight", &[e, n_vocab]);
    }

    fn gemma3_metadata(&self, w: &mut GgufWriter, window: u64) {
        let head = self.n_embd / self.n_head;
        w.set("general.architecture", "gemma3");
        w.set("general.name", self.name.as_str());
        w.set("general.file_type", 1u32);
        w.set("gemma3.block_count", self.n_layer as u32);
        w.set("gemma3.context_length", self.context_length as u32);
        w.set("gemma3.embedding_length", self.n_embd as u32);
        w.set("gemma3.feed_forward_length", self.n_ff as u32);
        w.set("gemma3.attention.head_count", self.n_head as u32);
        w.set("gemma3.attention.head_count_kv", self.n_head_kv as u32);
        w.set("gemma3.attention.key_length", head as u32);
        w.set("gemma3.attention.value_length", head as u32);
        w.set("gemma3.attention.sliding_window", window as u32);
        w.set("gemma3.attention.layer_norm_rms_epsilon", 1e-6f32);
        w.set("gemma3.rope.freq_base", 1_000_000.0f32);
    }
}

/// A tensor writer: name and shape, data as the model's weights are (random or zeros).
type TensorSink<'a> = dyn FnMut(&mut GgufWriter, &str, &[u64]) + 'a;

/// Layer `i`'s attention norm and Q/K/V/output projections (GQA: K and V `kv` wide).
fn attention(w: &mut GgufWriter, tensor: &mut TensorSink<'_>, i: u64, e: u64, kv: u64) {
    norm(w, &format!("blk.{i}.attn_norm.weight"), e);
    tensor(w, &format!("blk.{i}.attn_q.weight"), &[e, e]);
    tensor(w, &format!("blk.{i}.attn_k.weight"), &[e, kv]);
    tensor(w, &format!("blk.{i}.attn_v.weight"), &[e, kv]);
    tensor(w, &format!("blk.{i}.attn_output.weight"), &[e, e]);
}

/// Layer `i`'s dense gated FFN.
fn dense_ffn(w: &mut GgufWriter, tensor: &mut TensorSink<'_>, i: u64, e: u64, ff: u64) {
    tensor(w, &format!("blk.{i}.ffn_gate.weight"), &[e, ff]);
    tensor(w, &format!("blk.{i}.ffn_up.weight"), &[e, ff]);
    tensor(w, &format!("blk.{i}.ffn_down.weight"), &[ff, e]);
}

/// A norm weight of ones (F32, as converters write norms).
fn norm(w: &mut GgufWriter, name: &str, n: u64) {
    let ones: Vec<u8> = (0..n).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    w.add_tensor(name, &[n], GgmlType::F32, TensorData::Bytes(ones));
}

/// An MoE router (F32) that weighs every expert alike.
fn router(w: &mut GgufWriter, name: &str, n_embd: u64, n_expert: u64) {
    let weights: Vec<u8> = (0..n_embd * n_expert)
        .flat_map(|_| 0.01f32.to_le_bytes())
        .collect();
    w.add_tensor(
        name,
        &[n_embd, n_expert],
        GgmlType::F32,
        TensorData::Bytes(weights),
    );
}

/// Half-precision values uniform in about ±0.03: enough signal to run, far from overflow.
fn small_f16(count: u64, rng: &mut SplitMix64) -> Vec<u8> {
    let mut out = Vec::with_capacity(count as usize * 2);
    for _ in 0..count {
        // Exponent 2^-6..2^-5 (biased 9..10), random mantissa and sign.
        let bits = rng.next_u64();
        let sign = ((bits >> 63) as u16) << 15;
        let exponent = (9 + (bits >> 62 & 1) as u16) << 10;
        let mantissa = (bits & 0x3ff) as u16;
        out.extend_from_slice(&(sign | exponent | mantissa).to_le_bytes());
    }
    out
}
