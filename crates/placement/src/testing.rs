//! Synthetic models and rigs for the planner's tests, shaped like the seeds' models.

use super::model::{classify, AttentionLayout, ExpertShape, ModelShape, ModelTensor};
use super::options::DeviceId;
use super::plan::DeviceSpec;

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

fn tensor(name: String, bytes: u64, n_layer: u32) -> ModelTensor {
    let (layer, role) = classify(&name, n_layer);
    ModelTensor {
        name,
        bytes,
        layer,
        role,
        elements: 0,
        row_length: 0,
        quantized: false,
    }
}

/// A GLM-5.2-like MoE: `dense` dense layers, then MoE layers with `expert_bytes` of routed experts
/// each, MLA attention (576-wide K, no V).
pub fn moe_model(n_layer: u32, dense: u32, layer_bytes: u64, expert_bytes: u64) -> ModelShape {
    let mut tensors = vec![tensor("token_embd.weight".into(), 800 * MIB, n_layer)];
    for il in 0..n_layer {
        tensors.push(tensor(
            format!("blk.{il}.attn_q_a.weight"),
            layer_bytes / 2,
            n_layer,
        ));
        tensors.push(tensor(
            format!("blk.{il}.attn_kv_a_mqa.weight"),
            layer_bytes / 2,
            n_layer,
        ));
        if il >= dense {
            for part in ["gate", "up", "down"] {
                tensors.push(tensor(
                    format!("blk.{il}.ffn_{part}_exps.weight"),
                    expert_bytes / 3,
                    n_layer,
                ));
            }
            tensors.push(tensor(
                format!("blk.{il}.ffn_down_shexp.weight"),
                40 * MIB,
                n_layer,
            ));
        } else {
            tensors.push(tensor(
                format!("blk.{il}.ffn_down.weight"),
                300 * MIB,
                n_layer,
            ));
        }
    }
    tensors.push(tensor("output.weight".into(), 800 * MIB, n_layer));
    tensors.push(tensor("output_norm.weight".into(), 24 * 1024, n_layer));
    ModelShape {
        architecture: "glm-dsa".into(),
        n_layer,
        n_embd: 6144,
        n_vocab: 154_880,
        n_ff: 12_288,
        context_length: 202_752,
        rope_dimensions: 64,
        attention: AttentionLayout {
            head_count_kv: vec![1; n_layer as usize],
            head_count: vec![64; n_layer as usize],
            key_length: 576,
            value_length: 512,
            key_length_swa: 0,
            value_length_swa: 0,
            shared_kv_layers: 0,
            cacheless: false,
            mla: true,
            mla_key_length: 256,
            mla_value_length: 256,
            sliding_window: None,
            swa_layers: vec![false; n_layer as usize],
            indexer_key_length: vec![0; n_layer as usize],
            indexer_value_length: 0,
            indexer_heads: 0,
            indexer_top_k: 0,
            indexer_block_size: 0,
            compress_ratios: Vec::new(),
            recurrent: None,
            recurrent_layers: Vec::new(),
        },
        experts: Some(ExpertShape {
            count: 256,
            used: 8,
            shared: 1,
            feed_forward_length: 2048,
            shared_feed_forward_length: 0,
            groups: 0,
            groups_used: 0,
            weights_norm: false,
            weights_scaled: false,
        }),
        tensors,
    }
}

pub fn gpus(n: u32, each: u64) -> Vec<DeviceSpec> {
    let mut devices: Vec<DeviceSpec> = (0..n)
        .map(|i| DeviceSpec {
            id: DeviceId::Gpu(i),
            name: format!("RTX 3090 #{i}"),
            capacity_bytes: each,
            reserve_bytes: 0,
            overhead_bytes: 300 * MIB,
            bandwidth_bytes_per_s: Some(936_000_000_000),
            link_degraded: false,
            correction: None,
        })
        .collect();
    devices.push(DeviceSpec {
        id: DeviceId::Cpu,
        name: "CPU RAM".into(),
        capacity_bytes: 192 * GIB,
        reserve_bytes: 8 * GIB,
        overhead_bytes: 0,
        bandwidth_bytes_per_s: Some(89_600_000_000),
        link_degraded: false,
        correction: None,
    });
    devices
}

/// A tokenizer of `n` made-up tokens, for writers that copy one in.
pub fn synthetic_vocab(n: usize) -> rigdeck_gguf::Metadata {
    let mut w = rigdeck_gguf::GgufWriter::new();
    let names: rigdeck_gguf::StringArray = (0..n).map(|i| format!("t{i}")).collect();
    w.set("tokenizer.ggml.model", "gpt2");
    w.set(
        "tokenizer.ggml.tokens",
        rigdeck_gguf::Value::Array(rigdeck_gguf::Array::String(names)),
    );
    w.metadata().clone()
}

/// The shape the planner reads from what `writer` writes (through a real file).
pub fn shape_of_writer(
    writer: &rigdeck_gguf::GgufWriter,
) -> Result<ModelShape, crate::from_gguf::ShapeError> {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("model.gguf");
    writer.write_to_path(&path).expect("the model is written");
    crate::from_gguf::load_shape(&path).map(|loaded| loaded.shape)
}

/// `n` GPUs of `each` bytes lent by one other box over `link`, added to `devices` before their
/// CPU as `RPC0…`; the box they are on.
pub fn lend(
    devices: &mut Vec<DeviceSpec>,
    n: u32,
    each: u64,
    link: crate::link::Link,
) -> crate::link::RemoteBox {
    let cpu = devices.pop();
    let ids: Vec<DeviceId> = (0..n).map(DeviceId::Rpc).collect();
    for &id in &ids {
        devices.push(DeviceSpec {
            id,
            name: format!("{} · RTX 3090 · on box 2", id.device_name()),
            capacity_bytes: each,
            reserve_bytes: 0,
            overhead_bytes: 300 * MIB,
            bandwidth_bytes_per_s: Some(936_000_000_000),
            link_degraded: false,
            correction: None,
        });
    }
    devices.extend(cpu);
    crate::link::RemoteBox {
        name: "box 2".into(),
        endpoint: "10.0.0.2:50052".into(),
        link,
        devices: ids,
    }
}
