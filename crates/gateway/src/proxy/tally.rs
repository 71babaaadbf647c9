//! What the gateway learns from an answer as it passes: time to the first token, the engine's
//! own token counts (`usage`, or llama.cpp's `timings`), its decode speed, and an error it
//! reported. Reads only what it must: after the first token, an event is parsed only when it
//! mentions usage, timings or an error.

use std::time::Instant;

use serde_json::Value;

/// Counts and times for one request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// From llama.cpp's `timings.predicted_per_second`.
    pub engine_decode_tps: Option<f64>,
    /// From llama.cpp's `timings.prompt_per_second`.
    pub engine_prompt_tps: Option<f64>,
    /// An error the engine reported in its answer.
    pub error: Option<String>,
}

impl Tally {
    /// Reads one streamed event. Returns false for the usage chunk the gateway asked for on
    /// the client's behalf (`drop_usage_chunk`), which the client must not see.
    pub fn event(&mut self, data: &[u8], now: Instant, drop_usage_chunk: bool) -> bool {
        if data.is_empty() || data == b"[DONE]" {
            return true;
        }
        let interesting = self.first_token.is_none()
            || contains(data, b"\"usage\"")
            || contains(data, b"\"timings\"")
            || contains(data, b"\"error\"");
        if !interesting {
            self.last_token = Some(now);
            return true;
        }
        let Ok(value) = serde_json::from_slice::<Value>(data) else {
            return true;
        };
        if carries_text(&value) {
            self.first_token.get_or_insert(now);
            self.last_token = Some(now);
        }
        self.read_counts(&value);
        let usage_only = value
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
            && value.get("usage").is_some_and(Value::is_object);
        !(drop_usage_chunk && usage_only)
    }

    /// Reads a whole (non-streamed) answer.
    pub fn body(&mut self, body: &[u8], now: Instant) {
        if let Ok(value) = serde_json::from_slice::<Value>(body) {
            self.first_token.get_or_insert(now);
            self.read_counts(&value);
        }
    }

    /// Reads the counts, timings and error an answer's JSON carries.
    pub fn read_counts(&mut self, value: &Value) {
        // `"error": null` (some engines send it on every chunk) is no error.
        if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_owned);
            self.error = Some(message);
        }
        let usage = value
            .get("usage")
            .or_else(|| value.pointer("/message/usage"))
            .or_else(|| value.pointer("/response/usage"));
        if let Some(usage) = usage {
            let number = |keys: &[&str]| keys.iter().find_map(|k| usage.pointer(k)?.as_u64());
            if let Some(n) = number(&["/prompt_tokens", "/input_tokens"]) {
                self.prompt_tokens = Some(n);
            }
            if let Some(n) = number(&["/completion_tokens", "/output_tokens"]) {
                self.completion_tokens = Some(n);
            }
            if let Some(n) = number(&[
                "/prompt_tokens_details/cached_tokens",
                "/cache_read_input_tokens",
            ]) {
                self.cached_tokens = Some(n);
            }
        }
        // `count_tokens` answers with the count alone.
        if let Some(n) = value.get("input_tokens").and_then(Value::as_u64) {
            self.prompt_tokens = Some(n);
        }
        if let Some(timings) = value.get("timings") {
            let number = |k: &str| timings.get(k).and_then(Value::as_u64);
            let tps = timings.get("predicted_per_second").and_then(Value::as_f64);
            self.engine_decode_tps = tps.filter(|t| t.is_finite() && *t > 0.0);
            let prompt_tps = timings.get("prompt_per_second").and_then(Value::as_f64);
            self.engine_prompt_tps = prompt_tps.filter(|t| t.is_finite() && *t > 0.0);
            if self.prompt_tokens.is_none() {
                if let Some(n) = number("prompt_n") {
                    self.prompt_tokens = Some(n + number("cache_n").unwrap_or(0));
                }
            }
            self.completion_tokens = self.completion_tokens.or_else(|| number("predicted_n"));
            self.cached_tokens = self.cached_tokens.or_else(|| number("cache_n"));
        }
    }

    /// The engine's figure, else completion tokens over the time between first and last token.
    pub fn decode_tps(&self) -> Option<f64> {
        if self.engine_decode_tps.is_some() {
            return self.engine_decode_tps;
        }
        let (first, last, n) = (self.first_token?, self.last_token?, self.completion_tokens?);
        let seconds = last.duration_since(first).as_secs_f64();
        (n > 1 && seconds > 0.0).then(|| (n - 1) as f64 / seconds)
    }
}

/// Whether an event carries generated text: a chat delta (content, reasoning, tool calls), a
/// completion's text, an Anthropic content block delta, a Responses API delta.
pub fn carries_text(value: &Value) -> bool {
    let non_empty = |v: Option<&Value>| match v {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        _ => false,
    };
    if let Some(choice) = value.pointer("/choices/0") {
        return non_empty(choice.pointer("/delta/content"))
            || non_empty(choice.pointer("/delta/reasoning_content"))
            || non_empty(choice.pointer("/delta/tool_calls"))
            || non_empty(choice.get("text"));
    }
    match value.get("type").and_then(Value::as_str) {
        Some(kind) => kind == "content_block_delta" || kind.ends_with(".delta"),
        None => false,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn first_token_is_the_first_text_not_the_first_chunk() {
        let t0 = Instant::now();
        let mut tally = Tally::default();
        let role = br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        assert!(tally.event(role, t0, false));
        assert!(tally.first_token.is_none());
        let text = br#"{"choices":[{"delta":{"content":"Hi"}}]}"#;
        tally.event(text, t0 + Duration::from_millis(5), false);
        assert_eq!(tally.first_token, Some(t0 + Duration::from_millis(5)));
    }

    #[test]
    fn reads_usage_and_drops_only_the_injected_usage_chunk() {
        let now = Instant::now();
        let mut tally = Tally::default();
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"prompt_tokens_details":{"cached_tokens":4}},"timings":{"predicted_per_second":41.5}}"#;
        assert!(!tally.event(usage, now, true));
        assert_eq!(tally.prompt_tokens, Some(12));
        assert_eq!(tally.completion_tokens, Some(30));
        assert_eq!(tally.cached_tokens, Some(4));
        assert_eq!(tally.decode_tps(), Some(41.5));
        assert!(Tally::default().event(usage, now, false));
    }

    #[test]
    fn llama_cpp_timings_stand_in_for_usage() {
        let mut tally = Tally::default();
        tally.event(
            br#"{"choices":[{"finish_reason":"stop","delta":{}}],"timings":{"prompt_n":3,"cache_n":7,"predicted_n":16,"predicted_per_second":20.0}}"#,
            Instant::now(),
            false,
        );
        assert_eq!(tally.prompt_tokens, Some(10));
        assert_eq!(tally.completion_tokens, Some(16));
        assert_eq!(tally.cached_tokens, Some(7));
    }

    #[test]
    fn anthropic_and_responses_streams_count_too() {
        let now = Instant::now();
        let mut tally = Tally::default();
        tally.event(
            br#"{"type":"message_start","message":{"usage":{"input_tokens":9,"output_tokens":0}}}"#,
            now,
            false,
        );
        tally.event(
            br#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}"#,
            now,
            false,
        );
        tally.event(
            br#"{"type":"message_delta","usage":{"output_tokens":5}}"#,
            now,
            false,
        );
        assert_eq!(
            (tally.prompt_tokens, tally.completion_tokens),
            (Some(9), Some(5))
        );
        assert!(tally.first_token.is_some());

        let mut responses = Tally::default();
        responses.event(
            br#"{"type":"response.output_text.delta","delta":"x"}"#,
            now,
            false,
        );
        responses.event(br#"{"type":"response.completed","response":{"usage":{"input_tokens":4,"output_tokens":2}}}"#, now, false);
        assert_eq!(
            (responses.prompt_tokens, responses.completion_tokens),
            (Some(4), Some(2))
        );
    }

    #[test]
    fn an_error_field_that_is_null_is_no_error() {
        let mut tally = Tally::default();
        tally.event(
            br#"{"choices":[{"delta":{"content":"a"}}],"error":null}"#,
            Instant::now(),
            false,
        );
        tally.body(
            br#"{"usage":{"prompt_tokens":5,"completion_tokens":1},"error":null}"#,
            Instant::now(),
        );
        assert_eq!(tally.error, None);
        assert_eq!(tally.completion_tokens, Some(1));
    }

    #[test]
    fn an_error_event_and_a_whole_body_are_read() {
        let mut tally = Tally::default();
        tally.event(
            br#"{"error":{"code":500,"message":"context full"}}"#,
            Instant::now(),
            false,
        );
        assert_eq!(tally.error.as_deref(), Some("context full"));
        let mut body = Tally::default();
        body.body(
            br#"{"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
            Instant::now(),
        );
        assert_eq!(body.completion_tokens, Some(1));
        let mut count = Tally::default();
        count.body(br#"{"input_tokens":17}"#, Instant::now());
        assert_eq!(count.prompt_tokens, Some(17));
    }

    #[test]
    fn decode_speed_falls_back_to_token_times() {
        let t0 = Instant::now();
        let tally = Tally {
            first_token: Some(t0),
            last_token: Some(t0 + Duration::from_secs(2)),
            completion_tokens: Some(21),
            ..Tally::default()
        };
        assert_eq!(tally.decode_tps(), Some(10.0));
    }
}
