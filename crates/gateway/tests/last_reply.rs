//! The gateway's status carries each model's last reply and its decode speed, read from the
//! engine's own timings; a refused request leaves it as it was.

mod support;

use std::sync::Arc;

use bytes::Bytes;
use rigdeck_gateway::keys::Caller;
use rigdeck_gateway::{GatewayOptions, Route};
use support::{gateway_over, ready_at, Stage};
use tokio::net::TcpListener;

/// An engine that answers every chat request as llama-server does, with its timings.
async fn engine_with_timings(predicted_per_second: f64) -> String {
    let answer = serde_json::json!({
        "choices": [{"message": {"role": "assistant", "content": "hello there"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7},
        "timings": {"predicted_per_second": predicted_per_second, "predicted_n": 7},
    });
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let answer = answer.clone();
            async move { axum::Json(answer) }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

fn chat(model: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#
    ))
}

#[tokio::test]
async fn the_status_shows_the_last_replys_speed() {
    let stage = Arc::new(Stage::default());
    stage.set("m", ready_at(engine_with_timings(42.5).await));
    let gateway = gateway_over(stage, GatewayOptions::default()).await;
    let before = gateway.status().await.unwrap();
    assert_eq!(before.models[0].last_reply, None, "no reply yet");

    let answer = gateway
        .handle(Route::ChatCompletions, Caller::app(), chat("m"))
        .await;
    assert_eq!(answer.status().as_u16(), 200);
    axum::body::to_bytes(answer.into_body(), usize::MAX)
        .await
        .unwrap();
    let status = gateway.status().await.unwrap();
    let reply = status.models[0].last_reply.expect("the reply is kept");
    assert_eq!(reply.decode_tps, 42.5);
    assert_eq!(reply.completion_tokens, Some(7));
    let json = serde_json::to_value(&status.models[0]).unwrap();
    assert_eq!(json["last_reply"]["decode_tps"], 42.5);

    let refused = gateway
        .handle(Route::ChatCompletions, Caller::app(), Bytes::from("{"))
        .await;
    assert_eq!(refused.status().as_u16(), 400);
    let after = gateway.status().await.unwrap();
    assert_eq!(after.models[0].last_reply, Some(reply));
}
