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
    /// Random small weights (a model that runs) or zeros (a sparse file, for sizing only).
    pub random_weights: bool,
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
            random_weights: true,
        }
    }

    /// Writes the model; the tokenizer (every `tokenizer.*` key) comes from `vocab`.
    pub fn write(&self, vocab: &Path, out: &Path) -> Result<u64, GgufError> {
        let vocab = GgufFile::open(vocab)?;
        let n_vocab = vocab
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .map_or(0, |t| t.len() as u64);
        let mut w = GgufWriter::new();
        self.metadata(&mut w);
        for (key, value) in vocab
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
        {
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
        let norm = |w: &mut GgufWriter, name: &str, n: u64| {
            let ones: Vec<u8> = (0..n).flat_map(|_| 1.0f32.to_le_bytes()).collect();
            w.add_tensor(name, &[n], GgmlType::F32, TensorData::Bytes(ones));
        };
        let (e, kv) = (self.n_embd, self.n_embd / self.n_head * self.n_head_kv);
        tensor(&mut w, "token_embd.weight", &[e, n_vocab]);
        if self.sliding_window.is_some() {
            let head = self.n_embd / self.n_head;
            for i in 0..self.n_layer {
                norm(&mut w, &format!("blk.{i}.attn_norm.weight"), e);
                tensor(&mut w, &format!("blk.{i}.attn_q.weight"), &[e, e]);
                tensor(&mut w, &format!("blk.{i}.attn_k.weight"), &[e, kv]);
                tensor(&mut w, &format!("blk.{i}.attn_v.weight"), &[e, kv]);
                tensor(&mut w, &format!("blk.{i}.attn_output.weight"), &[e, e]);
                norm(&mut w, &format!("blk.{i}.attn_q_norm.weight"), head);
                norm(&mut w, &format!("blk.{i}.attn_k_norm.weight"), head);
                norm(&mut w, &format!("blk.{i}.post_attention_norm.weight"), e);
                norm(&mut w, &format!("blk.{i}.ffn_norm.weight"), e);
                tensor(&mut w, &format!("blk.{i}.ffn_gate.weight"), &[e, self.n_ff]);
                tensor(&mut w, &format!("blk.{i}.ffn_up.weight"), &[e, self.n_ff]);
                tensor(&mut w, &format!("blk.{i}.ffn_down.weight"), &[self.n_ff, e]);
                norm(&mut w, &format!("blk.{i}.post_ffw_norm.weight"), e);
            }
            // No output.weight: llama.cpp ties the output to token_embd (and loads it twice).
            norm(&mut w, "output_norm.weight", e);
            return w.write_to_path(out);
        }
        for i in 0..self.n_layer {
            norm(&mut w, &format!("blk.{i}.attn_norm.weight"), e);
            tensor(&mut w, &format!("blk.{i}.attn_q.weight"), &[e, e]);
            tensor(&mut w, &format!("blk.{i}.attn_k.weight"), &[e, kv]);
            tensor(&mut w, &format!("blk.{i}.attn_v.weight"), &[e, kv]);
            tensor(&mut w, &format!("blk.{i}.attn_output.weight"), &[e, e]);
            norm(&mut w, &format!("blk.{i}.ffn_norm.weight"), e);
            match self.experts {
                None => {
                    tensor(&mut w, &format!("blk.{i}.ffn_gate.weight"), &[e, self.n_ff]);
                    tensor(&mut w, &format!("blk.{i}.ffn_up.weight"), &[e, self.n_ff]);
                    tensor(&mut w, &format!("blk.{i}.ffn_down.weight"), &[self.n_ff, e]);
                }
                Some((n_expert, _)) => {
                    let router: Vec<u8> = (0..e * n_expert)
                        .flat_map(|_| 0.01f32.to_le_bytes())
                        .collect();
                    w.add_tensor(
                        &format!("blk.{i}.ffn_gate_inp.weight"),
                        &[e, n_expert],
                        GgmlType::F32,
                        TensorData::Bytes(router),
                    );
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
        w.write_to_path(out)
    }

    fn metadata(&self, w: &mut GgufWriter) {
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
