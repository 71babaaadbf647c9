//! What reaches an engine's own root (`/tokenize`, `/metrics`) when a benchmark goes through
//! the gateway: the engine's key or nothing, never the credential the benchmark shows the
//! gateway (the daemon's admin token). A fake gateway and a fake engine record every
//! `Authorization` header they are sent.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use rigdeck_bench::{BenchSpec, Endpoint, EngineKind, Runner, Shape, StepResult, StepSink};
use serde_json::{json, Value};
use tokio::sync::watch;

const GATEWAY_CREDENTIAL: &str = "the-daemons-admin-token";

/// A request's path and its `Authorization` header.
type Request = (String, Option<String>);

/// Every request a fake server was sent.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

impl Seen {
    fn record(&self, path: &str, headers: &HeaderMap) {
        let auth = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.0
            .lock()
            .expect("never poisoned")
            .push((path.to_owned(), auth));
    }

    fn all(&self) -> Vec<Request> {
        self.0.lock().expect("never poisoned").clone()
    }
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// llama-server's root as far as a benchmark reads it: a word is a token.
async fn fake_engine(seen: Seen) -> String {
    async fn tokenize(
        State(seen): State<Seen>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        seen.record("/tokenize", &headers);
        let words = body["content"].as_str().unwrap_or("").split_whitespace();
        Json(json!({"count": words.count()}))
    }
    async fn metrics(State(seen): State<Seen>, headers: HeaderMap) -> &'static str {
        seen.record("/metrics", &headers);
        "llamacpp:tokens_predicted_total 0\n"
    }
    serve(
        Router::new()
            .route("/tokenize", post(tokenize))
            .route("/metrics", get(metrics))
            .with_state(seen),
    )
    .await
}

/// The gateway's `/v1/chat/completions`: one streamed token and the usage.
async fn fake_gateway(seen: Seen) -> String {
    async fn chat(State(seen): State<Seen>, headers: HeaderMap) -> impl IntoResponse {
        seen.record("/v1/chat/completions", &headers);
        let body = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":1}}\n\n",
            "data: [DONE]\n\n",
        );
        ([(header::CONTENT_TYPE, "text/event-stream")], body)
    }
    serve(
        Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(seen),
    )
    .await
}

struct Ignore;

impl StepSink for Ignore {
    async fn step(&self, _step: &StepResult) {}
}

/// Runs a one-step benchmark through the fake gateway at the fake engine; what the engine saw.
async fn engine_sees(engine_key: Option<&str>) -> Vec<Request> {
    let (engine_seen, gateway_seen) = (Seen::default(), Seen::default());
    let engine = fake_engine(engine_seen.clone()).await;
    let gateway = fake_gateway(gateway_seen.clone()).await;
    let endpoint = Endpoint {
        base_url: format!("{gateway}/v1"),
        api_key: Some(GATEWAY_CREDENTIAL.into()),
        model: "tiny".into(),
        engine: EngineKind::LlamaCpp,
        engine_url: Some(engine),
        engine_key: engine_key.map(str::to_owned),
    };
    let spec = BenchSpec {
        shapes: vec![Shape {
            prompt_tokens: 16,
            output_tokens: 1,
        }],
        warm_runs: 1,
        ..BenchSpec::default()
    };
    let mut runner = Runner::prepare(endpoint, spec).await.expect("a valid spec");
    let (_keep, cancel) = watch::channel(false);
    runner.run(&Ignore, cancel).await;
    assert!(
        gateway_seen
            .all()
            .iter()
            .all(|(_, auth)| auth.as_deref() == Some("Bearer the-daemons-admin-token")),
        "the gateway gets the benchmark's credential: {:?}",
        gateway_seen.all()
    );
    engine_seen.all()
}

#[tokio::test]
async fn the_gateways_credential_never_reaches_an_engine_without_a_key() {
    let seen = engine_sees(None).await;
    assert!(seen.iter().any(|(path, _)| path == "/tokenize"), "{seen:?}");
    assert!(seen.iter().any(|(path, _)| path == "/metrics"), "{seen:?}");
    assert!(
        seen.iter().all(|(_, auth)| auth.is_none()),
        "an engine without a key is sent no credential: {seen:?}"
    );
}

#[tokio::test]
async fn an_engine_with_a_key_gets_its_own_key_and_nothing_else() {
    let seen = engine_sees(Some("engine-key")).await;
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|(_, auth)| auth.as_deref() == Some("Bearer engine-key")),
        "{seen:?}"
    );
}
