//! The daemon and its database: history written as 10 s averages, a database from a newer
//! Rigdeck refused without stopping live telemetry, gateway usage pruned by age at start.

mod support;

use reqwest::StatusCode;
use support::TestServer;

#[tokio::test]
async fn a_database_from_a_newer_version_turns_history_off_but_not_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data/rigdeck.db");
    rigdeck_core::store::Store::open(&db)
        .await
        .unwrap()
        .close()
        .await;
    mark_as_written_by_a_newer_version(&db).await;
    let rig = support::scratch_rig(dir.path(), "2xgh200.json");
    let t = TestServer::start_with_rig(dir, rig).await;
    let frame = t.get_json("/api/v1/telemetry/latest").await;
    assert_eq!(frame["sample"]["gpus"]["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(frame["sample"]["gpus"]["gpus"][1]["numa_node"], 1);
    let status = t.get_json("/api/v1/status").await;
    assert_eq!(status["history_available"], false);
    let day = t
        .client
        .get(t.url("/api/v1/telemetry/history?range=24h"))
        .bearer_auth(t.server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(day.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = day.json().await.unwrap();
    assert_eq!(body["code"], "history_unavailable");
}

/// Records a migration this build does not know, as a newer Rigdeck would have.
async fn mark_as_written_by_a_newer_version(db: &std::path::Path) {
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101000000, 'from the future', 1, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
}

#[tokio::test]
async fn shutdown_flushes_the_bucket_in_progress_into_the_database() {
    let t = TestServer::start("2x5060ti.json").await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let db = t.dir.path().join("data/rigdeck.db");
    let TestServer { server, dir, .. } = t;
    server.shutdown().await;
    let store = rigdeck_core::store::Store::open(&db).await.unwrap();
    let history = store
        .history(
            rigdeck_core::telemetry::history::HistoryRange::OneHour,
            0,
            10_000,
        )
        .await
        .unwrap();
    assert_eq!(history.gpus.len(), 2);
    assert!(!history.gpus[0].t.is_empty());
    assert!(!history.host.t.is_empty());
    drop(dir);
}

#[tokio::test]
async fn gateway_usage_older_than_the_retention_is_deleted_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data/rigdeck.db");
    let store = rigdeck_core::store::Store::open(&db).await.unwrap();
    let day_ms = 86_400_000_i64;
    let now = rigdeck_core::now_ms();
    // The default keeps 90 days: one request from 100 days ago, one from yesterday.
    for at_ms in [now - 100 * day_ms, now - day_ms] {
        sqlx::query(
            "INSERT INTO gateway_requests (at_ms, model, key_id, key_name, route, stream, status, \
             http_status, prompt_tokens, completion_tokens, cached_tokens, ttft_ms, decode_tps, \
             duration_ms, error) VALUES (?, 'm', NULL, 'app', 'chat', 0, 'ok', 200, 1, 1, NULL, \
             NULL, NULL, 1.0, NULL)",
        )
        .bind(at_ms)
        .execute(store.pool())
        .await
        .unwrap();
    }
    store.close().await;
    let rig = support::scratch_rig(dir.path(), "2x5060ti.json");
    let t = TestServer::start_with_rig(dir, rig).await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let mut kept: Vec<i64> = Vec::new();
    for _ in 0..50 {
        kept = sqlx::query_scalar("SELECT at_ms FROM gateway_requests")
            .fetch_all(&pool)
            .await
            .unwrap();
        if kept.len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(kept, vec![now - day_ms], "only yesterday's request is kept");
    drop(t);
}
