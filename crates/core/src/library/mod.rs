//! The model library: every model in the configured folders (GGUF, single or split, safetensors
//! folders, and the tags of an Ollama store read in place) with the facts a user chooses by. Headers are read once per file
//! version (size and modification time), so rescanning is cheap and changes on disk show up.

pub mod known_folders;
mod ollama;
mod safetensors;
mod scan;
mod watcher;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rigdeck_gguf::split::{GgufModel, MissingParts};
use rigdeck_gguf::summary::ModelSummary;
use serde::Serialize;

pub use ollama::OllamaModel;
pub use safetensors::SafetensorsInfo;
pub use scan::FileStamp;
use scan::Found;
pub use watcher::{spawn_library_watcher, LibraryHandle};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFormat {
    Gguf,
    Safetensors,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelEntry {
    /// The path to give the planner and the engines: the first shard, or the safetensors folder.
    pub path: PathBuf,
    pub name: String,
    pub format: ModelFormat,
    /// The configured model folder it was found in.
    pub folder: PathBuf,
    pub files: Vec<FileStamp>,
    pub size_bytes: u64,
    pub gguf: Option<ModelSummary>,
    pub safetensors: Option<SafetensorsInfo>,
    /// Why the model cannot be used as it is (a missing shard, a corrupt header), with the fix.
    pub problem: Option<String>,
    /// Set for a tag of an Ollama store (`path` is then its GGUF blob).
    pub ollama: Option<OllamaModel>,
}

/// The last scan and the headers already read.
#[derive(Default)]
pub struct Library {
    cache: HashMap<Vec<FileStamp>, ModelEntry>,
    entries: Vec<ModelEntry>,
}

impl Library {
    pub fn entries(&self) -> &[ModelEntry] {
        &self.entries
    }

    /// Rescans `folders`; returns true when the list changed. Blocking (file system).
    pub fn rescan(&mut self, folders: &[PathBuf]) -> bool {
        let mut next_cache = HashMap::new();
        let mut entries = Vec::new();
        for found in scan::walk(folders) {
            let key = found.stamps();
            let entry = self.cache.remove(&key).unwrap_or_else(|| read_entry(found));
            next_cache.insert(key, entry.clone());
            entries.push(entry);
        }
        entries.sort_by(|a, b| {
            a.name
                .to_lowercase()
                .cmp(&b.name.to_lowercase())
                .then(a.path.cmp(&b.path))
        });
        self.cache = next_cache;
        let changed = entries != self.entries;
        self.entries = entries;
        changed
    }
}

fn read_entry(found: Found) -> ModelEntry {
    match found {
        Found::Gguf {
            folder,
            files,
            missing,
        } => gguf_entry(folder, files, missing),
        Found::Safetensors { folder, dir, files } => {
            let (info, problem) = match safetensors::read_config(&dir) {
                Ok(info) => (Some(info), None),
                Err(e) => (None, Some(format!("{e}: re-download config.json"))),
            };
            ModelEntry {
                name: dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                size_bytes: files.iter().map(|f| f.size_bytes).sum(),
                path: dir,
                format: ModelFormat::Safetensors,
                folder,
                files,
                gguf: None,
                safetensors: info,
                problem,
                ollama: None,
            }
        }
        Found::Ollama { folder, tag } => ollama_entry(folder, tag),
    }
}

/// An Ollama tag: named by its tag, its blob's header read like any GGUF file's.
fn ollama_entry(folder: PathBuf, tag: ollama::OllamaTag) -> ModelEntry {
    let (gguf, problem) = match &tag.problem {
        Some(problem) => (None, Some(problem.clone())),
        None => match read_summary(&tag.path) {
            Ok(summary) => (Some(summary), None),
            Err(e) => (
                None,
                Some(format!(
                    "Ollama's {} blob is not a readable GGUF file: {e}: run `ollama pull {}` again",
                    tag.name, tag.name
                )),
            ),
        },
    };
    ModelEntry {
        name: tag.name.clone(),
        size_bytes: tag.files.iter().map(|f| f.size_bytes).sum(),
        path: tag.path.clone(),
        format: ModelFormat::Gguf,
        folder,
        ollama: Some(tag.model()),
        files: tag.files,
        gguf,
        safetensors: None,
        problem,
    }
}

fn read_summary(path: &Path) -> Result<ModelSummary, rigdeck_gguf::GgufError> {
    GgufModel::open(path).map(|model| ModelSummary::from_model(&model))
}

fn gguf_entry(folder: PathBuf, files: Vec<FileStamp>, missing: MissingParts) -> ModelEntry {
    let path = files.first().map(|f| f.path.clone()).unwrap_or_default();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (summary, problem) = if missing.is_empty() {
        match read_summary(&path) {
            Ok(summary) => (Some(summary), None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (
            None,
            Some(format!(
                "split model incomplete: {missing} missing: download the missing part(s) next \
                 to the others"
            )),
        )
    };
    let name = summary
        .as_ref()
        .and_then(|s| s.name.clone())
        .unwrap_or_else(|| display_name(&file_name));
    ModelEntry {
        name,
        size_bytes: files.iter().map(|f| f.size_bytes).sum(),
        path,
        format: ModelFormat::Gguf,
        folder,
        files,
        gguf: summary,
        safetensors: None,
        problem,
        ollama: None,
    }
}

/// `GLM-5.2-IQ2-00001-of-00006.gguf` → `GLM-5.2-IQ2`.
fn display_name(file_name: &str) -> String {
    match rigdeck_gguf::split::SplitName::parse(file_name) {
        Some(split) => split.prefix,
        None => file_name.trim_end_matches(".gguf").to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rigdeck_gguf::fixtures::MoeShape;

    #[test]
    fn lists_models_reads_each_header_once_and_sees_changes() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        std::fs::create_dir_all(&models).unwrap();
        MoeShape::small()
            .writer()
            .write_split(&models, "tiny-moe", 2)
            .unwrap();
        let mut library = Library::default();
        let folders = vec![models.clone()];
        assert!(library.rescan(&folders));
        assert_eq!(library.entries().len(), 1);
        let entry = &library.entries()[0];
        assert_eq!(entry.format, ModelFormat::Gguf);
        assert_eq!(entry.files.len(), 2);
        assert!(entry.problem.is_none(), "{:?}", entry.problem);
        assert!(entry.gguf.as_ref().unwrap().experts.is_some());
        assert!(!library.rescan(&folders), "nothing changed");

        std::fs::remove_file(models.join("tiny-moe-00002-of-00002.gguf")).unwrap();
        assert!(library.rescan(&folders));
        let problem = library.entries()[0].problem.clone().unwrap();
        assert!(
            problem.contains("tiny-moe-00002-of-00002.gguf"),
            "{problem}"
        );

        std::fs::write(models.join("broken.gguf"), b"GGUF\x03\x00\x00\x00").unwrap();
        library.rescan(&[models]);
        let broken = library
            .entries()
            .iter()
            .find(|e| e.name == "broken")
            .unwrap();
        assert!(
            broken.problem.as_ref().unwrap().contains("broken.gguf"),
            "{:?}",
            broken.problem
        );
    }

    #[test]
    fn a_file_name_promising_billions_of_parts_is_one_short_problem() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["x-00001-of-4000000000.gguf", "y-00001-of-65535.gguf"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let mut library = Library::default();
        library.rescan(&[dir.path().to_owned()]);
        let problems: Vec<String> = library
            .entries()
            .iter()
            .filter_map(|e| e.problem.clone())
            .collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().all(|p| p.len() < 400), "{problems:?}");
        assert!(
            problems.iter().any(|p| p.contains(
                "65534 of 65535 parts ('y-00002-of-65535.gguf' … 'y-65535-of-65535.gguf') are missing"
            )),
            "{problems:?}"
        );
    }
}
