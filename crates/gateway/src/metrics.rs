//! Prometheus text exposition: a small writer (families, labels escaped) that the daemon also
//! uses for its GPU and host gauges, and the gateway's own counters per model.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use crate::usage::{Outcome, UsageRecord};

/// Time-to-first-token histogram bounds, in seconds.
const TTFT_BUCKETS_S: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Builds one exposition document.
#[derive(Default)]
pub struct PromText {
    out: String,
}

impl PromText {
    /// Starts a metric family (`kind`: `gauge`, `counter`, `histogram`).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        value.to_string()
    }
}

#[derive(Default, Clone)]
struct ModelCounters {
    requests: BTreeMap<Outcome, u64>,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// Cumulative counts per bound of [`TTFT_BUCKETS_S`], then the total.
    ttft_buckets: [u64; TTFT_BUCKETS_S.len()],
    ttft_count: u64,
    ttft_sum_s: f64,
    loads: u64,
    evictions: u64,
}

/// The gateway's counters since the daemon started.
#[derive(Default)]
pub struct Metrics {
    models: Mutex<BTreeMap<String, ModelCounters>>,
}

impl Metrics {
    fn with(&self, model: &str, change: impl FnOnce(&mut ModelCounters)) {
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        change(models.entry(model.to_owned()).or_default());
    }

    /// Counts a request under `model` (the profile it named, or one label for unknown names).
    pub fn request(&self, model: &str, record: &UsageRecord) {
        self.with(model, |m| {
            *m.requests.entry(record.status).or_default() += 1;
            m.prompt_tokens += record.prompt_tokens.unwrap_or(0);
            m.completion_tokens += record.completion_tokens.unwrap_or(0);
            if let Some(ttft_ms) = record.ttft_ms {
                let seconds = ttft_ms / 1000.0;
                for (bucket, bound) in m.ttft_buckets.iter_mut().zip(TTFT_BUCKETS_S) {
                    if seconds <= bound {
                        *bucket += 1;
                    }
                }
                m.ttft_count += 1;
                m.ttft_sum_s += seconds;
            }
        });
    }

    pub fn load(&self, model: &str) {
        self.with(model, |m| m.loads += 1);
    }

    pub fn eviction(&self, model: &str) {
        self.with(model, |m| m.evictions += 1);
    }

    /// Writes every family; `in_flight` is read live from the activity table.
    pub fn write(&self, out: &mut PromText, in_flight: &dyn Fn(&str) -> u32) {
        let models = self
            .models
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        out.family(
            "rigdeck_gateway_requests_total",
            "counter",
            "Requests through the gateway, by model and outcome.",
        );
        for (model, m) in &models {
            for (outcome, n) in &m.requests {
                out.sample(
                    "rigdeck_gateway_requests_total",
                    &[("model", model), ("status", outcome.as_str())],
                    *n as f64,
                );
            }
        }
        out.family(
            "rigdeck_gateway_tokens_total",
            "counter",
            "Tokens the engines reported, by model and kind.",
        );
        for (model, m) in &models {
            for (kind, n) in [
                ("prompt", m.prompt_tokens),
                ("completion", m.completion_tokens),
            ] {
                out.sample(
                    "rigdeck_gateway_tokens_total",
                    &[("model", model), ("kind", kind)],
                    n as f64,
                );
            }
        }
        out.family(
            "rigdeck_gateway_in_flight",
            "gauge",
            "Requests being served now.",
        );
        for model in models.keys() {
            out.sample(
                "rigdeck_gateway_in_flight",
                &[("model", model)],
                f64::from(in_flight(model)),
            );
        }
        out.family(
            "rigdeck_gateway_time_to_first_token_seconds",
            "histogram",
            "Time from the request to the first generated token.",
        );
        let name = "rigdeck_gateway_time_to_first_token_seconds";
        for (model, m) in &models {
            for (bound, n) in TTFT_BUCKETS_S.iter().zip(m.ttft_buckets) {
                let le = bound.to_string();
                out.sample(
                    &format!("{name}_bucket"),
                    &[("model", model), ("le", &le)],
                    n as f64,
                );
            }
            let total = m.ttft_count as f64;
            out.sample(
                &format!("{name}_bucket"),
                &[("model", model), ("le", "+Inf")],
                total,
            );
            out.sample(&format!("{name}_sum"), &[("model", model)], m.ttft_sum_s);
            out.sample(&format!("{name}_count"), &[("model", model)], total);
        }
        out.family(
            "rigdeck_gateway_loads_total",
            "counter",
            "Models started on request.",
        );
        out.family(
            "rigdeck_gateway_evictions_total",
            "counter",
            "Models stopped by the gateway (to make room, or idle past their TTL).",
        );
        for (model, m) in &models {
            out.sample(
                "rigdeck_gateway_loads_total",
                &[("model", model)],
                m.loads as f64,
            );
            out.sample(
                "rigdeck_gateway_evictions_total",
                &[("model", model)],
                m.evictions as f64,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_families_with_escaped_labels_and_cumulative_buckets() {
        let metrics = Metrics::default();
        let record = UsageRecord {
            at_ms: 0,
            model: "q\"1".to_owned(),
            key_id: None,
            key_name: "k".to_owned(),
            route: "chat.completions".to_owned(),
            stream: true,
            status: Outcome::Ok,
            http_status: 200,
            prompt_tokens: Some(3),
            completion_tokens: Some(4),
            cached_tokens: None,
            ttft_ms: Some(300.0),
            decode_tps: None,
            duration_ms: 1.0,
            error: None,
            rig: None,
        };
        metrics.request(&record.model, &record);
        let mut out = PromText::default();
        metrics.write(&mut out, &|_| 2);
        let text = out.finish();
        assert!(text.contains("# TYPE rigdeck_gateway_requests_total counter"));
        assert!(text.contains(r#"rigdeck_gateway_requests_total{model="q\"1",status="ok"} 1"#));
        assert!(text.contains(r#"rigdeck_gateway_tokens_total{model="q\"1",kind="completion"} 4"#));
        assert!(text.contains(r#"rigdeck_gateway_in_flight{model="q\"1"} 2"#));
        assert!(text.contains(r#"_bucket{model="q\"1",le="0.25"} 0"#));
        assert!(text.contains(r#"_bucket{model="q\"1",le="0.5"} 1"#));
        assert!(text.contains(r#"_bucket{model="q\"1",le="+Inf"} 1"#));
    }
}
