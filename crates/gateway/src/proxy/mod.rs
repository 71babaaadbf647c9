//! Forwarding to an engine: the request goes to the ready instance's own address with the
//! engine's key in place of the client's, and the answer comes back through a [`relay::Relay`],
//! status and content type as the engine sent them.

pub mod relay;
pub mod sse;
pub mod tally;

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;

use crate::error::{ErrorKind, GatewayError};
use crate::fleet::Upstream;
use crate::route::GatewayRequest;
use relay::{EndGuard, Relay};

/// Sends the request to the engine and relays its answer. The error comes back with the
/// guard when the engine did not answer at all.
pub async fn forward(
    client: &reqwest::Client,
    request: &GatewayRequest,
    upstream: &Upstream,
    model: &str,
    end: EndGuard,
    stall: Duration,
) -> Result<Response, (GatewayError, EndGuard)> {
    match open(client, request, upstream, model).await {
        Ok(answer) => Ok(relay_response(answer, request, model, end, stall)),
        Err(err) => Err((err, end)),
    }
}

/// The engine's answer, headers read, body not yet.
pub async fn open(
    client: &reqwest::Client,
    request: &GatewayRequest,
    upstream: &Upstream,
    model: &str,
) -> Result<reqwest::Response, GatewayError> {
    let url = format!("{}{}", upstream.base_url, request.route.path());
    let mut builder = client
        .post(&url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(request.upstream_body(&upstream.served_name));
    if let Some(key) = &upstream.api_key {
        builder = builder.bearer_auth(key);
    }
    builder.send().await.map_err(|err| {
        GatewayError::new(
            ErrorKind::Engine,
            format!(
                "the engine serving '{model}' at {} did not answer ({err}); the Instances page shows its state and log",
                upstream.base_url
            ),
        )
    })
}

/// Whether the engine answered with a stream of events.
pub fn is_event_stream(answer: &reqwest::Response) -> bool {
    answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Relays an open answer.
pub fn relay(
    answer: reqwest::Response,
    request: &GatewayRequest,
    model: &str,
    mut end: EndGuard,
    stall: Duration,
) -> Relay {
    end.http_status = answer.status().as_u16();
    let events = is_event_stream(&answer);
    Relay::new(
        answer.bytes_stream().boxed(),
        events,
        request.usage_injected,
        request.route.dialect(),
        model.to_owned(),
        end,
        stall,
    )
}

fn relay_response(
    answer: reqwest::Response,
    request: &GatewayRequest,
    model: &str,
    end: EndGuard,
    stall: Duration,
) -> Response {
    let status = answer.status();
    let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
    let events = is_event_stream(&answer);
    let body = Body::from_stream(relay(answer, request, model, end, stall));
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    if let Some(content_type) = content_type {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
    }
    if events {
        stream_headers(&mut response);
    }
    response
}

/// A stream must reach the client as it is written: no caching, no proxy buffering.
pub fn stream_headers(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
}
