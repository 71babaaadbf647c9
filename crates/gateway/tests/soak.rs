//! Ten thousand requests through the gateway in front of a local engine stand-in: streams read
//! to the end, streams the client drops after the first event, whole answers, refusals. After
//! them no request is in flight, every one is recorded, and the process holds no more file
//! descriptors than before (no upstream connection leaked).

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;
use rigdeck_gateway::keys::Caller;
use rigdeck_gateway::{Gateway, GatewayOptions, Route};
use support::{gateway_over, ready_at, Stage};

/// Three events and the end, or a whole answer, like llama-server's.
async fn engine(body: Bytes) -> Response {
    let streaming = body.windows(13).any(|w| w == b"\"stream\":true");
    if !streaming {
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(r#"{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#))
            .unwrap();
    }
    let events = [
        r#"data: {"choices":[{"delta":{"content":"a"}}]}"#,
        r#"data: {"choices":[{"delta":{"content":"b"}}]}"#,
        r#"data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        "data: [DONE]",
    ];
    let stream = futures_util::stream::iter(events).then(|e| async move {
        tokio::task::yield_now().await;
        Ok::<_, std::io::Error>(Bytes::from(format!("{e}\n\n")))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// A gateway (on an in-memory database with the real schema) in front of `engine`, served on a
/// free loopback port.
async fn gateway_before(engine: axum::Router, options: GatewayOptions) -> Arc<Gateway> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, engine).await.unwrap() });
    let stage = Arc::new(Stage::default());
    stage.set("m", ready_at(format!("http://{address}")));
    gateway_over(stage, options).await
}

/// Requests the soak runs at once.
const CONCURRENT: usize = 32;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_requests_leave_nothing_behind() {
    let app = axum::Router::new().route("/v1/chat/completions", post(engine));
    let gateway = gateway_before(app, GatewayOptions::default()).await;

    let run = |i: usize| {
        let gateway = gateway.clone();
        async move {
            let body = match i % 4 {
                0 | 1 => r#"{"model":"m","stream":true}"#,
                2 => r#"{"model":"m"}"#,
                _ => r#"{"model":"nope"}"#,
            };
            let response = gateway
                .handle(Route::ChatCompletions, Caller::app(), Bytes::from(body))
                .await;
            let mut stream = response.into_body().into_data_stream();
            if i % 4 == 1 {
                // A client that leaves after the first event.
                stream.next().await;
                return;
            }
            while stream.next().await.is_some() {}
        }
    };
    // The same load once to fill the connection pools, then counted. The pool keeps idle
    // keep-alive connections for reuse, at most one per request that ran at once, and each
    // has both its ends in this process; how many the warm-up left depends on scheduling, so
    // up to two descriptors per concurrent request may come on top. A leak per request (or
    // per dropped stream, 2 500 of them) stays far beyond that.
    let load = |range: std::ops::Range<usize>| {
        futures_util::stream::iter(range)
            .map(run)
            .buffer_unordered(CONCURRENT)
            .collect::<Vec<()>>()
    };
    load(0..1_000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = open_fds();
    load(1_000..11_000).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = open_fds();
    assert!(
        after <= before + 2 * CONCURRENT,
        "file descriptors grew from {before} to {after} over 10 000 requests"
    );
    let status = gateway.status().await.unwrap();
    assert_eq!(status.models[0].in_flight, 0);
    let usage = gateway.usage(0, i64::MAX).await.unwrap();
    assert_eq!(usage.totals.requests, 11_000);
    let cancelled = usage
        .recent
        .iter()
        .filter(|r| r.status.as_str() == "cancelled");
    assert!(
        cancelled.count() > 0,
        "dropped streams are recorded as cancelled"
    );
    let by_model: Vec<(&str, u64)> = usage
        .by_model
        .iter()
        .map(|m| (m.model.as_str(), m.totals.requests))
        .collect();
    assert_eq!(by_model, vec![("m", 8_250), ("nope", 2_750)]);
}

/// Set when the engine stand-in's endless stream is dropped (its client went away).
static ENDLESS_DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

struct DropFlag;

impl Drop for DropFlag {
    fn drop(&mut self) {
        ENDLESS_DROPPED.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An event every 5 ms until the client goes away.
async fn endless() -> Response {
    let flag = DropFlag;
    let stream = futures_util::stream::unfold(flag, |flag| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let event =
            Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
        Some((Ok::<_, std::io::Error>(event), flag))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_frees_the_engine_and_the_request() {
    let app = axum::Router::new().route("/v1/chat/completions", post(endless));
    let options = GatewayOptions {
        client_stall: Duration::from_secs(1),
        ..GatewayOptions::default()
    };
    let gateway = gateway_before(app, options).await;

    let response = gateway
        .handle(
            Route::ChatCompletions,
            Caller::app(),
            Bytes::from(r#"{"model":"m","stream":true}"#),
        )
        .await;
    // Takes one event, then holds the body without reading it, as a stuck client does.
    let mut body = response.into_body().into_data_stream();
    body.next().await.unwrap().unwrap();
    assert_eq!(gateway.status().await.unwrap().models[0].in_flight, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ENDLESS_DROPPED.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the engine still streams to a client that stopped reading"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(gateway.status().await.unwrap().models[0].in_flight, 0);
    let usage = gateway.usage(0, i64::MAX).await.unwrap();
    let error = usage.recent[0].error.clone().unwrap_or_default();
    assert!(error.contains("stopped reading"), "{error}");
    // What was measured before the stall is kept in the record.
    assert!(usage.recent[0].ttft_ms.is_some(), "{:?}", usage.recent[0]);
    // The body it holds ends instead of hanging when it is read at last.
    while body.next().await.is_some() {}
}
