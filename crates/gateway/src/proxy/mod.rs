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

use crate::elsewhere::RemoteAnswer;
use crate::error::{ErrorKind, GatewayError};
use crate::fleet::Upstream;
use crate::route::GatewayRequest;
use relay::{EndGuard, Relay};

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
    send(builder).await.map_err(|err| {
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
    let body = answer.bytes_stream().map(|chunk| chunk.map_err(Into::into));
    Relay::new(
        body.boxed(),
        events,
        request.usage_injected,
        request.route.dialect(),
        model.to_owned(),
        end,
        stall,
    )
}

/// The engine's open answer as the client's response: status and content type as sent.
pub fn relay_response(
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

/// A rig's open answer as the client's response, relayed like an engine's.
pub fn relay_remote(
    answer: RemoteAnswer,
    request: &GatewayRequest,
    model: &str,
    mut end: EndGuard,
    stall: Duration,
) -> Response {
    end.http_status = answer.status;
    let events = answer
        .content_type
        .as_deref()
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let relay = Relay::new(
        answer.body,
        events,
        request.usage_injected,
        request.route.dialect(),
        model.to_owned(),
        end,
        stall,
    );
    let mut response = Response::new(Body::from_stream(relay));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    if let Some(value) = answer
        .content_type
        .and_then(|v| HeaderValue::from_str(&v).ok())
    {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
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

/// Sends a request, and once more when it went out on a pooled connection the server had
/// already closed. llama-server answers `Keep-Alive` yet closes after a streamed reply, so the
/// next request can pick that connection up; the server never saw the first try, and a new
/// connection is what a client without a pool would have paid for anyway.
pub async fn send(request: reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
    let again = request.try_clone();
    match (request.send().await, again) {
        (Err(err), Some(again)) if closed_before_answer(&err) => again.send().await,
        (outcome, _) => outcome,
    }
}

/// Whether hyper says the connection closed before an answer began.
fn closed_before_answer(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = cause {
        if current
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return true;
        }
        cause = current.source();
    }
    false
}
