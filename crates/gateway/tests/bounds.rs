//! The gateway under a hostile or unlucky client, in front of stand-ins it does not control:
//! made-up model names do not grow `/metrics`, the requests waiting for one load are capped, a
//! request that went out on a pooled connection the engine had closed is sent again, and a
//! request whose engine just died waits for the supervisor's restart instead of failing.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use rigdeck_gateway::keys::Caller;
use rigdeck_gateway::metrics::PromText;
use rigdeck_gateway::{Gateway, GatewayOptions, ModelState, Route};
use support::{gateway_over, ready_at, Stage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn chat(model: &str, stream: bool) -> Bytes {
    Bytes::from(format!(
        r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    ))
}

fn metrics_text(gateway: &Gateway) -> String {
    let mut out = PromText::default();
    gateway.write_metrics(&mut out);
    out.finish()
}

#[tokio::test]
async fn made_up_model_names_share_one_metrics_label() {
    let stage = Arc::new(Stage::default());
    let gateway = gateway_over(stage, GatewayOptions::default()).await;
    let ask = |i: usize| {
        let gateway = gateway.clone();
        async move {
            let body = chat(&format!("bogus-{i}"), false);
            let answer = gateway
                .handle(Route::ChatCompletions, Caller::app(), body)
                .await;
            assert_eq!(answer.status().as_u16(), 404);
        }
    };
    for i in 0..10 {
        ask(i).await;
    }
    let series_after_ten = metrics_text(&gateway).lines().count();
    for i in 10..2_000 {
        ask(i).await;
    }
    let text = metrics_text(&gateway);
    assert_eq!(
        text.lines().count(),
        series_after_ten,
        "/metrics grew with made-up names:\n{}",
        &text[..text.len().min(2_000)]
    );
    assert!(!text.contains("bogus-"), "{text}");
    assert!(text.contains(r#"model="unknown""#), "{text}");
}

#[tokio::test]
async fn requests_waiting_for_one_load_are_capped_with_a_retry_after() {
    let stage = Arc::new(Stage::on_demand());
    // Loading, and it never finishes: every request waits.
    stage.set("m", ModelState::Loading { progress: None });
    let options = GatewayOptions {
        max_waiters: 4,
        ..GatewayOptions::default()
    };
    let gateway = gateway_over(stage, options).await;
    let mut waiting = Vec::new();
    for _ in 0..4 {
        let answer = gateway
            .handle(Route::ChatCompletions, Caller::app(), chat("m", true))
            .await;
        assert_eq!(
            answer.status().as_u16(),
            200,
            "a stream waits with progress"
        );
        waiting.push(answer);
    }
    let refused = gateway
        .handle(Route::ChatCompletions, Caller::app(), chat("m", false))
        .await;
    assert_eq!(refused.status().as_u16(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body = axum::body::to_bytes(refused.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("wait for 'm' to load"), "{text}");
    // One that leaves makes room for another.
    waiting.pop();
    let again = gateway
        .handle(Route::ChatCompletions, Caller::app(), chat("m", true))
        .await;
    assert_eq!(again.status().as_u16(), 200);
}

/// Reads one HTTP request (headers and a Content-Length body); `false` when the peer closed.
async fn read_request(socket: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return false;
        }
        seen.extend_from_slice(&buf[..n]);
        let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if seen.len() >= end + 4 + length {
            return true;
        }
    }
}

/// An engine like llama-server after a streamed reply: it answers one request per connection
/// with keep-alive, then closes the connection when the next request arrives on it, unanswered.
async fn closing_engine() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                if !read_request(&mut socket).await {
                    return;
                }
                let body = r#"{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                // The next request on this connection is never answered.
                read_request(&mut socket).await;
            });
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn a_request_on_a_pooled_connection_the_engine_closed_is_sent_again() {
    let stage = Arc::new(Stage::default());
    stage.set("m", ready_at(closing_engine().await));
    let gateway = gateway_over(stage, GatewayOptions::default()).await;
    for i in 0..20 {
        let answer = gateway
            .handle(Route::ChatCompletions, Caller::app(), chat("m", false))
            .await;
        let status = answer.status().as_u16();
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

/// A port nothing listens on (bound, then released).
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn a_request_whose_engine_just_died_waits_for_its_restart() {
    let stage = Arc::new(Stage::default());
    // Still shown ready at its old address, as in the moments after a kill -9.
    stage.set("m", ready_at(format!("http://127.0.0.1:{}", dead_port())));
    let gateway = gateway_over(stage.clone(), GatewayOptions::default()).await;
    let restarted = closing_engine().await;
    // The supervisor notices, restarts it, and it comes back on a new port.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        stage.set("m", ModelState::Loading { progress: None });
        tokio::time::sleep(Duration::from_millis(300)).await;
        stage.set("m", ready_at(restarted));
    });
    for stream in [false, true] {
        let answer = gateway
            .handle(Route::ChatCompletions, Caller::app(), chat("m", stream))
            .await;
        let status = answer.status().as_u16();
        let mut body = answer.into_body().into_data_stream();
        let mut text = Vec::new();
        while let Some(Ok(chunk)) = body.next().await {
            text.extend_from_slice(&chunk);
        }
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&text));
    }
}

/// An engine that answers `path` with `events` as a stream of server-sent events, one chunk
/// each, and ends.
async fn streaming_engine(path: &'static str, events: &'static [&'static str]) -> String {
    let app = axum::Router::new().route(
        path,
        axum::routing::post(move || async move {
            let body = futures_util::stream::iter(events)
                .map(|e| Ok::<_, std::io::Error>(Bytes::from_static(e.as_bytes())));
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(axum::body::Body::from_stream(body))
                .unwrap()
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// Three events and the end, as llama-server streams a short reply.
const SHORT_REPLY: &[&str] = &[
    "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n",
    "data: [DONE]\n\n",
];

#[tokio::test]
async fn a_finished_stream_leaves_no_task_behind() {
    let stage = Arc::new(Stage::default());
    stage.set(
        "m",
        ready_at(streaming_engine("/v1/chat/completions", SHORT_REPLY).await),
    );
    let gateway = gateway_over(stage, GatewayOptions::default()).await;
    let stream_once = || async {
        let answer = gateway
            .handle(Route::ChatCompletions, Caller::app(), chat("m", true))
            .await;
        let mut body = answer.into_body().into_data_stream();
        while body.next().await.is_some() {}
    };
    // One first, so the connection pools hold what they keep.
    stream_once().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = alive();
    for _ in 0..50 {
        stream_once().await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        alive() <= before + 2,
        "tasks went from {before} to {} over 50 streams",
        alive()
    );
}

/// An Anthropic stream that opens with a content block, as llama-server's does when the first
/// token it samples is an incomplete UTF-8 sequence.
const WITHOUT_MESSAGE_START: &[&str] = &[
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\u{fffd}a\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
];

#[tokio::test]
async fn an_anthropic_stream_always_opens_with_message_start() {
    let stage = Arc::new(Stage::default());
    stage.set(
        "m",
        ready_at(streaming_engine("/v1/messages", WITHOUT_MESSAGE_START).await),
    );
    let gateway = gateway_over(stage, GatewayOptions::default()).await;
    let body = Bytes::from(
        r#"{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    let answer = gateway.handle(Route::Messages, Caller::app(), body).await;
    assert_eq!(answer.status().as_u16(), 200);
    let text = axum::body::to_bytes(answer.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text);
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        kinds.first().copied(),
        Some("message_start"),
        "the stream: {text}"
    );
    assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1);
    assert!(text.contains(r#""model":"m""#), "{text}");
}
