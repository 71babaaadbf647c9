//! The fleet overview: one entry per daemon (the desk itself and each rig it watches) with its
//! state, the age of its last telemetry frame, its GPUs, findings, running instances and
//! downloads in progress, read from the same JSON the API gives.

use serde_json::Value;

use crate::watch::{RigState, RigView};

/// One daemon on the overview.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Entry {
    pub name: String,
    /// `desk` (this daemon) or `rig`.
    pub role: &'static str,
    pub address: Option<String>,
    /// `live` or `unreachable`.
    pub state: &'static str,
    pub why: Option<String>,
    pub reason: Option<String>,
    /// Since when it has been in that state.
    pub since_ms: i64,
    /// The figures below are the last known ones, not live.
    pub stale: bool,
    /// When the figures were taken.
    pub taken_at_ms: Option<i64>,
    /// The last frame's own time, and its age now.
    pub frame_at_ms: Option<i64>,
    pub frame_age_ms: Option<i64>,
    pub gpus: Vec<GpuLine>,
    pub findings: Vec<FindingLine>,
    pub instances: Vec<InstanceLine>,
    pub downloads: Vec<DownloadLine>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuLine {
    pub index: Option<u64>,
    pub name: Option<String>,
    pub vram_used_bytes: Option<u64>,
    pub vram_total_bytes: Option<u64>,
    pub temperature_c: Option<f64>,
    pub utilization_pct: Option<u64>,
    pub power_w: Option<f64>,
    pub lost: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FindingLine {
    pub severity: String,
    pub title: String,
    pub subject: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct InstanceLine {
    pub name: String,
    /// The model file's name, from the engine's `-m`/`--model`.
    pub model: Option<String>,
    pub state: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DownloadLine {
    pub label: String,
    pub state: String,
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// The desk's own entry, from its own state (always live).
pub fn desk_entry(name: &str, state: &RigState, now_ms: i64) -> Entry {
    let mut entry = blank(name, "desk", None, now_ms);
    fill(&mut entry, state, now_ms);
    entry.since_ms = state.taken_at_ms;
    entry
}

/// A rig's entry from the desk's watch.
pub fn rig_entry(view: &RigView, now_ms: i64) -> Entry {
    let mut entry = blank(&view.name, "rig", view.address.clone(), view.since_ms);
    if !view.live {
        entry.state = "unreachable";
        entry.why.clone_from(&view.why);
        entry.reason.clone_from(&view.reason);
        entry.stale = view.last.is_some();
    }
    if let Some(last) = &view.last {
        fill(&mut entry, last, now_ms);
    }
    entry
}

fn blank(name: &str, role: &'static str, address: Option<String>, since_ms: i64) -> Entry {
    Entry {
        name: name.to_owned(),
        role,
        address,
        state: "live",
        why: None,
        reason: None,
        since_ms,
        stale: false,
        taken_at_ms: None,
        frame_at_ms: None,
        frame_age_ms: None,
        gpus: Vec::new(),
        findings: Vec::new(),
        instances: Vec::new(),
        downloads: Vec::new(),
    }
}

fn fill(entry: &mut Entry, state: &RigState, now_ms: i64) {
    entry.taken_at_ms = Some(state.taken_at_ms);
    if let Some(frame) = &state.telemetry {
        entry.frame_at_ms = frame["sample"]["at_ms"].as_i64();
        entry.frame_age_ms = entry.frame_at_ms.map(|at| (now_ms - at).max(0));
        entry.gpus = items(&frame["sample"]["gpus"]["gpus"])
            .map(gpu_line)
            .collect();
        entry.findings = items(&frame["findings"]).map(finding_line).collect();
    }
    entry.instances = items(&state.instances)
        .filter(|i| is_running(i))
        .map(instance_line)
        .collect();
    entry.downloads = items(&state.downloads)
        .filter(|d| matches!(d["state"].as_str(), Some("queued" | "running" | "paused")))
        .map(download_line)
        .collect();
}

fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn gpu_line(gpu: &Value) -> GpuLine {
    let milli = |v: &Value| v.as_f64().map(|x| x / 1000.0);
    GpuLine {
        index: gpu["index"].as_u64(),
        name: gpu["name"].as_str().map(str::to_owned),
        vram_used_bytes: gpu["memory"]["used_bytes"].as_u64(),
        vram_total_bytes: gpu["memory"]["total_bytes"].as_u64(),
        temperature_c: milli(&gpu["temperature_mc"]),
        utilization_pct: gpu["utilization_gpu_pct"].as_u64(),
        power_w: milli(&gpu["power_mw"]),
        lost: gpu["lost"].as_str().map(str::to_owned),
    }
}

fn finding_line(finding: &Value) -> FindingLine {
    FindingLine {
        severity: text(&finding["severity"]),
        title: text(&finding["title"]),
        subject: text(&finding["subject"]),
    }
}

/// An instance whose engine process is up (not stopped, crashed or failed).
fn is_running(instance: &Value) -> bool {
    !matches!(
        instance["phase"].as_str(),
        None | Some("stopped" | "crashed" | "failed" | "exited")
    )
}

fn instance_line(instance: &Value) -> InstanceLine {
    let argv: Vec<&str> = items(&instance["argv"]).filter_map(Value::as_str).collect();
    let model = argv
        .iter()
        .position(|arg| *arg == "-m" || *arg == "--model")
        .and_then(|i| argv.get(i + 1))
        .map(|path| path.rsplit('/').next().unwrap_or(path).to_owned());
    InstanceLine {
        name: text(&instance["name"]),
        model,
        state: text(&instance["phase"]),
    }
}

fn download_line(download: &Value) -> DownloadLine {
    DownloadLine {
        label: text(&download["label"]),
        state: text(&download["state"]),
        done_bytes: download["progress"]["done_bytes"].as_u64().unwrap_or(0),
        total_bytes: download["progress"]["total_bytes"].as_u64().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> RigState {
        RigState {
            taken_at_ms: 10_000,
            telemetry: Some(json!({
                "sample": {"at_ms": 9_500, "gpus": {"gpus": [{"index": 0, "name": "RTX 3090",
                    "memory": {"used_bytes": 5, "total_bytes": 24}, "temperature_mc": 61500,
                    "utilization_gpu_pct": 40, "power_mw": 250000}]}},
                "findings": [{"severity": "warning", "title": "Hot", "subject": "gpu0"}]
            })),
            instances: json!([
                {"name": "a", "phase": "ready", "argv": ["llama-server", "-m", "/m/tiny.gguf"]},
                {"name": "b", "phase": "stopped", "argv": []}
            ]),
            downloads: json!([
                {"label": "x", "state": "running", "progress": {"done_bytes": 1, "total_bytes": 2}},
                {"label": "y", "state": "done", "progress": {"done_bytes": 2, "total_bytes": 2}}
            ]),
        }
    }

    #[test]
    fn an_unreachable_rig_keeps_its_last_state_flagged_stale() {
        let view = RigView {
            name: "tower".into(),
            address: Some("127.0.0.1:1".into()),
            live: false,
            why: Some("the desk cannot reach the rig: refused".into()),
            reason: Some("unreachable".into()),
            since_ms: 11_000,
            last: Some(state()),
        };
        let entry = rig_entry(&view, 12_000);
        assert_eq!(entry.state, "unreachable");
        assert!(entry.stale);
        assert_eq!(entry.taken_at_ms, Some(10_000));
        assert_eq!(entry.frame_age_ms, Some(2_500));
        assert_eq!(entry.gpus[0].temperature_c, Some(61.5));
        assert_eq!(entry.gpus[0].power_w, Some(250.0));
        assert_eq!(entry.instances.len(), 1);
        assert_eq!(entry.instances[0].model.as_deref(), Some("tiny.gguf"));
        assert_eq!(entry.downloads.len(), 1);
        assert_eq!(entry.findings[0].title, "Hot");
    }

    #[test]
    fn a_live_rig_is_not_stale() {
        let view = RigView {
            name: "tower".into(),
            address: None,
            live: true,
            why: None,
            reason: None,
            since_ms: 1,
            last: Some(state()),
        };
        let entry = rig_entry(&view, 10_000);
        assert_eq!(entry.state, "live");
        assert!(!entry.stale);
    }
}
