//! Launch profiles and instances through the daemon's API, on a rig played by the NVML test
//! double: validation messages, exports, admission against the double's free VRAM, the wait for
//! a previous engine's memory (the rig file lists its pid, then is rewritten without it), logs,
//! stop. The engine is the real llama-server from Rigdeck's own (cached) CPU build; its model
//! here is not a valid GGUF, so it exits soon after starting, which is all these checks need
//! (the full ready/chat/crash path is in crates/core/tests/real_engine.rs).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rigdeck_core::engines::registry::EngineBuild;
use serde_json::{json, Value};
use support::{llama_server, TestServer};

impl TestServer {
    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .client
            .request(method, self.url(path))
            .bearer_auth(self.server.token());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn instance(&self, name: &str) -> Value {
        let (_, all) = self.send("GET", "/api/v1/instances", None).await;
        all.as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    async fn wait_final(&self, name: &str) -> Value {
        for _ in 0..600 {
            let view = self.instance(name).await;
            if view["phase"] == "stopped"
                || (view["phase"] == "crashed" && view["restart"].is_null())
            {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{name} did not end");
    }
}

/// The cached llama-server registered in the test daemon's database, and a stand-in model file
/// (profiles only need the path to exist).
async fn build_and_model(t: &TestServer) -> (EngineBuild, PathBuf) {
    let build = support::register_llama_server(&t.dir.path().join("data")).await;
    let model = t.dir.path().join("not-really.gguf");
    std::fs::write(&model, b"not a gguf").unwrap();
    (build, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_admission_release_wait_logs_and_stop_through_the_api() {
    let t = TestServer::start("2x5060ti.json").await;
    let program = llama_server().await;
    let (build, model) = build_and_model(&t).await;

    let (status, engines) = t.send("GET", "/api/v1/engines", None).await;
    assert_eq!(status, 200);
    assert_eq!(engines[0]["id"], build.id);

    // The token is required, as for the rest of the API.
    let anonymous = t
        .client
        .get(t.url("/api/v1/profiles"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);

    // Validation names the problem.
    let base = json!({"name": "api", "engine_build_id": build.id, "model": model,
        "restart": {"policy": "never"}, "planned_memory": [{"gpu": 1, "bytes": 1u64 << 30}]});
    let with = |patch: Value| {
        let mut body = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    for (patch, expected) in [
        (
            json!({"engine_build_id": 999}),
            "engine build 999, which is not installed",
        ),
        (
            json!({"model": "/nowhere/x.gguf"}),
            "'/nowhere/x.gguf' does not exist",
        ),
        (json!({"env": {"BAD-NAME": "1"}}), "'BAD-NAME' is not valid"),
        (json!({"port": 70000}), "port 70000 is out of range"),
        (
            json!({"extra_args": ["--definitely-not-a-flag"]}),
            "'--definitely-not-a-flag' in the extra arguments is not an option",
        ),
    ] {
        let (status, err) = t.send("POST", "/api/v1/profiles", Some(with(patch))).await;
        assert_eq!(status, 400, "{err}");
        assert_eq!(err["code"], "invalid_profile");
        assert!(err["message"].as_str().unwrap().contains(expected), "{err}");
    }

    // Create, read, export.
    let (status, saved) = t
        .send(
            "POST",
            "/api/v1/profiles",
            Some(with(
                json!({"env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "extra_args": ["--metrics"]}),
            )),
        )
        .await;
    assert_eq!(status, 201, "{saved}");
    assert_eq!(saved["argv"][0], program.display().to_string());
    assert!(saved["command_line"]
        .as_str()
        .unwrap()
        .contains("--metrics"));
    let (status, _) = t.send("POST", "/api/v1/profiles", Some(base.clone())).await;
    assert_eq!(status, 409, "the name is taken");
    let (_, list) = t.send("GET", "/api/v1/profiles", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (_, shell) = t
        .send("GET", "/api/v1/profiles/api/export?format=shell", None)
        .await;
    let shell = shell.as_str().unwrap();
    assert!(
        shell.starts_with("#!/bin/sh\n") && shell.contains("export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
        "{shell}"
    );
    assert!(
        shell.contains(&format!("exec {}", program.display())),
        "{shell}"
    );
    let (_, unit) = t
        .send("GET", "/api/v1/profiles/api/export?format=systemd", None)
        .await;
    assert!(
        unit.as_str().unwrap().contains("Restart=on-failure"),
        "{unit}"
    );
    let (status, _) = t
        .send("GET", "/api/v1/profiles/api/export?format=docker", None)
        .await;
    assert_eq!(status, 400);

    // Start: the engine runs (and soon exits: the model is not a GGUF); logs are captured;
    // its pid is Rigdeck's in the telemetry.
    let (status, view) = t
        .send("POST", "/api/v1/profiles/api/start", Some(json!({})))
        .await;
    assert_eq!(status, 200, "{view}");
    let pid = view["pid"].as_u64().unwrap();
    let ended = t.wait_final("api").await;
    assert_eq!(ended["phase"], "crashed", "{ended}");
    let (status, lines) = t
        .send("GET", "/api/v1/instances/api/logs?tail=500", None)
        .await;
    assert_eq!(status, 200);
    assert!(!lines.as_array().unwrap().is_empty(), "{lines}");
    let (_, found) = t
        .send(
            "GET",
            "/api/v1/instances/api/logs?search=gguf&tail=500",
            None,
        )
        .await;
    assert!(found
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["text"].as_str().unwrap().contains("gguf")));

    // NVML still shows the old engine's memory on GPU 1: the next start waits until the rig
    // file is rewritten without it.
    t.edit_rig(|rig| {
        rig["gpus"][1]["processes"] =
            json!([{"pid": pid, "used_mib": 1000, "name": "llama-server"}])
    });
    let frame = t
        .wait_for_frame("the old pid listed", |f| {
            f["sample"]["gpus"]["gpus"][1]["processes"][0]["pid"] == pid
        })
        .await;
    assert_eq!(
        frame["sample"]["gpus"]["gpus"][1]["processes"][0]["started_by_rigdeck"], true,
        "the engine's VRAM is Rigdeck's, not foreign"
    );
    assert_eq!(
        frame["sample"]["gpus"]["gpus"][1]["processes"][0]["rigdeck_instance"], "api",
        "the dashboard can say which engine holds the memory"
    );
    let started = Instant::now();
    let release = async {
        tokio::time::sleep(Duration::from_millis(2000)).await;
        t.edit_rig(|rig| rig["gpus"][1]["processes"] = json!([]));
    };
    let (_, (status, view)) = tokio::join!(
        release,
        t.send(
            "POST",
            "/api/v1/profiles/api/start",
            Some(json!({"force": false}))
        )
    );
    assert_eq!(status, 200, "{view}");
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "started while the old engine's memory was still listed"
    );
    t.wait_final("api").await;

    // Admission: 8 GiB planned on GPU 0, which has about 4.9 GiB free (ollama holds 11 GiB).
    let (status, _) = t
        .send(
            "POST",
            "/api/v1/profiles",
            Some(json!({"name": "big", "engine_build_id": build.id,
            "model": model, "restart": {"policy": "never"},
            "planned_memory": [{"gpu": 0, "bytes": 8u64 << 30}]})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, refused) = t
        .send("POST", "/api/v1/profiles/big/start", Some(json!({})))
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["code"], "does_not_fit");
    assert_eq!(
        refused["message"],
        "GPU 0 needs 8.2 GiB, 4.9 GiB free: stop what holds it or use --force"
    );
    let (status, forced) = t
        .send(
            "POST",
            "/api/v1/profiles/big/start",
            Some(json!({"force": true})),
        )
        .await;
    assert_eq!(status, 200, "{forced}");
    t.wait_final("big").await;

    // Stop, unknown names, update, delete.
    let (status, stopped) = t.send("POST", "/api/v1/instances/big/stop", None).await;
    assert_eq!(status, 200, "{stopped}");
    let (status, err) = t.send("POST", "/api/v1/instances/nope/stop", None).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (404, Some("instance_not_found"))
    );
    let (status, updated) = t
        .send(
            "PUT",
            "/api/v1/profiles/api",
            Some(with(json!({"port": 18080}))),
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["profile"]["port"], 18080);
    let (status, _) = t.send("DELETE", "/api/v1/profiles/big", None).await;
    assert_eq!(status, 204);
    let (status, err) = t.send("GET", "/api/v1/profiles/big", None).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (404, Some("profile_not_found"))
    );

    t.server.shutdown().await;
}

#[tokio::test]
async fn an_engine_build_request_names_a_bad_backend() {
    let t = support::TestServer::start("2x5060ti.json").await;
    for (body, expected) in [
        (serde_json::json!({"backend": "metal"}), "metal"),
        (
            serde_json::json!({"backend": "cuda", "cuda_architectures": "sm_86"}),
            "sm_86",
        ),
        (serde_json::json!({"backnd": "cpu"}), "not valid"),
        (
            serde_json::json!({"backend": "cpu", "index_url": "ftp://mirror/simple"}),
            "is not a usable package index URL (scheme 'ftp'",
        ),
    ]
    .into_iter()
    // The architectures come from the GPUs (12.0 here); without a CUDA compiler the build is
    // refused at once. (With one, this request would start a real CUDA build.)
    .chain((!support::has_cuda_toolkit()).then(|| (serde_json::json!({"backend": "cuda"}), "nvcc")))
    {
        let response = t
            .client
            .post(t.url("/api/v1/engines/build"))
            .bearer_auth(t.server.token())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
        let error: serde_json::Value = response.json().await.unwrap();
        assert!(
            error["message"].as_str().unwrap().contains(expected),
            "{error}"
        );
    }
}

/// What an older Rigdeck let through and an export turned into a new line: a line break (here
/// one that would add `ExecStartPre=` to an exported unit) or any other control character, in
/// any string of a profile. Create and update are refused with 400 and the field named, and the
/// stored profile is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_a_profile_are_refused_with_the_field_named() {
    let t = TestServer::start("2x5060ti.json").await;
    let (build, model) = build_and_model(&t).await;
    let base = json!({"name": "ok", "engine_build_id": build.id, "model": model,
        "env": {"CUDA_VISIBLE_DEVICES": "0"}, "restart": {"policy": "never"}});
    let with = |patch: Value| {
        let mut body = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let evil = "0\nExecStartPre=/bin/sh -c evil";
    let cases = [
        (
            json!({"env": {"CUDA_VISIBLE_DEVICES": evil}}),
            "environment value of CUDA_VISIBLE_DEVICES contains a line break (U+000A): remove it",
        ),
        (
            json!({"env": {"CUDA_VISIBLE_DEVICES": "0\t1"}}),
            "environment value of CUDA_VISIBLE_DEVICES contains a tab (U+0009): remove it",
        ),
        (
            json!({"env": {"X\nExecStartPre": "1"}}),
            "environment variable name \"X\\nExecStartPre\" contains a line break (U+000A)",
        ),
        (
            json!({"extra_args": ["--metrics", format!("x{evil}")]}),
            "extra argument 2 (\"x0\\nExecStartPre=/bin/sh -c evil\") contains a line break",
        ),
        (
            json!({"model": format!("{}\n", model.display())}),
            "model path contains a line break",
        ),
        (
            json!({"host": "127.0.0.1\r"}),
            "host contains a carriage return (U+000D)",
        ),
        (
            json!({"api_key": "k\u{1b}[2J"}),
            "API key contains an escape character (U+001B)",
        ),
        (
            json!({"name": "ok\nExecStartPre=x"}),
            "profile name contains a line break",
        ),
        (
            json!({"placement": {"overrides": [{"pattern": "blk\0", "device": {"kind": "cpu"}}]}}),
            "tensor override 1 pattern contains a NUL byte (U+0000)",
        ),
    ];
    for (patch, expected) in &cases {
        let (status, err) = t
            .send("POST", "/api/v1/profiles", Some(with(patch.clone())))
            .await;
        assert_eq!(status, 400, "{patch}: {err}");
        assert_eq!(err["code"], "invalid_profile");
        assert!(
            err["message"].as_str().unwrap().contains(expected),
            "{patch}: {err}"
        );
    }
    let (_, list) = t.send("GET", "/api/v1/profiles", None).await;
    assert_eq!(list, json!([]), "nothing refused was stored");

    // The same through an update: refused, and the stored profile is unchanged.
    let (status, saved) = t.send("POST", "/api/v1/profiles", Some(base.clone())).await;
    assert_eq!(status, 201, "{saved}");
    for (patch, expected) in &cases {
        let (status, err) = t
            .send("PUT", "/api/v1/profiles/ok", Some(with(patch.clone())))
            .await;
        assert_eq!(status, 400, "{patch}: {err}");
        assert!(
            err["message"].as_str().unwrap().contains(expected),
            "{patch}: {err}"
        );
    }
    let (_, stored) = t.send("GET", "/api/v1/profiles/ok", None).await;
    assert_eq!(
        stored["profile"]["env"],
        json!({"CUDA_VISIBLE_DEVICES": "0"})
    );
    assert_eq!(stored["profile"]["extra_args"], json!([]));
    t.server.shutdown().await;
}

/// A profile with port 0 gets a free port at each start: its own command line says so instead
/// of showing a port it will not use, its export writes a port free now and says why, and the
/// running instance shows the port it really listens on, in its view and its command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_0_profile_shows_no_fixed_port_and_its_instance_the_real_one() {
    let t = TestServer::start("2x5060ti.json").await;
    let (build, model) = build_and_model(&t).await;
    let body = json!({"name": "free", "engine_build_id": build.id, "model": model,
        "restart": {"policy": "never"}});
    let (status, saved) = t.send("POST", "/api/v1/profiles", Some(body)).await;
    assert_eq!(status, 201, "{saved}");
    assert_eq!(saved["profile"]["port"], 0);
    let shown = saved["command_line"].as_str().unwrap();
    assert!(shown.ends_with(" --port <chosen at start>"), "{shown}");
    let argv: Vec<&str> = saved["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    let at = argv.iter().position(|w| *w == "--port").unwrap();
    assert_eq!(argv[at + 1], "<chosen at start>");
    let (_, again) = t.send("GET", "/api/v1/profiles/free", None).await;
    assert_eq!(again["command_line"], saved["command_line"]);

    // A file needs a number: one free now, and a note that says so.
    let (status, script) = t
        .send("GET", "/api/v1/profiles/free/export?format=shell", None)
        .await;
    assert_eq!(status, 200, "{script}");
    let script = script.as_str().unwrap();
    let exported = script
        .split(" --port ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap();
    assert_ne!(exported.parse::<u16>().unwrap(), 0, "{script}");
    assert!(
        script.contains(&format!(
            "# Note: the profile picks a free port at each start; this file uses {exported},"
        )),
        "{script}"
    );

    // Started: the view and its command line carry the port this run listens on.
    let (status, view) = t
        .send("POST", "/api/v1/profiles/free/start", Some(json!({})))
        .await;
    assert_eq!(status, 200, "{view}");
    let port = view["port"].as_u64().unwrap();
    assert_ne!(port, 0);
    let line = view["command_line"].as_str().unwrap();
    assert!(line.ends_with(&format!(" --port {port}")), "{line}");
    assert!(!line.contains("chosen at start"), "{line}");
    let listed = t.instance("free").await;
    assert_eq!(listed["port"], port);
    assert_eq!(listed["command_line"], view["command_line"]);
    t.wait_final("free").await;
    t.server.shutdown().await;
}
