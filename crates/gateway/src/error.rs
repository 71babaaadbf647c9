//! Refusals in the shape clients already parse: OpenAI's `{"error": {message, type, code}}` on the
//! OpenAI routes, Anthropic's `{"type": "error", "error": {type, message}}` on `/v1/messages`, as a
//! whole response before streaming starts and as a final event once it has.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;

/// Which API family a route belongs to: it decides the error body and the streaming framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

/// Why the gateway answered instead of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed JSON, a missing `model`, a field of the wrong type.
    InvalidRequest,
    /// No key, or a key that is unknown or revoked.
    Authentication,
    /// No profile or alias has that name.
    ModelNotFound,
    /// The body is larger than the gateway accepts.
    TooLarge,
    /// The model's concurrency limit is reached.
    RateLimited,
    /// The model is stopped and may not be started on request, or its start was refused.
    Unavailable,
    /// The engine failed: unreachable, or it stopped mid-reply.
    Engine,
}

impl ErrorKind {
    fn status(self) -> StatusCode {
        match self {
            Self::InvalidRequest => StatusCode::BAD_REQUEST,
            Self::Authentication => StatusCode::UNAUTHORIZED,
            Self::ModelNotFound => StatusCode::NOT_FOUND,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Engine => StatusCode::BAD_GATEWAY,
        }
    }

    /// OpenAI's `type` and `code`.
    fn openai(self) -> (&'static str, &'static str) {
        match self {
            Self::InvalidRequest => ("invalid_request_error", "invalid_request"),
            Self::Authentication => ("authentication_error", "invalid_api_key"),
            Self::ModelNotFound => ("invalid_request_error", "model_not_found"),
            Self::TooLarge => ("invalid_request_error", "request_too_large"),
            Self::RateLimited => ("rate_limit_error", "rate_limit_exceeded"),
            Self::Unavailable => ("server_error", "model_unavailable"),
            Self::Engine => ("server_error", "engine_failed"),
        }
    }

    /// Anthropic's error `type`.
    fn anthropic(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request_error",
            Self::Authentication => "authentication_error",
            Self::ModelNotFound => "not_found_error",
            Self::TooLarge => "request_too_large",
            Self::RateLimited => "rate_limit_error",
            Self::Unavailable => "overloaded_error",
            Self::Engine => "api_error",
        }
    }
}

/// A refusal with a message that names the thing and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GatewayError {
    pub kind: ErrorKind,
    pub message: String,
    /// Sent as `Retry-After` (seconds) with a 429.
    pub retry_after_s: Option<u64>,
}

impl GatewayError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after_s: None,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    fn body(&self, dialect: Dialect) -> serde_json::Value {
        match dialect {
            Dialect::OpenAi => {
                let (kind, code) = self.kind.openai();
                json!({"error": {"message": self.message, "type": kind, "code": code, "param": null}})
            }
            Dialect::Anthropic => {
                json!({"type": "error", "error": {"type": self.kind.anthropic(), "message": self.message}})
            }
        }
    }

    /// The whole answer, before anything was streamed.
    pub fn response(&self, dialect: Dialect) -> Response {
        let mut response = (self.status(), axum::Json(self.body(dialect))).into_response();
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }

    /// The last event of a stream that already started (its status line is long sent).
    pub fn sse_event(&self, dialect: Dialect) -> Bytes {
        let body = self.body(dialect);
        match dialect {
            Dialect::OpenAi => Bytes::from(format!("data: {body}\n\n")),
            Dialect::Anthropic => Bytes::from(format!("event: error\ndata: {body}\n\n")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_and_anthropic_bodies_carry_the_message() {
        let err = GatewayError::new(ErrorKind::ModelNotFound, "no model 'x'");
        let openai = err.body(Dialect::OpenAi);
        assert_eq!(openai["error"]["code"], "model_not_found");
        assert_eq!(openai["error"]["message"], "no model 'x'");
        let anthropic = err.body(Dialect::Anthropic);
        assert_eq!(anthropic["error"]["type"], "not_found_error");
        assert_eq!(err.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn a_rate_limit_says_when_to_retry() {
        let mut err = GatewayError::new(ErrorKind::RateLimited, "busy");
        err.retry_after_s = Some(2);
        let response = err.response(Dialect::OpenAi);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn stream_errors_are_framed_per_dialect() {
        let err = GatewayError::new(ErrorKind::Engine, "engine stopped");
        let openai = err.sse_event(Dialect::OpenAi);
        assert!(openai.starts_with(b"data: {"));
        assert!(openai.ends_with(b"\n\n"));
        let anthropic = err.sse_event(Dialect::Anthropic);
        assert!(anthropic.starts_with(b"event: error\ndata: "));
    }
}
