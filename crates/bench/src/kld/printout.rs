//! Reads what `llama-perplexity --kl-divergence` prints: the final statistics (Mean KLD and its
//! percentiles, Δp, same top token, the perplexity ratio, each uncertainty as printed) and, while
//! it runs, how many chunks are done and the time left it announces.

use serde::{Deserialize, Serialize};

/// The statistics of one KL-divergence run, as llama-perplexity printed them. Shares (`same_top`,
/// `rms_dp`, `mean_dp`) are fractions, not percent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KldStats {
    pub mean: f64,
    pub mean_unc: f64,
    pub median: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub same_top: f64,
    pub same_top_unc: f64,
    pub rms_dp: f64,
    pub rms_dp_unc: f64,
    pub mean_dp: f64,
    pub ppl: f64,
    pub ppl_unc: f64,
    pub ppl_base: f64,
    pub ppl_ratio: f64,
    pub ppl_ratio_unc: f64,
}

/// Parses the final statistics; the message names the first line that is missing.
pub fn parse_stats(stdout: &str) -> Result<KldStats, String> {
    let pair = |label: &str| value_pair(stdout, label);
    let one = |label: &str| pair(label).map(|(v, _)| v);
    let (mean, mean_unc) = pair("Mean    KLD:")?;
    let (same_top, same_top_unc) = pair("Same top p:")?;
    let (rms_dp, rms_dp_unc) = pair("RMS Δp    :")?;
    let (ppl, ppl_unc) = pair("Mean PPL(Q)                   :")?;
    let (ppl_ratio, ppl_ratio_unc) = pair("Mean PPL(Q)/PPL(base)         :")?;
    Ok(KldStats {
        mean,
        mean_unc,
        median: one("Median  KLD:")?,
        p99: one("99.0%   KLD:")?,
        p999: one("99.9%   KLD:")?,
        max: one("Maximum KLD:")?,
        same_top: same_top / 100.0,
        same_top_unc: same_top_unc / 100.0,
        rms_dp: rms_dp / 100.0,
        rms_dp_unc: rms_dp_unc / 100.0,
        mean_dp: one("Mean    Δp:")? / 100.0,
        ppl,
        ppl_unc,
        ppl_base: one("Mean PPL(base)                :")?,
        ppl_ratio,
        ppl_ratio_unc,
    })
}

/// The numbers after `label` on its line: a value and, after `±`, its uncertainty (0 if none,
/// or if llama.cpp printed `nan` for it: the spread of identical figures, which JSON cannot hold).
fn value_pair(text: &str, label: &str) -> Result<(f64, f64), String> {
    let rest = text
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .ok_or_else(|| format!("llama-perplexity printed no '{}' line", label.trim_end()))?;
    let mut numbers = rest
        .split('±')
        .map(|part| part.trim().trim_end_matches('%').trim().parse::<f64>());
    let value = numbers
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| format!("'{}' is not followed by a number", label.trim_end()))?;
    let uncertainty = numbers
        .next()
        .and_then(Result::ok)
        .filter(|u| u.is_finite())
        .unwrap_or(0.0);
    Ok((value, uncertainty))
}

/// How far a run is: chunks done of all, and the time left llama-perplexity announced.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ChunkProgress {
    pub done: u32,
    pub total: Option<u32>,
    /// Seconds for one pass (a batch of chunks) as the tool measured its first one.
    pub seconds_per_pass: Option<f64>,
}

impl ChunkProgress {
    pub fn fraction(&self) -> Option<f64> {
        let total = self.total.filter(|t| *t > 0)?;
        Some((f64::from(self.done) / f64::from(total)).min(1.0))
    }

    /// Time left, from the measured pace once a chunk is done, else from the first pass.
    pub fn eta_s(&self, elapsed_s: f64) -> Option<f64> {
        let total = f64::from(self.total?);
        if self.done > 0 {
            let done = f64::from(self.done);
            return Some((elapsed_s / done * (total - done)).max(0.0));
        }
        self.seconds_per_pass.map(|s| s * total)
    }

    /// Takes in one piece of output (stdout or stderr, any split).
    pub fn read(&mut self, text: &str) {
        for line in text.split('\n') {
            self.read_line(line);
        }
    }

    fn read_line(&mut self, line: &str) {
        if let Some(total) = after_number(line, "computing over ")
            .or_else(|| after_number(line, "calculating perplexity over "))
        {
            self.total = Some(total as u32);
        }
        if let Some(at) = line.find(" seconds per pass") {
            let head = &line[..at];
            let number = head.rsplit(' ').next().unwrap_or_default();
            self.seconds_per_pass = number.parse().ok();
        }
        // The reference pass prints `[k]ppl,` for chunk k; the KLD pass a row per chunk.
        for piece in line.split('[').skip(1) {
            if let Some(k) = piece
                .split_once(']')
                .and_then(|(k, _)| k.parse::<u32>().ok())
            {
                self.done = self.done.max(k);
            }
        }
        if let Some(k) = chunk_row(line) {
            self.done = self.done.max(k);
        }
    }
}

/// The integer right after `marker` in `line`.
fn after_number(line: &str, marker: &str) -> Option<u64> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A KLD table row: a chunk number then figures with `±`.
fn chunk_row(line: &str) -> Option<u32> {
    let mut words = line.split_whitespace();
    let k = words.next()?.parse().ok()?;
    line.contains('±').then_some(k)
}

/// What llama-perplexity said when it failed for a reason the user can fix; `None` otherwise.
pub fn known_failure(output: &str) -> Option<KnownFailure> {
    if let Some(line) = output
        .lines()
        .find(|l| l.contains("the data file you provided tokenizes to only"))
    {
        let tokens = after_number(line, "tokenizes to only ")?;
        let needed = output
            .lines()
            .find_map(|l| after_number(l, "you need at least "));
        return Some(KnownFailure::CorpusTooShort { tokens, needed });
    }
    output
        .lines()
        .find(|l| l.contains("inconsistent vocabulary"))
        .map(|l| KnownFailure::Vocabulary(l.trim().to_owned()))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnownFailure {
    /// Fewer than two windows of tokens in the corpus.
    CorpusTooShort {
        tokens: u64,
        needed: Option<u64>,
    },
    Vocabulary(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    // Printed by the pinned llama-perplexity for Gemma 3 270M Q4_0 against its F16 (4 × 512).
    const PRINTOUT: &str = "
chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p
   1      45.0849 ±    9.4247       0.59067 ±    0.08324       0.60659 ±    0.04057    17.766 ±  1.731 %    64.314 ±  3.006 %
   2      57.6315 ±    8.3568       0.57733 ±    0.05953       0.59247 ±    0.02759    17.364 ±  1.209 %    61.765 ±  2.154 %

====== Perplexity statistics ======
Mean PPL(Q)                   :  89.188959 ±   9.725755
Mean PPL(base)                :  48.233450 ±   5.070331
Cor(ln(PPL(Q)), ln(PPL(base))):  92.65%
Mean ln(PPL(Q)/PPL(base))     :   0.614704 ±   0.041249
Mean PPL(Q)/PPL(base)         :   1.849110 ±   0.076275
Mean PPL(Q)-PPL(base)         :  40.955510 ±   5.378324

====== KL divergence statistics ======
Mean    KLD:   0.585545 ±   0.017401
Maximum KLD:   7.524590
99.9%   KLD:   4.361195
99.0%   KLD:   3.050154
95.0%   KLD:   1.436904
Median  KLD:   0.452338
Minimum KLD:   0.000103

====== Token probability statistics ======
Mean    Δp: -5.952 ± 0.475 %
Maximum Δp: 45.762%
RMS Δp    : 16.287 ± 0.792 %
Same top p: 60.294 ± 1.533 %
";

    #[test]
    fn the_final_statistics_are_read_as_printed() {
        let s = parse_stats(PRINTOUT).expect("parsed");
        assert_eq!((s.mean, s.mean_unc), (0.585545, 0.017401));
        assert_eq!(
            (s.median, s.p99, s.p999, s.max),
            (0.452338, 3.050154, 4.361195, 7.52459)
        );
        assert!((s.same_top - 0.60294).abs() < 1e-12 && (s.same_top_unc - 0.01533).abs() < 1e-12);
        assert!((s.rms_dp - 0.16287).abs() < 1e-12 && (s.mean_dp + 0.05952).abs() < 1e-12);
        assert_eq!((s.ppl, s.ppl_base), (89.188959, 48.23345));
        assert_eq!((s.ppl_ratio, s.ppl_ratio_unc), (1.84911, 0.076275));
    }

    #[test]
    fn an_undefined_uncertainty_reads_as_none_so_the_figures_can_be_stored() {
        // A candidate computing the reference's exact numbers: llama.cpp prints `-nan` for the
        // spread of identical log ratios.
        let identical = PRINTOUT.replace(
            "Mean PPL(Q)/PPL(base)         :   1.849110 ±   0.076275",
            "Mean PPL(Q)/PPL(base)         :   1.000000 ±       -nan",
        );
        assert_ne!(identical, PRINTOUT);
        let s = parse_stats(&identical).expect("parsed");
        assert_eq!((s.ppl_ratio, s.ppl_ratio_unc), (1.0, 0.0));
        let stored: KldStats =
            serde_json::from_str(&serde_json::to_string(&s).expect("json")).expect("read back");
        assert_eq!((stored.mean, stored.ppl_ratio_unc), (s.mean, 0.0));
    }

    #[test]
    fn a_printout_without_statistics_names_the_missing_line() {
        let err = parse_stats("chunk PPL\n   1   45.0 ± 9.4\n").unwrap_err();
        assert!(err.contains("Mean    KLD"), "{err}");
    }

    #[test]
    fn progress_counts_chunks_of_both_passes_and_reads_the_pace() {
        let mut p = ChunkProgress::default();
        p.read("0.00.8 I perplexity: calculating perplexity over 6 chunks, n_ctx=512, batch_size=2048, n_seq=4\n");
        p.read("0.04.1 I perplexity: 3.19 seconds per pass - ETA ");
        assert_eq!((p.total, p.seconds_per_pass), (Some(6), Some(3.19)));
        p.read("[1]24.9752,[2]32.3");
        p.read("541,[3]30.1,");
        assert_eq!(p.done, 3);
        assert_eq!(p.fraction(), Some(0.5));
        assert_eq!(p.eta_s(6.0), Some(6.0));

        let mut k = ChunkProgress::default();
        k.read("I kl_divergence: computing over 4 chunks, n_ctx=512, batch_size=2048, n_seq=4\n");
        k.read(&PRINTOUT[..400]);
        assert_eq!((k.total, k.done), (Some(4), 2));
    }

    #[test]
    fn a_short_corpus_is_recognised_with_its_numbers() {
        let out = "E perplexity: you need at least 1024 tokens to evaluate perplexity with a context of 512\nE perplexity: the data file you provided tokenizes to only 700 tokens\n";
        assert_eq!(
            known_failure(out),
            Some(KnownFailure::CorpusTooShort {
                tokens: 700,
                needed: Some(1024)
            })
        );
        assert_eq!(known_failure("all good"), None);
    }
}
