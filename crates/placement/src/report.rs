//! One planning operation, written once for the API, the CLI and the UI: plan (or solve) a model
//! on a rig, then the flags, the speed ceiling and the problems a user should see.

use serde::{Deserialize, Serialize};

use super::ceiling::{ceiling_across, SpeedCeiling};
use super::compute::{
    cache_types_note, compute_estimate_note, flash_attention_note, host_layers_note,
};
use super::flags::{command_line, to_args_for, FlagError, Offload};
use super::link::{rpc_servers, RemoteBox};
use super::model::ModelShape;
use super::options::{DeviceId, PlacementOptions};
use super::plan::{plan, DeviceSpec, Plan, PlanError};
use super::solver::solve_across;

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
    report_across(model, model_path, devices, &[], options, auto)
}

/// As [`report`] on a rig of several boxes: `devices` holds the lent ones (`RPC…`) of `boxes`.
/// Options as given that name no `--rpc` server use every box's (the rig is what is lent); the
/// ceiling counts the links, and a link that takes much of each token's time is a problem.
pub fn report_across(
    model: &ModelShape,
    model_path: &str,
    devices: &[DeviceSpec],
    boxes: &[RemoteBox],
    options: &PlacementOptions,
    auto: bool,
) -> Result<PlanReport, ReportError> {
    let (options, plan, mut notes) = if auto {
        let s = solve_across(model, devices, boxes, options)?;
        (s.options, s.plan, s.notes)
    } else {
        let mut options = options.clone();
        if options.rpc_servers.is_empty() {
            options.rpc_servers = rpc_servers(boxes);
        }
        let plan = plan(model, devices, &options)?;
        (options, plan, Vec::new())
    };
    notes.extend(compute_estimate_note(model));
    notes.extend(host_layers_note(&plan, &options));
    notes.extend(flash_attention_note(model, &options));
    notes.extend(cache_types_note(model, &options));
    let ceiling = ceiling_across(model, &plan, boxes);
    notes.extend(load_notes(&ceiling));
    if boxes.iter().any(|b| b.endpoint.starts_with("box")) && !options.rpc_servers.is_empty() {
        notes.push("boxN:50052 in --rpc stands for the address of that box's rpc-server (llama.cpp's default port): Rigdeck's fleet tunnel gives the real one".into());
    }
    let offload = Offload::for_devices(devices.iter().map(|d| &d.id));
    let args_result: Result<Vec<String>, FlagError> = to_args_for(model_path, &options, offload);
    let (args, command) = match args_result {
        Ok(args) => {
            let line = command_line("llama-server", &args);
            (args, Ok(line))
        }
        Err(err) => (Vec::new(), Err(err.to_string())),
    };
    let mut problems = problems(model, &options, &plan);
    let (slow, costly) = slow_links(&ceiling);
    problems.extend(slow);
    notes.extend(costly);
    Ok(PlanReport {
        problems,
        ceiling,
        fits: plan.fits(),
        options,
        plan,
        args,
        command_line: command,
        notes,
    })
}

/// Share of a generated token's time a link may take before the plan says it is too slow for
/// the split (a problem: the link takes as long as all the rest, so it at least halves the speed).
pub const SLOW_LINK_SHARE: f64 = 0.5;
/// Share past which the plan notes what a link costs (the split still runs at a fair speed).
pub const COSTLY_LINK_SHARE: f64 = 0.25;

/// Each link that takes more than [`SLOW_LINK_SHARE`] of a generated token's time (problems), and
/// each that takes more than [`COSTLY_LINK_SHARE`] of it (notes), with figures.
fn slow_links(ceiling: &SpeedCeiling) -> (Vec<String>, Vec<String>) {
    let Some(tps) = ceiling.tokens_per_s else {
        return (Vec::new(), Vec::new());
    };
    let token = 1.0 / tps;
    let (mut problems, mut notes) = (Vec::new(), Vec::new());
    for l in &ceiling.links {
        let share = l.seconds_per_token / token;
        let verdict = if share > SLOW_LINK_SHARE {
            "is too slow for this split"
        } else if share > COSTLY_LINK_SHARE {
            "costs this split much of its speed"
        } else {
            continue;
        };
        let said = format!(
            "the link to {} ({}) {verdict}: it takes {:.2} ms of every token's {:.2} ms ({:.0} %), {} crossings of {} bytes each way at {} with {:.2} ms latency; without it the ceiling would be {:.1} tok/s, not {:.1}: use a faster link, or fewer boundaries (whole layers on the other box, not experts)",
            l.box_name,
            l.link.name,
            l.seconds_per_token * 1e3,
            token * 1e3,
            100.0 * share,
            l.crossings_per_token,
            l.bytes_per_token / u64::from(l.crossings_per_token.max(1)),
            l.link.throughput_text(),
            l.link.latency_s * 1e3,
            1.0 / (token - ceiling.link_seconds_per_token()).max(f64::MIN_POSITIVE),
            tps
        );
        match share > SLOW_LINK_SHARE {
            true => problems.push(said),
            false => notes.push(said),
        }
    }
    (problems, notes)
}

/// What the load sends over each link, and how long that takes at its throughput.
fn load_notes(ceiling: &SpeedCeiling) -> Vec<String> {
    ceiling
        .links
        .iter()
        .filter(|l| l.load_bytes > 0)
        .map(|l| {
            format!(
                "loading sends {} of weights to {} over {}: about {:.0} s",
                gib(l.load_bytes),
                l.box_name,
                l.link.describe(),
                l.load_seconds
            )
        })
        .collect()
}

/// The architecture of a draft head llama.cpp loads only beside its target model
/// (`llama_context` refuses it without one: it reads the target's embeddings and cache).
const DRAFT_HEAD: &str = "gemma4-assistant";

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn problems(model: &ModelShape, options: &PlacementOptions, plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    if model.architecture == DRAFT_HEAD {
        out.push(format!("this {DRAFT_HEAD} file is Gemma 4's draft head, not a model to serve: llama.cpp starts it only as the draft of the Gemma 4 model it was made for, over that model's embeddings and cache (llama-server -m GEMMA4.gguf -md THIS.gguf); on its own llama.cpp refuses it, and the figures above are not what it takes beside its model. Serve the Gemma 4 model and give this file as its draft model."));
    }
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
                options
                    .buffer_name(o.device)
                    .unwrap_or_else(|| o.device.buffer_name())
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
    use crate::link::Link;
    use crate::testing::{gpus, lend, moe_model, GIB, MIB};

    /// The note of `command`'s plan (an 8-layer MoE on one 80 GiB GPU) that begins with
    /// `opening`.
    fn offload_note(command: &str, opening: &str) -> Option<String> {
        let model = moe_model(8, 2, 150 * MIB, 300 * MIB);
        let parsed = parse_command(command).unwrap();
        let r = report(&model, "m.gguf", &gpus(1, 80 * GIB), &parsed.options, false).unwrap();
        r.notes.into_iter().find(|n| n.starts_with(opening))
    }

    #[test]
    fn host_layers_beside_a_gpu_are_noted_under_the_offload_threshold() {
        let note = |command: &str| offload_note(command, "Layers in host memory");
        assert!(note("llama-server -m m.gguf -ngl 4 -ub 16").is_some());
        assert_eq!(note("llama-server -m m.gguf -ngl 4"), None);
        assert_eq!(
            note("llama-server -m m.gguf -ngl 4 -ub 16 --no-op-offload"),
            None
        );
        assert_eq!(note("llama-server -m m.gguf -ngl 99 -ub 16"), None);
    }

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
    fn a_split_across_boxes_counts_its_link_and_a_slow_one_is_said() {
        let model = moe_model(80, 80, 600 * MIB, 0);
        let mut rig = gpus(2, 24 * GIB);
        let remote = lend(&mut rig, 2, 24 * GIB, Link::named("10gbe").unwrap());
        let base = PlacementOptions::default();
        let r = report_across(
            &model,
            "/m/big.gguf",
            &rig,
            std::slice::from_ref(&remote),
            &base,
            true,
        )
        .unwrap();
        assert!(r.fits, "{:?}", r.problems);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        let line = r.command_line.clone().unwrap();
        assert!(
            line.starts_with("llama-server -m /m/big.gguf --rpc 10.0.0.2:50052 -dev RPC0,RPC1,CUDA0,CUDA1 -ngl all -ts "),
            "{line}"
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("loading sends") && n.contains("10 GbE")),
            "{:?}",
            r.notes
        );
        // The same split over a link with 20 ms of latency: a cost said, with the figures.
        let mut slow = remote;
        slow.link = Link::measured(10_000_000, 0.02).unwrap();
        let options = r.options.clone();
        let costly = report_across(
            &model,
            "/m/big.gguf",
            &rig,
            &[slow.clone()],
            &options,
            false,
        );
        let costly = costly.unwrap();
        assert!(costly.problems.is_empty(), "{:?}", costly.problems);
        let said = costly
            .notes
            .iter()
            .find(|n| n.contains("costs this split much of its speed"))
            .unwrap_or_else(|| panic!("{:?}", costly.notes));
        assert!(
            said.contains("box 2") && said.contains("10 MB/s") && said.contains("20.00 ms latency"),
            "{said}"
        );
        assert!(said.contains("2 crossings"), "{said}");
        // With 200 ms the link takes more than all the rest: too slow, a problem.
        slow.link = Link::measured(10_000_000, 0.2).unwrap();
        let r = report_across(&model, "/m/big.gguf", &rig, &[slow], &options, false).unwrap();
        let said = r
            .problems
            .iter()
            .find(|p| p.contains("too slow for this split"))
            .unwrap_or_else(|| panic!("{:?}", r.problems));
        assert!(said.contains("200.00 ms latency"), "{said}");
    }

    #[test]
    fn options_without_servers_on_a_rig_of_boxes_use_every_box() {
        let model = moe_model(8, 8, 100 * MIB, 0);
        let mut rig = gpus(1, 24 * GIB);
        let remote = lend(&mut rig, 1, 24 * GIB, Link::named("1gbe").unwrap());
        let r = report_across(
            &model,
            "m.gguf",
            &rig,
            &[remote],
            &PlacementOptions::default(),
            false,
        )
        .unwrap();
        assert_eq!(r.options.rpc_servers.len(), 1);
        assert!(!r
            .plan
            .device(DeviceId::Rpc(0))
            .unwrap()
            .usage
            .layers
            .is_empty());
        assert!(r.command_line.unwrap().contains("--rpc 10.0.0.2:50052"));
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
