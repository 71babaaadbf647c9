//! The facts about a model that placement needs: its tensors (name, bytes, layer, role) and its
//! attention layout, independent of where they were read from (a local or remote GGUF header).

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
    /// MLA (DeepSeek-style): the cache holds one compressed K row per token and no V.
    pub mla: bool,
    /// Sliding-window size in tokens, when the model has sliding-window layers.
    pub sliding_window: Option<u32>,
    /// Which layers use the sliding window.
    pub swa_layers: Vec<bool>,
    /// Extra K-only cache per layer (the DSA indexer of GLM-5.x), in elements per token; 0 = none.
    pub indexer_key_length: Vec<u32>,
    /// The DSA indexer's heads and the keys it selects per query (its scores are a compute
    /// buffer term that grows with the context).
    #[serde(default)]
    pub indexer_heads: u32,
    #[serde(default)]
    pub indexer_top_k: u32,
}

/// Mixture-of-experts shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertShape {
    pub count: u32,
    pub used: u32,
    pub shared: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelShape {
    pub architecture: String,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_vocab: u32,
    pub n_ff: u32,
    pub context_length: u32,
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
    }
}
