//! What a running engine says about itself (llama-server's `/props`): its context per slot and
//! whether it takes images. Read for the chat's model list and for a reply's default length.

use std::sync::LazyLock;
use std::time::Duration;

use rigdeck_gateway::fleet::Upstream;
use serde_json::Value;

/// A running engine's own figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineProps {
    /// Tokens per slot; `None` when the engine does not say.
    pub context: Option<u64>,
    /// Served with a vision projector.
    pub vision: bool,
}

/// The engine's `/props`, or `None` when it does not answer them (vLLM, SGLang, an engine
/// that is busy for more than two seconds).
pub async fn engine_props(upstream: &Upstream) -> Option<EngineProps> {
    // One client for every call: an engine on this machine answers in milliseconds or not at all.
    static CLIENT: LazyLock<reqwest::Client> = LazyLock::new(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap_or_default()
    });
    let mut request = CLIENT.get(format!("{}/props", upstream.base_url));
    if let Some(key) = &upstream.api_key {
        request = request.bearer_auth(key);
    }
    let body = request.send().await.ok()?.bytes().await.ok()?;
    let props: Value = serde_json::from_slice(&body).ok()?;
    Some(EngineProps {
        context: props
            .pointer("/default_generation_settings/n_ctx")
            .and_then(Value::as_u64),
        vision: props
            .pointer("/modalities/vision")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}
