//! Test support: a stand-in for the daemon's instances (models in whatever state a test sets)
//! and a gateway over it on an in-memory database with the real schema.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use rigdeck_gateway::{
    Fleet, Gateway, GatewayOptions, Hold, ModelEntry, ModelState, ServePolicy, StartError, Upstream,
};

/// Models in whatever state the test sets; a start never finishes on its own.
#[derive(Default)]
pub struct Stage {
    states: Mutex<HashMap<String, ModelState>>,
    on_demand: bool,
}

impl Stage {
    /// Its model starts on request.
    pub fn on_demand() -> Self {
        Self {
            on_demand: true,
            ..Self::default()
        }
    }

    pub fn set(&self, name: &str, state: ModelState) {
        self.states.lock().unwrap().insert(name.to_owned(), state);
    }
}

pub fn ready_at(base_url: String) -> ModelState {
    ModelState::Ready(Upstream {
        base_url,
        api_key: None,
        served_name: "m".into(),
    })
}

impl Fleet for Stage {
    fn models(&self) -> BoxFuture<'_, Result<Vec<ModelEntry>, String>> {
        Box::pin(async {
            Ok(vec![ModelEntry {
                name: "m".into(),
                policy: ServePolicy {
                    on_demand: self.on_demand,
                    ..ServePolicy::default()
                },
                planned: vec![],
                model_file: "m.gguf".into(),
            }])
        })
    }

    fn state(&self, name: &str) -> ModelState {
        let states = self.states.lock().unwrap();
        states.get(name).cloned().unwrap_or(ModelState::Stopped)
    }

    fn start<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), StartError>> {
        Box::pin(async { Err(StartError::AlreadyRunning) })
    }

    fn hold<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Hold> {
        Box::pin(async { Box::new(()) as Hold })
    }

    fn held(&self, _: &str) -> bool {
        false
    }

    fn gpu_memory(&self, _: &str) -> Vec<(u32, u64)> {
        Vec::new()
    }

    fn stop_if_unheld<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async { Ok(true) })
    }
}

pub async fn gateway_over(stage: Arc<Stage>, options: GatewayOptions) -> Arc<Gateway> {
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .unwrap();
    // The gateway's tables as the daemon's migrations leave them.
    for schema in [
        include_str!("../../../core/migrations/20261125000001_gateway.sql"),
        include_str!("../../../core/migrations/20261205002801_gateway_rig.sql"),
    ] {
        sqlx::raw_sql(schema).execute(&pool).await.unwrap();
    }
    Gateway::new(stage, pool, options).await.unwrap()
}
