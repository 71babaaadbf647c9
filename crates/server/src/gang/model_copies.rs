//! A gang's model on the boxes that lack it: every member reads it from the same path, so a
//! follower's rig without it is offered the head's own download (the same repository, commit
//! and files, from the head's download records) before the start, with where it would land
//! there; a model that did not come from the hub gets the advice to copy it.
//!
//! On the head: [`survey`] (which followers lack the model, and where a download lands on
//! each) and [`fetch`] (start those downloads through the fleet channel). On a follower's rig:
//! [`copy_here`] (`POST /api/v1/gang/model-copies`), where a download lands and, unless it is a
//! dry run, queued.

use std::path::{Path, PathBuf};

use axum::http::Method;
use rigdeck_core::downloads::{DownloadRequest, DownloadView, Downloads};
use rigdeck_core::hub::cache::Destination;
use rigdeck_core::hub::repo::RepoFile;
use serde::{Deserialize, Serialize};

use super::member::{call_peer, Crew, PEER_CALL_TIMEOUT};

/// Where the head's model came from: the download that holds it, and the model's path under
/// that download's folder (empty when the model is the folder itself).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelOrigin {
    pub request: DownloadRequest,
    pub within: PathBuf,
}

/// What the head asks a follower's rig: where `origin` lands there and, unless `dry_run`, to
/// queue its download.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CopyRequest {
    pub origin: ModelOrigin,
    #[serde(default)]
    pub dry_run: bool,
}

/// A rig's answer: where the model lands there, and the queued download.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CopyAnswer {
    pub lands_at: PathBuf,
    pub download: Option<serde_json::Value>,
}

/// One follower's rig that lacks the model, as the head sees it.
#[derive(Debug, Clone, Serialize)]
pub struct MissingOn {
    pub rig: String,
    /// Where a download lands there (none when the model did not come from the hub, or the
    /// rig could not say).
    pub lands_at: Option<PathBuf>,
    /// Whether that is the profile's model path.
    pub same_path: bool,
    /// The rig's download, once started.
    pub download_id: Option<i64>,
    /// What to do, or why the rig could not be asked.
    pub note: String,
}

/// Which rigs lack a gang's model and what can be done about it.
#[derive(Debug, Clone, Serialize)]
pub struct Survey {
    pub model: PathBuf,
    /// The head's download of it (repository, commit, files); none when it did not come from
    /// the hub.
    pub origin: Option<ModelOrigin>,
    pub missing: Vec<MissingOn>,
}

/// The finished download on this rig that holds `model` (the model file itself, or a folder a
/// downloaded file lies in), with the model's path under the download's folder.
pub fn origin_of(downloads: &Downloads, model: &Path) -> Option<ModelOrigin> {
    downloads
        .finished()
        .into_iter()
        .find_map(|(request, paths)| {
            let root = request
                .files
                .iter()
                .zip(&paths)
                .filter(|(_, visible)| visible.starts_with(model))
                .find_map(|(file, visible)| download_root(visible, file))?;
            let within = model.strip_prefix(&root).ok()?.to_path_buf();
            Some(ModelOrigin { request, within })
        })
}

/// The folder a download put `file` under: `visible` without the file's repository path.
fn download_root(visible: &Path, file: &RepoFile) -> Option<PathBuf> {
    let mut root = visible.to_path_buf();
    for _ in Path::new(file.path.as_str()).components() {
        if !root.pop() {
            return None;
        }
    }
    Some(root)
}

/// Where `origin`'s download lands under `destination`: the same place under its folder.
pub fn landing(destination: &Destination, origin: &ModelOrigin) -> Option<PathBuf> {
    let request = &origin.request;
    let file = request.files.first()?;
    let visible = destination
        .paths(&request.repo, &request.commit, file)
        .visible;
    let root = download_root(&visible, file)?;
    Some(match origin.within.as_os_str().is_empty() {
        true => root,
        false => root.join(&origin.within),
    })
}

/// On a follower's rig: where the model lands here and, unless a dry run, its download queued.
pub async fn copy_here(downloads: &Downloads, asked: CopyRequest) -> Result<CopyAnswer, String> {
    let destination = downloads
        .destination()
        .map_err(|e| format!("this rig cannot download from the hub: {e}"))?;
    let lands_at = landing(&destination, &asked.origin)
        .ok_or("the head's download lists no files: nothing to download")?;
    let download = match asked.dry_run {
        true => None,
        false => {
            let view: DownloadView = downloads
                .enqueue(asked.origin.request)
                .await
                .map_err(|e| e.to_string())?;
            Some(serde_json::json!(view))
        }
    };
    Ok(CopyAnswer { lands_at, download })
}

/// For each rig in `rigs` (which lack `model`): where the head's download would land there, or
/// the advice to copy it when it did not come from the hub. With `start`, the downloads are
/// queued on those rigs.
pub async fn survey(
    crew: &Crew,
    downloads: Option<&Downloads>,
    model: &Path,
    rigs: &[String],
    start: bool,
) -> Survey {
    let origin = downloads.and_then(|d| origin_of(d, model));
    let mut missing = Vec::new();
    for rig in rigs {
        let on = match &origin {
            Some(origin) => ask_rig(crew, rig, model, origin, start).await,
            None => MissingOn {
                rig: rig.clone(),
                lands_at: None,
                same_path: false,
                download_id: None,
                note: copy_advice(model, rig),
            },
        };
        missing.push(on);
    }
    Survey {
        model: model.to_path_buf(),
        origin,
        missing,
    }
}

async fn ask_rig(
    crew: &Crew,
    rig: &str,
    model: &Path,
    origin: &ModelOrigin,
    start: bool,
) -> MissingOn {
    let asked = CopyRequest {
        origin: origin.clone(),
        dry_run: !start,
    };
    let mut on = MissingOn {
        rig: rig.to_owned(),
        lands_at: None,
        same_path: false,
        download_id: None,
        note: String::new(),
    };
    let body = match serde_json::to_value(&asked) {
        Ok(body) => body,
        Err(e) => {
            on.note = e.to_string();
            return on;
        }
    };
    let path = "/api/v1/gang/model-copies";
    let answer = match call_peer(crew, rig, Method::POST, path, Some(body), PEER_CALL_TIMEOUT).await
    {
        Ok((200 | 201, answer)) => serde_json::from_value::<CopyAnswer>(answer)
            .map_err(|e| format!("its answer is not readable ({e}): update Rigdeck there")),
        Ok((404, _)) => Err(
            "its Rigdeck cannot download a gang's model yet: update it there, or copy the model"
                .to_owned(),
        ),
        Ok((_, answer)) => Err(answer["message"]
            .as_str()
            .map_or_else(|| answer.to_string(), str::to_owned)),
        Err(why) => Err(format!("it cannot be asked: {why}")),
    };
    match answer {
        Ok(answer) => {
            on.same_path = answer.lands_at == model;
            on.download_id = answer.download.as_ref().and_then(|d| d["id"].as_i64());
            on.note = landing_note(model, rig, &answer.lands_at, start);
            on.lands_at = Some(answer.lands_at);
        }
        Err(why) => on.note = format!("'{rig}' {why}"),
    }
    on
}

/// What a download on `rig` does: lands at the profile's path, or somewhere else (both named,
/// with the fix).
fn landing_note(model: &Path, rig: &str, lands_at: &Path, started: bool) -> String {
    let verb = if started {
        "is downloading"
    } else {
        "would download"
    };
    if lands_at == model {
        return format!("'{rig}' {verb} it to '{}'", lands_at.display());
    }
    format!(
        "'{rig}' {verb} it to '{}', not to '{}' where the profile reads it: every box needs the model at the same path; give '{rig}' the same data folder layout as this rig (the same Hugging Face cache or download folder), or link it there once downloaded (ln -s '{}' '{}')",
        lands_at.display(),
        model.display(),
        lands_at.display(),
        model.display()
    )
}

/// A model that did not come from the hub: copy it to the rig at the same path.
pub fn copy_advice(model: &Path, rig: &str) -> String {
    let shown = model.display();
    let example = match model.is_dir() {
        true => format!("rsync -a '{shown}/' {rig}:'{shown}/'"),
        false => format!("rsync -a '{shown}' {rig}:'{shown}'"),
    };
    format!(
        "'{shown}' was not downloaded by this rig's Rigdeck, so it cannot be downloaded on '{rig}': copy it there at the same path, e.g. {example} (with '{rig}''s host name)"
    )
}

/// The survey as a sentence for a refused start: what to do on each rig.
pub fn offer(survey: &Survey, gang: &str) -> String {
    let notes: Vec<&str> = survey.missing.iter().map(|m| m.note.as_str()).collect();
    match &survey.origin {
        Some(origin) => format!(
            "the model came from the hub ({} at commit {}, {}): POST /api/v1/gangs/{gang}/fetch-model downloads it on {} ({})",
            origin.request.repo,
            origin.request.commit,
            origin.request.label,
            rig_list(survey),
            notes.join("; ")
        ),
        None => notes.join("; "),
    }
}

fn rig_list(survey: &Survey) -> String {
    let rigs: Vec<String> = survey
        .missing
        .iter()
        .map(|m| format!("'{}'", m.rig))
        .collect();
    rigs.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_landing_elsewhere_names_both_paths_and_the_fix() {
        let note = landing_note(
            Path::new("/srv/hf/models--o--n/snapshots/c"),
            "mini",
            Path::new("/home/u/.cache/hf/models--o--n/snapshots/c"),
            false,
        );
        assert!(
            note.contains("not to '/srv/hf/models--o--n/snapshots/c'"),
            "{note}"
        );
        assert!(note.contains("ln -s"), "{note}");
        let same = landing_note(Path::new("/m"), "mini", Path::new("/m"), true);
        assert_eq!(same, "'mini' is downloading it to '/m'");
    }

    #[test]
    fn a_files_download_folder_is_its_path_without_the_file_name() {
        let file: RepoFile = serde_json::from_value(serde_json::json!({
            "path": "Q4/x.gguf", "size_bytes": 1, "git_oid": "a".repeat(40), "lfs_sha256": null
        }))
        .unwrap();
        assert_eq!(
            download_root(Path::new("/c/snapshots/abc/Q4/x.gguf"), &file),
            Some(PathBuf::from("/c/snapshots/abc"))
        );
    }
}
