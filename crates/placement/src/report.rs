//! One planning operation, written once for the API, the CLI and the UI: plan (or solve) a model
//! on a rig, then the flags, the speed ceiling and the problems a user should see.

use serde::{Deserialize, Serialize};

use super::ceiling::{ceiling, SpeedCeiling};
use super::compute::compute_estimate_note;
use super::flags::{command_line, to_args_for, FlagError, Offload};
use super::model::ModelShape;
use super::options::{DeviceId, PlacementOptions};
use super::plan::{plan, DeviceSpec, Plan, PlanError};
use super::solver::solve;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    pub options: PlacementOptions,
    pub plan: Plan,
    pub fits: bool,
    /// llama-server arguments after the program name.
    pub args: Vec<String>,
    /// The same as one copyable line, or why the options cannot be written as flags.
    pub command_line: Result<String, String>,
    pub ceiling: SpeedCeiling,
    /// What is wrong or risky, most important first.
    pub problems: Vec<String>,
    /// What the solver decided, or what the reader of a pasted command assumed.
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// Plans with `options` as given, or (with `auto`) lets the solver choose the placement.
pub fn report(
    model: &ModelShape,
    model_path: &str,
    devices: &[DeviceSpec],
    options: &PlacementOptions,
    auto: bool,
) -> Result<PlanReport, ReportError> {
    let (options, plan, mut notes) = if auto {
        let s = solve(model, devices, options)?;
        (s.options, s.plan, s.notes)
    } else {
        (options.clone(), plan(model, devices, options)?, Vec::new())
    };
    notes.extend(compute_estimate_note(model));
    let offload = Offload::for_devices(devices.iter().map(|d| &d.id));
    let args_result: Result<Vec<String>, FlagError> = to_args_for(model_path, &options, offload);
    let (args, command) = match args_result {
        Ok(args) => {
            let line = command_line("llama-server", &args);
            (args, Ok(line))
        }
        Err(err) => (Vec::new(), Err(err.to_string())),
    };
    Ok(PlanReport {
        problems: problems(model, &options, &plan),
        ceiling: ceiling(model, &plan),
        fits: plan.fits(),
        options,
        plan,
        args,
        command_line: command,
        notes,
    })
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn problems(model: &ModelShape, options: &PlacementOptions, plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for d in plan.devices.iter().filter(|d| d.overflow_bytes > 0) {
        out.push(format!(
            "{} needs {} but has {} free after its reserve: over by {}",
            d.spec.name,
            gib(d.usage.total_bytes()),
            gib(d.spec.capacity_bytes.saturating_sub(d.spec.reserve_bytes)),
            gib(d.overflow_bytes)
        ));
    }
    piled_experts(plan, &mut out);
    for (i, (o, &hits)) in options
        .overrides
        .iter()
        .zip(&plan.override_hits)
        .enumerate()
    {
        if hits == 0 {
            out.push(format!(
                "-ot #{} '{}={}' takes no tensor: an earlier -ot already took everything it matches (a CPU catch-all must come last), or the pattern matches no tensor of this model",
                i + 1,
                o.pattern,
                o.device.buffer_name()
            ));
        }
    }
    // Experts alone on a riser card count too: each token's activations cross the slow link.
    let gpus_in_use: Vec<_> = plan
        .devices
        .iter()
        .filter(|d| {
            matches!(d.spec.id, DeviceId::Gpu(_))
                && !(d.usage.layers.is_empty() && d.usage.expert_layers.is_empty())
        })
        .collect();
    if gpus_in_use.len() > 1 {
        for d in gpus_in_use.iter().filter(|d| d.spec.link_degraded) {
            out.push(format!("{} is on a degraded PCIe link but holds part of a split model: every token's activations cross that link", d.spec.name));
        }
    }
    if model.n_vocab == 0 {
        out.push(
            "the model's vocabulary size is unknown, so the output buffer is not counted".into(),
        );
    }
    out
}

/// The trap of seed 002: with a layer split, `-ncmoe` leaves every GPU-kept expert on the last card.
fn piled_experts(plan: &Plan, out: &mut Vec<String>) {
    let holders: Vec<_> = plan
        .devices
        .iter()
        .filter(|d| matches!(d.spec.id, DeviceId::Gpu(_)) && !d.usage.expert_layers.is_empty())
        .collect();
    let gpus_with_layers = plan
        .devices
        .iter()
        .filter(|d| matches!(d.spec.id, DeviceId::Gpu(_)) && !d.usage.layers.is_empty())
        .count();
    if let [only] = holders.as_slice() {
        if gpus_with_layers > 1 && only.usage.expert_layers.len() > 1 {
            out.push(format!(
                "all experts kept on GPUs sit on {} ({} layers) while the other cards hold none: -ncmoe with a layer split does this; give each card its own -ot block with a CPU catch-all last (automatic placement does)",
                only.spec.name,
                only.usage.expert_layers.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::parse_command;
    use crate::testing::{gpus, moe_model, GIB, MIB};

    #[test]
    fn the_seed_002_mistake_is_explained() {
        let model = moe_model(78, 3, 150 * MIB, 3 * GIB);
        let parsed = parse_command("llama-server -m glm.gguf -c 32768 -ngl 99 -ncmoe 60").unwrap();
        let r = report(
            &model,
            "glm.gguf",
            &gpus(4, 24 * GIB),
            &parsed.options,
            false,
        )
        .unwrap();
        assert!(!r.fits);
        assert!(r.problems[0].contains("over by"), "{:?}", r.problems);
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("-ncmoe with a layer split")),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn a_catch_all_before_a_card_block_is_pointed_out() {
        let model = moe_model(8, 0, 100 * MIB, 600 * MIB);
        let parsed =
            parse_command(r"llama-server -m m.gguf -ot exps=CPU -ot 'blk\.1\.ffn_.*_exps=CUDA0'")
                .unwrap();
        let r = report(&model, "m.gguf", &gpus(1, 24 * GIB), &parsed.options, false).unwrap();
        assert!(
            r.problems
                .iter()
                .any(|p| p.starts_with("-ot #2") && p.contains("must come last")),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn a_rig_without_gpus_gets_no_gpu_flags_planned_or_pasted() {
        let model = moe_model(8, 1, 100 * MIB, 200 * MIB);
        let cpu_only = gpus(0, 0);
        let auto = report(
            &model,
            "m.gguf",
            &cpu_only,
            &PlacementOptions::default(),
            true,
        )
        .unwrap();
        let pasted = parse_command("llama-server -m m.gguf -ngl 99 -ts 1,1 -mg 1 -ot exps=CPU")
            .unwrap()
            .options;
        let given = report(&model, "m.gguf", &cpu_only, &pasted, false).unwrap();
        for r in [auto, given] {
            let line = r.command_line.unwrap();
            assert!(line.starts_with("llama-server -m m.gguf -c "), "{line}");
            for flag in [" -ngl ", " -ts ", " -sm ", " -mg ", " -ot "] {
                assert!(!line.contains(flag), "{flag} in {line}");
            }
        }
    }

    #[test]
    fn auto_gives_a_fitting_plan_with_flags_and_a_ceiling() {
        let model = moe_model(78, 3, 150 * MIB, 3 * GIB);
        let base = PlacementOptions {
            context: 32_768,
            threads: Some(12),
            ..Default::default()
        };
        let r = report(&model, "/m/glm.gguf", &gpus(4, 24 * GIB), &base, true).unwrap();
        assert!(r.fits, "{:?}", r.problems);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        let line = r.command_line.unwrap();
        assert!(
            line.starts_with("llama-server -m /m/glm.gguf -ngl all -ts "),
            "{line}"
        );
        assert!(line.ends_with("-t 12 -kvu"), "{line}");
        assert!(r.ceiling.tokens_per_s.unwrap() > 5.0);
        // The written flags describe the same plan when read back.
        let reread = parse_command(&line).unwrap();
        let again = report(
            &model,
            "/m/glm.gguf",
            &gpus(4, 24 * GIB),
            &reread.options,
            false,
        )
        .unwrap();
        assert_eq!(again.plan, r.plan);
    }
}
