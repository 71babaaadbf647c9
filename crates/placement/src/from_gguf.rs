//! Builds the planner's `ModelShape` from a GGUF header (one file or all shards of a split),
//! including the recurrent layers of SSM and hybrid models (`{arch}.ssm.*`, which layers are
//! recurrent), read as each architecture's `load_arch_hparams` in llama.cpp reads them.

use std::path::Path;

use rigdeck_gguf::error::GgufError;
use rigdeck_gguf::split::GgufModel;
use rigdeck_gguf::summary::{ModelSummary, PerLayer, SlidingWindowPattern};
use rigdeck_gguf::TokenizerArrays;
use serde::Serialize;

use super::model::{classify, AttentionLayout, ExpertShape, ModelShape, ModelTensor};

mod recurrent;
use recurrent::recurrent_layout;

#[derive(Debug, thiserror::Error)]
pub enum ShapeError {
    #[error("model '{model}' has no {what} in its header ({key}): it cannot be planned; is it a language model GGUF?")]
    Missing {
        model: String,
        what: &'static str,
        key: String,
    },
    #[error("model header of '{model}' says {key} = {value}, which {why}: the file is damaged or was not written by a GGUF converter; re-download or re-convert it")]
    Implausible {
        model: String,
        key: String,
        value: u64,
        why: String,
    },
    #[error("'{0}' is not a GGUF file: give the path of a .gguf model (any shard of a split one)")]
    NotGguf(String),
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// A model read from disk: what the UI shows about it and what the planner needs.
#[derive(Debug, Clone, Serialize)]
pub struct LoadedModel {
    pub summary: ModelSummary,
    pub shape: ModelShape,
}

/// Reads the header of a model (all shards of a split one) and its placement shape: a file
/// named `.gguf`, or one that starts as a GGUF file does (Ollama names its blobs by
/// digest, without the extension).
pub fn load_shape(path: &Path) -> Result<LoadedModel, ShapeError> {
    if path.extension().and_then(|e| e.to_str()) != Some("gguf") && !starts_as_gguf(path) {
        return Err(ShapeError::NotGguf(path.display().to_string()));
    }
    // The plan needs the vocabulary's size, not its tokens: counting them instead of keeping
    // them is most of the read of a large header.
    let model = GgufModel::open_with(path, TokenizerArrays::Counted)?;
    let label = path.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    loaded(&model, label)
}

/// Whether the file begins with the GGUF magic.
fn starts_as_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"GGUF")
}

/// The same for a model on a web server (a Hugging Face `resolve` URL): only the headers are
/// fetched, with HTTP Range requests, so a 400 GB model is planned before it is downloaded.
/// Returns the model and the number of HTTP requests it took.
pub async fn load_remote_shape(url: &str) -> Result<(LoadedModel, u64), ShapeError> {
    load_remote_shape_with(&rigdeck_gguf::remote::HttpReader::new(), url).await
}

/// The same through a configured reader (a hub token, other limits).
pub async fn load_remote_shape_with(
    reader: &rigdeck_gguf::remote::HttpReader,
    url: &str,
) -> Result<(LoadedModel, u64), ShapeError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) || !url.contains(".gguf") {
        return Err(ShapeError::NotGguf(url.to_owned()));
    }
    let model = reader.read_model(url).await?;
    let label = url.rsplit('/').next().unwrap_or("model");
    Ok((loaded(&model, label)?, reader.requests()))
}

fn loaded(model: &GgufModel, label: &str) -> Result<LoadedModel, ShapeError> {
    let shape = shape_of(model, label)?;
    Ok(LoadedModel {
        summary: ModelSummary::from_model(model),
        shape,
    })
}

/// The longest context a header may claim; the largest any published model trains for is
/// 10M tokens. A larger claim is a damaged header, and planning with it only saturates.
const MAX_CONTEXT: u64 = 1 << 26;

/// What the tensor table itself can vouch for: header values beyond these describe tensors the
/// file does not have, and sizing per-layer tables from them would let a 1 KB header claim
/// billions of layers.
struct TableBounds {
    /// Highest `blk.N.` index plus one.
    layers: u64,
    /// The largest dimension of any tensor (an embedding, head or expert count cannot exceed it).
    widest: u64,
}

impl TableBounds {
    fn of(model: &GgufModel) -> Self {
        let layers = model
            .tensors
            .iter()
            .filter_map(|t| t.info.name.strip_prefix("blk."))
            .filter_map(|rest| rest.split('.').next()?.parse::<u64>().ok())
            .map(|il| il.saturating_add(1))
            .max()
            .unwrap_or(0);
        let widest = model
            .tensors
            .iter()
            .flat_map(|t| t.info.dims.iter().copied())
            .max()
            .unwrap_or(0);
        TableBounds { layers, widest }
    }
}

/// Refuses header values the tensor table cannot support, naming the key and the reason.
fn check_bounds(
    summary: &ModelSummary,
    table: &TableBounds,
    arch: &str,
    label: &str,
) -> Result<(), ShapeError> {
    let refuse = |suffix: &str, value: u64, why: String| ShapeError::Implausible {
        model: label.to_owned(),
        key: format!("{arch}.{suffix}"),
        value,
        why,
    };
    let widest = |suffix: &str, value: Option<u64>| match value {
        Some(v) if v > table.widest => Err(refuse(
            suffix,
            v,
            format!(
                "is more than the largest tensor dimension in the file ({})",
                table.widest
            ),
        )),
        _ => Ok(()),
    };
    if let Some(n) = summary.layers.filter(|&n| n > table.layers) {
        let why = match table.layers {
            0 => "is more than its tensor table holds: no layer (blk.N) tensors".to_owned(),
            held => format!(
                "is more than its tensor table holds: layers 0–{} only",
                held - 1
            ),
        };
        return Err(refuse("block_count", n, why));
    }
    widest("embedding_length", summary.embedding_length)?;
    widest("vocab_size", summary.vocab_size)?;
    widest("key_length", summary.key_length)?;
    widest("value_length", summary.value_length)?;
    widest("attention.key_length_swa", summary.key_length_swa)?;
    widest("attention.value_length_swa", summary.value_length_swa)?;
    if let Some(n) = summary
        .shared_kv_layers
        .filter(|&n| n > 0 && summary.layers.is_some_and(|layers| n >= layers))
    {
        let why = "leaves no layer a cache of its own to share: it must be fewer than block_count";
        return Err(refuse("attention.shared_kv_layers", n, why.to_owned()));
    }
    widest(
        "feed_forward_length",
        summary.feed_forward_length.as_ref().map(PerLayer::max),
    )?;
    widest(
        "attention.head_count",
        summary.head_count.as_ref().map(PerLayer::max),
    )?;
    widest(
        "attention.head_count_kv",
        summary.head_count_kv.as_ref().map(PerLayer::max),
    )?;
    if let Some(experts) = &summary.experts {
        widest("expert_count", Some(experts.count))?;
        if let Some(used) = experts.used.filter(|&u| u > experts.count) {
            let why = format!("is more than the {} experts it has", experts.count);
            return Err(refuse("expert_used_count", used, why));
        }
    }
    if let Some(n) = summary.context_length.filter(|&n| n > MAX_CONTEXT) {
        let why = format!("is beyond any trained context ({MAX_CONTEXT} tokens at most)");
        return Err(refuse("context_length", n, why));
    }
    Ok(())
}

/// The layers llama.cpp runs: `block_count` minus the multi-token-prediction blocks at the end
/// (`{arch}.nextn_predict_layers`), which it neither loads nor caches unless speculative MTP
/// is switched on (`llama_hparams::n_layer()`, the `TENSOR_SKIP` of MTP tensors, the cache's
/// layer filter). A file made of MTP blocks only keeps them all, as llama.cpp does.
fn trunk_layers(model: &GgufModel, arch: &str, blocks: u32) -> u32 {
    let nextn = model
        .metadata
        .get_u32(&format!("{arch}.nextn_predict_layers"))
        .unwrap_or(0);
    match blocks.checked_sub(nextn) {
        Some(trunk) if trunk > 0 => trunk,
        _ => blocks,
    }
}

/// `blk.N.…` with N among the MTP blocks (`trunk..blocks`).
fn is_mtp_block(name: &str, trunk: u32, blocks: u32) -> bool {
    name.strip_prefix("blk.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|index| index.parse::<u32>().ok())
        .is_some_and(|block| (trunk..blocks).contains(&block))
}

/// Reads the facts placement needs; absent optional facts take llama.cpp's defaults.
pub fn shape_of(model: &GgufModel, label: &str) -> Result<ModelShape, ShapeError> {
    let summary = ModelSummary::from_model(model);
    let arch = summary.architecture.clone().unwrap_or_default();
    let missing = |what, suffix: &str| ShapeError::Missing {
        model: label.to_owned(),
        what,
        key: format!("{arch}.{suffix}"),
    };
    let table = TableBounds::of(model);
    check_bounds(&summary, &table, &arch, label)?;
    let blocks = u32_of(summary.layers).ok_or_else(|| missing("layer count", "block_count"))?;
    let n_layer = trunk_layers(model, &arch, blocks);
    let n_embd = u32_of(summary.embedding_length)
        .ok_or_else(|| missing("embedding length", "embedding_length"))?;
    let head_count = expand(summary.head_count.as_ref(), n_layer)
        .ok_or_else(|| missing("attention head count", "attention.head_count"))?;
    // llama.cpp: head_count_kv defaults to head_count; key/value length to n_embd / n_head.
    let mut head_count_kv =
        expand(summary.head_count_kv.as_ref(), n_layer).unwrap_or_else(|| head_count.clone());
    let recurrent = recurrent_layout(
        model,
        &arch,
        &mut head_count_kv,
        summary.feed_forward_length.as_ref(),
        &table,
        label,
    )?;
    let n_head = head_count.iter().copied().max().unwrap_or(1).max(1);
    let compress_ratios = compress_ratios(model, &arch, n_layer, label)?;
    let key_length = u32_of(summary.key_length).unwrap_or(n_embd / n_head);
    let value_length = u32_of(summary.value_length).unwrap_or(n_embd / n_head);
    let tensors = model
        .tensors
        .iter()
        .map(|t| {
            let (layer, role) = classify(&t.info.name, n_layer);
            ModelTensor {
                name: t.info.name.clone(),
                bytes: t.info.size_bytes,
                layer,
                role,
                elements: rigdeck_gguf::types::element_count(&t.info.dims).unwrap_or(0),
                row_length: t.info.dims.first().copied().unwrap_or(0),
                quantized: t.info.ggml_type.is_quantized(),
            }
        })
        // The MTP blocks' weights stay on disk (see `trunk_layers`).
        .filter(|t| !is_mtp_block(&t.name, n_layer, blocks))
        .collect();
    Ok(ModelShape {
        n_layer,
        n_embd,
        n_vocab: u32_of(summary.vocab_size).unwrap_or(0),
        n_ff: summary
            .feed_forward_length
            .as_ref()
            .map_or(0, |f| f.max().min(u64::from(u32::MAX)) as u32),
        context_length: u32_of(summary.context_length).unwrap_or(4096),
        rope_dimensions: model
            .metadata
            .get_u32(&format!("{arch}.rope.dimension_count"))
            .unwrap_or(0),
        attention: AttentionLayout {
            head_count_kv,
            head_count,
            key_length,
            value_length,
            key_length_swa: u32_of(summary.key_length_swa).unwrap_or(0),
            value_length_swa: u32_of(summary.value_length_swa).unwrap_or(0),
            shared_kv_layers: shared_kv_layers(&arch, n_layer, summary.shared_kv_layers),
            cacheless: CACHELESS.contains(&arch.as_str()),
            mla: summary.mla.as_ref().is_some_and(|m| m.active),
            mla_key_length: mla_width(summary.mla.as_ref(), |m| m.key_length_mla),
            mla_value_length: mla_width(summary.mla.as_ref(), |m| m.value_length_mla),
            sliding_window: u32_of(summary.sliding_window),
            swa_layers: swa_layers(
                &arch,
                summary.sliding_window,
                summary.sliding_window_pattern.as_ref(),
                n_layer,
            ),
            indexer_key_length: match compress_ratios.is_empty() {
                true => indexer(model, &arch, n_layer, summary.context_length),
                // DeepSeek V4's lightning indexer: on the layers compressed by 4.
                false => compressed_indexer(model, &arch, &compress_ratios),
            },
            // MiniMax-M3's indexer cache is a whole cache of one head: a V as wide as the
            // model's beside the K.
            indexer_value_length: if arch == "minimax-m3" {
                value_length
            } else {
                0
            },
            indexer_heads: model
                .metadata
                .get_u32(&format!("{arch}.attention.indexer.head_count"))
                .unwrap_or(0),
            indexer_top_k: model
                .metadata
                .get_u32(&format!("{arch}.attention.indexer.top_k"))
                .unwrap_or(0),
            indexer_block_size: model
                .metadata
                .get_u32(&format!("{arch}.attention.indexer.block_size"))
                .unwrap_or(0),
            compress_ratios,
            recurrent: recurrent.shape,
            recurrent_layers: recurrent.layers,
        },
        experts: summary
            .experts
            .as_ref()
            .filter(|e| e.count > 0)
            .map(|e| ExpertShape {
                count: e.count.min(u64::from(u32::MAX)) as u32,
                used: e.used.unwrap_or(e.count).min(u64::from(u32::MAX)) as u32,
                shared: e.shared.unwrap_or(0).min(u64::from(u32::MAX)) as u32,
                feed_forward_length: u32_of(e.feed_forward_length).unwrap_or(0),
                shared_feed_forward_length: u32_of(e.shared_feed_forward_length).unwrap_or(0),
                groups: model
                    .metadata
                    .get_u32(&format!("{arch}.expert_group_count"))
                    .unwrap_or(0),
                groups_used: model
                    .metadata
                    .get_u32(&format!("{arch}.expert_group_used_count"))
                    .unwrap_or(0),
                weights_norm: model
                    .metadata
                    .get_bool(&format!("{arch}.expert_weights_norm"))
                    .unwrap_or(false),
                weights_scaled: model
                    .metadata
                    .get_f32(&format!("{arch}.expert_weights_scale"))
                    .is_some_and(|scale| scale != 0.0 && scale != 1.0),
            }),
        architecture: arch,
        tensors,
    })
}

/// One of the MLA head widths, 0 without MLA (llama.cpp uses them only when both are set).
fn mla_width(
    mla: Option<&rigdeck_gguf::summary::Mla>,
    width: impl Fn(&rigdeck_gguf::summary::Mla) -> Option<u64>,
) -> u32 {
    mla.filter(|m| m.active)
        .and_then(|m| u32_of(width(m)))
        .unwrap_or(0)
}

fn u32_of(v: Option<u64>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok())
}

/// DeepSeek V4's compression of each layer's cache (`attention.compress_ratios`), empty for
/// another architecture; a list shorter than the layers or a ratio llama.cpp does not build (0,
/// 4 and 128) is refused, as llama.cpp refuses the file.
fn compress_ratios(
    model: &GgufModel,
    arch: &str,
    n_layer: u32,
    label: &str,
) -> Result<Vec<u32>, ShapeError> {
    if arch != "deepseek4" {
        return Ok(Vec::new());
    }
    let key = format!("{arch}.attention.compress_ratios");
    let ratios = match model.metadata.get(&key) {
        Some(rigdeck_gguf::Value::Array(ratios)) => ratios.to_u64_vec().unwrap_or_default(),
        _ => Vec::new(),
    };
    let refuse = |value: u64, why: String| ShapeError::Implausible {
        model: label.to_owned(),
        key: key.clone(),
        value,
        why,
    };
    if ratios.len() < n_layer as usize {
        let why = format!("lists ratios for {} of its {n_layer} layers", ratios.len());
        return Err(refuse(ratios.len() as u64, why));
    }
    if let Some(&odd) = ratios.iter().find(|&&r| !matches!(r, 0 | 4 | 128)) {
        return Err(refuse(
            odd,
            "is a compression llama.cpp does not build (0, 4 or 128)".into(),
        ));
    }
    Ok(ratios[..n_layer as usize]
        .iter()
        .map(|&r| r as u32)
        .collect())
}

/// DeepSeek V4's indexer cache width on each layer: its key length on the layers compressed by
/// 4, none elsewhere.
fn compressed_indexer(model: &GgufModel, arch: &str, ratios: &[u32]) -> Vec<u32> {
    let width = model
        .metadata
        .get_u32(&format!("{arch}.attention.indexer.key_length"))
        .unwrap_or(0);
    ratios
        .iter()
        .map(|&r| if r == 4 { width } else { 0 })
        .collect()
}

/// The architectures llama.cpp gives no cache (`llama_model::create_memory` returns none): the
/// non-causal embedding models and the diffusion decoders, whose attention runs over the
/// micro-batch alone.
const CACHELESS: &[&str] = &[
    "bert",
    "modern-bert",
    "nomic-bert",
    "nomic-bert-moe",
    "neo-bert",
    "jina-bert-v2",
    "jina-bert-v3",
    "eurobert",
    "gemma-embedding",
    "wavtokenizer-dec",
    "dream",
    "llada",
    "llada-moe",
    "rnd1",
];

/// The last layers that read an earlier layer's cache: the header's count, but for `gemma3n`,
/// whose first 20 layers alone keep one in llama.cpp whatever the header says.
fn shared_kv_layers(arch: &str, n_layer: u32, in_header: Option<u64>) -> u32 {
    const GEMMA3N_CACHED_LAYERS: u32 = 20;
    if arch == "gemma3n" {
        return n_layer.saturating_sub(GEMMA3N_CACHED_LAYERS);
    }
    u32_of(in_header).unwrap_or(0)
}

fn expand(value: Option<&PerLayer>, n_layer: u32) -> Option<Vec<u32>> {
    match value? {
        PerLayer::Uniform(v) => Some(vec![u32::try_from(*v).ok()?; n_layer as usize]),
        PerLayer::PerLayer(values) => {
            let mut out: Vec<u32> = values
                .iter()
                .map(|v| u32::try_from(*v).unwrap_or(u32::MAX))
                .collect();
            out.resize(n_layer as usize, out.last().copied().unwrap_or(0));
            Some(out)
        }
    }
}

/// Sliding-window layouts llama.cpp builds in when the file gives no pattern
/// (`load_swa_pattern(ml, n, dense_first)` per architecture in `src/models/*.cpp`).
const SWA_DEFAULTS: &[(&str, u64, bool)] = &[
    ("gemma2", 2, false),
    ("gemma3", 6, false),
    ("gemma-embedding", 6, false),
    ("gemma3n", 5, false),
    ("cohere2", 4, false),
    ("cohere2moe", 4, true),
    ("exaone4", 4, false),
    ("exaone-moe", 4, false),
    ("gpt-oss", 2, false),
    ("olmo2", 4, false),
    ("afmoe", 4, false),
    ("smallthinker", 4, true),
    ("plamo3", 8, false),
    ("deepseek4", 0, false),
];

/// Which layers slide: an explicit per-layer list wins, else the period from the file or the
/// architecture's built-in one. An architecture llama.cpp gives no window layout gets none
/// (full attention everywhere, the larger and so safer KV estimate).
fn swa_layers(
    arch: &str,
    window: Option<u64>,
    pattern: Option<&SlidingWindowPattern>,
    n_layer: u32,
) -> Vec<bool> {
    let n = n_layer as usize;
    if window.unwrap_or(0) == 0 {
        return vec![false; n];
    }
    let builtin = SWA_DEFAULTS.iter().find(|(a, _, _)| *a == arch);
    let (period, dense_first) = match (pattern, builtin) {
        (Some(SlidingWindowPattern::PerLayer(v)), _) => {
            return (0..n)
                .map(|il| v.get(il).copied().unwrap_or(false))
                .collect()
        }
        (Some(SlidingWindowPattern::Period(p)), b) => (*p, b.is_some_and(|(_, _, d)| *d)),
        (None, Some((_, p, d))) => (*p, *d),
        (None, None) => return vec![false; n],
    };
    (0..n as u64)
        .map(|il| match (period, dense_first) {
            (0, _) => true,
            (p, true) => il % p != 0,
            (p, false) => il % p < p - 1,
        })
        .collect()
}

/// GLM-5.x (DeepSeek sparse attention) keeps an extra K-only indexer cache on its "full"
/// indexer layers, read as llama.cpp's loader reads them (`llama_model_glm_dsa`):
/// `{arch}.attention.indexer.types` as an array (bool or integer flags, non-zero = full) or one
/// scalar for every layer; without it, every layer for models trained below a 1M context (GLM 5
/// and 5.1) and GLM-5.2's own pattern above.
fn indexer(model: &GgufModel, arch: &str, n_layer: u32, context: Option<u64>) -> Vec<u32> {
    let n = n_layer as usize;
    let Some(width) = model
        .metadata
        .get_u32(&format!("{arch}.attention.indexer.key_length"))
    else {
        return vec![0; n];
    };
    let full: Vec<bool> = match model
        .metadata
        .get(&format!("{arch}.attention.indexer.types"))
    {
        Some(rigdeck_gguf::Value::Array(flags)) => flags
            .to_u64_vec()
            .map(|v| v.into_iter().map(|x| x != 0).collect())
            .or_else(|| flags.to_bool_vec())
            .unwrap_or_default(),
        Some(one) => {
            let on = one.as_u64().map(|x| x != 0).or_else(|| one.as_bool());
            vec![on.unwrap_or(false); n]
        }
        // MiniMax-M3: an indexer on every layer after the leading dense ones.
        None if arch == "minimax-m3" => {
            let dense = model
                .metadata
                .get_u32(&format!("{arch}.leading_dense_block_count"))
                .unwrap_or(0) as usize;
            (0..n).map(|il| il >= dense).collect()
        }
        None if context.unwrap_or(0) < 1_048_576 => vec![true; n],
        None => (0..n).map(glm_5_2_full_indexer).collect(),
    };
    (0..n)
        .map(|il| {
            if full.get(il) == Some(&true) {
                width
            } else {
                0
            }
        })
        .collect()
}

/// GLM-5.2's indexer layout (its config.json, llama.cpp's `GLM_5_2_DEFAULT_INDEXER_TYPES`):
/// layers 0 and 1, then every fourth layer from 2.
fn glm_5_2_full_indexer(il: usize) -> bool {
    il < 2 || (il - 2).is_multiple_of(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RecurrentKind, RecurrentShape};
    use crate::testing::{shape_of_writer, synthetic_vocab};
    use rigdeck_gguf::fixtures::MoeShape;
    use rigdeck_gguf::Value;

    /// The indexer widths of the small DSA fixture with `types` set (or not) and a trained context.
    fn indexer_widths(types: Option<Value>, context: u32) -> Vec<u32> {
        let shape = MoeShape::small();
        let mut writer = shape.writer();
        let arch = &shape.architecture;
        writer.set(&format!("{arch}.context_length"), Value::U32(context));
        if let Some(types) = types {
            writer.set(&format!("{arch}.attention.indexer.types"), types);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dsa.gguf");
        writer.write_to_path(&path).unwrap();
        load_shape(&path)
            .unwrap()
            .shape
            .attention
            .indexer_key_length
    }

    #[test]
    fn the_tokenizer_counted_not_kept_gives_the_same_summary_and_shape() {
        let dir = tempfile::tempdir().unwrap();
        let shape = MoeShape {
            tokenizer: true,
            ..MoeShape::small()
        };
        let shards = shape.writer().write_split(dir.path(), "m", 2).unwrap();
        let loaded = load_shape(&shards[1]).unwrap();
        let kept = GgufModel::open(&shards[1]).unwrap();
        assert_eq!(loaded.summary, ModelSummary::from_model(&kept));
        assert_eq!(loaded.summary.vocab_size, Some(u64::from(shape.vocab)));
        assert_eq!(
            loaded.shape,
            shape_of(&kept, "m-00002-of-00002.gguf").unwrap()
        );
    }

    #[test]
    fn a_gguf_named_without_the_extension_is_read_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        // Ollama's blobs are GGUF files named by their digest.
        let blob = dir.path().join(format!("sha256-{:064x}", 1));
        MoeShape::small().writer().write_to_path(&blob).unwrap();
        assert_eq!(
            load_shape(&blob).unwrap().shape.n_layer,
            MoeShape::small().layers
        );
        let notes = dir.path().join("notes");
        std::fs::write(&notes, "GGU").unwrap();
        let err = load_shape(&notes).unwrap_err();
        assert!(matches!(err, ShapeError::NotGguf(_)), "{err}");
        assert!(
            err.to_string().contains("notes' is not a GGUF file"),
            "{err}"
        );
    }

    #[test]
    fn dsa_indexer_layers_are_read_as_llama_cpp_reads_them() {
        use rigdeck_gguf::value::Array;
        let width = indexer_widths(None, 4096)[0];
        assert!(width > 0, "the fixture has an indexer");
        let n = indexer_widths(None, 4096).len();
        let expect = |full: &[usize]| -> Vec<u32> {
            (0..n)
                .map(|il| if full.contains(&il) { width } else { 0 })
                .collect()
        };
        let all: Vec<usize> = (0..n).collect();
        // gguf-py writes Python bools as a bool array; llama.cpp's own saver writes u32 flags.
        let mut flags = vec![false; n];
        flags[0] = true;
        assert_eq!(
            indexer_widths(Some(Value::Array(Array::Bool(flags))), 4096),
            expect(&[0])
        );
        let mut ints = vec![0i32; n];
        ints[n - 1] = 1;
        assert_eq!(
            indexer_widths(Some(Value::Array(Array::I32(ints))), 4096),
            expect(&[n - 1])
        );
        // One scalar for every layer.
        assert_eq!(indexer_widths(Some(Value::U32(0)), 4096), expect(&[]));
        assert_eq!(indexer_widths(Some(Value::Bool(true)), 4096), expect(&all));
        // Without the key: all layers below a 1M trained context, GLM-5.2's pattern above.
        assert_eq!(indexer_widths(None, 131_072), expect(&all));
        let pattern: Vec<usize> = (0..n)
            .filter(|&il| il < 2 || (il - 2).is_multiple_of(4))
            .collect();
        assert_eq!(indexer_widths(None, 1_048_576), expect(&pattern));
    }

    fn tiny_with(key: &str, value: Value) -> Result<ModelShape, ShapeError> {
        let shape = MoeShape::small();
        let mut writer = shape.writer();
        writer.set(&format!("{}.{key}", shape.architecture), value);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        writer.write_to_path(&path).unwrap();
        load_shape(&path).map(|loaded| loaded.shape)
    }

    #[test]
    fn deepseek4_compression_ratios_are_read_and_those_llama_cpp_refuses_are_refused() {
        let with = |ratios: Vec<u32>| {
            let mut shape = MoeShape::small();
            shape.architecture = "deepseek4".into();
            let mut writer = shape.writer();
            let key = "deepseek4.attention.compress_ratios";
            writer.set(key, Value::Array(rigdeck_gguf::Array::U32(ratios)));
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("ds4.gguf");
            writer.write_to_path(&path).unwrap();
            load_shape(&path).map(|loaded| loaded.shape)
        };
        let shape = with(vec![0, 4, 128, 4]).unwrap();
        assert_eq!(shape.attention.compress_ratios, [0, 4, 128, 4]);
        assert!(shape.attention.caches_key_only());
        let short = with(vec![0, 4]).unwrap_err().to_string();
        assert!(
            short.contains("compress_ratios = 2, which lists ratios for 2 of its 4 layers"),
            "{short}"
        );
        let odd = with(vec![0, 4, 64, 4]).unwrap_err().to_string();
        assert!(
            odd.contains("= 64, which is a compression llama.cpp does not build (0, 4 or 128)"),
            "{odd}"
        );
    }

    #[test]
    fn a_header_claiming_billions_of_layers_is_refused_before_any_table_is_sized() {
        let e = tiny_with("block_count", Value::U32(4_000_000_000)).unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::Implausible {
                    value: 4_000_000_000,
                    ..
                }
            ),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(
                "says glm-dsa.block_count = 4000000000, which is more than its tensor table \
                 holds: layers 0–3 only"
            ),
            "{msg}"
        );
    }

    #[test]
    fn header_widths_beyond_any_tensor_dimension_are_refused() {
        for key in [
            "embedding_length",
            "attention.head_count",
            "expert_count",
            "feed_forward_length",
            "attention.key_length_swa",
        ] {
            let e = tiny_with(key, Value::U32(3_000_000_000)).unwrap_err();
            assert!(
                e.to_string().contains(&format!(
                    "glm-dsa.{key} = 3000000000, which is more than the largest tensor dimension"
                )),
                "{key}: {e}"
            );
        }
        let e = tiny_with("context_length", Value::U32(4_000_000_000)).unwrap_err();
        assert!(
            e.to_string().contains("is beyond any trained context"),
            "{e}"
        );
    }

    #[test]
    fn a_header_sharing_every_layers_cache_is_refused() {
        let e = tiny_with("attention.shared_kv_layers", Value::U32(4)).unwrap_err();
        assert!(
            e.to_string().contains(
                "glm-dsa.attention.shared_kv_layers = 4, which leaves no layer a cache of its own"
            ),
            "{e}"
        );
        let shape = tiny_with("attention.shared_kv_layers", Value::U32(1)).unwrap();
        assert!(shape.attention.has_kv(2) && !shape.attention.has_kv(3));
    }

    #[test]
    fn sliding_window_layouts_follow_llama_cpp() {
        let gemma3 = swa_layers("gemma3", Some(1024), None, 12);
        assert_eq!(gemma3, (0..12).map(|il| il % 6 < 5).collect::<Vec<_>>());
        let dense_first = swa_layers("cohere2moe", Some(4096), None, 8);
        assert_eq!(
            dense_first,
            vec![false, true, true, true, false, true, true, true]
        );
        assert_eq!(
            swa_layers(
                "gemma3",
                Some(1024),
                Some(&SlidingWindowPattern::Period(2)),
                4
            ),
            vec![true, false, true, false]
        );
        assert_eq!(
            swa_layers("llama", Some(4096), None, 3),
            vec![false; 3],
            "no built-in layout: full attention"
        );
        assert_eq!(swa_layers("gemma3", None, None, 3), vec![false; 3]);
        let explicit = SlidingWindowPattern::PerLayer(vec![true, false]);
        assert_eq!(
            swa_layers("x", Some(8), Some(&explicit), 3),
            vec![true, false, false]
        );
    }

    /// A tokenizer of `n` made-up tokens (enough for the reader; llama.cpp needs a real one).
    fn small_qwen3next() -> rigdeck_gguf::tiny_recurrent::TinyQwen3Next {
        rigdeck_gguf::tiny_recurrent::TinyQwen3Next {
            name: "q".into(),
            hybrid: rigdeck_gguf::tiny_recurrent::QwenHybrid::Qwen3Next,
            n_layer: 8,
            n_embd: 256,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            full_attention_interval: 4,
            conv_kernel: 4,
            linear_head_dim: 32,
            linear_key_heads: 2,
            linear_value_heads: 4,
            experts: (4, 2),
            expert_ff: 64,
            shared_ff: 64,
            legacy_ssm_in: false,
            fused_gate_up: false,
            n_ff: 512,
            context_length: 4096,
        }
    }

    #[test]
    fn mamba_layers_are_all_recurrent_with_the_header_ssm_geometry() {
        let mamba = rigdeck_gguf::tiny_recurrent::TinyMamba {
            name: "m".into(),
            n_layer: 3,
            n_embd: 192,
            d_state: 20,
            d_conv: 4,
            dt_rank: 12,
            context_length: 1 << 20,
        };
        let mut writer = mamba.writer(&synthetic_vocab(16));
        // Mamba 1 does not read a group count: a stray one must not change the state.
        writer.set("mamba.ssm.group_count", Value::U32(8));
        let shape = shape_of_writer(&writer).unwrap();
        let attention = &shape.attention;
        assert_eq!(
            attention.recurrent,
            Some(RecurrentShape {
                kind: RecurrentKind::Mamba,
                conv_kernel: 4,
                inner_size: 384,
                state_size: 20,
                group_count: 0,
                time_step_rank: 12,
                normed_scan_parameters: false,
            })
        );
        assert_eq!(attention.recurrent_layers, vec![true; 3]);
        assert_eq!(
            attention.head_count_kv,
            vec![0; 3],
            "no attention, no KV cache"
        );
    }

    #[test]
    fn qwen3next_attends_every_interval_and_caches_no_kv_on_its_linear_layers() {
        let q = small_qwen3next();
        let shape = shape_of_writer(&q.writer(&synthetic_vocab(16))).unwrap();
        let attention = &shape.attention;
        let recurrent: Vec<bool> = (0..8).map(|il| il % 4 != 3).collect();
        assert_eq!(attention.recurrent_layers, recurrent);
        assert_eq!(attention.head_count_kv, vec![0, 0, 0, 2, 0, 0, 0, 2]);
        let gdn = attention.recurrent.unwrap();
        assert_eq!(gdn.kind, RecurrentKind::GatedDeltaNet);
        assert_eq!(
            (gdn.inner_size, gdn.state_size, gdn.group_count),
            (128, 32, 2)
        );
        assert_eq!(gdn.conv_channels(), 2 * 64 + 128);

        // Without the key llama.cpp's default interval is 4; an explicit flag list wins.
        let mut writer = q.writer(&synthetic_vocab(16));
        writer.set("qwen3next.full_attention_interval", Value::U32(2));
        let every_other = shape_of_writer(&writer).unwrap().attention.recurrent_layers;
        assert_eq!(
            every_other,
            (0..8).map(|il| il % 2 == 0).collect::<Vec<_>>()
        );
        let flags = vec![true, false, true, true, true, true, true, false];
        writer.set(
            "qwen3next.attention.recurrent_layers",
            Value::Array(rigdeck_gguf::Array::Bool(flags.clone())),
        );
        let listed = shape_of_writer(&writer).unwrap().attention;
        assert_eq!(listed.recurrent_layers, flags);
        assert_eq!(listed.head_count_kv, vec![0, 2, 0, 0, 0, 0, 0, 2]);
        // A zero interval (a division by zero in llama.cpp) reads as full attention everywhere.
        let mut writer = q.writer(&synthetic_vocab(16));
        writer.set("qwen3next.full_attention_interval", Value::U32(0));
        let zero = shape_of_writer(&writer).unwrap().attention;
        assert_eq!(zero.recurrent_layers, vec![false; 8]);
    }

    #[test]
    fn hostile_ssm_widths_are_refused() {
        let mut writer = small_qwen3next().writer(&synthetic_vocab(16));
        writer.set("qwen3next.ssm.inner_size", Value::U32(4_000_000_000));
        let e = shape_of_writer(&writer).unwrap_err();
        assert!(
            e.to_string().contains(
                "qwen3next.ssm.inner_size = 4000000000, which is more than the largest tensor \
                 dimension"
            ),
            "{e}"
        );
        let mut writer = small_qwen3next().writer(&synthetic_vocab(16));
        writer.set("qwen3next.ssm.state_size", Value::U64(u64::MAX));
        assert!(matches!(
            shape_of_writer(&writer).unwrap_err(),
            ShapeError::Implausible { .. }
        ));
    }

    #[test]
    fn older_shapes_without_recurrent_fields_still_deserialize() {
        let shape = MoeShape::small();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dsa.gguf");
        shape.writer().write_to_path(&path).unwrap();
        let loaded = load_shape(&path).unwrap().shape;
        let mut json = serde_json::to_value(&loaded).unwrap();
        let attention = json["attention"].as_object_mut().unwrap();
        assert!(attention.remove("recurrent").is_some());
        assert!(attention.remove("recurrent_layers").is_some());
        let back: ModelShape = serde_json::from_value(json).unwrap();
        assert_eq!(back, loaded, "absent recurrent fields read as none");
    }
}
