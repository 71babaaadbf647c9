//! The API end to end over real HTTP: token, Host/Origin checks, telemetry, history, settings.

mod support;

use reqwest::StatusCode;
use support::TestServer;

#[tokio::test]
async fn every_api_call_needs_the_token() {
    let t = TestServer::start("4x3090.json").await;
    let bare = t.client.get(t.url("/api/v1/status")).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = bare.json().await.unwrap();
    assert_eq!(body["code"], "unauthorized");
    assert!(body["message"].as_str().unwrap().contains("rigdeck serve"));

    let wrong = t
        .client
        .get(t.url("/api/v1/status"))
        .bearer_auth("0".repeat(64))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let status = t.get_json("/api/v1/status").await;
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["telemetry_period_ms"], 1000);
}

#[tokio::test]
async fn every_route_of_the_api_answers_401_without_the_token() {
    let t = TestServer::start("4x3090.json").await;
    let endpoints = rigdeck_server::http::protected_endpoints();
    assert!(endpoints.len() >= 25, "{endpoints:?}");
    for (method, path) in endpoints {
        let path = path.replace("{name}", "tiny");
        for auth in [None, Some("0".repeat(64))] {
            let mut request = t
                .client
                .request(method.clone(), t.url(&path))
                .header("content-type", "application/json")
                .body("{}");
            if let Some(token) = &auth {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {path} with token {auth:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_login_link_sets_a_strict_cookie_and_drops_the_token_from_the_address() {
    let t = TestServer::start("4x3090.json").await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = client.get(t.server.login_url()).send().await.unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    assert_eq!(login.headers()["location"], "/");
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let with_cookie = client
        .get(t.url("/api/v1/status"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), StatusCode::OK);

    let bad = client.get(t.url("/login?token=nope")).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    assert!(bad.headers().get("set-cookie").is_none());
}

#[tokio::test]
async fn the_sign_in_form_checks_the_token() {
    let t = TestServer::start("4x3090.json").await;
    let ok = t
        .client
        .post(t.url("/api/v1/session"))
        .json(&serde_json::json!({"token": t.server.token()}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::NO_CONTENT);
    assert!(ok.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .starts_with("rigdeck_session="));
    let bad = t
        .client
        .post(t.url("/api/v1/session"))
        .json(&serde_json::json!({"token": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused_and_no_cors_is_offered() {
    let t = TestServer::start("4x3090.json").await;
    let token = t.server.token().to_owned();
    let origin = t
        .client
        .get(t.url("/api/v1/status"))
        .bearer_auth(&token)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(origin.status(), StatusCode::FORBIDDEN);
    assert!(origin
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let body: serde_json::Value = origin.json().await.unwrap();
    assert_eq!(body["code"], "forbidden_origin");

    let rebinding = t
        .client
        .get(t.url("/"))
        .header(
            "host",
            format!("evil.example:{}", t.server.local_addr.port()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(rebinding.status(), StatusCode::MISDIRECTED_REQUEST);

    let same_origin = t.server.base_url();
    let fine = t
        .client
        .get(t.url("/api/v1/status"))
        .bearer_auth(&token)
        .header("origin", same_origin)
        .send()
        .await
        .unwrap();
    assert_eq!(fine.status(), StatusCode::OK);
    assert!(fine.headers().get("access-control-allow-origin").is_none());
    assert_eq!(fine.headers()["x-frame-options"], "DENY");
}

#[tokio::test]
async fn the_latest_frame_shows_the_rig_and_flags_the_x1_card() {
    let t = TestServer::start("4x3090.json").await;
    let frame = t.get_json("/api/v1/telemetry/latest").await;
    let gpus = frame["sample"]["gpus"]["gpus"].as_array().unwrap();
    assert_eq!(frame["sample"]["gpus"]["driver"]["state"], "ready");
    assert_eq!(gpus.len(), 4);
    assert_eq!(gpus[0]["name"], "NVIDIA GeForce RTX 3090 Ti");
    assert_eq!(gpus[3]["name"], "NVIDIA GeForce RTX 3090");
    assert_eq!(gpus[3]["pcie"]["width_current"], 1);
    assert_eq!(gpus[3]["pcie"]["width_max"], 16);
    assert_eq!(gpus[1]["memory"]["total_bytes"], 24576u64 << 20);
    assert_eq!(gpus[1]["compute_capability"]["major"], 8);
    assert!(gpus[1]["peak_bandwidth_bytes_per_s"].as_u64().unwrap() > 900_000_000_000);
    let narrow: Vec<_> = frame["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "pcie_narrow" && f["severity"] == "warning")
        .collect();
    assert_eq!(narrow.len(), 1);
    assert_eq!(narrow[0]["gpu_index"], 3);
    assert!(
        frame["sample"]["host"]["memory"]["total_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[tokio::test]
async fn history_comes_from_memory_for_15_minutes_and_rejects_unknown_ranges() {
    let t = TestServer::start("2x5060ti.json").await;
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    let history = t.get_json("/api/v1/telemetry/history?range=15m").await;
    assert_eq!(history["source"], "memory");
    assert_eq!(history["gpus"].as_array().unwrap().len(), 2);
    assert!(history["gpus"][0]["t"].as_array().unwrap().len() >= 2);
    assert!(history["host"]["cpu_usage_pct"].as_array().unwrap().len() >= 2);
    let stored = t.get_json("/api/v1/telemetry/history?range=24h").await;
    assert_eq!(stored["source"], "database");

    let bad = t
        .client
        .get(t.url("/api/v1/telemetry/history?range=2w"))
        .bearer_auth(t.server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("15m, 1h or 24h"));
}

#[tokio::test]
async fn settings_are_validated_saved_and_applied() {
    let t = TestServer::start("2x5060ti.json").await;
    let put = |body: serde_json::Value| {
        t.client
            .put(t.url("/api/v1/settings"))
            .bearer_auth(t.server.token())
            .json(&body)
            .send()
    };
    let bad = put(serde_json::json!({"telemetry_period_ms": 5}))
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("between 250 and 60000"));
    let unknown = put(serde_json::json!({"telemetry_speed": 5}))
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);

    let ok =
        put(serde_json::json!({"telemetry_period_ms": 500, "keep_running_in_background": true}))
            .await
            .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let settings: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(settings["telemetry_period_ms"], 500);
    assert!(t.server.keep_running_in_background());
    assert_eq!(
        t.get_json("/api/v1/status").await["telemetry_period_ms"],
        500
    );
    let saved = std::fs::read_to_string(t.dir.path().join("config/settings.toml")).unwrap();
    assert!(saved.contains("telemetry_period_ms = 500"), "{saved}");
}

#[tokio::test]
async fn a_second_server_on_a_busy_port_says_so() {
    let t = TestServer::start("2x5060ti.json").await;
    let dir = tempfile::tempdir().unwrap();
    let busy = format!("127.0.0.1:{}", t.server.local_addr.port());
    let err = rigdeck_server::start(support::options(dir.path(), &busy))
        .await
        .err()
        .expect("port is taken");
    let message = err.to_string();
    assert!(
        message.contains("already in use") && message.contains("--bind"),
        "{message}"
    );
}
