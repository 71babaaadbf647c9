//! llama.cpp across boxes: the paired rigs that lend devices to a profile over RPC through the
//! fleet's channel (`lenders: [{rig, devices}]`), checked at save. Such a profile starts as a
//! gang: the leases first, then this rig's llama-server with `--rpc` to their endpoints.

use serde::{Deserialize, Serialize};

use super::profile::ProfileError;
use crate::engines::EngineKind;

/// The most devices one rig lends to a profile (what one lease takes).
const MAX_DEVICES: usize = 16;

/// A paired rig and the devices it lends, named as llama.cpp lists them there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lender {
    /// The rig's fleet name (`rigdeck fleet list`).
    pub rig: String,
    /// `["CPU"]`, `["CUDA0", "CUDA1"]`…
    pub devices: Vec<String>,
}

/// Checks the lenders of a profile whose engine is `kind`; `multi_node` says whether the profile
/// also runs across boxes the vLLM way (the two do not mix).
pub fn validate(
    lenders: &[Lender],
    kind: EngineKind,
    multi_node: bool,
) -> Result<(), ProfileError> {
    let bad = |reason: String| Err(ProfileError::BadLenders { reason });
    if lenders.is_empty() {
        return Ok(());
    }
    if kind != EngineKind::LlamaCpp {
        return bad(format!(
            "{kind} cannot borrow devices over RPC: lenders are for llama.cpp profiles (vLLM and SGLang span boxes with multi_node)"
        ));
    }
    if multi_node {
        return bad("a profile has lenders or multi_node, not both: remove one".to_owned());
    }
    for (i, lender) in lenders.iter().enumerate() {
        let rig = lender.rig.trim();
        if rig.is_empty() || rig.chars().any(char::is_control) {
            return bad(format!(
                "lender {} has no usable rig name: give a paired rig's name as `rigdeck fleet list` shows it",
                i + 1
            ));
        }
        if lenders[..i].iter().any(|l| l.rig == lender.rig) {
            return bad(format!(
                "the rig '{rig}' is named twice: list all its devices under one lender"
            ));
        }
        let usable = |d: &String| {
            !d.is_empty()
                && d.len() <= 32
                && d.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if lender.devices.is_empty()
            || lender.devices.len() > MAX_DEVICES
            || !lender.devices.iter().all(usable)
        {
            return bad(format!(
                "the devices of '{rig}' ({:?}) are not a list of llama.cpp device names: give 1 to {MAX_DEVICES}, e.g. [\"CPU\"] or [\"CUDA0\", \"CUDA1\"] (`llama-server --list-devices` on that rig)",
                lender.devices
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lender(rig: &str, devices: &[&str]) -> Lender {
        Lender {
            rig: rig.into(),
            devices: devices.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    #[test]
    fn lenders_are_checked_with_what_to_do() {
        let ok = [
            lender("mini", &["CPU"]),
            lender("tower", &["CUDA0", "CUDA1"]),
        ];
        assert!(validate(&ok, EngineKind::LlamaCpp, false).is_ok());
        let refusals = [
            (
                vec![lender("", &["CPU"])],
                EngineKind::LlamaCpp,
                false,
                "no usable rig name",
            ),
            (
                vec![lender("mini", &[])],
                EngineKind::LlamaCpp,
                false,
                "e.g. [\"CPU\"]",
            ),
            (
                vec![lender("mini", &["CPU,-H"])],
                EngineKind::LlamaCpp,
                false,
                "device names",
            ),
            (
                vec![lender("mini", &["CPU"]), lender("mini", &["CUDA0"])],
                EngineKind::LlamaCpp,
                false,
                "named twice",
            ),
            (
                vec![lender("mini", &["CPU"])],
                EngineKind::Vllm,
                false,
                "for llama.cpp profiles",
            ),
            (
                vec![lender("mini", &["CPU"])],
                EngineKind::LlamaCpp,
                true,
                "not both",
            ),
        ];
        for (lenders, kind, multi, said) in refusals {
            let err = validate(&lenders, kind, multi).unwrap_err().to_string();
            assert!(err.starts_with("lenders: ") && err.contains(said), "{err}");
        }
    }
}
