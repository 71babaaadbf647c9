//! The parts of a split model by number: llama.cpp's file-name pattern, its limit on the count,
//! and the parts missing from a folder as ranges.

use serde::Serialize;
use std::fmt;

/// The most parts a split model can have: llama.cpp keeps `split.count` in a u16, so a name
/// that claims more was not written by its tools (and must not make us list or fetch billions
/// of names).
pub const MAX_SPLIT_PARTS: u32 = u16::MAX as u32;

/// llama.cpp's `llama_split_path`: `<prefix>-<number:05>-of-<count:05>.gguf`.
pub fn split_file_name(prefix: &str, number: u32, count: u32) -> String {
    format!("{prefix}-{number:05}-of-{count:05}.gguf")
}

/// The absent parts of a split model as ranges of part numbers: one present part of a
/// 65 535-part name is one range, never 65 534 names in memory or in a message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MissingParts {
    /// Everything before `-00001-of-00006.gguf`.
    pub prefix: String,
    /// The number of parts the name promises.
    pub count: u32,
    /// Missing part numbers (1-based), as inclusive ranges in ascending order.
    pub ranges: Vec<(u32, u32)>,
}

/// Up to this many missing parts are named one by one; more are described as ranges.
const NAMED_MISSING_PARTS: u32 = 4;
/// Ranges shown in a message before the rest is summarised.
const SHOWN_MISSING_RANGES: usize = 3;

impl MissingParts {
    /// Walks parts 1..=count once, keeping only range bounds.
    pub fn find(prefix: &str, count: u32, mut is_present: impl FnMut(u32) -> bool) -> Self {
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for n in 1..=count.min(MAX_SPLIT_PARTS) {
            if is_present(n) {
                continue;
            }
            match ranges.last_mut() {
                Some((_, last)) if last.checked_add(1) == Some(n) => *last = n,
                _ => ranges.push((n, n)),
            }
        }
        MissingParts {
            prefix: prefix.to_owned(),
            count,
            ranges,
        }
    }

    /// No part is missing.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many parts are missing.
    pub fn total(&self) -> u32 {
        self.ranges
            .iter()
            .map(|(a, b)| b.saturating_sub(*a).saturating_add(1))
            .fold(0, u32::saturating_add)
    }

    fn name(&self, number: u32) -> String {
        format!("'{}'", split_file_name(&self.prefix, number, self.count))
    }

    fn describe_range(&self, (first, last): (u32, u32)) -> String {
        match last.saturating_sub(first) {
            0 => self.name(first),
            1 => format!("{}, {}", self.name(first), self.name(last)),
            _ => format!("{} … {}", self.name(first), self.name(last)),
        }
    }
}

impl fmt::Display for MissingParts {
    /// `'x-00003-of-00004.gguf' is` / `'…3…', '…4…' are` for a few parts; for many,
    /// `65534 of 65535 parts ('x-00002-of-65535.gguf' … 'x-65535-of-65535.gguf') are`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        if total <= NAMED_MISSING_PARTS {
            let names: Vec<String> = self
                .ranges
                .iter()
                .flat_map(|&(a, b)| a..=b)
                .map(|n| self.name(n))
                .collect();
            let verb = if total == 1 { "is" } else { "are" };
            return write!(f, "{} {verb}", names.join(", "));
        }
        let shown: Vec<String> = self
            .ranges
            .iter()
            .take(SHOWN_MISSING_RANGES)
            .map(|&r| self.describe_range(r))
            .collect();
        let more = self.ranges.len().saturating_sub(SHOWN_MISSING_RANGES);
        let rest = if more > 0 {
            format!(" and {more} more ranges")
        } else {
            String::new()
        };
        write!(
            f,
            "{total} of {} parts ({}{rest}) are",
            self.count,
            shown.join("; ")
        )
    }
}
