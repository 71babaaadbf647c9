//! Where a benchmark sends its requests: an OpenAI-compatible base URL with its key and model,
//! which engine answers there (so the request can force the output length the way that engine
//! allows), and where its tokenizer and Prometheus metrics are, when it has them.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::spec::Api;

/// The engine behind an endpoint, as far as requests need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    LlamaCpp,
    Vllm,
    Sglang,
    /// Anything else (a cloud API): only standard OpenAI fields are sent.
    #[default]
    Other,
}

/// A resolved target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Up to and including `/v1`, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Sent as a bearer token; never stored with the run.
    #[serde(skip_serializing, default)]
    pub api_key: Option<String>,
    pub model: String,
    pub engine: EngineKind,
    /// The engine's own root (`/tokenize`, `/metrics`), when it can be reached directly.
    pub engine_url: Option<String>,
    /// The only key sent to the engine's own root. `api_key` never goes there: behind the
    /// gateway it is the gateway's credential (the daemon's own), which no engine may see.
    #[serde(skip_serializing, default)]
    pub engine_key: Option<String>,
}

impl Endpoint {
    /// The route requests go to.
    pub fn route(&self, api: Api) -> String {
        let base = self.base_url.trim_end_matches('/');
        match api {
            Api::Chat => format!("{base}/chat/completions"),
            Api::Completions => format!("{base}/completions"),
        }
    }

    /// A streamed request's body. `max_tokens` caps the output; `force` asks the engine to
    /// produce exactly that many tokens where it has a way to (a cloud API gets neither field,
    /// since unknown fields may be refused there).
    pub fn body(
        &self,
        api: Api,
        prompt: &str,
        max_tokens: u32,
        temperature: f64,
        force: bool,
    ) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        match api {
            Api::Chat => {
                body.insert(
                    "messages".into(),
                    json!([{"role": "user", "content": prompt}]),
                );
            }
            Api::Completions => {
                body.insert("prompt".into(), json!(prompt));
            }
        }
        body.insert("max_tokens".into(), json!(max_tokens));
        body.insert("temperature".into(), json!(temperature));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        if force {
            match self.engine {
                EngineKind::LlamaCpp | EngineKind::Sglang => {
                    body.insert("ignore_eos".into(), json!(true));
                }
                EngineKind::Vllm => {
                    body.insert("ignore_eos".into(), json!(true));
                    body.insert("min_tokens".into(), json!(max_tokens));
                }
                EngineKind::Other => {}
            }
        }
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(engine: EngineKind) -> Endpoint {
        Endpoint {
            base_url: "http://127.0.0.1:9/v1/".into(),
            api_key: Some("secret".into()),
            model: "m".into(),
            engine,
            engine_url: None,
            engine_key: None,
        }
    }

    #[test]
    fn output_length_is_forced_only_where_the_engine_allows() {
        let vllm = endpoint(EngineKind::Vllm).body(Api::Chat, "hi", 64, 0.0, true);
        assert_eq!(vllm["min_tokens"], 64);
        assert_eq!(vllm["ignore_eos"], true);
        assert_eq!(vllm["stream_options"]["include_usage"], true);
        let llama = endpoint(EngineKind::LlamaCpp).body(Api::Completions, "hi", 8, 0.0, true);
        assert_eq!(llama["prompt"], "hi");
        assert!(llama.get("min_tokens").is_none());
        let cloud = endpoint(EngineKind::Other).body(Api::Chat, "hi", 8, 0.0, true);
        assert!(cloud.get("ignore_eos").is_none());
        assert_eq!(
            endpoint(EngineKind::Other).route(Api::Chat),
            "http://127.0.0.1:9/v1/chat/completions"
        );
    }

    #[test]
    fn keys_never_serialize() {
        let text = serde_json::to_string(&endpoint(EngineKind::Vllm)).expect("serializes");
        assert!(!text.contains("secret"), "{text}");
    }
}
