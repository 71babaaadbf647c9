//! The recurrent layers of SSM and hybrid models: which layers keep a recurrent state instead of
//! (or beside) a KV cache, and the `{arch}.ssm.*` sizes of that state, read per architecture as
//! llama.cpp's `load_arch_hparams` reads them.

use rigdeck_gguf::split::GgufModel;
use rigdeck_gguf::summary::PerLayer;

use super::{expand, ShapeError, TableBounds};
use crate::model::{RecurrentKind, RecurrentShape};

/// How an architecture tells its recurrent layers (its `load_arch_hparams` in llama.cpp).
#[derive(Debug, Clone, Copy)]
enum RecurrentRule {
    /// Every layer: the purely recurrent `mamba`/`mamba2` (`llm_arch_is_recurrent`) and
    /// `falcon-h1` (an SSM beside the attention of every layer).
    All,
    /// A layer without KV heads (`jamba`, `granitehybrid`, `plamo2`).
    NoKvHeads,
    /// A layer with neither KV heads nor a feed-forward (`nemotron_h`: its MLP-only layers
    /// have neither attention nor state).
    NoKvHeadsNoFeedForward,
    /// `{arch}.attention.recurrent_layers` (flags, or one scalar for all), else every layer but
    /// each `full_attention_interval`-th (default 4): `qwen3next`, `qwen35`, `qwen35moe`.
    FullAttentionInterval,
}

/// Which layers the hybrid memory gives an attention KV cache (`filter_attn` in
/// `llama_model::create_memory`; by default the layers that are not recurrent).
#[derive(Debug, Clone, Copy)]
enum AttentionRule {
    NotRecurrent,
    /// `falcon-h1`: every layer.
    All,
    /// `nemotron_h`: not recurrent and no feed-forward.
    NotRecurrentNoFeedForward,
}

/// The recurrent architectures whose state llama.cpp sizes with the SSM formulas of
/// `llama_hparams::n_embd_r`/`n_embd_s` (RWKV, LFM2, Kimi and MiniMax linear attention use other
/// keys and are not modelled): their kind, whether they read `ssm.group_count` (Mamba 1 and
/// Jamba do not, so it counts 0 even when present), and their layer rules.
const RECURRENT_ARCHS: &[(&str, RecurrentKind, bool, RecurrentRule, AttentionRule)] = &[
    (
        "mamba",
        RecurrentKind::Mamba,
        false,
        RecurrentRule::All,
        AttentionRule::NotRecurrent,
    ),
    (
        "mamba2",
        RecurrentKind::Mamba,
        true,
        RecurrentRule::All,
        AttentionRule::NotRecurrent,
    ),
    (
        "jamba",
        RecurrentKind::Mamba,
        false,
        RecurrentRule::NoKvHeads,
        AttentionRule::NotRecurrent,
    ),
    (
        "granitehybrid",
        RecurrentKind::Mamba,
        true,
        RecurrentRule::NoKvHeads,
        AttentionRule::NotRecurrent,
    ),
    (
        "plamo2",
        RecurrentKind::Mamba,
        true,
        RecurrentRule::NoKvHeads,
        AttentionRule::NotRecurrent,
    ),
    (
        "falcon-h1",
        RecurrentKind::Mamba,
        true,
        RecurrentRule::All,
        AttentionRule::All,
    ),
    (
        "nemotron_h",
        RecurrentKind::Mamba,
        true,
        RecurrentRule::NoKvHeadsNoFeedForward,
        AttentionRule::NotRecurrentNoFeedForward,
    ),
    (
        "nemotron_h_moe",
        RecurrentKind::Mamba,
        true,
        RecurrentRule::NoKvHeadsNoFeedForward,
        AttentionRule::NotRecurrentNoFeedForward,
    ),
    (
        "qwen3next",
        RecurrentKind::GatedDeltaNet,
        true,
        RecurrentRule::FullAttentionInterval,
        AttentionRule::NotRecurrent,
    ),
    (
        "qwen35",
        RecurrentKind::GatedDeltaNet,
        true,
        RecurrentRule::FullAttentionInterval,
        AttentionRule::NotRecurrent,
    ),
    (
        "qwen35moe",
        RecurrentKind::GatedDeltaNet,
        true,
        RecurrentRule::FullAttentionInterval,
        AttentionRule::NotRecurrent,
    ),
];

/// The recurrent geometry and layers of a model (none for other architectures).
#[derive(Debug, Default)]
pub(super) struct RecurrentLayout {
    pub(super) shape: Option<RecurrentShape>,
    pub(super) layers: Vec<bool>,
}

/// Reads the `{arch}.ssm.*` keys (each bounded by the tensor table, as a damaged header could
/// otherwise claim a state of any size), marks the recurrent layers, and takes the KV heads
/// away from layers the hybrid memory gives no attention cache (a Qwen3-Next header states
/// one `head_count_kv` for all layers, but only every fourth has a KV cache).
pub(super) fn recurrent_layout(
    model: &GgufModel,
    arch: &str,
    head_count_kv: &mut [u32],
    feed_forward: Option<&PerLayer>,
    table: &TableBounds,
    label: &str,
) -> Result<RecurrentLayout, ShapeError> {
    let Some(&(_, kind, groups, rule, attention)) =
        RECURRENT_ARCHS.iter().find(|(a, ..)| *a == arch)
    else {
        return Ok(RecurrentLayout::default());
    };
    let n = head_count_kv.len();
    let key = |suffix: &str| -> Result<u32, ShapeError> {
        let full = format!("{arch}.{suffix}");
        match model.metadata.get(&full).and_then(|v| v.as_u64()) {
            Some(v) if v > table.widest => Err(ShapeError::Implausible {
                model: label.to_owned(),
                key: full,
                value: v,
                why: format!(
                    "is more than the largest tensor dimension in the file ({})",
                    table.widest
                ),
            }),
            // Bounded by a tensor dimension; beyond u32 llama.cpp could not read it either.
            Some(v) => Ok(u32::try_from(v).unwrap_or(u32::MAX)),
            None => Ok(0),
        }
    };
    let shape = RecurrentShape {
        kind,
        conv_kernel: key("ssm.conv_kernel")?,
        inner_size: key("ssm.inner_size")?,
        state_size: key("ssm.state_size")?,
        group_count: if groups { key("ssm.group_count")? } else { 0 },
        time_step_rank: key("ssm.time_step_rank")?,
        normed_scan_parameters: model
            .metadata
            .get_bool(&format!("{arch}.ssm.dt_b_c_rms"))
            .unwrap_or(false),
    };
    let feed_forward = expand(feed_forward, n as u32).unwrap_or_else(|| vec![0; n]);
    let ff = |il: usize| feed_forward.get(il).copied().unwrap_or(0);
    let layers: Vec<bool> = match rule {
        RecurrentRule::All => vec![true; n],
        RecurrentRule::NoKvHeads => head_count_kv.iter().map(|&h| h == 0).collect(),
        RecurrentRule::NoKvHeadsNoFeedForward => (0..n)
            .map(|il| head_count_kv.get(il) == Some(&0) && ff(il) == 0)
            .collect(),
        RecurrentRule::FullAttentionInterval => interval_layers(model, arch, n),
    };
    for (il, heads) in head_count_kv.iter_mut().enumerate() {
        let recurrent = layers.get(il).copied().unwrap_or(false);
        let cached = match attention {
            AttentionRule::NotRecurrent => !recurrent,
            AttentionRule::All => true,
            AttentionRule::NotRecurrentNoFeedForward => !recurrent && ff(il) == 0,
        };
        if !cached {
            *heads = 0;
        }
    }
    Ok(RecurrentLayout {
        shape: Some(shape),
        layers,
    })
}

/// Qwen3-Next's recurrent layers (`llama_model_qwen3next::load_arch_hparams`): the
/// `attention.recurrent_layers` flags when present (an array, or one scalar for every layer),
/// else all but each `full_attention_interval`-th layer, counting from 1 (default 4; a zero
/// interval, on which llama.cpp would divide by zero, reads as 1: no recurrent layer).
fn interval_layers(model: &GgufModel, arch: &str, n: usize) -> Vec<bool> {
    match model
        .metadata
        .get(&format!("{arch}.attention.recurrent_layers"))
    {
        Some(rigdeck_gguf::Value::Array(flags)) => {
            let flags: Vec<bool> = flags
                .to_u64_vec()
                .map(|v| v.into_iter().map(|x| x != 0).collect())
                .or_else(|| flags.to_bool_vec())
                .unwrap_or_default();
            (0..n)
                .map(|il| flags.get(il).copied().unwrap_or(false))
                .collect()
        }
        Some(one) => {
            let on = one.as_u64().map(|x| x != 0).or_else(|| one.as_bool());
            vec![on.unwrap_or(false); n]
        }
        None => {
            let interval = model
                .metadata
                .get_u32(&format!("{arch}.full_attention_interval"))
                .unwrap_or(4)
                .max(1) as usize;
            (0..n)
                .map(|il| !(il + 1).is_multiple_of(interval))
                .collect()
        }
    }
}
