//! Will it fit, per quantization, before downloading: each GGUF quantization of a hub
//! repository is planned on a rig (the live one or a preset) from its headers alone, read with
//! Range requests, and the best one for the rig is marked. Headers are cached per file version
//! (the commit is part of the address), so changing the context or the rig reads nothing again.

use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::hub::api::client::redirect_policy;
use crate::hub::api::redact::without_url_queries;
use crate::hub::api::HubClient;
use crate::hub::config::HubConfig;
use crate::hub::quants::{FileGroup, GroupKind};
use crate::hub::repo::{CommitId, RepoId};
use crate::placement::from_gguf::{load_remote_shape_with, LoadedModel};
use crate::placement::report::report;
use crate::placement::verdict::FitVerdict;
use crate::placement::{DeviceSpec, PlacementOptions};

/// Headers kept; past this the cache starts over (a few KB to a few MB each).
const CACHED_HEADERS: usize = 256;

/// One device's share of a quantization's plan.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceFit {
    pub name: String,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    /// What the planner kept back of the capacity (the plan may fill capacity − reserve).
    pub reserve_bytes: u64,
}

/// One quantization on the rig.
#[derive(Clone, Debug, Serialize)]
pub struct QuantFit {
    pub label: String,
    pub total_bytes: u64,
    pub verdict: Option<FitVerdict>,
    /// The verdict in words, or why there is none.
    pub summary: String,
    pub devices: Vec<DeviceFit>,
    /// Decode speed ceiling from memory bandwidth (tokens/s), when the bandwidths are known.
    pub tokens_per_s: Option<f64>,
    pub command_line: Option<String>,
    pub error: Option<String>,
    pub recommended: bool,
}

/// One GGUF quantization's header, read from the hub: what planning it needs.
#[derive(Clone)]
pub struct QuantHeader {
    pub label: String,
    pub total_bytes: u64,
    /// Its first file's path in the repository (the plan's `-m`).
    pub first_file: Option<String>,
    pub model: Result<Arc<LoadedModel>, String>,
}

impl QuantHeader {
    /// No quantization could be read (the hub client could not be made): one row says why.
    fn unreadable(error: String) -> QuantHeader {
        QuantHeader {
            label: String::new(),
            total_bytes: 0,
            first_file: None,
            model: Err(error),
        }
    }

    /// The architecture its header names, when it was read.
    pub fn architecture(&self) -> Option<&str> {
        self.model
            .as_ref()
            .ok()
            .map(|m| m.shape.architecture.as_str())
    }
}

/// Plans each quantization on the devices `devices_of` gives for its architecture (the rig
/// corrected by its records for that architecture) at `context` tokens; marks the recommended
/// one.
pub fn plan_quants(
    headers: &[QuantHeader],
    devices_of: impl Fn(&str) -> Vec<DeviceSpec>,
    context: u32,
) -> Vec<QuantFit> {
    let mut fits: Vec<QuantFit> = headers
        .iter()
        .map(|header| match &header.model {
            Ok(model) => plan_fit(
                header,
                model,
                &devices_of(&model.shape.architecture),
                context,
            ),
            Err(error) => failed_fit(&header.label, header.total_bytes, error.clone()),
        })
        .collect();
    mark_recommended(&mut fits);
    fits
}

/// Parsed headers by resolve address (which holds the commit).
#[derive(Clone, Default)]
pub struct HeaderCache {
    entries: Arc<Mutex<HashMap<String, Arc<LoadedModel>>>>,
}

impl HeaderCache {
    fn get(&self, url: &str) -> Option<Arc<LoadedModel>> {
        self.lock().get(url).cloned()
    }

    fn put(&self, url: String, model: Arc<LoadedModel>) {
        let mut entries = self.lock();
        if entries.len() >= CACHED_HEADERS {
            entries.clear();
        }
        entries.insert(url, model);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LoadedModel>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Plans every GGUF quantization of `groups` on `devices` at `context` tokens, reading the
    /// headers of all of them at once; marks the recommended one.
    pub async fn fit_quants(
        &self,
        config: &HubConfig,
        repo: &RepoId,
        commit: &CommitId,
        groups: &[FileGroup],
        devices: &[DeviceSpec],
        context: u32,
    ) -> Vec<QuantFit> {
        let headers = self.read_quants(config, repo, commit, groups).await;
        plan_quants(&headers, |_| devices.to_vec(), context)
    }

    /// The header of every GGUF quantization of `groups`, read at once (or from the cache), in
    /// the order of `groups`; a quantization whose header cannot be read carries why.
    pub async fn read_quants(
        &self,
        config: &HubConfig,
        repo: &RepoId,
        commit: &CommitId,
        groups: &[FileGroup],
    ) -> Vec<QuantHeader> {
        let client = match HubClient::new(config) {
            Ok(client) => client,
            Err(e) => return vec![QuantHeader::unreadable(e.to_string())],
        };
        let reader = match header_reader(config) {
            Ok(reader) => reader,
            Err(e) => return vec![QuantHeader::unreadable(e)],
        };
        let mut reads = tokio::task::JoinSet::new();
        for (index, group) in groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.kind == GroupKind::Gguf)
        {
            let Some(first) = group.files.first() else {
                continue;
            };
            let url = client.resolve_url(repo, commit, &first.path).to_string();
            let (cache, reader) = (self.clone(), reader.clone());
            reads.spawn(async move { (index, cache.load(&reader, url).await) });
        }
        let mut loaded: Vec<(usize, Result<Arc<LoadedModel>, String>)> = reads.join_all().await;
        loaded.sort_by_key(|(index, _)| *index);
        loaded
            .into_iter()
            .filter_map(|(index, model)| {
                groups.get(index).map(|group| QuantHeader {
                    label: group.label.clone(),
                    total_bytes: group.total_bytes,
                    first_file: group.files.first().map(|f| f.path.as_str().to_owned()),
                    model,
                })
            })
            .collect()
    }

    async fn load(
        &self,
        reader: &rigdeck_gguf::remote::HttpReader,
        url: String,
    ) -> Result<Arc<LoadedModel>, String> {
        if let Some(model) = self.get(&url) {
            return Ok(model);
        }
        // The reader's errors may name the CDN's signed address: its query goes.
        let (model, _) = load_remote_shape_with(reader, &url)
            .await
            .map_err(|e| without_url_queries(&e.to_string()))?;
        let model = Arc::new(model);
        self.put(url, model.clone());
        Ok(model)
    }
}

/// A header reader that sends the token and follows redirects by the rule of every hub request
/// (`redirect_policy`: no downgrade to http, no loop; reqwest drops the token on a redirect to
/// another host or port, such as the hub's CDN).
fn header_reader(config: &HubConfig) -> Result<rigdeck_gguf::remote::HttpReader, String> {
    use rigdeck_gguf::remote::{HttpReader, Limits};
    let limits = Limits::default();
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(value) = config
        .token
        .as_ref()
        .and_then(|t| reqwest::header::HeaderValue::from_str(&t.bearer()).ok())
    {
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(limits.connect)
        .read_timeout(limits.idle)
        .redirect(redirect_policy())
        .default_headers(headers)
        .build()
        .map_err(|e| {
            format!(
                "the HTTP client for {} could not be built: {e}",
                config.endpoint
            )
        })?;
    Ok(HttpReader::with_client(client, limits))
}

fn failed_fit(label: &str, total_bytes: u64, error: String) -> QuantFit {
    QuantFit {
        label: label.to_owned(),
        total_bytes,
        verdict: None,
        summary: "unknown: its header could not be read".into(),
        devices: Vec::new(),
        tokens_per_s: None,
        command_line: None,
        error: Some(error),
        recommended: false,
    }
}

fn plan_fit(
    header: &QuantHeader,
    model: &LoadedModel,
    devices: &[DeviceSpec],
    context: u32,
) -> QuantFit {
    let options = PlacementOptions {
        context,
        ..PlacementOptions::default()
    };
    let label = header.first_file.as_deref().unwrap_or("model.gguf");
    match report(&model.shape, label, devices, &options, true) {
        Ok(report) => {
            let verdict = FitVerdict::of(&report.plan);
            QuantFit {
                label: header.label.clone(),
                total_bytes: header.total_bytes,
                summary: verdict.summary(),
                verdict: Some(verdict),
                devices: report
                    .plan
                    .devices
                    .iter()
                    .map(|d| DeviceFit {
                        name: d.spec.name.clone(),
                        used_bytes: d.usage.total_bytes(),
                        capacity_bytes: d.spec.capacity_bytes,
                        reserve_bytes: d.spec.reserve_bytes,
                    })
                    .collect(),
                tokens_per_s: report.ceiling.tokens_per_s,
                command_line: report.command_line.ok(),
                error: None,
                recommended: false,
            }
        }
        Err(e) => failed_fit(&header.label, header.total_bytes, e.to_string()),
    }
}

/// The best placement class any quantization reaches, and within it the largest file (the
/// least quantization loss): what fits best without giving up more quality than needed.
fn mark_recommended(fits: &mut [QuantFit]) {
    let best = fits
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            f.verdict
                .as_ref()
                .filter(|v| v.fits())
                .map(|v| (i, v.rank(), f.total_bytes))
        })
        .min_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
        .map(|(i, _, _)| i);
    if let Some(fit) = best.and_then(|i| fits.get_mut(i)) {
        fit.recommended = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downloads::raw_http::{answer, RawServer, Reply};
    use crate::hub::quants;
    use crate::hub::repo::{RepoFile, RepoPath};

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    /// The fit of the one GGUF quantization of `o/n` on a hub at `hub`.
    async fn fit_error(hub: &str) -> String {
        let config = HubConfig {
            endpoint: crate::hub::config::parse_endpoint(Some(hub)).expect("endpoint"),
            cache_dir: std::env::temp_dir(),
            token: None,
        };
        let file = RepoFile {
            path: RepoPath::parse("m-Q4_K_M.gguf").expect("path"),
            size_bytes: 1 << 20,
            git_oid: "1".repeat(40),
            lfs_sha256: Some("a".repeat(64)),
        };
        let groups = quants::group(&[file]);
        let repo = RepoId::parse("o/n").expect("repo");
        let commit = CommitId::parse(COMMIT).expect("commit");
        let headers = HeaderCache::default()
            .read_quants(&config, &repo, &commit, &groups)
            .await;
        let fits = plan_quants(&headers, |_| Vec::new(), 4096);
        fits.first()
            .and_then(|f| f.error.clone())
            .expect("the header read fails")
    }

    fn redirect(to: &str) -> Reply {
        Reply::Bytes(answer("302 Found", &[("location", to.to_owned())], b""))
    }

    #[tokio::test]
    async fn the_fit_path_refuses_a_redirect_loop_at_its_first_repeat_as_the_downloader_does() {
        let server = RawServer::start(|line| {
            if line.contains("/loop/a") {
                redirect("/loop/b")
            } else {
                redirect("/loop/a")
            }
        })
        .await;
        let error = fit_error(&server.url).await;
        assert!(error.contains("loop"), "{error}");
        assert_eq!(
            server.requests().len(),
            3,
            "the resolve, /loop/a, /loop/b; /loop/a again is refused"
        );
    }

    #[tokio::test]
    async fn a_fit_error_shows_no_signed_query() {
        // The resolve sends the reader to a signed CDN address that redirects to itself.
        let signed = "/blob?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIA";
        let server = RawServer::start(move |_| redirect(signed)).await;
        let error = fit_error(&server.url).await;
        assert!(error.contains("/blob"), "{error}");
        assert!(
            !error.contains("s3cr3t") && !error.contains("X-Amz"),
            "{error}"
        );
    }

    fn fit(label: &str, bytes: u64, verdict: Option<FitVerdict>) -> QuantFit {
        QuantFit {
            label: label.into(),
            total_bytes: bytes,
            summary: String::new(),
            verdict,
            devices: Vec::new(),
            tokens_per_s: None,
            command_line: None,
            error: None,
            recommended: false,
        }
    }

    #[test]
    fn the_largest_quant_of_the_best_placement_class_is_recommended() {
        let mut fits = vec![
            fit("Q2_K", 10, Some(FitVerdict::OnGpus { gpus: 2 })),
            fit("Q4_K_M", 20, Some(FitVerdict::OnGpus { gpus: 2 })),
            fit("Q8_0", 40, Some(FitVerdict::ExpertsInRam { layers: 3 })),
            fit("BF16", 80, Some(FitVerdict::DoesNotFit { short_bytes: 1 })),
            fit("broken", 5, None),
        ];
        mark_recommended(&mut fits);
        let chosen: Vec<&str> = fits
            .iter()
            .filter(|f| f.recommended)
            .map(|f| f.label.as_str())
            .collect();
        assert_eq!(chosen, ["Q4_K_M"]);
        let mut none_fits = vec![fit(
            "BF16",
            80,
            Some(FitVerdict::DoesNotFit { short_bytes: 1 }),
        )];
        mark_recommended(&mut none_fits);
        assert!(!none_fits[0].recommended);
    }
}
