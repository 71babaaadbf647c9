//! Synthetic models shaped like real ones, for tests and benchmarks of anything that reads
//! headers (this crate, the placement planner).
//!
//! [`MoeShape::glm_5_2`] is a GLM-5.x-class DeepSeek-style MoE with MLA and the DSA indexer:
//! 78 layers (3 dense), 256 experts with 8 active and 1 shared, about 1 800 tensors with the
//! sizes of an IQ2-class quantization (experts IQ2_XXS/IQ2_XS, attention Q4_K/Q8_0), and a
//! 154 880-token vocabulary with merges, so its first header is megabytes like the real one.
//! Its data is all zero: written with [`GgufWriter::write_split`] it becomes sparse files of
//! about 200 GB in total that take a few megabytes of disk.
//!
//! The layout follows llama.cpp's `deepseek2`/`glm-dsa` tensors (`src/llama-arch.cpp`); the
//! hyper-parameter values are plausible, not a copy of any release.

use crate::rng::SplitMix64;
use crate::types::GgmlType;
use crate::value::{StringArray, Value};
use crate::write::{GgufWriter, TensorData};

/// The shape of a synthetic DeepSeek-style MoE model.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeShape {
    /// `general.architecture`.
    pub architecture: String,
    /// `general.name`.
    pub name: String,
    /// Transformer layers.
    pub layers: u32,
    /// Leading layers with a dense FFN instead of experts.
    pub dense_layers: u32,
    /// Hidden size.
    pub embedding: u64,
    /// FFN size of the dense layers.
    pub dense_ff: u64,
    /// FFN size of one expert.
    pub expert_ff: u64,
    /// Routed experts per layer.
    pub experts: u32,
    /// Experts active per token.
    pub experts_used: u32,
    /// Shared experts per layer.
    pub experts_shared: u32,
    /// Attention heads.
    pub heads: u32,
    /// Query LoRA rank.
    pub q_lora_rank: u64,
    /// KV LoRA rank (the MLA latent).
    pub kv_lora_rank: u64,
    /// RoPE dimensions of a head.
    pub rope_dim: u64,
    /// Non-RoPE key dimensions of a head.
    pub qk_nope_dim: u64,
    /// Value dimensions of a head.
    pub v_head_dim: u64,
    /// DSA indexer heads (0: no indexer tensors).
    pub indexer_heads: u32,
    /// DSA indexer head size.
    pub indexer_head_dim: u64,
    /// Vocabulary size.
    pub vocab: u32,
    /// Trained context length.
    pub context: u64,
    /// Whether to write the tokenizer arrays (tokens, types, merges).
    pub tokenizer: bool,
    /// Type of the routed experts' gate and up tensors.
    pub expert_type: GgmlType,
    /// Type of the routed experts' down tensors.
    pub expert_down_type: GgmlType,
    /// Type of the other matrices.
    pub matrix_type: GgmlType,
    /// `general.file_type`.
    pub file_type: u32,
}

impl MoeShape {
    /// A GLM-5.x-class model at IQ2_XXS (see the module docs).
    pub fn glm_5_2() -> MoeShape {
        MoeShape {
            architecture: "glm-dsa".to_owned(),
            name: "GLM-5.2 (synthetic)".to_owned(),
            layers: 78,
            dense_layers: 3,
            embedding: 6144,
            dense_ff: 12288,
            expert_ff: 2048,
            experts: 256,
            experts_used: 8,
            experts_shared: 1,
            heads: 64,
            q_lora_rank: 2048,
            kv_lora_rank: 512,
            rope_dim: 64,
            qk_nope_dim: 192,
            v_head_dim: 256,
            indexer_heads: 32,
            indexer_head_dim: 128,
            vocab: 154_880,
            context: 202_752,
            tokenizer: true,
            expert_type: GgmlType::IQ2_XXS,
            expert_down_type: GgmlType::IQ2_XS,
            matrix_type: GgmlType::Q4_K,
            file_type: 19,
        }
    }

    /// The same architecture, tiny: 4 layers, 8 experts, a 512-token vocabulary.
    pub fn small() -> MoeShape {
        MoeShape {
            name: "tiny MoE (synthetic)".to_owned(),
            layers: 4,
            dense_layers: 1,
            embedding: 256,
            dense_ff: 512,
            expert_ff: 256,
            experts: 8,
            experts_used: 2,
            heads: 4,
            q_lora_rank: 256,
            kv_lora_rank: 256,
            qk_nope_dim: 64,
            v_head_dim: 64,
            indexer_heads: 2,
            indexer_head_dim: 64,
            vocab: 512,
            context: 4096,
            ..MoeShape::glm_5_2()
        }
    }

    /// The model with a real tokenizer (every `tokenizer.*` key of `vocab`, e.g. one of
    /// llama.cpp's `models/ggml-vocab-*.gguf`) and a vocabulary of its size, so that llama.cpp
    /// itself loads it (the synthetic tokenizer is for header sizes only).
    pub fn writer_with_tokenizer(&self, vocab: &crate::value::Metadata) -> GgufWriter {
        let tokens = vocab
            .get("tokenizer.ggml.tokens")
            .and_then(|v| match v {
                Value::Array(tokens) => u32::try_from(tokens.len()).ok(),
                _ => None,
            })
            .unwrap_or(self.vocab);
        let shape = MoeShape {
            vocab: tokens,
            tokenizer: false,
            ..self.clone()
        };
        let mut w = shape.writer();
        for (key, value) in vocab.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
            w.set(key, value.clone());
        }
        w
    }

    /// Builds the model: metadata, tokenizer and all tensor infos, data all zero.
    pub fn writer(&self) -> GgufWriter {
        let mut w = GgufWriter::new();
        self.set_metadata(&mut w);
        if self.tokenizer {
            self.set_tokenizer(&mut w);
        }
        self.add_tensors(&mut w);
        w
    }

    fn set_metadata(&self, w: &mut GgufWriter) {
        let a = |k: &str| format!("{}.{k}", self.architecture);
        // Hyper-parameters as the converters write them (u32), which llama.cpp requires.
        let key = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        w.set("general.architecture", self.architecture.as_str())
            .set("general.name", self.name.as_str())
            .set("general.file_type", self.file_type)
            .set("general.quantization_version", 2u32)
            .set(&a("block_count"), self.layers)
            .set(&a("context_length"), key(self.context))
            .set(&a("embedding_length"), key(self.embedding))
            .set(&a("feed_forward_length"), key(self.dense_ff))
            .set(&a("attention.head_count"), self.heads)
            .set(&a("attention.head_count_kv"), 1u32)
            .set(
                &a("attention.key_length"),
                key(self.kv_lora_rank.saturating_add(self.rope_dim)),
            )
            .set(&a("attention.value_length"), key(self.kv_lora_rank))
            .set(
                &a("attention.key_length_mla"),
                key(self.qk_nope_dim.saturating_add(self.rope_dim)),
            )
            .set(&a("attention.value_length_mla"), key(self.v_head_dim))
            .set(&a("attention.q_lora_rank"), key(self.q_lora_rank))
            .set(&a("attention.kv_lora_rank"), key(self.kv_lora_rank))
            .set(&a("attention.layer_norm_rms_epsilon"), 1e-5f32)
            .set(&a("rope.dimension_count"), key(self.rope_dim))
            .set(&a("rope.freq_base"), 1_000_000f32)
            .set(&a("expert_count"), self.experts)
            .set(&a("expert_used_count"), self.experts_used)
            .set(&a("expert_shared_count"), self.experts_shared)
            .set(&a("expert_feed_forward_length"), key(self.expert_ff))
            .set(&a("leading_dense_block_count"), self.dense_layers)
            .set(&a("expert_weights_scale"), 2.5f32)
            .set(&a("expert_weights_norm"), true)
            .set(&a("expert_gating_func"), 2u32)
            .set(&a("vocab_size"), self.vocab);
        if self.indexer_heads > 0 {
            w.set(&a("attention.indexer.head_count"), self.indexer_heads)
                .set(
                    &a("attention.indexer.key_length"),
                    key(self.indexer_head_dim),
                )
                .set(&a("attention.indexer.top_k"), 2048u32);
        }
    }

    /// Tokens of 1–12 random characters, types, and merges of token pairs, seeded.
    fn set_tokenizer(&self, w: &mut GgufWriter) {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
        let mut rng = SplitMix64::new(0x5eed);
        let word = |rng: &mut SplitMix64| -> String {
            let len = 1 + rng.below_usize(12);
            (0..len)
                .filter_map(|_| ALPHABET.get(rng.below_usize(ALPHABET.len())))
                .map(|&b| char::from(b))
                .collect()
        };
        let n = usize::try_from(self.vocab).unwrap_or(0);
        let tokens: StringArray = (0..n).map(|_| word(&mut rng)).collect();
        let types: Vec<i32> = (0..n).map(|i| if i < 100 { 3 } else { 1 }).collect();
        let merges: StringArray = (0..n.saturating_sub(1000))
            .map(|_| format!("{} {}", word(&mut rng), word(&mut rng)))
            .collect();
        w.set("tokenizer.ggml.model", "gpt2")
            .set("tokenizer.ggml.pre", "glm4")
            .set("tokenizer.ggml.tokens", tokens)
            .set("tokenizer.ggml.token_type", types)
            .set("tokenizer.ggml.merges", merges)
            .set("tokenizer.ggml.eos_token_id", 151_329u32)
            .set("tokenizer.ggml.padding_token_id", 151_329u32)
            .set("tokenizer.ggml.bos_token_id", 151_331u32)
            .set(
                "tokenizer.chat_template",
                Value::String(
                    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}".repeat(40),
                ),
            );
    }

    fn add_tensors(&self, w: &mut GgufWriter) {
        let (e, vocab) = (self.embedding, u64::from(self.vocab));
        w.add_tensor(
            "token_embd.weight",
            &[e, vocab],
            self.matrix_type,
            TensorData::Zeros,
        );
        for layer in 0..self.layers {
            self.add_attention(w, layer);
            if layer < self.dense_layers {
                self.add_dense_ffn(w, layer);
            } else {
                self.add_moe_ffn(w, layer);
            }
            if self.indexer_heads > 0 {
                self.add_indexer(w, layer);
            }
        }
        w.add_tensor("output_norm.weight", &[e], GgmlType::F32, TensorData::Zeros);
        w.add_tensor(
            "output.weight",
            &[e, vocab],
            GgmlType::Q6_K,
            TensorData::Zeros,
        );
    }

    fn add_attention(&self, w: &mut GgufWriter, layer: u32) {
        let t = |name: &str| format!("blk.{layer}.{name}");
        let (e, heads) = (self.embedding, u64::from(self.heads));
        let q_head = self.qk_nope_dim.saturating_add(self.rope_dim);
        let (m, z) = (self.matrix_type, TensorData::Zeros);
        w.add_tensor(&t("attn_norm.weight"), &[e], GgmlType::F32, z.clone())
            .add_tensor(
                &t("attn_q_a_norm.weight"),
                &[self.q_lora_rank],
                GgmlType::F32,
                z.clone(),
            )
            .add_tensor(
                &t("attn_kv_a_norm.weight"),
                &[self.kv_lora_rank],
                GgmlType::F32,
                z.clone(),
            )
            .add_tensor(&t("attn_q_a.weight"), &[e, self.q_lora_rank], m, z.clone())
            .add_tensor(
                &t("attn_q_b.weight"),
                &[self.q_lora_rank, heads.saturating_mul(q_head)],
                m,
                z.clone(),
            )
            .add_tensor(
                &t("attn_kv_a_mqa.weight"),
                &[e, self.kv_lora_rank.saturating_add(self.rope_dim)],
                m,
                z.clone(),
            )
            .add_tensor(
                &t("attn_k_b.weight"),
                &[self.qk_nope_dim, self.kv_lora_rank, heads],
                GgmlType::Q8_0,
                z.clone(),
            )
            .add_tensor(
                &t("attn_v_b.weight"),
                &[self.kv_lora_rank, self.v_head_dim, heads],
                GgmlType::Q8_0,
                z.clone(),
            )
            .add_tensor(
                &t("attn_output.weight"),
                &[heads.saturating_mul(self.v_head_dim), e],
                m,
                z.clone(),
            )
            .add_tensor(&t("ffn_norm.weight"), &[e], GgmlType::F32, z);
    }

    fn add_dense_ffn(&self, w: &mut GgufWriter, layer: u32) {
        let t = |name: &str| format!("blk.{layer}.{name}");
        let (e, ff, m) = (self.embedding, self.dense_ff, self.matrix_type);
        w.add_tensor(&t("ffn_gate.weight"), &[e, ff], m, TensorData::Zeros)
            .add_tensor(&t("ffn_up.weight"), &[e, ff], m, TensorData::Zeros)
            .add_tensor(&t("ffn_down.weight"), &[ff, e], m, TensorData::Zeros);
    }

    fn add_moe_ffn(&self, w: &mut GgufWriter, layer: u32) {
        let t = |name: &str| format!("blk.{layer}.{name}");
        let (e, ff, n) = (self.embedding, self.expert_ff, u64::from(self.experts));
        let shared_ff = ff.saturating_mul(u64::from(self.experts_shared));
        let (m, z) = (self.matrix_type, TensorData::Zeros);
        w.add_tensor(&t("ffn_gate_inp.weight"), &[e, n], GgmlType::F32, z.clone())
            .add_tensor(&t("exp_probs_b.bias"), &[n], GgmlType::F32, z.clone())
            .add_tensor(
                &t("ffn_gate_exps.weight"),
                &[e, ff, n],
                self.expert_type,
                z.clone(),
            )
            .add_tensor(
                &t("ffn_up_exps.weight"),
                &[e, ff, n],
                self.expert_type,
                z.clone(),
            )
            .add_tensor(
                &t("ffn_down_exps.weight"),
                &[ff, e, n],
                self.expert_down_type,
                z.clone(),
            )
            .add_tensor(&t("ffn_gate_shexp.weight"), &[e, shared_ff], m, z.clone())
            .add_tensor(&t("ffn_up_shexp.weight"), &[e, shared_ff], m, z.clone())
            .add_tensor(&t("ffn_down_shexp.weight"), &[shared_ff, e], m, z);
    }

    fn add_indexer(&self, w: &mut GgufWriter, layer: u32) {
        let t = |name: &str| format!("blk.{layer}.{name}");
        let (e, d, h) = (
            self.embedding,
            self.indexer_head_dim,
            u64::from(self.indexer_heads),
        );
        let z = TensorData::Zeros;
        w.add_tensor(&t("indexer.k_norm.weight"), &[d], GgmlType::F32, z.clone())
            .add_tensor(&t("indexer.k_norm.bias"), &[d], GgmlType::F32, z.clone())
            .add_tensor(&t("indexer.proj.weight"), &[e, h], GgmlType::F16, z.clone())
            .add_tensor(
                &t("indexer.attn_k.weight"),
                &[e, d],
                GgmlType::Q8_0,
                z.clone(),
            )
            .add_tensor(
                &t("indexer.attn_q_b.weight"),
                &[self.q_lora_rank, h.saturating_mul(d)],
                GgmlType::Q8_0,
                z,
            );
    }
}
