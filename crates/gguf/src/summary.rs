//! A model summary for people and the planner: architecture, size, quantization, shape.
//!
//! Everything comes from the header: parameter count is the sum of tensor elements, the
//! quantization is a histogram of tensor types, and the hyper-parameters are the
//! `{arch}.*` keys llama.cpp reads (`src/llama-arch.cpp`, `LLM_KV_NAMES`). A key the model
//! does not have is `None`, never an error: summaries are shown for models llama.cpp may not
//! even support.

use crate::read::{GgufFile, TensorInfo};
use crate::split::GgufModel;
use crate::types::GgmlType;
use crate::value::{Metadata, Value};
use serde::Serialize;
use std::collections::BTreeMap;

/// A hyper-parameter that is one number for all layers or one per layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum PerLayer {
    /// The same for every layer.
    Uniform(u64),
    /// One value per layer (e.g. `head_count_kv` of models that mix attention types).
    PerLayer(Vec<u64>),
}

impl PerLayer {
    /// The largest value over layers.
    pub fn max(&self) -> u64 {
        match self {
            PerLayer::Uniform(v) => *v,
            PerLayer::PerLayer(v) => v.iter().copied().max().unwrap_or(0),
        }
    }
}

/// Which layers use sliding-window attention.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlidingWindowPattern {
    /// Every n-th layer is full attention, the others sliding-window.
    Period(u64),
    /// Per layer: true where the layer uses the sliding window.
    PerLayer(Vec<bool>),
}

/// Multi-head latent attention (DeepSeek V2/V3, Kimi, GLM-5.x).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Mla {
    /// `{arch}.attention.key_length_mla`.
    pub key_length_mla: Option<u64>,
    /// `{arch}.attention.value_length_mla`.
    pub value_length_mla: Option<u64>,
    /// `{arch}.attention.kv_lora_rank`.
    pub kv_lora_rank: Option<u64>,
    /// `{arch}.attention.q_lora_rank`.
    pub q_lora_rank: Option<u64>,
    /// llama.cpp switches MLA on only when both MLA lengths are present.
    pub active: bool,
}

/// Mixture of experts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Experts {
    /// `{arch}.expert_count`.
    pub count: u64,
    /// `{arch}.expert_used_count`: experts active per token.
    pub used: Option<u64>,
    /// `{arch}.expert_shared_count`.
    pub shared: Option<u64>,
    /// `{arch}.leading_dense_block_count`: layers before the first MoE layer.
    pub leading_dense_blocks: Option<u64>,
    /// `{arch}.expert_feed_forward_length`.
    pub feed_forward_length: Option<u64>,
    /// `{arch}.expert_shared_feed_forward_length`.
    pub shared_feed_forward_length: Option<u64>,
}

/// Tensors of one type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TypeUsage {
    /// The type.
    pub ggml_type: GgmlType,
    /// Tensors of this type.
    pub tensors: u64,
    /// Their elements.
    pub elements: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// `general.file_type`: the quantization the file was made as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileType {
    /// The `llama_ftype` id.
    pub id: u64,
    /// Its label, e.g. `Q4_K_M`; `unknown (N)` for ids newer than Rigdeck.
    pub label: String,
}

/// The chat template a file carries (`tokenizer.chat_template`): its size and the names of the
/// extra ones (`tokenizer.chat_template.NAME`, e.g. `tool_use`), never the text, which can be
/// tens of kilobytes and summaries go into lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatTemplate {
    /// Bytes of the default template.
    pub bytes: u64,
    /// The named templates beside it.
    pub names: Vec<String>,
}

/// The key of a GGUF's default chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// What a model is, from its header.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ModelSummary {
    /// `general.architecture`, e.g. `llama`, `glm-dsa`.
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Sum of all tensors' elements.
    pub parameter_count: u64,
    /// Size on disk of all parts, when known.
    pub file_size: Option<u64>,
    /// Bytes of tensor data.
    pub tensor_bytes: u64,
    /// Number of tensors.
    pub tensor_count: usize,
    /// Number of parts (1 for an unsplit file).
    pub shard_count: usize,
    /// `general.file_type`.
    pub file_type: Option<FileType>,
    /// Per tensor type: count, elements and bytes; largest first.
    pub quantization: Vec<TypeUsage>,
    /// Average bits per weight over all tensor data.
    pub bits_per_weight: Option<f64>,
    /// `{arch}.block_count`.
    pub layers: Option<u64>,
    /// `{arch}.context_length`: the trained context.
    pub context_length: Option<u64>,
    /// `{arch}.embedding_length`.
    pub embedding_length: Option<u64>,
    /// `{arch}.feed_forward_length`.
    pub feed_forward_length: Option<PerLayer>,
    /// `{arch}.attention.head_count`.
    pub head_count: Option<PerLayer>,
    /// `{arch}.attention.head_count_kv`.
    pub head_count_kv: Option<PerLayer>,
    /// `{arch}.attention.key_length`.
    pub key_length: Option<u64>,
    /// `{arch}.attention.value_length`.
    pub value_length: Option<u64>,
    /// `{arch}.attention.key_length_swa` and `value_length_swa`: the heads of the
    /// sliding-window layers where they differ from the others' (Gemma 4).
    pub key_length_swa: Option<u64>,
    pub value_length_swa: Option<u64>,
    /// `{arch}.attention.shared_kv_layers`: the last layers, which read an earlier layer's
    /// cache and keep none of their own (Gemma 3n, Gemma 4's smaller models).
    pub shared_kv_layers: Option<u64>,
    /// MLA parameters, where present.
    pub mla: Option<Mla>,
    /// `{arch}.attention.sliding_window`.
    pub sliding_window: Option<u64>,
    /// `{arch}.attention.sliding_window_pattern`.
    pub sliding_window_pattern: Option<SlidingWindowPattern>,
    /// Experts, for MoE models.
    pub experts: Option<Experts>,
    /// Tokens in the vocabulary (`tokenizer.ggml.tokens`, else `{arch}.vocab_size`).
    pub vocab_size: Option<u64>,
    /// The chat template; `None`: the file carries none, and llama-server would fall back to
    /// ChatML unless told another (`--chat-template`).
    pub chat_template: Option<ChatTemplate>,
}

impl ModelSummary {
    /// The summary of one file.
    pub fn from_file(file: &GgufFile) -> ModelSummary {
        summarise(&file.metadata, file.tensors.iter(), file.file_size, 1)
    }

    /// The summary of a (possibly split) model.
    pub fn from_model(model: &GgufModel) -> ModelSummary {
        let tensors = model.tensors.iter().map(|t| &t.info);
        summarise(
            &model.metadata,
            tensors,
            model.file_size(),
            model.shards.len(),
        )
    }
}

fn summarise<'a>(
    md: &Metadata,
    tensors: impl Iterator<Item = &'a TensorInfo>,
    file_size: Option<u64>,
    shard_count: usize,
) -> ModelSummary {
    let architecture = md.get_str("general.architecture").map(str::to_owned);
    let arch = architecture.clone().unwrap_or_default();
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let u = |suffix: &str| md.get_u64(&key(suffix));

    let (quantization, tensor_count) = type_histogram(tensors);
    let parameter_count = quantization
        .iter()
        .fold(0u64, |a, t| a.saturating_add(t.elements));
    let tensor_bytes = quantization
        .iter()
        .fold(0u64, |a, t| a.saturating_add(t.bytes));
    // Ratios for display only; precision loss in the conversion is irrelevant.
    let bits_per_weight =
        (parameter_count > 0).then(|| tensor_bytes as f64 * 8.0 / parameter_count as f64);

    ModelSummary {
        name: md.get_str("general.name").map(str::to_owned),
        parameter_count,
        file_size,
        tensor_bytes,
        tensor_count,
        shard_count,
        file_type: md.get_u64("general.file_type").map(file_type),
        quantization,
        bits_per_weight,
        layers: u("block_count"),
        context_length: u("context_length"),
        embedding_length: u("embedding_length"),
        feed_forward_length: per_layer(md.get(&key("feed_forward_length"))),
        head_count: per_layer(md.get(&key("attention.head_count"))),
        head_count_kv: per_layer(md.get(&key("attention.head_count_kv"))),
        key_length: u("attention.key_length"),
        value_length: u("attention.value_length"),
        key_length_swa: u("attention.key_length_swa"),
        value_length_swa: u("attention.value_length_swa"),
        shared_kv_layers: u("attention.shared_kv_layers"),
        mla: mla(md, &arch),
        sliding_window: u("attention.sliding_window"),
        sliding_window_pattern: sliding_pattern(md.get(&key("attention.sliding_window_pattern"))),
        experts: experts(md, &arch),
        vocab_size: vocab_size(md, &arch),
        chat_template: chat_template(md),
        architecture,
    }
}

fn chat_template(md: &Metadata) -> Option<ChatTemplate> {
    let text = md
        .get_str(CHAT_TEMPLATE_KEY)
        .filter(|t| !t.trim().is_empty())?;
    let prefix = format!("{CHAT_TEMPLATE_KEY}.");
    let names = md
        .iter()
        .filter_map(|(key, _)| key.strip_prefix(&prefix))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    Some(ChatTemplate {
        bytes: text.len() as u64,
        names,
    })
}

/// Count, elements and bytes per tensor type, largest share first; and the tensor count.
fn type_histogram<'a>(tensors: impl Iterator<Item = &'a TensorInfo>) -> (Vec<TypeUsage>, usize) {
    let mut by_type: BTreeMap<GgmlType, TypeUsage> = BTreeMap::new();
    let mut count = 0usize;
    for t in tensors {
        count = count.saturating_add(1);
        let entry = by_type.entry(t.ggml_type).or_insert(TypeUsage {
            ggml_type: t.ggml_type,
            tensors: 0,
            elements: 0,
            bytes: 0,
        });
        entry.tensors = entry.tensors.saturating_add(1);
        entry.elements = entry.elements.saturating_add(t.element_count());
        entry.bytes = entry.bytes.saturating_add(t.size_bytes);
    }
    let mut usage: Vec<TypeUsage> = by_type.into_values().collect();
    usage.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.ggml_type.cmp(&b.ggml_type)));
    (usage, count)
}

fn per_layer(value: Option<&Value>) -> Option<PerLayer> {
    match value? {
        Value::Array(a) => a.to_u64_vec().map(PerLayer::PerLayer),
        v => v.as_u64().map(PerLayer::Uniform),
    }
}

fn sliding_pattern(value: Option<&Value>) -> Option<SlidingWindowPattern> {
    match value? {
        Value::Array(a) => a.to_bool_vec().map(SlidingWindowPattern::PerLayer),
        v => v.as_u64().map(SlidingWindowPattern::Period),
    }
}

fn mla(md: &Metadata, arch: &str) -> Option<Mla> {
    let u = |suffix: &str| md.get_u64(&format!("{arch}.attention.{suffix}"));
    let mla = Mla {
        key_length_mla: u("key_length_mla"),
        value_length_mla: u("value_length_mla"),
        kv_lora_rank: u("kv_lora_rank"),
        q_lora_rank: u("q_lora_rank"),
        active: false,
    };
    let any = mla.key_length_mla.is_some()
        || mla.value_length_mla.is_some()
        || mla.kv_lora_rank.is_some();
    let active = mla.key_length_mla.is_some() && mla.value_length_mla.is_some();
    any.then_some(Mla { active, ..mla })
}

fn experts(md: &Metadata, arch: &str) -> Option<Experts> {
    let u = |suffix: &str| md.get_u64(&format!("{arch}.{suffix}"));
    let count = u("expert_count").filter(|&c| c > 0)?;
    Some(Experts {
        count,
        used: u("expert_used_count"),
        shared: u("expert_shared_count"),
        leading_dense_blocks: u("leading_dense_block_count"),
        feed_forward_length: u("expert_feed_forward_length"),
        shared_feed_forward_length: u("expert_shared_feed_forward_length"),
    })
}

fn vocab_size(md: &Metadata, arch: &str) -> Option<u64> {
    md.get_arr("tokenizer.ggml.tokens")
        .map(|a| a.len() as u64)
        .or_else(|| md.get_u64(&format!("{arch}.vocab_size")))
}

/// The label of a `llama_ftype` (`include/llama.h`); ids 4–6 and 33–35 were removed.
pub fn file_type_label(id: u64) -> Option<&'static str> {
    Some(match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        _ => return None,
    })
}

fn file_type(id: u64) -> FileType {
    let label = file_type_label(id).map_or_else(|| format!("unknown ({id})"), str::to_owned);
    FileType { id, label }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_of(entries: Vec<(&str, Value)>) -> ModelSummary {
        let md = Metadata::from_entries(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        );
        summarise(&md, std::iter::empty(), None, 1)
    }

    #[test]
    fn the_chat_template_is_named_by_size_and_its_extra_names_never_by_text() {
        let template = "{% for m in messages %}{{ m.content }}{% endfor %}";
        let s = summary_of(vec![
            ("general.architecture", Value::String("qwen3".into())),
            (CHAT_TEMPLATE_KEY, Value::String(template.into())),
            (
                "tokenizer.chat_template.tool_use",
                Value::String("{{ tools }}".into()),
            ),
        ]);
        let t = s.chat_template.expect("a template");
        assert_eq!(t.bytes, template.len() as u64);
        assert_eq!(t.names, vec!["tool_use".to_owned()]);
        let json = serde_json::to_string(&summary_of(vec![(
            CHAT_TEMPLATE_KEY,
            Value::String(template.into()),
        )]))
        .unwrap();
        assert!(!json.contains("for m in messages"), "{json}");
    }

    #[test]
    fn a_file_without_a_chat_template_says_so() {
        let s = summary_of(vec![(
            "general.architecture",
            Value::String("gemma3".into()),
        )]);
        assert_eq!(s.chat_template, None);
        let blank = summary_of(vec![(CHAT_TEMPLATE_KEY, Value::String("  ".into()))]);
        assert_eq!(blank.chat_template, None);
    }
}
