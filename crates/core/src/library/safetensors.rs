//! Safetensors model folders (Hugging Face layout: `config.json` + `*.safetensors`): the facts
//! vLLM and SGLang users need, read from `config.json`.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SafetensorsInfo {
    pub architecture: Option<String>,
    pub model_type: Option<String>,
    pub layers: Option<u64>,
    pub hidden_size: Option<u64>,
    pub attention_heads: Option<u64>,
    pub kv_heads: Option<u64>,
    pub context_length: Option<u64>,
    pub vocab_size: Option<u64>,
    pub experts: Option<u64>,
    pub experts_per_token: Option<u64>,
    /// MLA (DeepSeek-style) when the config has a `kv_lora_rank`.
    pub kv_lora_rank: Option<u64>,
    pub dtype: Option<String>,
    /// `quantization_config.quant_method` (fp8, awq, gptq, compressed-tensors, …).
    pub quantization: Option<String>,
}

/// Reads `config.json`; multimodal configs keep the language model in `text_config`.
pub fn read_config(dir: &Path) -> Result<SafetensorsInfo, String> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let root: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?;
    let text_config = root.get("text_config").filter(|v| v.is_object());
    let num = |keys: &[&str]| -> Option<u64> {
        keys.iter().find_map(|k| {
            text_config
                .and_then(|t| t.get(*k))
                .or_else(|| root.get(*k))
                .and_then(Value::as_u64)
        })
    };
    let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    Ok(SafetensorsInfo {
        architecture: string(root.get("architectures").and_then(|a| a.get(0))),
        model_type: string(
            text_config
                .and_then(|t| t.get("model_type"))
                .or_else(|| root.get("model_type")),
        ),
        layers: num(&["num_hidden_layers", "n_layer", "num_layers"]),
        hidden_size: num(&["hidden_size", "d_model", "n_embd"]),
        attention_heads: num(&["num_attention_heads", "n_head"]),
        kv_heads: num(&["num_key_value_heads", "num_attention_heads"]),
        context_length: num(&[
            "max_position_embeddings",
            "max_sequence_length",
            "seq_length",
        ]),
        vocab_size: num(&["vocab_size"]),
        experts: num(&["n_routed_experts", "num_experts", "num_local_experts"]),
        experts_per_token: num(&["num_experts_per_tok", "moe_topk", "num_experts_per_token"]),
        kv_lora_rank: num(&["kv_lora_rank"]),
        dtype: string(
            text_config
                .and_then(|t| t.get("torch_dtype"))
                .or_else(|| root.get("torch_dtype"))
                .or_else(|| root.get("dtype")),
        ),
        quantization: string(
            root.get("quantization_config")
                .and_then(|q| q.get("quant_method")),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_moe_config_with_mla_and_fp8() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3","num_hidden_layers":61,
                "hidden_size":7168,"num_attention_heads":128,"num_key_value_heads":128,"n_routed_experts":256,
                "num_experts_per_tok":8,"kv_lora_rank":512,"max_position_embeddings":163840,"vocab_size":129280,
                "torch_dtype":"bfloat16","quantization_config":{"quant_method":"fp8"}}"#,
        )
        .unwrap();
        let info = read_config(dir.path()).unwrap();
        assert_eq!(info.architecture.as_deref(), Some("DeepseekV3ForCausalLM"));
        assert_eq!(
            (info.layers, info.experts, info.experts_per_token),
            (Some(61), Some(256), Some(8))
        );
        assert_eq!(info.kv_lora_rank, Some(512));
        assert_eq!(info.quantization.as_deref(), Some("fp8"));
    }

    #[test]
    fn a_multimodal_config_reads_its_text_model() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"architectures":["Gemma3ForConditionalGeneration"],"text_config":{"model_type":"gemma3_text","num_hidden_layers":62,"num_key_value_heads":16}}"#).unwrap();
        let info = read_config(dir.path()).unwrap();
        assert_eq!(info.layers, Some(62));
        assert_eq!(info.model_type.as_deref(), Some("gemma3_text"));
    }

    #[test]
    fn a_broken_config_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{ nope").unwrap();
        assert!(read_config(dir.path())
            .unwrap_err()
            .contains("config.json is not valid JSON"));
    }
}
