//! Counters an engine exposes on its Prometheus `/metrics`, read before and after each run so
//! the run gets its own speculative acceptance and prefix-cache hits (vLLM counts drafts and
//! cache hits; SGLang counts cached and prompt tokens but only reports acceptance as gauges over
//! its latest batches; llama.cpp reports drafts per request instead, see [`crate::request`]).

use std::collections::HashMap;

use crate::result::{Acceptance, EngineDeltas};

/// Counter names, summed over their label sets.
/// llama-server (with `--metrics`) counts with vLLM's names under its own prefix.
const DRAFTS: &[&str] = &[
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_drafts",
    "llamacpp:spec_decode_num_drafts_total",
];
const DRAFT_TOKENS: &[&str] = &[
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_draft_tokens",
    "llamacpp:spec_decode_num_draft_tokens_total",
];
const ACCEPTED: &[&str] = &[
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens",
    "llamacpp:spec_decode_num_accepted_tokens_total",
];
const CACHE_HITS: &[&str] = &[
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_hits",
    "sglang:cached_tokens_total",
];
const CACHE_QUERIES: &[&str] = &[
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_queries",
    "sglang:prompt_tokens_total",
];
/// SGLang's gauges (averages over recent batches, not counters).
/// How long an engine's `/metrics` may take: on this machine it answers in milliseconds, and
/// one that accepts and never answers must not hold the benchmark.
const SCRAPE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

const ACCEPT_RATE: &str = "sglang:spec_accept_rate";
const ACCEPT_LENGTH: &str = "sglang:spec_accept_length";

/// Counter values at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters(HashMap<String, f64>);

impl Counters {
    /// Parses Prometheus text: `name{labels} value`, summing label sets; comments skipped.
    pub fn parse(text: &str) -> Counters {
        let mut values: HashMap<String, f64> = HashMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, rest) = match line.find('{') {
                Some(open) => match line[open..].find('}') {
                    Some(close) => (&line[..open], &line[open + close + 1..]),
                    None => continue,
                },
                None => match line.split_once(char::is_whitespace) {
                    Some((name, rest)) => (name, rest),
                    None => continue,
                },
            };
            let value = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok());
            if let Some(value) = value.filter(|v| v.is_finite()) {
                *values.entry(series.to_owned()).or_default() += value;
            }
        }
        Counters(values)
    }

    fn get(&self, names: &[&str]) -> Option<f64> {
        names.iter().find_map(|n| self.0.get(*n).copied())
    }

    /// SGLang's acceptance gauges; none when speculative decoding is off (the length is then
    /// absent, or 0 or 1: one token a step).
    fn reported_acceptance(&self) -> Option<Acceptance> {
        let length = self.get(&[ACCEPT_LENGTH]).filter(|l| *l > 1.0)?;
        Some(Acceptance {
            reported_length: Some(length),
            reported_rate: self.get(&[ACCEPT_RATE]),
            ..Acceptance::default()
        })
    }

    /// Acceptance since the engine started: its counters as they stand (or SGLang's gauges).
    pub fn acceptance_so_far(&self) -> Option<Acceptance> {
        self.since(&Counters::default()).acceptance
    }

    /// What changed from `before` to `self`.
    pub fn since(&self, before: &Counters) -> EngineDeltas {
        let delta = |names: &[&str]| {
            Some(self.get(names)? - before.get(names).unwrap_or(0.0)).filter(|d| *d >= 0.0)
        };
        let acceptance = match (delta(DRAFT_TOKENS), delta(ACCEPTED)) {
            (Some(drafted), Some(accepted)) if drafted > 0.0 => Some(Acceptance {
                drafted: drafted as u64,
                accepted: accepted as u64,
                drafts: delta(DRAFTS).map(|d| d as u64),
                ..Acceptance::default()
            }),
            _ => self.reported_acceptance(),
        };
        let prefix_cache = match (delta(CACHE_HITS), delta(CACHE_QUERIES)) {
            (Some(hits), Some(queries)) if queries > 0.0 => Some((hits, queries)),
            _ => None,
        };
        EngineDeltas {
            acceptance,
            prefix_cache,
        }
    }
}

/// Reads an engine's `/metrics`.
pub struct Scraper {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
}

impl Scraper {
    pub fn new(client: reqwest::Client, engine_url: &str, key: Option<String>) -> Self {
        Scraper {
            client,
            url: format!("{}/metrics", engine_url.trim_end_matches('/')),
            key,
        }
    }

    /// The counters now; `None` when the engine has no metrics (llama.cpp without
    /// `--metrics`), which only means no engine-side deltas.
    pub async fn read(&self) -> Option<Counters> {
        let mut request = self.client.get(&self.url).timeout(SCRAPE_DEADLINE);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = crate::request::send_request(request).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        Some(Counters::parse(&response.text().await.ok()?))
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn an_engine_whose_metrics_never_answer_does_not_hold_the_scrape() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        // Accepts, and never answers.
        let held = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            drop(socket);
        });
        let scraper = Scraper::new(reqwest::Client::new(), &format!("http://{address}"), None);
        let read = tokio::time::timeout(SCRAPE_DEADLINE * 2, scraper.read()).await;
        assert_eq!(read.ok(), Some(None), "the scrape ends without counters");
        held.abort();
    }

    use super::*;

    #[test]
    fn deltas_of_vllm_counters_give_acceptance_and_cache_hits() {
        let before = Counters::parse(
            "# HELP x\nvllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 100\nvllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 60\nvllm:spec_decode_num_drafts_total{model_name=\"m\"} 25\nvllm:prefix_cache_queries_total 1000\nvllm:prefix_cache_hits_total 0\n",
        );
        let after = Counters::parse(
            "vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 300\nvllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 210\nvllm:spec_decode_num_drafts_total{model_name=\"m\"} 75\nvllm:prefix_cache_queries_total 3000\nvllm:prefix_cache_hits_total 500\nbroken{line 5\n",
        );
        let deltas = after.since(&before);
        let acceptance = deltas.acceptance.expect("drafts");
        assert_eq!(
            (acceptance.drafted, acceptance.accepted, acceptance.drafts),
            (200, 150, Some(50))
        );
        assert_eq!(acceptance.rate(), Some(0.75));
        assert_eq!(acceptance.mean_length(), Some(4.0));
        assert_eq!(deltas.prefix_cache, Some((500.0, 2000.0)));
        assert_eq!(
            Counters::default().since(&Counters::default()),
            EngineDeltas::default()
        );
    }

    #[test]
    fn llama_server_counts_drafts_under_its_own_prefix() {
        let now = Counters::parse(
            "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\nllamacpp:spec_decode_num_draft_tokens_total 120\nllamacpp:spec_decode_num_accepted_tokens_total 90\nllamacpp:spec_decode_num_drafts_total 30\nllamacpp:tokens_predicted_total 400\n",
        );
        let acceptance = now.acceptance_so_far().expect("drafts counted");
        assert_eq!(acceptance.rate(), Some(0.75));
        assert_eq!(acceptance.mean_length(), Some(4.0));
        assert_eq!(
            Counters::parse("llamacpp:tokens_predicted_total 4\n").acceptance_so_far(),
            None
        );
    }

    #[test]
    fn sglang_reports_acceptance_as_gauges_and_cache_hits_as_token_counters() {
        let before = Counters::parse(
            "sglang:cached_tokens_total{model_name=\"m\"} 100\nsglang:prompt_tokens_total{model_name=\"m\"} 1000\nsglang:spec_accept_length{tp_rank=\"0\"} 1.0\n",
        );
        let after = Counters::parse(
            "sglang:cached_tokens_total{model_name=\"m\"} 400\nsglang:prompt_tokens_total{model_name=\"m\"} 3000\nsglang:spec_accept_rate{tp_rank=\"0\"} 0.55\nsglang:spec_accept_length{tp_rank=\"0\"} 2.9\n",
        );
        let deltas = after.since(&before);
        assert_eq!(deltas.prefix_cache, Some((300.0, 2000.0)));
        let acceptance = deltas.acceptance.expect("gauges");
        assert_eq!(acceptance.rate(), Some(0.55));
        assert_eq!(acceptance.mean_length(), Some(2.9));
        // Without speculative decoding SGLang's length gauge stays at 1 (or 0): no acceptance.
        assert_eq!(before.since(&before).acceptance, None);
    }
}
