//! Recommended for this rig: the starter catalog (a data file a user can read, small models to
//! huge ones) with each candidate's quantizations planned on the rig ([`crate::hub_fit`]), one
//! quantization chosen per candidate and the candidates ranked by what fits this rig best.
//!
//! The ranking, best first:
//! 1. a candidate that fits before one that does not (those go last, the least short first);
//! 2. the placement class: on the GPUs, then experts in CPU RAM, then layers in CPU RAM, then
//!    CPU only ([`FitVerdict::rank`]);
//! 3. a speed ceiling that reads at a usable pace ([`USABLE_TOKENS_PER_S`] or more, or not
//!    known) before a slower one;
//! 4. the larger file first: within its class and pace, the more capable model.

use serde::{Deserialize, Serialize};
use std::cmp::{Ordering, Reverse};

use crate::hub_fit::QuantFit;
use crate::placement::verdict::FitVerdict;

/// A reply at fewer tokens per second than this reads slower than a person reads: a model that
/// slow ranks after the ones of its class that are faster, whatever its size.
pub const USABLE_TOKENS_PER_S: f64 = 10.0;

/// One model of the catalog, as the file lists it.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Candidate {
    pub repo: String,
    /// The quantization the catalog suggests.
    pub quant: String,
    /// `dense` or `moe`.
    pub kind: String,
    pub params: String,
    pub approx_gb: f64,
    pub why: String,
}

/// The catalog file: a sentence about it and its candidates.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Catalog {
    pub about: String,
    pub models: Vec<Candidate>,
}

impl Catalog {
    /// Reads the catalog's JSON; `source` names the file in the error.
    pub fn parse(text: &str, source: &str) -> Result<Catalog, String> {
        let catalog: Catalog = serde_json::from_str(text).map_err(|e| {
            format!("the model catalog {source} is not valid: {e}; fix the file or remove it")
        })?;
        if let Some(bad) = catalog
            .models
            .iter()
            .find(|m| m.repo.split('/').filter(|p| !p.is_empty()).count() != 2)
        {
            return Err(format!(
                "the model catalog {source} names '{}', which is not owner/name; fix the file",
                bad.repo
            ));
        }
        Ok(catalog)
    }
}

/// One candidate planned on the rig: the quantization to run and what it will be.
#[derive(Clone, Debug, Serialize)]
pub struct Recommendation {
    pub repo: String,
    /// The quantization to run: the catalog's when it fits, else the repository's that fits best.
    pub quant: String,
    pub kind: String,
    pub params: String,
    pub fits: bool,
    pub verdict: Option<FitVerdict>,
    /// The verdict in words.
    pub summary: String,
    pub total_bytes: u64,
    /// Decode speed ceiling (tokens/s), when the devices' bandwidths are known.
    pub tokens_per_s: Option<f64>,
    /// Why the catalog lists it.
    pub why: String,
    /// Why this quantization was chosen.
    pub choice: String,
}

/// A candidate that could not be planned, and why.
#[derive(Clone, Debug, Serialize)]
pub struct LeftOut {
    pub repo: String,
    pub reason: String,
}

/// The quantization to offer for `candidate` among its planned `fits`: the catalog's if it fits,
/// else the one `hub_fit` recommends (the best placement class, the largest file in it), else
/// (nothing fits) the catalog's or the smallest; `None` when no quantization was planned.
pub fn recommend(candidate: &Candidate, fits: &[QuantFit]) -> Option<Recommendation> {
    let planned = |f: &&QuantFit| f.verdict.is_some();
    let suggested = fits
        .iter()
        .filter(planned)
        .find(|f| f.label.eq_ignore_ascii_case(&candidate.quant));
    let fitting = |f: &&QuantFit| f.verdict.as_ref().is_some_and(FitVerdict::fits);
    let (chosen, choice) = if let Some(quant) = suggested.filter(fitting) {
        (
            quant,
            format!("{}, the catalog's suggestion, fits", quant.label),
        )
    } else if let Some(quant) = fits.iter().find(|f| f.recommended) {
        let why = match suggested {
            Some(_) => format!("{} does not fit", candidate.quant),
            None => format!("{} is not in the repository", candidate.quant),
        };
        (quant, format!("{why}: {} fits best", quant.label))
    } else {
        let quant =
            suggested.or_else(|| fits.iter().filter(planned).min_by_key(|f| f.total_bytes))?;
        (
            quant,
            format!("no quantization fits; {} is the closest", quant.label),
        )
    };
    Some(Recommendation {
        repo: candidate.repo.clone(),
        quant: chosen.label.clone(),
        kind: candidate.kind.clone(),
        params: candidate.params.clone(),
        fits: chosen.verdict.as_ref().is_some_and(FitVerdict::fits),
        verdict: chosen.verdict.clone(),
        summary: chosen.summary.clone(),
        total_bytes: chosen.total_bytes,
        tokens_per_s: chosen.tokens_per_s,
        why: candidate.why.clone(),
        choice,
    })
}

/// Why no quantization of a repository could be planned, from its fits.
pub fn unplanned_reason(fits: &[QuantFit]) -> String {
    fits.iter()
        .find_map(|f| f.error.clone())
        .unwrap_or_else(|| "the repository has no GGUF quantization".to_owned())
}

/// Sorts recommendations best first (see the module's rule).
pub fn rank(recommendations: &mut [Recommendation]) {
    recommendations.sort_by(compare);
}

fn compare(a: &Recommendation, b: &Recommendation) -> Ordering {
    key(a).cmp(&key(b)).then_with(|| a.repo.cmp(&b.repo))
}

/// Lower is better: fits, placement class, pace, then size (or shortfall for what does not fit).
fn key(r: &Recommendation) -> (bool, u8, bool, Reverse<u64>, u64) {
    match &r.verdict {
        Some(FitVerdict::DoesNotFit { short_bytes }) => {
            (true, u8::MAX, false, Reverse(0), *short_bytes)
        }
        Some(verdict) => (false, verdict.rank(), slow(r), Reverse(r.total_bytes), 0),
        None => (true, u8::MAX, true, Reverse(0), u64::MAX),
    }
}

fn slow(r: &Recommendation) -> bool {
    r.tokens_per_s.is_some_and(|t| t < USABLE_TOKENS_PER_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(repo: &str, quant: &str) -> Candidate {
        Candidate {
            repo: repo.into(),
            quant: quant.into(),
            kind: "dense".into(),
            params: "1B".into(),
            approx_gb: 1.0,
            why: "a test".into(),
        }
    }

    fn fit(label: &str, bytes: u64, verdict: FitVerdict, speed: Option<f64>) -> QuantFit {
        QuantFit {
            label: label.into(),
            total_bytes: bytes,
            summary: verdict.summary(),
            verdict: Some(verdict),
            devices: Vec::new(),
            tokens_per_s: speed,
            command_line: None,
            error: None,
            recommended: false,
        }
    }

    fn entry(repo: &str, bytes: u64, verdict: FitVerdict, speed: Option<f64>) -> Recommendation {
        let fits = [fit("Q4_K_M", bytes, verdict, speed)];
        recommend(&candidate(repo, "Q4_K_M"), &fits).expect("planned")
    }

    fn repos(list: &[Recommendation]) -> Vec<&str> {
        list.iter().map(|r| r.repo.as_str()).collect()
    }

    #[test]
    fn the_catalogs_quant_is_kept_when_it_fits() {
        let fits = [
            fit("Q8_0", 20, FitVerdict::OnGpus { gpus: 1 }, None),
            fit("Q4_K_M", 10, FitVerdict::OnGpus { gpus: 1 }, None),
        ];
        let chosen = recommend(&candidate("o/m", "q4_k_m"), &fits).expect("planned");
        assert_eq!(chosen.quant, "Q4_K_M");
        assert!(chosen.fits);
        assert!(chosen.choice.contains("suggestion"), "{}", chosen.choice);
    }

    #[test]
    fn a_quant_that_does_not_fit_gives_way_to_the_repositorys_recommended_one() {
        let mut small = fit("Q2_K", 5, FitVerdict::CpuOnly, None);
        small.recommended = true;
        let fits = [
            fit(
                "Q4_K_M",
                10,
                FitVerdict::DoesNotFit { short_bytes: 3 },
                None,
            ),
            small,
        ];
        let chosen = recommend(&candidate("o/m", "Q4_K_M"), &fits).expect("planned");
        assert_eq!(chosen.quant, "Q2_K");
        assert!(chosen.fits);
        assert_eq!(chosen.choice, "Q4_K_M does not fit: Q2_K fits best");
        let missing = recommend(&candidate("o/m", "IQ1_S"), &fits).expect("planned");
        assert_eq!(
            missing.choice,
            "IQ1_S is not in the repository: Q2_K fits best"
        );
    }

    #[test]
    fn nothing_fitting_offers_the_catalogs_quant_marked_as_not_fitting() {
        let fits = [
            fit("Q2_K", 5, FitVerdict::DoesNotFit { short_bytes: 1 }, None),
            fit(
                "Q4_K_M",
                10,
                FitVerdict::DoesNotFit { short_bytes: 6 },
                None,
            ),
        ];
        let chosen = recommend(&candidate("o/m", "Q4_K_M"), &fits).expect("planned");
        assert_eq!(chosen.quant, "Q4_K_M");
        assert!(!chosen.fits);
        let elsewhere = recommend(&candidate("o/m", "BF16"), &fits).expect("planned");
        assert_eq!(
            elsewhere.quant, "Q2_K",
            "the smallest when the catalog's is absent"
        );
    }

    #[test]
    fn a_repository_with_no_planned_quant_is_not_recommended() {
        let mut broken = fit("Q4_K_M", 10, FitVerdict::CpuOnly, None);
        broken.verdict = None;
        broken.error = Some("bad magic".into());
        assert!(recommend(&candidate("o/m", "Q4_K_M"), &[broken.clone()]).is_none());
        assert_eq!(unplanned_reason(&[broken]), "bad magic");
        assert_eq!(
            unplanned_reason(&[]),
            "the repository has no GGUF quantization"
        );
    }

    #[test]
    fn placement_class_comes_first_then_pace_then_size() {
        let mut list = vec![
            entry(
                "o/huge",
                200,
                FitVerdict::DoesNotFit { short_bytes: 90 },
                None,
            ),
            entry(
                "o/closer",
                150,
                FitVerdict::DoesNotFit { short_bytes: 10 },
                None,
            ),
            entry(
                "o/layers",
                60,
                FitVerdict::LayersInRam { layers: 3 },
                Some(30.0),
            ),
            entry(
                "o/experts",
                80,
                FitVerdict::ExpertsInRam { layers: 9 },
                Some(20.0),
            ),
            entry(
                "o/small-gpu",
                5,
                FitVerdict::OnGpus { gpus: 1 },
                Some(200.0),
            ),
            entry("o/big-gpu", 40, FitVerdict::OnGpus { gpus: 4 }, Some(25.0)),
            entry("o/slow-gpu", 70, FitVerdict::OnGpus { gpus: 4 }, Some(4.0)),
        ];
        rank(&mut list);
        assert_eq!(
            repos(&list),
            [
                "o/big-gpu",
                "o/small-gpu",
                "o/slow-gpu",
                "o/experts",
                "o/layers",
                "o/closer",
                "o/huge"
            ]
        );
        assert!(!list[5].fits && !list[6].fits);
    }

    #[test]
    fn a_cpu_only_rig_gets_the_largest_model_that_still_reads_at_a_usable_pace() {
        let mut list = vec![
            entry("o/27b", 17, FitVerdict::CpuOnly, Some(3.0)),
            entry("o/270m", 1, FitVerdict::CpuOnly, Some(150.0)),
            entry("o/4b", 3, FitVerdict::CpuOnly, Some(14.0)),
            entry("o/8b", 5, FitVerdict::CpuOnly, Some(8.5)),
            entry("o/moe", 19, FitVerdict::DoesNotFit { short_bytes: 3 }, None),
        ];
        rank(&mut list);
        assert_eq!(repos(&list), ["o/4b", "o/270m", "o/27b", "o/8b", "o/moe"]);
    }

    #[test]
    fn an_unknown_pace_ranks_by_size_alone() {
        let mut list = vec![
            entry("o/small", 1, FitVerdict::CpuOnly, None),
            entry("o/large", 9, FitVerdict::CpuOnly, None),
        ];
        rank(&mut list);
        assert_eq!(repos(&list), ["o/large", "o/small"]);
    }

    #[test]
    fn the_catalog_names_a_bad_entry_and_the_file() {
        let text = r#"{"about": "a", "models": [{"repo": "noslash", "quant": "Q4_K_M",
            "kind": "dense", "params": "1B", "approx_gb": 1, "why": "w"}]}"#;
        let error = Catalog::parse(text, "/etc/catalog.json").expect_err("bad repo");
        assert!(
            error.contains("noslash") && error.contains("/etc/catalog.json"),
            "{error}"
        );
        let error = Catalog::parse("{", "/etc/catalog.json").expect_err("bad json");
        assert!(error.contains("not valid"), "{error}");
    }

    #[test]
    fn the_shipped_catalog_parses_and_names_small_models_for_a_laptop() {
        let text = include_str!("../../../assets/hub/starter-catalog.json");
        let catalog = Catalog::parse(text, "starter-catalog.json").expect("the shipped catalog");
        assert!(
            catalog.models.iter().any(|m| m.approx_gb < 1.0),
            "a model under 1 GB"
        );
        assert!(
            catalog.models.iter().any(|m| m.approx_gb > 100.0),
            "a huge model"
        );
    }
}
