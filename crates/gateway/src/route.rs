//! The routes the gateway serves and what it reads from a request body before forwarding it: the
//! model it names, whether it streams, and the one change it makes (asking the engine to report
//! usage at the end of a stream, so every request's token counts come from the engine itself).

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::{Dialect, ErrorKind, GatewayError};

/// A route that carries a `model` and is forwarded to that model's engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    ChatCompletions,
    Completions,
    Embeddings,
    Responses,
    Messages,
    CountTokens,
}

impl Route {
    pub const ALL: [Route; 6] = [
        Self::ChatCompletions,
        Self::Completions,
        Self::Embeddings,
        Self::Responses,
        Self::Messages,
        Self::CountTokens,
    ];

    /// The path on the gateway and on the engine (llama-server serves all of them).
    pub fn path(self) -> &'static str {
        match self {
            Self::ChatCompletions => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
            Self::Embeddings => "/v1/embeddings",
            Self::Responses => "/v1/responses",
            Self::Messages => "/v1/messages",
            Self::CountTokens => "/v1/messages/count_tokens",
        }
    }

    /// The short name usage records and metrics carry.
    pub fn name(self) -> &'static str {
        match self {
            Self::ChatCompletions => "chat.completions",
            Self::Completions => "completions",
            Self::Embeddings => "embeddings",
            Self::Responses => "responses",
            Self::Messages => "messages",
            Self::CountTokens => "messages.count_tokens",
        }
    }

    pub fn dialect(self) -> Dialect {
        match self {
            Self::Messages | Self::CountTokens => Dialect::Anthropic,
            _ => Dialect::OpenAi,
        }
    }

    /// Routes whose streams end with an OpenAI usage chunk when `stream_options.include_usage`
    /// is set.
    fn reports_usage_on_request(self) -> bool {
        matches!(self, Self::ChatCompletions | Self::Completions)
    }
}

/// A request body checked and ready to forward.
#[derive(Debug, Clone)]
pub struct GatewayRequest {
    pub route: Route,
    /// As the client wrote it (a profile name or an alias).
    pub model: String,
    pub stream: bool,
    /// The gateway asked for the usage chunk; it is dropped before the client sees it.
    pub usage_injected: bool,
    object: Map<String, Value>,
    original: Bytes,
}

impl GatewayRequest {
    /// Reads the body: a JSON object with a non-empty string `model`.
    pub fn parse(route: Route, body: Bytes) -> Result<Self, GatewayError> {
        let invalid = |message: String| GatewayError::new(ErrorKind::InvalidRequest, message);
        let value: Value = serde_json::from_slice(&body).map_err(|err| {
            invalid(format!(
                "the request body is not valid JSON ({err}): send a JSON object with a \"model\" field"
            ))
        })?;
        let Value::Object(mut object) = value else {
            return Err(invalid(
                "the request body must be a JSON object with a \"model\" field".to_owned(),
            ));
        };
        let model = match object.get("model") {
            Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
            Some(Value::String(_)) | None => {
                return Err(invalid(
                    "the request names no model: set \"model\" to a profile name or alias (GET /v1/models lists them)".to_owned(),
                ))
            }
            Some(_) => return Err(invalid("\"model\" must be a string".to_owned())),
        };
        let stream = match object.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid("\"stream\" must be true or false".to_owned())),
        };
        let usage_injected =
            stream && route.reports_usage_on_request() && !object.contains_key("stream_options");
        if usage_injected {
            let mut options = Map::new();
            options.insert("include_usage".to_owned(), Value::Bool(true));
            object.insert("stream_options".to_owned(), Value::Object(options));
        }
        Ok(Self {
            route,
            model,
            stream,
            usage_injected,
            object,
            original: body,
        })
    }

    /// The body for the engine: `model` set to the engine's name for it (vLLM and SGLang check
    /// it) and the usage request added. Untouched bytes when nothing changed.
    pub fn upstream_body(&self, served_name: &str) -> Bytes {
        if !self.usage_injected && self.model == served_name {
            return self.original.clone();
        }
        let mut object = self.object.clone();
        object.insert("model".to_owned(), Value::String(served_name.to_owned()));
        // Serialising a map of plain JSON values cannot fail.
        Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(route: Route, body: &str) -> Result<GatewayRequest, GatewayError> {
        GatewayRequest::parse(route, Bytes::from(body.to_owned()))
    }

    #[test]
    fn reads_model_and_stream() {
        let r = parse(Route::ChatCompletions, r#"{"model":"qwen","messages":[]}"#).unwrap();
        assert_eq!(r.model, "qwen");
        assert!(!r.stream && !r.usage_injected);
        assert_eq!(
            r.upstream_body("qwen"),
            Bytes::from_static(br#"{"model":"qwen","messages":[]}"#)
        );
    }

    #[test]
    fn asks_for_usage_on_streams_that_did_not_and_renames_aliases() {
        let r = parse(Route::ChatCompletions, r#"{"model":"q","stream":true}"#).unwrap();
        assert!(r.stream && r.usage_injected);
        let body: Value = serde_json::from_slice(&r.upstream_body("qwen-32b")).unwrap();
        assert_eq!(body["model"], "qwen-32b");
        assert_eq!(body["stream_options"]["include_usage"], true);

        let own = parse(
            Route::ChatCompletions,
            r#"{"model":"q","stream":true,"stream_options":{"include_usage":false}}"#,
        )
        .unwrap();
        assert!(!own.usage_injected, "the client's own choice stands");
        let messages = parse(Route::Messages, r#"{"model":"q","stream":true}"#).unwrap();
        assert!(
            !messages.usage_injected,
            "Anthropic streams always carry usage"
        );
    }

    #[test]
    fn bad_bodies_get_clear_messages() {
        for (body, needle) in [
            ("{not json", "not valid JSON"),
            ("[1,2]", "JSON object"),
            (r#"{"messages":[]}"#, "names no model"),
            (r#"{"model":""}"#, "names no model"),
            (r#"{"model":7}"#, "must be a string"),
            (r#"{"model":"m","stream":"yes"}"#, "true or false"),
        ] {
            let err = parse(Route::ChatCompletions, body).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidRequest);
            assert!(err.message.contains(needle), "{body}: {}", err.message);
        }
    }
}
