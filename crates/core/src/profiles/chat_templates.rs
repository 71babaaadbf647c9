//! The chat templates llama-server knows by name (`--chat-template NAME`), and the one each
//! architecture uses, for a GGUF that carries no `tokenizer.chat_template` (llama-server then
//! falls back to ChatML, and a model trained on another format answers with stray
//! `<|im_end|>` or never stops).

/// The names of llama.cpp's built-in templates, as in `LLM_CHAT_TEMPLATES` of
/// `src/llama-chat.cpp` in the pinned source (llama-cpp-python 0.3.36's llama.cpp tree).
pub const CHAT_TEMPLATES: &[&str] = &[
    "chatml",
    "llama2",
    "llama2-sys",
    "llama2-sys-bos",
    "llama2-sys-strip",
    "mistral-v1",
    "mistral-v3",
    "mistral-v3-tekken",
    "mistral-v7",
    "mistral-v7-tekken",
    "phi3",
    "phi4",
    "falcon3",
    "zephyr",
    "monarch",
    "gemma",
    "orion",
    "openchat",
    "vicuna",
    "vicuna-orca",
    "deepseek",
    "deepseek2",
    "deepseek3",
    "deepseek-ocr",
    "command-r",
    "llama3",
    "chatglm3",
    "chatglm4",
    "glmedge",
    "minicpm",
    "exaone3",
    "exaone4",
    "exaone-moe",
    "rwkv-world",
    "granite",
    "granite-4.0",
    "granite-4.1",
    "gigachat",
    "megrez",
    "yandex",
    "bailing",
    "bailing-think",
    "bailing2",
    "llama4",
    "smolvlm",
    "hunyuan-moe",
    "gpt-oss",
    "hunyuan-dense",
    "hunyuan-vl",
    "kimi-k2",
    "seed_oss",
    "grok-2",
    "pangu-embedded",
    "solar-open",
];

/// The template of each GGUF architecture (`general.architecture`) whose format is certain.
pub const ARCHITECTURE_TEMPLATES: &[(&str, &str)] = &[
    ("gemma", "gemma"),
    ("gemma2", "gemma"),
    ("gemma3", "gemma"),
    ("gemma3n", "gemma"),
    ("llama", "llama3"),
    ("llama4", "llama4"),
    ("qwen2", "chatml"),
    ("qwen2moe", "chatml"),
    ("qwen3", "chatml"),
    ("qwen3moe", "chatml"),
    ("phi3", "phi3"),
    ("command-r", "command-r"),
    ("exaone", "exaone3"),
    ("exaone4", "exaone4"),
    ("granite", "granite"),
    ("chatglm", "chatglm4"),
    ("glm4", "chatglm4"),
    ("minicpm", "minicpm"),
    ("deepseek", "deepseek"),
    ("deepseek2", "deepseek3"),
    ("gpt-oss", "gpt-oss"),
    ("hunyuan-moe", "hunyuan-moe"),
    ("hunyuan-dense", "hunyuan-dense"),
    ("seed_oss", "seed_oss"),
    ("grok", "grok-2"),
    ("rwkv6", "rwkv-world"),
    ("rwkv7", "rwkv-world"),
];

/// Whether llama-server knows `name`.
pub fn is_known(name: &str) -> bool {
    CHAT_TEMPLATES.contains(&name)
}

/// The template for a file of `architecture` that carries none; `None` where it is not certain.
pub fn for_architecture(architecture: &str) -> Option<&'static str> {
    ARCHITECTURE_TEMPLATES
        .iter()
        .find(|(arch, _)| *arch == architecture)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_architecture_names_a_template_llama_server_knows() {
        for (arch, name) in ARCHITECTURE_TEMPLATES {
            assert!(is_known(name), "{arch} → {name}");
        }
        assert_eq!(for_architecture("gemma3"), Some("gemma"));
        assert_eq!(for_architecture("qwen3"), Some("chatml"));
        assert_eq!(for_architecture("llama"), Some("llama3"));
        assert_eq!(for_architecture("glm-dsa"), None);
        assert!(!is_known("ChatML"));
    }
}
