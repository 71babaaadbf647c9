//! Speculative decoding as a profile setting: one method (a draft model, the model's own
//! multi-token-prediction heads, n-gram lookup, EAGLE heads) and how many tokens to draft, written
//! in each engine's own words — llama.cpp/ik_llama.cpp `--spec-type`/`-md`/draft sizes, vLLM
//! `--speculative-config`, SGLang `--speculative-algorithm` — and checked at save time against
//! what the build says it supports (its `--help`, or the installed package's own method list).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::profile::ProfileError;
use crate::engines::registry::EngineBuild;
use crate::engines::EngineKind;

/// How the tokens to verify are drafted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecMethod {
    /// A smaller model of the same family (same vocabulary) drafts.
    DraftModel,
    /// The model's own multi-token-prediction layers draft (DeepSeek, GLM, Qwen3-Next, MiMo …).
    Mtp,
    /// Continuations of n-grams already in the prompt and the output: no second model.
    Ngram,
    /// EAGLE heads trained for the model (a small checkpoint of their own).
    Eagle,
    /// EAGLE-3 heads.
    Eagle3,
}

impl SpecMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            SpecMethod::DraftModel => "draft_model",
            SpecMethod::Mtp => "mtp",
            SpecMethod::Ngram => "ngram",
            SpecMethod::Eagle => "eagle",
            SpecMethod::Eagle3 => "eagle3",
        }
    }

    /// Whether the method reads a checkpoint of its own (`draft_model`).
    pub fn needs_model(self) -> bool {
        matches!(
            self,
            SpecMethod::DraftModel | SpecMethod::Eagle | SpecMethod::Eagle3
        )
    }
}

/// The setting a profile stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    pub method: SpecMethod,
    /// Tokens drafted per step (llama.cpp draft n-max, vLLM `num_speculative_tokens`, SGLang
    /// `--speculative-num-steps`). Our users' sweet spot for MTP is 2–3.
    #[serde(default = "default_tokens")]
    pub tokens: u32,
    /// The draft or EAGLE checkpoint (draft_model, eagle, eagle3).
    #[serde(default)]
    pub draft_model: Option<PathBuf>,
    /// llama.cpp family: the shortest draft worth verifying (draft n-min; for n-gram lookup the
    /// shortest continuation, default 1).
    #[serde(default)]
    pub min_tokens: Option<u32>,
    /// llama.cpp family: a drafted token below this probability ends the draft (draft p-min).
    #[serde(default)]
    pub p_min: Option<f64>,
    /// n-gram lookup: how many of the latest tokens must match earlier text before its
    /// continuation is drafted (llama.cpp ngram-mod n-match, default 24; ik_llama.cpp
    /// `--spec-ngram-size-n`; vLLM `prompt_lookup_max`). Shorter drafts more, and worse.
    #[serde(default)]
    pub ngram_match: Option<u32>,
}

fn default_tokens() -> u32 {
    3
}

/// The most tokens any engine drafts usefully per step; more is a typo.
const MAX_TOKENS: u32 = 64;

/// The method in the engine's own words, when the build has it; the error says what it has.
pub fn engine_method(spec: &Speculative, build: &EngineBuild) -> Result<String, ProfileError> {
    let caps = &build.capabilities;
    let offered = &caps.features.speculative_types;
    // A vLLM/SGLang registered before their methods were read: nothing to check against.
    if build.kind.is_python() && offered.is_empty() {
        return Ok(python_method_name(build.kind, spec.method).to_owned());
    }
    let lacks = || ProfileError::SpeculativeUnsupported {
        method: spec.method.as_str(),
        id: build.id,
        kind: build.kind.to_string(),
        offered: if offered.is_empty() {
            "none".to_owned()
        } else {
            offered.join(", ")
        },
    };
    let pick = |names: &[&str]| {
        names
            .iter()
            .find(|n| offered.iter().any(|o| o == *n))
            .map(|n| (*n).to_owned())
    };
    let found = match build.kind {
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => match spec.method {
            SpecMethod::DraftModel => caps.spelling(DRAFT_MODEL_FLAGS).map(|_| "draft".into()),
            // Current llama.cpp names MTP drafting a spec type; ik_llama.cpp has a switch.
            SpecMethod::Mtp => pick(&["draft-mtp", "mtp"]).or_else(|| {
                caps.spelling(MTP_SWITCHES)
                    .filter(|_| !caps.options.is_empty())
                    .map(str::to_owned)
            }),
            SpecMethod::Ngram => pick(&["ngram-mod", "ngram-simple", "ngram-map-k", "ngram-cache"]),
            SpecMethod::Eagle3 => pick(&["draft-eagle3", "eagle3"]),
            SpecMethod::Eagle => pick(&["draft-eagle", "eagle"]),
        },
        EngineKind::Vllm | EngineKind::Sglang => {
            let name = python_method_name(build.kind, spec.method);
            // SGLang drafts with MTP layers through its EAGLE worker (NEXTN is its name for it).
            let alternatives: &[&str] = match (build.kind, spec.method) {
                (EngineKind::Sglang, SpecMethod::Mtp) => &["NEXTN", "EAGLE"],
                _ => &[name],
            };
            pick(alternatives)
        }
    };
    found.ok_or_else(lacks)
}

/// vLLM's `method` and SGLang's `--speculative-algorithm` for each method.
fn python_method_name(kind: EngineKind, method: SpecMethod) -> &'static str {
    let sglang = kind == EngineKind::Sglang;
    match (method, sglang) {
        (SpecMethod::DraftModel, false) => "draft_model",
        (SpecMethod::DraftModel, true) => "STANDALONE",
        (SpecMethod::Mtp, false) => "mtp",
        (SpecMethod::Mtp, true) => "NEXTN",
        (SpecMethod::Ngram, false) => "ngram",
        (SpecMethod::Ngram, true) => "NGRAM",
        (SpecMethod::Eagle, false) => "eagle",
        (SpecMethod::Eagle, true) => "EAGLE",
        (SpecMethod::Eagle3, false) => "eagle3",
        (SpecMethod::Eagle3, true) => "EAGLE3",
    }
}

/// The draft-model option, newest spelling first.
const DRAFT_MODEL_FLAGS: &[&str] = &["--spec-draft-model", "--model-draft", "-md"];
/// Draft sizes: current llama.cpp, then older trees and ik_llama.cpp.
const DRAFT_MAX_FLAGS: &[&str] = &["--spec-draft-n-max", "--draft-max", "--draft"];
const DRAFT_MIN_FLAGS: &[&str] = &["--spec-draft-n-min", "--draft-min"];
const DRAFT_P_MIN_FLAGS: &[&str] = &["--spec-draft-p-min", "--draft-p-min"];

/// ik_llama.cpp's MTP switch.
const MTP_SWITCHES: &[&str] = &["-mtp", "--multi-token-prediction"];

/// Checks the setting against the build: the method, the draft checkpoint, the sizes.
pub fn validate(spec: &Speculative, build: &EngineBuild) -> Result<(), ProfileError> {
    let bad = |reason: String| Err(ProfileError::BadSpeculative { reason });
    if spec.tokens == 0 || spec.tokens > MAX_TOKENS {
        return bad(format!(
            "tokens is {}: draft between 1 and {MAX_TOKENS} tokens a step (2–4 is typical)",
            spec.tokens
        ));
    }
    if let Some(min) = spec.min_tokens.filter(|m| *m > spec.tokens) {
        return bad(format!(
            "min_tokens {min} is more than tokens {}: lower it",
            spec.tokens
        ));
    }
    if let Some(p) = spec.p_min.filter(|p| !(0.0..=1.0).contains(p)) {
        return bad(format!("p_min {p} is not a probability: give 0–1"));
    }
    match (&spec.draft_model, spec.method.needs_model()) {
        (None, true) => {
            return bad(format!(
                "{} needs draft_model: the path of the draft checkpoint",
                spec.method.as_str()
            ))
        }
        (Some(_), false) => {
            return bad(format!(
                "{} drafts without a second model: remove draft_model",
                spec.method.as_str()
            ))
        }
        (Some(path), true) if !path.exists() => {
            return bad(format!(
                "draft model '{}' does not exist: give the full path of the file or folder",
                path.display()
            ))
        }
        _ => {}
    }
    match (spec.ngram_match, spec.method) {
        (Some(0), _) => {
            return bad("ngram_match is 0: give a length of 1 or more tokens".to_owned())
        }
        (Some(_), method) if method != SpecMethod::Ngram => {
            return bad(format!(
                "ngram_match is a setting of n-gram lookup, not of {}: remove it",
                method.as_str()
            ))
        }
        (Some(_), _) if build.kind == EngineKind::Sglang => {
            return bad("ngram_match is not a setting of sglang: remove it".to_owned())
        }
        _ => {}
    }
    let llama = !build.kind.is_python();
    let match_flags = ["--spec-ngram-mod-n-match", "--spec-ngram-size-n"];
    if llama && spec.ngram_match.is_some() && build.capabilities.spelling(&match_flags).is_none() {
        return bad(format!(
            "ngram_match needs --spec-ngram-mod-n-match or --spec-ngram-size-n, which engine build {} does not have: update it or remove ngram_match",
            build.id
        ));
    }
    if !llama && (spec.min_tokens.is_some() || spec.p_min.is_some()) {
        return bad(format!(
            "min_tokens and p_min are llama.cpp settings; {} has no such option: remove them",
            build.kind
        ));
    }
    engine_method(spec, build)?;
    Ok(())
}

/// The arguments that turn the setting on for `build` (validated before).
pub fn args(spec: &Speculative, build: &EngineBuild) -> Result<Vec<String>, ProfileError> {
    let method = engine_method(spec, build)?;
    let model = spec
        .draft_model
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let tokens = spec.tokens.to_string();
    Ok(match build.kind {
        EngineKind::LlamaCpp | EngineKind::IkLlamaCpp => llama_args(spec, build, &method, model),
        EngineKind::Vllm => {
            let mut config = serde_json::json!({
                "method": method,
                "num_speculative_tokens": spec.tokens,
            });
            if spec.method.needs_model() {
                config["model"] = serde_json::Value::String(model);
            }
            if let Some(n) = spec.ngram_match {
                config["prompt_lookup_max"] = n.into();
            }
            vec!["--speculative-config".into(), config.to_string()]
        }
        EngineKind::Sglang => {
            let mut argv = vec!["--speculative-algorithm".to_owned(), method];
            if spec.method == SpecMethod::Ngram {
                argv.extend(["--speculative-num-draft-tokens".into(), tokens]);
            } else {
                // A chain (top-k 1) of `tokens` steps verifies `tokens + 1` tokens at once.
                argv.extend([
                    "--speculative-num-steps".into(),
                    tokens,
                    "--speculative-eagle-topk".into(),
                    "1".into(),
                    "--speculative-num-draft-tokens".into(),
                    (spec.tokens + 1).to_string(),
                ]);
            }
            if spec.method.needs_model() {
                argv.extend(["--speculative-draft-model-path".into(), model]);
            }
            argv
        }
    })
}

fn llama_args(spec: &Speculative, build: &EngineBuild, method: &str, model: String) -> Vec<String> {
    let mut argv = Vec::new();
    let caps = &build.capabilities;
    let mut push = |flags: &[&'static str], value: Option<String>| {
        if let Some(flag) = caps.spelling(flags) {
            argv.push(flag.to_owned());
            argv.extend(value);
        }
    };
    if spec.method == SpecMethod::Ngram && caps.accepts("--spec-ngram-mod-n-max") {
        // ngram-mod drafts the continuation of the longest match, between n-min and n-max tokens.
        push(&["--spec-type"], Some(method.to_owned()));
        push(&["--spec-ngram-mod-n-max"], Some(spec.tokens.to_string()));
        // llama.cpp's own n-min (48) is above most n-max values people pick.
        let min = spec.min_tokens.unwrap_or(1);
        push(&["--spec-ngram-mod-n-min"], Some(min.to_string()));
        if let Some(n) = spec.ngram_match {
            push(&["--spec-ngram-mod-n-match"], Some(n.to_string()));
        }
    } else {
        if MTP_SWITCHES.contains(&method) {
            push(MTP_SWITCHES, None);
        } else if spec.method != SpecMethod::DraftModel {
            push(&["--spec-type"], Some(method.to_owned()));
        }
        if spec.method.needs_model() {
            push(DRAFT_MODEL_FLAGS, Some(model));
        }
        push(DRAFT_MAX_FLAGS, Some(spec.tokens.to_string()));
        if let Some(n) = spec.ngram_match {
            push(&["--spec-ngram-size-n"], Some(n.to_string()));
        }
        if let Some(min) = spec.min_tokens {
            push(DRAFT_MIN_FLAGS, Some(min.to_string()));
        }
        if let Some(p) = spec.p_min {
            push(DRAFT_P_MIN_FLAGS, Some(p.to_string()));
        }
    }
    if caps.features.metrics {
        // The instance view reads acceptance from `/metrics`, which llama-server serves only
        // when asked.
        argv.push("--metrics".to_owned());
    }
    argv
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::profiles::profile::tests::build;

    fn llama(options: &[&str], types: &[&str]) -> EngineBuild {
        let mut b = build("/opt/llama/llama-server", options);
        b.capabilities.features.speculative_types = types.iter().map(|t| (*t).into()).collect();
        b.capabilities.features.metrics = options.contains(&"--metrics");
        b
    }

    fn python(kind: EngineKind, methods: &[&str]) -> EngineBuild {
        let mut b = llama(&[], methods);
        b.kind = kind;
        b
    }

    fn spec(method: SpecMethod, tokens: u32, model: Option<&Path>) -> Speculative {
        Speculative {
            method,
            tokens,
            draft_model: model.map(Path::to_owned),
            min_tokens: None,
            p_min: None,
            ngram_match: None,
        }
    }

    const CURRENT: &[&str] = &[
        "--spec-type",
        "--spec-draft-model",
        "-md",
        "--spec-draft-n-max",
        "--spec-draft-n-min",
        "--spec-draft-p-min",
        "--spec-ngram-mod-n-max",
        "--spec-ngram-mod-n-min",
        "--spec-ngram-mod-n-match",
        "--metrics",
    ];
    const TYPES: &[&str] = &["draft-simple", "draft-eagle3", "draft-mtp", "ngram-mod"];

    #[test]
    fn llama_cpp_writes_its_own_spec_flags() {
        let b = llama(CURRENT, TYPES);
        let mtp = args(&spec(SpecMethod::Mtp, 3, None), &b).unwrap();
        assert_eq!(
            mtp,
            [
                "--spec-type",
                "draft-mtp",
                "--spec-draft-n-max",
                "3",
                "--metrics"
            ]
        );
        let mut ngram = spec(SpecMethod::Ngram, 16, None);
        ngram.ngram_match = Some(4);
        assert_eq!(
            args(&ngram, &b).unwrap(),
            [
                "--spec-type",
                "ngram-mod",
                "--spec-ngram-mod-n-max",
                "16",
                "--spec-ngram-mod-n-min",
                "1",
                "--spec-ngram-mod-n-match",
                "4",
                "--metrics"
            ]
        );
        let mut draft = spec(SpecMethod::DraftModel, 8, Some(Path::new("/m/d.gguf")));
        draft.min_tokens = Some(2);
        draft.p_min = Some(0.75);
        assert_eq!(
            args(&draft, &b).unwrap(),
            [
                "--spec-draft-model",
                "/m/d.gguf",
                "--spec-draft-n-max",
                "8",
                "--spec-draft-n-min",
                "2",
                "--spec-draft-p-min",
                "0.75",
                "--metrics"
            ]
        );
    }

    #[test]
    fn older_trees_and_ik_llama_use_their_draft_flags() {
        let mut b = llama(
            &["-md", "--draft-max", "--draft-min", "--spec-type"],
            &["ngram-simple", "ngram-cache"],
        );
        b.kind = EngineKind::IkLlamaCpp;
        let draft = spec(SpecMethod::DraftModel, 4, Some(Path::new("/d.gguf")));
        assert_eq!(
            args(&draft, &b).unwrap(),
            ["-md", "/d.gguf", "--draft-max", "4"]
        );
        let ngram = args(&spec(SpecMethod::Ngram, 5, None), &b).unwrap();
        assert_eq!(ngram, ["--spec-type", "ngram-simple", "--draft-max", "5"]);
        assert!(validate(&spec(SpecMethod::Mtp, 2, None), &b).is_err());
        b.capabilities.options.insert("-mtp".into());
        let mtp = args(&spec(SpecMethod::Mtp, 2, None), &b).unwrap();
        assert_eq!(mtp, ["-mtp", "--draft-max", "2"]);
    }

    #[test]
    fn vllm_and_sglang_get_their_config() {
        let vllm = python(EngineKind::Vllm, &["ngram", "eagle3", "mtp", "draft_model"]);
        assert_eq!(
            args(&spec(SpecMethod::Mtp, 2, None), &vllm).unwrap(),
            [
                "--speculative-config",
                r#"{"method":"mtp","num_speculative_tokens":2}"#
            ]
        );
        let eagle = spec(SpecMethod::Eagle3, 3, Some(Path::new("/e3")));
        assert_eq!(
            args(&eagle, &vllm).unwrap()[1],
            r#"{"method":"eagle3","model":"/e3","num_speculative_tokens":3}"#
        );
        let sglang = python(EngineKind::Sglang, &["EAGLE", "EAGLE3", "NEXTN", "NGRAM"]);
        assert_eq!(
            args(&spec(SpecMethod::Mtp, 3, None), &sglang).unwrap(),
            [
                "--speculative-algorithm",
                "NEXTN",
                "--speculative-num-steps",
                "3",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "4"
            ]
        );
    }

    #[test]
    fn refusals_name_the_method_and_what_the_build_has() {
        let dir = tempfile::tempdir().unwrap();
        let b = llama(CURRENT, TYPES);
        let err = validate(&spec(SpecMethod::Eagle, 3, Some(dir.path())), &b)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("eagle") && err.contains("draft-mtp, ngram-mod"),
            "{err}"
        );
        let sglang = python(EngineKind::Sglang, &["EAGLE", "NGRAM"]);
        let err = validate(&spec(SpecMethod::DraftModel, 3, Some(dir.path())), &sglang)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("draft_model") && err.contains("EAGLE, NGRAM"),
            "{err}"
        );
        let too_many = validate(&spec(SpecMethod::Mtp, 0, None), &b).unwrap_err();
        assert!(too_many.to_string().contains("between 1 and 64"));
        let no_model = validate(&spec(SpecMethod::DraftModel, 3, None), &b).unwrap_err();
        assert!(no_model.to_string().contains("needs draft_model"));
        let gone = spec(
            SpecMethod::DraftModel,
            3,
            Some(&dir.path().join("gone.gguf")),
        );
        assert!(validate(&gone, &b)
            .unwrap_err()
            .to_string()
            .contains("gone.gguf' does not exist"));
        let mut llama_only = spec(SpecMethod::Mtp, 3, None);
        llama_only.p_min = Some(0.5);
        let vllm = python(EngineKind::Vllm, &["mtp"]);
        assert!(validate(&llama_only, &vllm)
            .unwrap_err()
            .to_string()
            .contains("llama.cpp settings"));
        assert_eq!(validate(&spec(SpecMethod::Mtp, 3, None), &vllm), Ok(()));
    }
}
