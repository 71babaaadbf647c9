//! The hub's model endpoints: search, a model's summary at a revision, its file tree (with
//! sizes and LFS hashes, every entry validated), and its card.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use url::Url;

use super::client::{parse_json, same_origin, HubClient, MAX_ANSWER_BYTES};
use super::error::HubError;
use super::redact::shown_url;
use crate::repo::{is_hex_digest, CommitId, RepoFile, RepoId, RepoPath, Revision};

/// Files in one listing we accept (the largest public repositories hold a few thousand).
const MAX_LISTED_FILES: usize = 100_000;
/// Pages of a tree listing followed (the hub pages by 1000 entries).
const MAX_TREE_PAGES: usize = 200;
/// Bytes of a tree listing, all its pages together (each page is also bounded by
/// `MAX_ANSWER_BYTES`); the largest public repositories list a few MB.
const MAX_LISTING_BYTES: u64 = 64 << 20;
/// Refusals quoted in the error for a repository whose every file was refused.
const QUOTED_REFUSALS: usize = 3;
/// A model card read for display.
const MAX_CARD_BYTES: u64 = 2 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    #[default]
    Downloads,
    Likes,
    Updated,
}

impl SortBy {
    fn api_name(self) -> &'static str {
        match self {
            SortBy::Downloads => "downloads",
            SortBy::Likes => "likes",
            SortBy::Updated => "lastModified",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightFormat {
    Gguf,
    Safetensors,
}

/// What the user searches for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SearchQuery {
    pub text: String,
    pub format: Option<WeightFormat>,
    #[serde(default)]
    pub sort: SortBy,
    pub limit: Option<u32>,
}

/// One search hit.
#[derive(Clone, Debug, Serialize)]
pub struct ModelSummary {
    pub id: RepoId,
    pub downloads: u64,
    pub likes: u64,
    pub last_modified: Option<String>,
    pub pipeline_tag: Option<String>,
    pub tags: Vec<String>,
    /// Terms must be accepted on the hub before the files can be read.
    pub gated: bool,
}

/// The hub's JSON for a model, as far as we read it; every field optional so a mirror that
/// omits one still works.
#[derive(Deserialize)]
struct RawModel {
    // The hub sends both `id` and the older `modelId`; mirrors may send either.
    id: Option<String>,
    #[serde(rename = "modelId")]
    model_id: Option<String>,
    sha: Option<String>,
    #[serde(default)]
    downloads: u64,
    #[serde(default)]
    likes: u64,
    #[serde(rename = "lastModified")]
    last_modified: Option<String>,
    pipeline_tag: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    gated: serde_json::Value,
    #[serde(default)]
    private: bool,
    gguf: Option<RawGgufInfo>,
}

#[derive(Deserialize, Clone, Debug, Serialize)]
pub struct RawGgufInfo {
    pub total: Option<u64>,
    pub architecture: Option<String>,
    pub context_length: Option<u64>,
}

/// A model at one commit: what its page shows above the files.
#[derive(Clone, Debug, Serialize)]
pub struct ModelInfo {
    pub summary: ModelSummary,
    pub commit: CommitId,
    pub private: bool,
    /// The hub's own reading of the GGUF (parameter count, architecture, trained context).
    pub gguf: Option<RawGgufInfo>,
    pub page_url: String,
}

/// A file tree, with the entries refused and why.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Listing {
    pub files: Vec<RepoFile>,
    /// Entries left out (unsafe paths, collisions, bad hashes), one message each.
    pub refused: Vec<String>,
}

fn summary_of(raw: &RawModel) -> Result<ModelSummary, String> {
    let text = raw
        .id
        .as_deref()
        .or(raw.model_id.as_deref())
        .unwrap_or_default();
    let id = RepoId::parse(text).map_err(|e| e.to_string())?;
    Ok(ModelSummary {
        id,
        downloads: raw.downloads,
        likes: raw.likes,
        last_modified: raw.last_modified.clone(),
        pipeline_tag: raw.pipeline_tag.clone(),
        tags: raw.tags.iter().take(64).cloned().collect(),
        gated: !matches!(
            raw.gated,
            serde_json::Value::Bool(false) | serde_json::Value::Null
        ),
    })
}

impl HubClient {
    /// Searches models; hits whose id is not a valid repository id are left out.
    pub async fn search(&self, query: &SearchQuery) -> Result<Vec<ModelSummary>, HubError> {
        let mut url = self.url(["api", "models"]);
        {
            let mut pairs = url.query_pairs_mut();
            if !query.text.trim().is_empty() {
                pairs.append_pair("search", query.text.trim());
            }
            if let Some(format) = query.format {
                pairs.append_pair(
                    "filter",
                    match format {
                        WeightFormat::Gguf => "gguf",
                        WeightFormat::Safetensors => "safetensors",
                    },
                );
            }
            pairs.append_pair("sort", query.sort.api_name());
            pairs.append_pair("direction", "-1");
            let limit = query.limit.unwrap_or(30).clamp(1, 100);
            pairs.append_pair("limit", &limit.to_string());
        }
        let (raw, _) = self.get_json::<Vec<RawModel>>(&url).await?;
        Ok(raw.iter().filter_map(|m| summary_of(m).ok()).collect())
    }

    /// A model at a revision, with the commit the revision points to now.
    pub async fn model_info(
        &self,
        repo: &RepoId,
        revision: &Revision,
    ) -> Result<ModelInfo, HubError> {
        let mut segments = vec!["api", "models"];
        segments.extend(repo.as_str().split('/'));
        segments.extend(["revision", revision.as_str()]);
        let url = self.url(segments);
        let (raw, _) = self.get_json::<RawModel>(&url).await?;
        let parse_error = |detail: String| HubError::Parse {
            url: shown_url(&url),
            detail,
        };
        let summary = summary_of(&raw).map_err(parse_error)?;
        if summary.id != *repo {
            return Err(parse_error(format!(
                "it describes '{}', not '{repo}'",
                summary.id
            )));
        }
        let sha = raw.sha.as_deref().unwrap_or_default();
        let commit = CommitId::parse(sha).map_err(|e| parse_error(e.to_string()))?;
        Ok(ModelInfo {
            summary,
            commit,
            private: raw.private,
            gguf: raw.gguf,
            page_url: self.page_url(repo).to_string(),
        })
    }

    /// Every file of the repository at `commit`, paged as the hub pages it, bounded in
    /// entries and bytes across all pages. A listing whose every file is refused is an error
    /// that says why.
    pub async fn list_files(&self, repo: &RepoId, commit: &CommitId) -> Result<Listing, HubError> {
        let mut segments = vec!["api", "models"];
        segments.extend(repo.as_str().split('/'));
        segments.extend(["tree", commit.as_str()]);
        let mut url = self.url(segments);
        url.query_pairs_mut().append_pair("recursive", "true");
        let too_large = |url: &Url| HubError::ListingTooLarge {
            url: shown_url(url),
            bytes: MAX_LISTING_BYTES,
            entries: MAX_LISTED_FILES,
        };
        let mut entries = Vec::new();
        let mut bytes_left = MAX_LISTING_BYTES;
        for _ in 0..MAX_TREE_PAGES {
            let limit = MAX_ANSWER_BYTES.min(bytes_left);
            let (body, headers) = match self.get_bytes(&url, limit).await {
                Err(HubError::TooLarge { .. }) if limit < MAX_ANSWER_BYTES => {
                    return Err(too_large(&url))
                }
                other => other?,
            };
            bytes_left -= body.len() as u64;
            entries.extend(parse_json::<Vec<RawEntry>>(&body, &url)?);
            if entries.len() > MAX_LISTED_FILES {
                return Err(too_large(&url));
            }
            match next_page(&headers, &url) {
                Some(next) if same_origin(&next, self.endpoint()) => url = next,
                _ => break,
            }
        }
        let listed = entries.iter().filter(|e| e.kind == "file").count();
        let listing = validate_entries(entries);
        if listing.files.is_empty() && !listing.refused.is_empty() {
            return Err(every_file_refused(repo, listed, &listing.refused));
        }
        Ok(listing)
    }

    /// The model card (README.md) at `commit`; an empty text when the repository has none.
    pub async fn model_card(&self, repo: &RepoId, commit: &CommitId) -> Result<String, HubError> {
        let readme = RepoPath::parse("README.md").map_err(|e| HubError::Parse {
            url: repo.to_string(),
            detail: e.to_string(),
        })?;
        match self
            .get_text(&self.resolve_url(repo, commit, &readme), MAX_CARD_BYTES)
            .await
        {
            Err(HubError::NotFound { .. }) => Ok(String::new()),
            other => other,
        }
    }
}

/// The error for a listing with nothing usable, quoting the first refusals.
fn every_file_refused(repo: &RepoId, listed: usize, refused: &[String]) -> HubError {
    let mut reasons = refused
        .iter()
        .take(QUOTED_REFUSALS)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if refused.len() > QUOTED_REFUSALS {
        reasons.push_str(&format!(" (and {} more)", refused.len() - QUOTED_REFUSALS));
    }
    HubError::EveryFileRefused {
        repo: repo.to_string(),
        count: listed,
        reasons,
    }
}

/// The `Link: <…>; rel="next"` header's address.
fn next_page(headers: &reqwest::header::HeaderMap, base: &Url) -> Option<Url> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        if !params.contains("rel=\"next\"") {
            return None;
        }
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        base.join(target).ok()
    })
}

/// One entry of the hub's tree listing.
#[derive(Deserialize)]
struct RawEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    oid: String,
    lfs: Option<RawLfs>,
}

#[derive(Deserialize)]
struct RawLfs {
    oid: String,
    size: u64,
}

/// Keeps the entries that are safe and consistent; every other one is named with its reason.
/// A path listed twice, or both as a file and as a folder of other files, is refused on all
/// its entries: which one the user would get is not knowable.
fn validate_entries(entries: Vec<RawEntry>) -> Listing {
    let mut listing = Listing::default();
    let mut by_path: BTreeMap<RepoPath, Vec<RepoFile>> = BTreeMap::new();
    for entry in entries.into_iter().filter(|e| e.kind == "file") {
        match validate_entry(entry) {
            Ok(file) => by_path.entry(file.path.clone()).or_default().push(file),
            Err(message) => listing.refused.push(message),
        }
    }
    let folders: BTreeSet<String> = by_path
        .keys()
        .flat_map(|p| folder_prefixes(p.as_str()))
        .map(str::to_owned)
        .collect();
    let mut kept = Vec::new();
    for (path, mut files) in by_path {
        if files.len() > 1 {
            listing.refused.push(format!(
                "the hub listed '{path}' {} times; left out",
                files.len()
            ));
        } else if folders.contains(path.as_str()) {
            listing.refused.push(format!(
                "the hub listed '{path}' both as a file and as a folder; left out"
            ));
        } else if let Some(file) = files.pop() {
            kept.push(file);
        }
    }
    listing.files = kept;
    listing
}

/// "a/b/c" → ["a", "a/b"].
fn folder_prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

fn validate_entry(entry: RawEntry) -> Result<RepoFile, String> {
    let path = RepoPath::parse(&entry.path).map_err(|e| e.to_string())?;
    if !is_hex_digest(&entry.oid, 40) {
        return Err(format!(
            "the hub listed '{path}' without a valid git id; left out"
        ));
    }
    let lfs_sha256 = match entry.lfs {
        None => None,
        Some(lfs) if !is_hex_digest(&lfs.oid, 64) => {
            return Err(format!(
                "the hub listed '{path}' with an LFS hash that is not a SHA-256; left out"
            ))
        }
        Some(lfs) if lfs.size != entry.size => {
            return Err(format!(
                "the hub listed '{path}' as {} bytes and its LFS object as {}; left out",
                entry.size, lfs.size
            ))
        }
        Some(lfs) => Some(lfs.oid),
    };
    Ok(RepoFile {
        path,
        size_bytes: entry.size,
        git_oid: entry.oid,
        lfs_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, size: u64, lfs: Option<&str>) -> RawEntry {
        RawEntry {
            kind: "file".into(),
            path: path.into(),
            size,
            oid: "1".repeat(40),
            lfs: lfs.map(|oid| RawLfs {
                oid: oid.into(),
                size,
            }),
        }
    }

    #[test]
    fn hostile_listings_keep_only_safe_distinct_files() {
        let sha = "a".repeat(64);
        let listing = validate_entries(vec![
            entry("good.gguf", 10, Some(&sha)),
            entry("../escape.gguf", 10, Some(&sha)),
            entry("/etc/passwd", 1, None),
            entry("twice.json", 1, None),
            entry("twice.json", 2, None),
            entry("dir", 1, None),
            entry("dir/inner.gguf", 1, None),
            entry("bad-hash.gguf", 1, Some("xyz")),
            RawEntry {
                kind: "directory".into(),
                path: "sub".into(),
                size: 0,
                oid: String::new(),
                lfs: None,
            },
        ]);
        let kept: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(kept, ["dir/inner.gguf", "good.gguf"]);
        assert_eq!(listing.refused.len(), 5, "{:#?}", listing.refused);
        assert!(listing.refused.iter().any(|m| m.contains("2 times")));
        assert!(listing
            .refused
            .iter()
            .any(|m| m.contains("both as a file and as a folder")));
    }

    #[test]
    fn a_size_that_disagrees_with_the_lfs_object_is_refused() {
        let mut raw = entry("x.gguf", 10, Some(&"b".repeat(64)));
        if let Some(lfs) = raw.lfs.as_mut() {
            lfs.size = 11;
        }
        let error = validate_entry(raw).expect_err("size mismatch");
        assert!(
            error.contains("10 bytes") && error.contains("11"),
            "{error}"
        );
    }

    #[test]
    fn the_next_page_comes_from_the_link_header() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "link",
            "<https://h/api/models/o/n/tree/x?cursor=abc>; rel=\"next\""
                .parse()
                .expect("header"),
        );
        let base = Url::parse("https://h/api/models/o/n/tree/x").expect("url");
        assert_eq!(
            next_page(&headers, &base).map(|u| u.to_string()),
            Some("https://h/api/models/o/n/tree/x?cursor=abc".into())
        );
        assert_eq!(next_page(&reqwest::header::HeaderMap::new(), &base), None);
    }
}
