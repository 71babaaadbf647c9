//! `rigdeck profiles create` takes every setting the API's launch profile takes: speculative
//! decoding (method, draft length, draft model, n-gram match), the engine knobs and the chat
//! template, saved by the daemon against the real llama-server build and read back with
//! `rigdeck profiles show`; what the build refuses is refused with the daemon's own message.

mod support;

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use support::{output_text, register_llama_server, tiny_runnable, TestServer};

fn rigdeck(url: &str, config: &Path, args: Vec<String>) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rigdeck"))
        .args(args)
        .env("RIGDECK_URL", url)
        .env("RIGDECK_CONFIG_DIR", config)
        .env("RIGDECK_DATA_DIR", config.join("unused-data"))
        .output()
        .expect("run rigdeck")
}

struct Cli {
    url: String,
    config: std::path::PathBuf,
    engine: String,
    model: String,
}

impl Cli {
    /// `rigdeck profiles create NAME --engine ID --model TINY` and `flags`.
    async fn create(&self, name: &str, flags: &[&str]) -> (bool, String, String) {
        let mut args: Vec<String> = ["profiles", "create", name, "--engine", &self.engine]
            .into_iter()
            .chain(["--model", &self.model])
            .map(str::to_owned)
            .collect();
        args.extend(flags.iter().map(|f| (*f).to_owned()));
        let output = self.run(args).await;
        let (stdout, stderr) = output_text(&output);
        (output.status.success(), stdout, stderr)
    }

    /// The profile as `rigdeck profiles show NAME` prints it.
    async fn show(&self, name: &str) -> Value {
        let output = self
            .run(vec!["profiles".into(), "show".into(), name.into()])
            .await;
        let (stdout, stderr) = output_text(&output);
        assert!(output.status.success(), "{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    async fn run(&self, args: Vec<String>) -> Output {
        let (url, config) = (self.url.clone(), self.config.clone());
        tokio::task::spawn_blocking(move || rigdeck(&url, &config, args))
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_takes_speculation_engine_knobs_and_a_chat_template() {
    let t = TestServer::start("2x5060ti.json").await;
    let build = register_llama_server(&t.dir.path().join("data")).await;
    let model = tiny_runnable(t.dir.path());
    let cli = Cli {
        url: t.server.base_url(),
        config: t.dir.path().join("config"),
        engine: build.id.to_string(),
        model: model.display().to_string(),
    };

    let (ok, stdout, stderr) = cli
        .create(
            "tuned",
            &[
                "--speculative",
                "ngram",
                "--draft-tokens",
                "4",
                "--ngram-match",
                "8",
                "--cpu-mask",
                "ff",
                "--cpu-strict",
                "--mlock",
                "--no-mmap",
                "--chat-template",
                "gemma",
            ],
        )
        .await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("created profile 'tuned'"), "{stdout}");
    let shown = cli.show("tuned").await;
    let tuned = &shown["profile"];
    assert_eq!(tuned["speculative"]["method"], "ngram", "{shown}");
    assert_eq!(tuned["speculative"]["tokens"], 4);
    assert_eq!(tuned["speculative"]["ngram_match"], 8);
    assert_eq!(tuned["engine"]["cpu_mask"], "ff");
    assert_eq!(tuned["engine"]["cpu_strict"], true);
    assert_eq!(tuned["engine"]["mlock"], true);
    assert_eq!(tuned["engine"]["no_mmap"], true);
    assert_eq!(tuned["chat_template"], "gemma");
    let line = shown["command_line"].as_str().unwrap_or_default();
    for flag in ["--chat-template gemma", "--cpu-mask ff", "--spec-type"] {
        assert!(line.contains(flag), "{flag} missing from {line}");
    }

    let draft = model.display().to_string();
    let (ok, stdout, stderr) = cli
        .create(
            "drafted",
            &[
                "--speculative",
                "draft_model",
                "--draft-model",
                &draft,
                "--draft-tokens",
                "5",
                "--draft-min-tokens",
                "2",
                "--draft-p-min",
                "0.5",
            ],
        )
        .await;
    assert!(ok, "{stdout}{stderr}");
    let shown = cli.show("drafted").await;
    let drafted = &shown["profile"];
    assert_eq!(drafted["speculative"]["method"], "draft_model", "{shown}");
    assert_eq!(drafted["speculative"]["draft_model"], draft.as_str());
    assert_eq!(drafted["speculative"]["tokens"], 5);
    assert_eq!(drafted["speculative"]["min_tokens"], 2);
    assert_eq!(drafted["speculative"]["p_min"], 0.5);

    // What the build or the engine refuses is refused with the daemon's message, and nothing is
    // saved.
    let refusals: [(&str, &[&str], &str); 4] = [
        (
            "eagle-without-heads",
            &["--speculative", "eagle"],
            "eagle needs draft_model: the path of the draft checkpoint",
        ),
        (
            "vllm-knob",
            &["--kv-cache-dtype", "fp8"],
            "kv_cache_dtype is not a setting of llama.cpp: remove it from the profile",
        ),
        (
            "bad-mask",
            &["--cpu-mask", "zz"],
            "cpu_mask \"zz\" is not a hex mask",
        ),
        (
            "bad-template",
            &["--chat-template", "nosuch"],
            "chat template 'nosuch' is not one llama-server knows",
        ),
    ];
    for (name, flags, message) in refusals {
        let (ok, stdout, stderr) = cli.create(name, flags).await;
        assert!(!ok, "{name} was saved: {stdout}");
        assert!(stderr.contains(message), "{name}: {stderr}");
    }
    let list = cli
        .run(vec!["profiles".into(), "list".into(), "--json".into()])
        .await;
    let names: Vec<String> = serde_json::from_slice::<Vec<Value>>(&list.stdout)
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(names, ["drafted", "tuned"]);
    t.server.shutdown().await;
}
