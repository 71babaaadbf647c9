//! Server-sent events as the engines write them: the byte stream cut into whole events (a blank
//! line ends one), so each can be read, and one the gateway asked for can be left out, without
//! holding anything back longer than the event's own last byte.

use bytes::{Bytes, BytesMut};

/// Accumulates stream bytes and hands out whole events.
#[derive(Default)]
pub struct EventSplitter {
    pending: BytesMut,
}

/// One event's fields that matter here.
#[derive(Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event:` line (Anthropic and the Responses API name their events).
    pub kind: Option<&'a str>,
    /// The `data:` lines joined with newlines.
    pub data: Vec<u8>,
}

impl EventSplitter {
    /// Adds a chunk; returns the bytes of every event it completed (possibly several), or
    /// nothing when it ended mid-event.
    pub fn push(&mut self, chunk: &[u8]) -> Option<Bytes> {
        self.pending.extend_from_slice(chunk);
        let end = last_event_end(&self.pending)?;
        Some(self.pending.split_to(end).freeze())
    }

    /// What is left when the stream ends (an event without its blank line).
    pub fn rest(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| self.pending.split().freeze())
    }
}

/// Where the last complete event ends (after its blank line).
fn last_event_end(bytes: &[u8]) -> Option<usize> {
    let lf = bytes.windows(2).rposition(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = bytes
        .windows(4)
        .rposition(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    lf.max(crlf)
}

/// The events in bytes that hold whole events, each with its byte range.
pub fn events(bytes: &[u8]) -> Vec<(std::ops::Range<usize>, Event<'_>)> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let rest = &bytes[start..];
        let (len, sep) = match (find(rest, b"\n\n"), find(rest, b"\r\n\r\n")) {
            (Some(a), Some(b)) if b < a => (b, 4),
            (Some(a), _) => (a, 2),
            (None, Some(b)) => (b, 4),
            (None, None) => (rest.len(), 0),
        };
        out.push((start..start + len + sep, parse(&rest[..len])));
        start += len + sep;
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse(block: &[u8]) -> Event<'_> {
    let mut kind = None;
    let mut data: Vec<u8> = Vec::new();
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(value) = field(line, b"data") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
        } else if let Some(value) = field(line, b"event") {
            kind = std::str::from_utf8(value).ok();
        }
    }
    Event { kind, data }
}

/// `name: value` or `name:value`.
fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let value = line.strip_prefix(name)?.strip_prefix(b":")?;
    Some(value.strip_prefix(b" ").unwrap_or(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_events_pass_at_once_and_split_ones_wait_for_their_end() {
        let mut s = EventSplitter::default();
        assert_eq!(
            s.push(b"data: {\"a\":1}\n\ndata: {\"b\""),
            Some(Bytes::from_static(b"data: {\"a\":1}\n\n"))
        );
        assert_eq!(s.push(b":2}\n"), None);
        assert_eq!(
            s.push(b"\n"),
            Some(Bytes::from_static(b"data: {\"b\":2}\n\n"))
        );
        assert_eq!(s.rest(), None);
        s.push(b"data: [DONE]");
        assert_eq!(s.rest(), Some(Bytes::from_static(b"data: [DONE]")));
    }

    #[test]
    fn reads_event_names_data_and_crlf_framing() {
        let bytes =
            b"event: message_start\ndata: {\"x\":1}\n\n: comment\n\nevent:ping\r\ndata:{}\r\n\r\n";
        let parsed = events(bytes);
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[0].1.kind, Some("message_start"));
        assert_eq!(parsed[0].1.data, b"{\"x\":1}");
        assert_eq!(parsed[1].1.data, b"");
        assert_eq!(parsed[2].1.kind, Some("ping"));
        assert_eq!(parsed[2].1.data, b"{}");
        assert_eq!(parsed[2].0.end, bytes.len());
    }
}
