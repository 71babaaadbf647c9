//! The folders where other tools keep models on this machine (the Hugging Face cache, LM Studio,
//! llama.cpp's cache, Ollama, Jan), found from the environment as it is at the call, with what
//! the library scan finds in each and whether the library already reads it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Library;

/// A tool's model folder that exists on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownFolder {
    /// The tool that keeps models there: "Hugging Face", "LM Studio", "llama.cpp", "Ollama", "Jan".
    pub tool: &'static str,
    pub path: PathBuf,
    /// The path as a user would type it: `~/.ollama/models` under the home folder.
    pub display_path: String,
    /// Models the library scan finds in it, and their bytes on disk.
    pub models: usize,
    pub size_bytes: u64,
    /// Whether one of the library's folders is this one or holds it.
    pub added: bool,
    /// One line per model that cannot be used ("qwen3:8b: …"), or why the folder cannot be read.
    pub problems: Vec<String>,
}

/// The tools' folders that exist, from this process's environment now, scanned with `scanner`
/// (keep it between calls: it reads a model's header once per file version).
pub fn find(library_folders: &[PathBuf], scanner: &mut Library) -> Vec<KnownFolder> {
    find_with(library_folders, scanner, &|name| std::env::var_os(name))
}

/// [`find`] with the environment given by `env` (so tests need not change the process's).
pub fn find_with(
    library_folders: &[PathBuf],
    scanner: &mut Library,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<KnownFolder> {
    let home = env("HOME").map(PathBuf::from);
    let mut seen = Vec::new();
    let mut folders: Vec<KnownFolder> = candidates(env)
        .into_iter()
        .filter(|(_, path)| path.is_dir())
        .filter(|(_, path)| {
            let real = canonical(path);
            let new = !seen.contains(&real);
            seen.push(real);
            new
        })
        .map(|(tool, path)| KnownFolder {
            tool,
            display_path: display_path(&path, home.as_deref()),
            models: 0,
            size_bytes: 0,
            added: is_in_library(library_folders, &path),
            problems: unreadable(&path).into_iter().collect(),
            path,
        })
        .collect();
    let readable: Vec<PathBuf> = folders
        .iter()
        .filter(|f| f.problems.is_empty())
        .map(|f| f.path.clone())
        .collect();
    scanner.rescan(&readable);
    for entry in scanner.entries() {
        let Some(folder) = folders.iter_mut().find(|f| f.path == entry.folder) else {
            continue;
        };
        folder.models += 1;
        folder.size_bytes += entry.size_bytes;
        if let Some(problem) = &entry.problem {
            folder.problems.push(format!("{}: {problem}", entry.name));
        }
    }
    folders
}

/// Whether one of `library_folders` is `path` or holds it (links resolved), so the library
/// already scans it.
pub fn is_in_library(library_folders: &[PathBuf], path: &Path) -> bool {
    let path = canonical(path);
    library_folders
        .iter()
        .any(|folder| path.starts_with(canonical(folder)))
}

/// Each tool's folders, in the order the tools document them; existing or not.
fn candidates(env: &dyn Fn(&str) -> Option<OsString>) -> Vec<(&'static str, PathBuf)> {
    let var = |name: &str| {
        env(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let home = var("HOME");
    let cache = var("XDG_CACHE_HOME").or_else(|| home.as_ref().map(|h| h.join(".cache")));
    let under = |base: &Option<PathBuf>, rel: &str| base.as_ref().map(|b| b.join(rel));
    let hf_hub = var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| under(&cache, "huggingface/hub"));
    let llama_cpp = var("LLAMA_CACHE").or_else(|| under(&cache, "llama.cpp"));
    let ollama = var("OLLAMA_MODELS").or_else(|| under(&home, ".ollama/models"));
    [
        ("Hugging Face", hf_hub),
        ("LM Studio", under(&home, ".lmstudio/models")),
        ("LM Studio", under(&cache, "lm-studio/models")),
        ("llama.cpp", llama_cpp),
        ("Ollama", ollama),
        (
            "Ollama",
            Some(PathBuf::from("/usr/share/ollama/.ollama/models")),
        ),
        ("Jan", under(&home, "jan/models")),
    ]
    .into_iter()
    .filter_map(|(tool, path)| Some((tool, path?)))
    .collect()
}

/// Why the folder cannot be listed, with the fix; `None` when it can.
fn unreadable(path: &Path) -> Option<String> {
    std::fs::read_dir(path).err().map(|e| {
        format!(
            "cannot read {}: {e}: give your user read access to it",
            path.display()
        )
    })
}

/// `~/…` for a path under the home folder, else the path.
fn display_path(path: &Path, home: Option<&Path>) -> String {
    match home.and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) if home.is_some_and(|h| h.is_absolute()) => format!("~/{}", rest.display()),
        _ => path.display().to_string(),
    }
}

/// The path with links resolved, so `~/models` and a link to it compare equal; the path itself
/// when it cannot be resolved.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_os_str().to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn finds_only_the_folders_that_exist_and_knows_which_are_added() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        for dir in [".cache/huggingface/hub", ".ollama/models", "jan/models"] {
            std::fs::create_dir_all(h.join(dir)).unwrap();
        }
        std::fs::write(h.join("jan/models/broken.gguf"), b"GGUF\x03\x00").unwrap();
        let env = env_of(&[("HOME", h)]);
        let found = find_with(&[h.join(".ollama")], &mut Library::default(), &env);
        let rows: Vec<(&str, PathBuf, bool)> = found
            .iter()
            .filter(|f| !f.path.starts_with("/usr/share"))
            .map(|f| (f.tool, f.path.clone(), f.added))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("Hugging Face", h.join(".cache/huggingface/hub"), false),
                ("Ollama", h.join(".ollama/models"), true),
                ("Jan", h.join("jan/models"), false),
            ]
        );
        let jan = found.iter().find(|f| f.tool == "Jan").unwrap();
        assert_eq!(jan.display_path, "~/jan/models");
        assert_eq!((jan.models, jan.size_bytes), (1, 6));
        assert_eq!(jan.problems.len(), 1, "{:?}", jan.problems);
        assert!(
            jan.problems[0].starts_with("broken: ") && jan.problems[0].contains("broken.gguf"),
            "{:?}",
            jan.problems
        );
    }

    #[test]
    fn the_environment_moves_the_folders() {
        let home = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let e = elsewhere.path();
        for dir in ["hf", "llama", "ollama", "home/hub"] {
            std::fs::create_dir_all(e.join(dir)).unwrap();
        }
        let (hf, llama, ollama, hf_home) = (
            e.join("hf"),
            e.join("llama"),
            e.join("ollama"),
            e.join("home"),
        );
        let env = env_of(&[
            ("HOME", home.path()),
            ("HF_HUB_CACHE", &hf),
            ("HF_HOME", &hf_home),
            ("LLAMA_CACHE", &llama),
            ("OLLAMA_MODELS", &ollama),
        ]);
        let paths: Vec<PathBuf> = find_with(&[], &mut Library::default(), &env)
            .into_iter()
            .filter(|f| !f.path.starts_with("/usr/share"))
            .map(|f| f.path)
            .collect();
        assert_eq!(paths, vec![hf.clone(), llama, ollama]);
        assert_eq!(
            display_path(&hf, Some(home.path())),
            hf.display().to_string()
        );
        let env = env_of(&[("HOME", home.path()), ("HF_HOME", &hf_home)]);
        let found = find_with(&[], &mut Library::default(), &env);
        assert_eq!(found[0].path, hf_home.join("hub"));
    }
}
