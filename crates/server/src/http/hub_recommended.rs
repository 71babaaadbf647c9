//! `GET /hub/recommended`: the starter catalog's candidates planned on the live rig from their
//! remote headers (the model page's verdict, `hub::fits_on_rig`), a few at a time under one
//! deadline, and ranked by `core::hub_recommend`. A hub that cannot be reached is said in one
//! line (`offline`); a candidate that cannot be read is left out with its reason.
//!
//! The catalog is `assets/hub/starter-catalog.json`, built in; `RIGDECK_STARTER_CATALOG` names
//! another file to read instead.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::StreamExt;
use rigdeck_core::hub::api::{HubClient, HubError};
use rigdeck_core::hub::config::HubConfig;
use rigdeck_core::hub::repo::{RepoId, Revision};
use rigdeck_core::hub_fit::QuantFit;
use rigdeck_core::hub_recommend::{
    rank, recommend, unplanned_reason, Candidate, Catalog, LeftOut, Recommendation,
};
use rigdeck_core::placement::rig::Margins;
use serde::Deserialize;

use super::error::ApiError;
use super::hub::{fits_on_rig, groups_at, hub_client, respond};
use super::placement::devices_for;
use super::AppState;

/// The environment variable naming a catalog file to read instead of the built-in one.
pub const CATALOG_ENV: &str = "RIGDECK_STARTER_CATALOG";
/// Repositories read at once.
const CONCURRENT_READS: usize = 4;
/// The whole answer's deadline: a candidate not planned by then is left out, saying so.
const DEADLINE: Duration = Duration::from_secs(25);

/// The catalog's text: the file `RIGDECK_STARTER_CATALOG` names, else the built-in one.
pub(super) fn catalog_text() -> Result<(String, String), ApiError> {
    const BUILT_IN: &str = include_str!("../../../../assets/hub/starter-catalog.json");
    match std::env::var_os(CATALOG_ENV) {
        Some(path) if !path.is_empty() => {
            let shown = std::path::Path::new(&path).display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|e| {
                catalog_error(format!(
                    "the model catalog {shown} ({CATALOG_ENV}) cannot be read: {e}; fix the path or unset {CATALOG_ENV}"
                ))
            })?;
            Ok((text, shown))
        }
        _ => Ok((BUILT_IN.to_owned(), "starter-catalog.json".to_owned())),
    }
}

fn catalog_error(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "catalog", message)
}

#[derive(Debug, Deserialize)]
pub struct RecommendedParams {
    /// Context length to plan for (tokens).
    context: Option<u32>,
}

/// How reading one candidate ended.
enum Outcome {
    Planned(Vec<QuantFit>),
    Failed { reason: String, unreachable: bool },
}

pub async fn recommended(
    State(state): State<Arc<AppState>>,
    Query(params): Query<RecommendedParams>,
) -> Response {
    respond(
        async {
            let context = params.context.unwrap_or(32_768);
            if context == 0 || context > 1 << 24 {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("context {context} is out of range: choose 1 to 16777216 tokens"),
                ));
            }
            let (text, source) = catalog_text()?;
            let catalog = Catalog::parse(&text, &source).map_err(catalog_error)?;
            // A rig with no reading yet answers at once, before the hub is asked.
            devices_for(&state, "live", &Margins::default())?;
            let (client, config) = hub_client(&state)?;
            let outcomes = read_all(&state, &client, &config, &catalog.models, context).await;
            Ok(answer(&catalog, &config, context, outcomes))
        }
        .await,
    )
}

/// Each candidate's outcome, read `CONCURRENT_READS` at a time until `DEADLINE`; stops early
/// when the hub cannot be reached and nothing was read. A candidate not reached has no entry.
async fn read_all(
    state: &AppState,
    client: &HubClient,
    config: &HubConfig,
    candidates: &[Candidate],
    context: u32,
) -> Vec<(String, Outcome)> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let repos: Vec<String> = candidates.iter().map(|c| c.repo.clone()).collect();
    let mut reads = futures_util::stream::iter(repos)
        .map(|repo| async move {
            let outcome = plan_candidate(state, client, config, &repo, context).await;
            (repo, outcome)
        })
        .buffer_unordered(CONCURRENT_READS);
    let mut outcomes = Vec::new();
    while let Ok(Some((repo, outcome))) = tokio::time::timeout_at(deadline, reads.next()).await {
        let unreachable = matches!(
            outcome,
            Outcome::Failed {
                unreachable: true,
                ..
            }
        );
        let planned_any = outcomes
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Planned(_)));
        outcomes.push((repo, outcome));
        if unreachable && !planned_any {
            break;
        }
    }
    outcomes
}

async fn plan_candidate(
    state: &AppState,
    client: &HubClient,
    config: &HubConfig,
    repo: &str,
    context: u32,
) -> Outcome {
    let failed = |reason: String| Outcome::Failed {
        reason,
        unreachable: false,
    };
    let repo = match RepoId::parse(repo) {
        Ok(repo) => repo,
        Err(e) => return failed(e.to_string()),
    };
    let info = match client.model_info(&repo, &Revision::main()).await {
        Ok(info) => info,
        Err(e) => {
            return Outcome::Failed {
                unreachable: unreachable(&e),
                reason: e.to_string(),
            }
        }
    };
    let groups = match groups_at(client, &repo, &info).await {
        Ok((groups, _)) => groups,
        Err(e) => return failed(e.message),
    };
    match fits_on_rig(
        state,
        config,
        (&repo, &info.commit),
        &groups,
        "live",
        context,
    )
    .await
    {
        Ok(fits) => Outcome::Planned(fits),
        Err(e) => failed(e.message),
    }
}

/// The hub itself did not answer (as opposed to answering that something is wrong).
fn unreachable(error: &HubError) -> bool {
    matches!(
        error,
        HubError::Network { .. }
            | HubError::Timeout { .. }
            | HubError::NoResponse { .. }
            | HubError::BodyStalled { .. }
    )
}

fn answer(
    catalog: &Catalog,
    config: &HubConfig,
    context: u32,
    outcomes: Vec<(String, Outcome)>,
) -> serde_json::Value {
    let planned_any = outcomes
        .iter()
        .any(|(_, o)| matches!(o, Outcome::Planned(_)));
    let offline = outcomes.iter().find_map(|(_, o)| match o {
        Outcome::Failed {
            reason,
            unreachable: true,
        } if !planned_any => Some(reason.clone()),
        _ => None,
    });
    if let Some(reason) = offline {
        return serde_json::json!({
            "context": context,
            "offline": true,
            "message": format!(
                "The model hub at {} cannot be reached, so nothing can be recommended now: run a model you already have. ({reason})",
                config.endpoint.as_str().trim_end_matches('/')
            ),
            "about": catalog.about,
            "models": [],
            "left_out": [],
        });
    }
    let (models, left_out) = recommendations(&catalog.models, outcomes);
    serde_json::json!({
        "context": context,
        "offline": false,
        "message": null,
        "about": catalog.about,
        "models": models,
        "left_out": left_out,
    })
}

/// The ranked recommendations, and the candidates left out (in the catalog's order) with why.
fn recommendations(
    candidates: &[Candidate],
    mut outcomes: Vec<(String, Outcome)>,
) -> (Vec<Recommendation>, Vec<LeftOut>) {
    let mut models = Vec::new();
    let mut left_out = Vec::new();
    for candidate in candidates {
        let at = outcomes
            .iter()
            .position(|(repo, _)| *repo == candidate.repo);
        let reason = match at.map(|i| outcomes.swap_remove(i).1) {
            Some(Outcome::Planned(fits)) => match recommend(candidate, &fits) {
                Some(model) => {
                    models.push(model);
                    continue;
                }
                None => unplanned_reason(&fits),
            },
            Some(Outcome::Failed { reason, .. }) => reason,
            None => format!(
                "not read within {} s (the hub was slow): reload to try again",
                DEADLINE.as_secs()
            ),
        };
        left_out.push(LeftOut {
            repo: candidate.repo.clone(),
            reason,
        });
    }
    rank(&mut models);
    (models, left_out)
}
