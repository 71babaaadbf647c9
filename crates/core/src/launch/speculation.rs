//! How well a running engine's speculative decoding does: drafted and accepted tokens since it
//! started, read from its Prometheus `/metrics` (llama-server with `--metrics`, vLLM, SGLang), for
//! the instance view.

use serde::Serialize;

use super::instances::{Instances, LaunchError};
use crate::supervisor::Phase;
use rigdeck_bench::engine_metrics::Scraper;

/// The instance view's figures; `reason` says why there are none.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SpeculationView {
    pub name: String,
    /// Whether the engine's counters could be read.
    pub available: bool,
    pub reason: Option<String>,
    pub drafted: u64,
    pub accepted: u64,
    /// Verification rounds, where the engine counts them.
    pub drafts: Option<u64>,
    /// accepted / drafted.
    pub acceptance_rate: Option<f64>,
    /// Tokens gained per verification round, the target's own token included.
    pub mean_accepted_length: Option<f64>,
}

/// Reads the counters of the instance `name` now.
pub async fn read(
    instances: &Instances,
    client: reqwest::Client,
    name: &str,
) -> Result<SpeculationView, LaunchError> {
    let (phase, host, port) = instances
        .phase_and_address(name)
        .ok_or_else(|| LaunchError::NotRunning(name.to_owned()))?;
    let unavailable = |reason: &str| SpeculationView {
        name: name.to_owned(),
        reason: Some(reason.to_owned()),
        ..SpeculationView::default()
    };
    let Some(port) = port.filter(|_| phase == Phase::Ready) else {
        return Ok(unavailable("the engine is not ready"));
    };
    let scraper = Scraper::new(
        client,
        &format!("http://{host}:{port}"),
        instances.engine_api_key(name),
    );
    let Some(counters) = scraper.read().await else {
        return Ok(unavailable(
            "the engine serves no /metrics (llama-server needs --metrics, which a profile with speculative decoding adds)",
        ));
    };
    let mut view = SpeculationView {
        name: name.to_owned(),
        available: true,
        ..SpeculationView::default()
    };
    if let Some(acceptance) = counters.acceptance_so_far() {
        view.drafted = acceptance.drafted;
        view.accepted = acceptance.accepted;
        view.drafts = acceptance.drafts;
        view.acceptance_rate = acceptance.rate();
        view.mean_accepted_length = acceptance.mean_length();
    }
    Ok(view)
}
