//! Ollama's model store, read in place: `<root>/manifests/<registry>/<namespace>/<model>/<tag>`
//! are JSON manifests whose model layer names a GGUF blob `<root>/blobs/sha256-<hex>`. Each tag
//! becomes one library model named as Ollama shows it (`qwen3:8b`), whose path is the blob.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::scan::{stamp, FileStamp};

/// The layer holding the GGUF weights.
const MODEL_MEDIA_TYPE: &str = "application/vnd.ollama.image.model";
/// The vision projector of a multimodal model (llama-server's `--mmproj`).
const PROJECTOR_MEDIA_TYPE: &str = "application/vnd.ollama.image.projector";
/// Ollama's own registry: its models are shown without it.
const DEFAULT_REGISTRY: &str = "registry.ollama.ai";
/// A manifest is a few hundred bytes; anything far larger is not one.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// One tag of an Ollama store, before its blob's header is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OllamaTag {
    /// The tag as Ollama shows it: `qwen3:8b`, `user/model:tag`, `hf.co/org/repo:tag`.
    pub name: String,
    pub manifest: FileStamp,
    /// The model blob (what llama-server gets with `-m`), or the manifest when it names none.
    pub path: PathBuf,
    /// The model blob, when it is there.
    pub files: Vec<FileStamp>,
    /// The projector blob of a multimodal model.
    pub projector: Option<PathBuf>,
    /// Why the tag cannot be used as it is, with the fix.
    pub problem: Option<String>,
}

/// What a library model read from an Ollama store carries besides its blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OllamaModel {
    /// The tag as Ollama shows it (also the model's name).
    pub tag: String,
    pub manifest: PathBuf,
    /// The projector blob of a multimodal model (llama-server's `--mmproj`).
    pub projector: Option<PathBuf>,
}

impl OllamaTag {
    pub fn model(&self) -> OllamaModel {
        OllamaModel {
            tag: self.name.clone(),
            manifest: self.manifest.path.clone(),
            projector: self.projector.clone(),
        }
    }
}

#[derive(Deserialize)]
struct Manifest {
    layers: Vec<Layer>,
}

#[derive(Deserialize)]
struct Layer {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: u64,
}

/// An Ollama store holds both `manifests` and `blobs`.
pub fn is_store(dir: &Path) -> bool {
    dir.join("manifests").is_dir() && dir.join("blobs").is_dir()
}

/// Every tag under `<root>/manifests`, in path order.
pub fn read_store(root: &Path) -> Vec<OllamaTag> {
    let mut manifests = Vec::new();
    collect_manifests(&root.join("manifests"), &mut Vec::new(), &mut manifests);
    manifests.sort();
    manifests
        .into_iter()
        .filter_map(|(parts, path)| {
            let manifest = stamp(&path)?;
            Some(read_tag(root, tag_name(&parts), manifest))
        })
        .collect()
}

/// Files exactly four levels down (registry, namespace, model, tag), hidden names skipped.
fn collect_manifests(dir: &Path, parts: &mut Vec<String>, out: &mut Vec<(Vec<String>, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        parts.push(name);
        if parts.len() == 4 {
            if path.is_file() {
                out.push((parts.clone(), path));
            }
        } else if path.is_dir() {
            collect_manifests(&path, parts, out);
        }
        parts.pop();
    }
}

/// `registry.ollama.ai/library/qwen3/8b` → `qwen3:8b`; another namespace keeps it
/// (`user/model:tag`), another registry keeps both (`hf.co/org/repo:tag`).
fn tag_name(parts: &[String]) -> String {
    let [registry, namespace, model, tag] = parts else {
        return parts.join("/");
    };
    let repo = match (registry.as_str(), namespace.as_str()) {
        (DEFAULT_REGISTRY, "library") => model.clone(),
        (DEFAULT_REGISTRY, _) => format!("{namespace}/{model}"),
        _ => format!("{registry}/{namespace}/{model}"),
    };
    format!("{repo}:{tag}")
}

fn read_tag(root: &Path, name: String, manifest: FileStamp) -> OllamaTag {
    let mut tag = OllamaTag {
        path: manifest.path.clone(),
        name,
        manifest,
        files: Vec::new(),
        projector: None,
        problem: None,
    };
    let layers = match read_manifest(&tag.manifest.path) {
        Ok(manifest) => manifest.layers,
        Err(why) => {
            tag.problem = Some(format!(
                "Ollama's manifest for {} ({}) {why}: run `ollama pull {}` again",
                tag.name,
                tag.manifest.path.display(),
                tag.name
            ));
            return tag;
        }
    };
    tag.projector = layers
        .iter()
        .find(|l| l.media_type == PROJECTOR_MEDIA_TYPE)
        .and_then(|l| blob_file_name(&l.digest))
        .map(|file| root.join("blobs").join(file))
        .filter(|p| p.is_file());
    let Some(layer) = layers.iter().find(|l| l.media_type == MODEL_MEDIA_TYPE) else {
        tag.problem = Some(format!(
            "Ollama's manifest for {} names no model layer ({MODEL_MEDIA_TYPE}): run `ollama pull {}` again",
            tag.name, tag.name
        ));
        return tag;
    };
    match model_blob(root, &tag.name, layer) {
        Ok(blob) => {
            tag.path = blob.path.clone();
            tag.files = vec![blob];
        }
        Err((path, problem)) => {
            tag.path = path.unwrap_or(tag.path);
            tag.problem = Some(problem);
        }
    }
    tag
}

fn read_manifest(path: &Path) -> Result<Manifest, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot be read ({e})"))?
        .len();
    if size > MAX_MANIFEST_BYTES {
        return Err(format!("is {size} bytes, far too large for a manifest"));
    }
    let text = std::fs::read(path).map_err(|e| format!("cannot be read ({e})"))?;
    serde_json::from_slice(&text).map_err(|e| format!("is not valid JSON ({e})"))
}

/// `sha256:<64 hex>` → `sha256-<64 hex>`; anything else (a path, say) is refused.
fn blob_file_name(digest: &str) -> Option<String> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("sha256-{hex}"))
}

/// The model layer's blob, present and of the manifest's size; else the blob's path (when the
/// digest gives one) and the problem.
fn model_blob(
    root: &Path,
    name: &str,
    layer: &Layer,
) -> Result<FileStamp, (Option<PathBuf>, String)> {
    let pull_again = format!("run `ollama pull {name}` again");
    let Some(file) = blob_file_name(&layer.digest) else {
        let problem = format!(
            "Ollama's {name} names blob digest '{}', which is not sha256:<64 hex digits>: {pull_again}",
            layer.digest
        );
        return Err((None, problem));
    };
    let blobs = root.join("blobs");
    let path = blobs.join(&file);
    let Some(blob) = stamp(&path).filter(|_| path.is_file()) else {
        let problem = format!(
            "Ollama's {name} names blob {file} which is not in {}: {pull_again}",
            blobs.display()
        );
        return Err((Some(path), problem));
    };
    if blob.size_bytes != layer.size {
        let problem = format!(
            "Ollama's {name} blob {file} is {} bytes but its manifest says {}: the download is \
             incomplete or damaged: {pull_again}",
            blob.size_bytes, layer.size
        );
        return Err((Some(path), problem));
    }
    Ok(blob)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::{Library, ModelEntry};
    use rigdeck_gguf::fixtures::MoeShape;

    /// An Ollama store as Ollama lays it out, written by the test.
    struct Store {
        root: PathBuf,
    }

    impl Store {
        fn new(root: PathBuf) -> Store {
            std::fs::create_dir_all(root.join("blobs")).unwrap();
            std::fs::create_dir_all(root.join("manifests")).unwrap();
            Store { root }
        }

        /// A real small GGUF as blob number `n`; its digest and size.
        fn gguf_blob(&self, n: u32) -> (String, u64) {
            let hex = format!("{n:064x}");
            let path = self.root.join("blobs").join(format!("sha256-{hex}"));
            let size = MoeShape::small().writer().write_to_path(&path).unwrap();
            (format!("sha256:{hex}"), size)
        }

        fn manifest(&self, tag_path: &str, text: &str) {
            let path = self.root.join("manifests").join(tag_path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }

        fn model_manifest(&self, tag_path: &str, (digest, size): &(String, u64)) {
            let text = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": format!("sha256:{:064x}", 999), "size": 10},
            "layers": [
                {"mediaType": MODEL_MEDIA_TYPE, "digest": digest, "size": size},
                {"mediaType": "application/vnd.ollama.image.template", "digest": format!("sha256:{:064x}", 998), "size": 3},
                {"mediaType": "application/vnd.ollama.image.params", "digest": format!("sha256:{:064x}", 997), "size": 3},
            ]});
            self.manifest(tag_path, &text.to_string());
        }
    }

    fn scan(folder: &Path) -> Vec<ModelEntry> {
        let mut library = Library::default();
        library.rescan(&[folder.to_owned()]);
        library.entries().to_vec()
    }

    fn named<'a>(entries: &'a [ModelEntry], name: &str) -> &'a ModelEntry {
        entries
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no model named {name} in {entries:#?}"))
    }

    #[test]
    fn each_tag_is_one_gguf_model_named_by_its_tag_whose_path_is_the_blob() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::new(home.path().join(".ollama/models"));
        let blob = store.gguf_blob(1);
        store.model_manifest("registry.ollama.ai/library/tiny/q4", &blob);
        store.model_manifest("registry.ollama.ai/library/tiny/latest", &blob);
        store.model_manifest("registry.ollama.ai/someone/moe/small", &blob);
        store.model_manifest("hf.co/org/Tiny-GGUF/Q4_K_M", &blob);
        MoeShape::small()
            .writer()
            .write_to_path(home.path().join(".ollama/models/plain.gguf"))
            .unwrap();
        let entries = scan(&home.path().join(".ollama"));
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "hf.co/org/Tiny-GGUF:Q4_K_M",
                "someone/moe:small",
                "tiny MoE (synthetic)",
                "tiny:latest",
                "tiny:q4"
            ],
            "{entries:#?}"
        );
        let blob_path = store
            .root
            .join("blobs")
            .join(blob.0.replace("sha256:", "sha256-"));
        let tag = named(&entries, "tiny:q4");
        assert_eq!(tag.path, blob_path);
        assert_eq!(tag.files.len(), 1);
        assert_eq!(tag.size_bytes, blob.1);
        assert!(tag.problem.is_none(), "{:?}", tag.problem);
        assert!(tag.gguf.as_ref().unwrap().experts.is_some());
        let ollama = tag.ollama.as_ref().unwrap();
        assert_eq!(ollama.tag, "tiny:q4");
        assert!(ollama
            .manifest
            .ends_with("manifests/registry.ollama.ai/library/tiny/q4"));
        let plain = named(&entries, "tiny MoE (synthetic)");
        assert!(plain.ollama.is_none() && plain.path.ends_with("plain.gguf"));
    }

    #[test]
    fn a_broken_tag_is_one_line_and_the_others_still_list() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_owned());
        let good = store.gguf_blob(1);
        store.model_manifest("registry.ollama.ai/library/good/1b", &good);
        let missing = (format!("sha256:{:064x}", 2), 1234);
        store.model_manifest("registry.ollama.ai/library/qwen3/8b", &missing);
        store.manifest("registry.ollama.ai/library/notjson/1b", "{ not json");
        store.model_manifest(
            "registry.ollama.ai/library/short/1b",
            &(good.0.clone(), good.1 + 1),
        );
        let corrupt = format!("{:064x}", 3);
        std::fs::write(
            store.root.join(format!("blobs/sha256-{corrupt}")),
            b"GGUF\x03\x00\x00\x00",
        )
        .unwrap();
        store.model_manifest(
            "registry.ollama.ai/library/corrupt/1b",
            &(format!("sha256:{corrupt}"), 8),
        );
        store.manifest(
            "registry.ollama.ai/library/sneaky/1b",
            &serde_json::json!({"layers": [{"mediaType": MODEL_MEDIA_TYPE, "digest": "sha256:../../../etc/passwd", "size": 1}]}).to_string(),
        );

        let entries = scan(dir.path());
        assert_eq!(entries.len(), 6, "{entries:#?}");
        let problem = |name: &str| named(&entries, name).problem.clone().unwrap_or_default();
        assert!(problem("good:1b").is_empty());
        assert_eq!(
            problem("qwen3:8b"),
            format!(
                "Ollama's qwen3:8b names blob sha256-{:064x} which is not in {}: run `ollama pull qwen3:8b` again",
                2,
                store.root.join("blobs").display()
            )
        );
        let not_json = problem("notjson:1b");
        assert!(
            not_json.starts_with("Ollama's manifest for notjson:1b (")
                && not_json.contains("is not valid JSON")
                && not_json.ends_with("run `ollama pull notjson:1b` again"),
            "{not_json}"
        );
        assert_eq!(
            problem("short:1b"),
            format!(
                "Ollama's short:1b blob {} is {} bytes but its manifest says {}: the download is \
                 incomplete or damaged: run `ollama pull short:1b` again",
                good.0.replace(':', "-"),
                good.1,
                good.1 + 1
            )
        );
        let corrupt = problem("corrupt:1b");
        assert!(
            corrupt.starts_with("Ollama's corrupt:1b blob is not a readable GGUF file: ")
                && corrupt.ends_with("run `ollama pull corrupt:1b` again"),
            "{corrupt}"
        );
        assert!(problem("sneaky:1b").contains("not sha256:<64 hex digits>"));
        assert!(entries
            .iter()
            .all(|e| e.problem.as_ref().is_none_or(|p| !p.contains('\n'))));
    }

    #[test]
    fn a_fixed_blob_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_owned());
        let blob = (format!("sha256:{:064x}", 5), 0);
        store.model_manifest("registry.ollama.ai/library/late/1b", &blob);
        let mut library = Library::default();
        let folders = [dir.path().to_owned()];
        library.rescan(&folders);
        assert!(library.entries()[0].problem.is_some());
        let written = store.gguf_blob(5);
        store.model_manifest("registry.ollama.ai/library/late/1b", &written);
        assert!(library.rescan(&folders));
        assert!(
            library.entries()[0].problem.is_none(),
            "{:?}",
            library.entries()[0].problem
        );
    }

    fn parts(path: &str) -> Vec<String> {
        path.split('/').map(str::to_owned).collect()
    }

    #[test]
    fn names_tags_as_ollama_shows_them() {
        assert_eq!(
            tag_name(&parts("registry.ollama.ai/library/qwen3/8b")),
            "qwen3:8b"
        );
        assert_eq!(
            tag_name(&parts("registry.ollama.ai/someone/tiny/q4")),
            "someone/tiny:q4"
        );
        assert_eq!(
            tag_name(&parts("hf.co/unsloth/Qwen3-8B-GGUF/Q4_K_M")),
            "hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M"
        );
    }

    #[test]
    fn a_digest_must_be_sha256_hex() {
        let hex = "a".repeat(64);
        assert_eq!(
            blob_file_name(&format!("sha256:{hex}")),
            Some(format!("sha256-{hex}"))
        );
        assert_eq!(blob_file_name("sha256:../../etc/passwd"), None);
        assert_eq!(blob_file_name(&format!("md5:{hex}")), None);
    }
}
