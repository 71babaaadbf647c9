//! The engine's own tokenizer, asked over HTTP, so a prompt has exactly the tokens a shape asks
//! for: llama.cpp's `/tokenize` (`content`) and vLLM's (`prompt`), read from either answer.
//! Endpoints without one (the gateway, a cloud API) get prompts sized by a character estimate.

use serde_json::{json, Value};

/// How long the engine's tokenizer may take to answer.
const TOKENIZE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

use crate::endpoint::{Endpoint, EngineKind};
use crate::request::{root_cause, send_request};

/// An engine's `/tokenize`.
#[derive(Clone)]
pub struct Tokenizer {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
    model: String,
    engine: EngineKind,
}

impl Tokenizer {
    /// The endpoint's tokenizer, if its engine root is known and answers; `None` otherwise
    /// (the benchmark then says its prompt lengths are estimates).
    pub async fn probe(client: &reqwest::Client, endpoint: &Endpoint) -> Option<Tokenizer> {
        let root = endpoint.engine_url.as_deref()?.trim_end_matches('/');
        let tokenizer = Tokenizer {
            client: client.clone(),
            url: format!("{root}/tokenize"),
            key: endpoint.engine_key.clone(),
            model: endpoint.model.clone(),
            engine: endpoint.engine,
        };
        match tokenizer.count("Hello there").await {
            Ok(n) if n > 0 => Some(tokenizer),
            Ok(_) => None,
            Err(err) => {
                tracing::info!("no tokenizer at {}: {err}", tokenizer.url);
                None
            }
        }
    }

    /// Tokens in `text`, without the special tokens a template would add.
    pub async fn count(&self, text: &str) -> Result<usize, String> {
        let body = match self.engine {
            EngineKind::Vllm | EngineKind::Sglang => {
                json!({"model": self.model, "prompt": text, "add_special_tokens": false})
            }
            EngineKind::LlamaCpp | EngineKind::Other => {
                json!({"content": text, "add_special": false})
            }
        };
        // An engine tokenizes a long prompt in well under a second; one that never answers
        // must not hold the benchmark.
        let mut request = self
            .client
            .post(&self.url)
            .json(&body)
            .timeout(TOKENIZE_DEADLINE);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = send_request(request).await.map_err(|e| root_cause(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{} answered {status}", self.url));
        }
        let answer: Value = response.json().await.map_err(|e| root_cause(&e))?;
        answer
            .get("count")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .or_else(|| answer.get("tokens").and_then(Value::as_array).map(Vec::len))
            .ok_or_else(|| format!("{} answered without tokens", self.url))
    }
}
