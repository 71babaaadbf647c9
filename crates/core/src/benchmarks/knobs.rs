//! What a tuning knob changes in a launch profile: a placement setting (threads, batch sizes,
//! `-ncmoe`, layers on GPUs, tensor split, KV types, slots, flash attention), the speculative
//! draft count, or any engine flag written after Rigdeck's own. Each value is applied to a
//! copy of the profile; the copy is validated like any profile before an engine sees it. Which
//! knobs change the numbers the model computes (KV cache types, flash attention, the model file,
//! ik_llama.cpp's options) and which only place or schedule the work is said here too: a quality
//! floor measures the KL divergence again only when the first kind changed.

use crate::bench::tune::Assignment;
use crate::placement::options::EXPERTS_REGEX;
use crate::placement::{DeviceId, KvType, PlacementOptions, TensorOverride};
use crate::profiles::profile::LaunchProfile;

/// Knob names the tuning form offers (any `-flag` or `--flag` works besides).
pub const SETTINGS: [&str; 13] = [
    "threads",
    "batch",
    "ubatch",
    "parallel",
    "n_gpu_layers",
    "n_cpu_moe",
    "gpu_expert_layers",
    "tensor_split",
    "cache_type",
    "cache_type_k",
    "cache_type_v",
    "flash_attention",
    "draft_max",
];

/// Settings that place or schedule the work without changing what is computed.
const SAME_NUMERICS_SETTINGS: [&str; 9] = [
    "threads",
    "batch",
    "ubatch",
    "parallel",
    "n_gpu_layers",
    "n_cpu_moe",
    "gpu_expert_layers",
    "tensor_split",
    "draft_max",
];

/// Engine flags of the same kind: threads, batch sizes, slots, layers and tensors placed on
/// devices, memory mapping, speculative drafts (the target model's numbers are unchanged).
const SAME_NUMERICS_FLAGS: [&str; 37] = [
    "-t",
    "--threads",
    "-tb",
    "--threads-batch",
    "-b",
    "--batch-size",
    "-ub",
    "--ubatch-size",
    "-np",
    "--parallel",
    "-cb",
    "--cont-batching",
    "-ngl",
    "--gpu-layers",
    "--n-gpu-layers",
    "-ts",
    "--tensor-split",
    "-sm",
    "--split-mode",
    "-mg",
    "--main-gpu",
    "-dev",
    "--device",
    "-ot",
    "--override-tensor",
    "-ncmoe",
    "--n-cpu-moe",
    "-cmoe",
    "--cpu-moe",
    "-nkvo",
    "--no-kv-offload",
    "--numa",
    "--no-mmap",
    "--mlock",
    "--draft-max",
    "--draft-min",
    "--prio",
];

/// Whether a knob can change the numbers the model computes, so a quality floor must measure a
/// trial that changes it. KV cache types, flash attention and any flag not known to only place
/// or schedule the work (`-mla`, `-fmoe`, `--model`, `--rope-scaling`…) count as changing them.
pub fn changes_numerics(knob: &str) -> bool {
    let knob = knob.trim();
    !SAME_NUMERICS_SETTINGS.contains(&knob) && !SAME_NUMERICS_FLAGS.contains(&knob)
}

/// The profile with only the knobs that change numerics applied: two trials whose numerics
/// profiles are equal compute the same numbers, so one KL divergence serves both.
pub fn numerics_of(base: &LaunchProfile, values: &Assignment) -> Result<LaunchProfile, String> {
    let mut profile = base.clone();
    for (knob, value) in values.iter().filter(|(knob, _)| changes_numerics(knob)) {
        apply(&mut profile, knob, value)?;
    }
    Ok(profile)
}

/// Sets `knob` to `value` in `profile`; the message names the knob, the value and the fix.
pub fn apply(profile: &mut LaunchProfile, knob: &str, value: &str) -> Result<(), String> {
    let value = value.trim();
    let placement = &mut profile.placement;
    match knob {
        "threads" => placement.threads = Some(number(knob, value, 1)?),
        "batch" => placement.batch = number(knob, value, 1)?,
        "ubatch" => placement.ubatch = number(knob, value, 1)?,
        "parallel" => placement.parallel = number(knob, value, 1)?,
        "n_gpu_layers" => placement.n_gpu_layers = Some(number(knob, value, 0)?),
        "n_cpu_moe" => set_cpu_moe(placement, number(knob, value, 0)?),
        "gpu_expert_layers" => set_gpu_experts(placement, &per_gpu(knob, value)?),
        "tensor_split" => placement.tensor_split = split(value)?,
        "cache_type" => {
            let kind = kv_type(knob, value)?;
            placement.cache_type_k = kind;
            placement.cache_type_v = kind;
        }
        "cache_type_k" => placement.cache_type_k = kv_type(knob, value)?,
        "cache_type_v" => placement.cache_type_v = kv_type(knob, value)?,
        "flash_attention" => placement.flash_attention = switch(knob, value)?,
        "draft_max" => {
            number(knob, value, 0)?;
            set_flag(&mut profile.extra_args, "--draft-max", value);
        }
        flag if flag.starts_with('-') && flag.len() > 1 && !flag.contains(char::is_whitespace) => {
            set_flag(&mut profile.extra_args, flag, value)
        }
        other => {
            return Err(format!(
                "'{other}' is not a knob: use one of {}, or an engine flag such as --draft-max",
                SETTINGS.join(", ")
            ))
        }
    }
    Ok(())
}

fn number(knob: &str, value: &str, min: u32) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= min)
        .ok_or_else(|| format!("{knob} = '{value}' is not a whole number of at least {min}"))
}

fn kv_type(knob: &str, value: &str) -> Result<KvType, String> {
    KvType::parse(value).ok_or_else(|| {
        let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
        format!(
            "{knob} = '{value}' is not a KV cache type: use one of {}",
            names.join(", ")
        )
    })
}

fn switch(knob: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{knob} = '{value}': use on or off")),
    }
}

/// `3,1` or `3/1`: proportions per GPU, as `-ts` reads them.
fn split(value: &str) -> Result<Vec<f64>, String> {
    crate::placement::flags::parse_split("tensor_split", value)
        .ok()
        .filter(|parts| parts.iter().any(|v| *v > 0.0))
        .ok_or_else(|| {
            format!("tensor_split = '{value}' is not proportions per GPU, e.g. 3,1 (three quarters on GPU 0)")
        })
}

/// `-ncmoe N`: the experts of the first N layers on the CPU. Earlier experts-to-CPU overrides
/// (`-cmoe` or another `-ncmoe`) are replaced; other overrides keep their order after these.
fn set_cpu_moe(placement: &mut PlacementOptions, layers: u32) {
    let is_cpu_experts =
        |o: &TensorOverride| o.device == DeviceId::Cpu && o.pattern.ends_with(EXPERTS_REGEX);
    let mut overrides = PlacementOptions::n_cpu_moe_overrides(layers);
    overrides.extend(placement.overrides.drain(..).filter(|o| !is_cpu_experts(o)));
    placement.overrides = overrides;
}

/// `8,6`: layers whose experts each GPU keeps, in order.
fn per_gpu(knob: &str, value: &str) -> Result<Vec<u32>, String> {
    value
        .split([',', '/'])
        .map(|part| part.trim().parse::<u32>().ok())
        .collect::<Option<Vec<u32>>>()
        .filter(|counts| !counts.is_empty())
        .ok_or_else(|| {
            format!("{knob} = '{value}' is not expert layers per GPU, e.g. 8,6 (GPU 0 keeps the experts of layers 0–7, GPU 1 of 8–13)")
        })
}

/// The experts of the first layers on the GPUs, `counts[g]` layers each in layer order (as
/// the layers themselves are split), every other expert on the CPU: the `-ot` lines the seeds
/// write by hand. Earlier expert overrides are replaced; others keep their order after these.
fn set_gpu_experts(placement: &mut PlacementOptions, counts: &[u32]) {
    let mut overrides = Vec::new();
    let mut layer = 0;
    for (gpu, count) in counts.iter().enumerate() {
        for _ in 0..*count {
            overrides.push(TensorOverride {
                pattern: format!(r"blk\.{layer}{EXPERTS_REGEX}"),
                device: DeviceId::Gpu(gpu as u32),
            });
            layer += 1;
        }
    }
    overrides.push(PlacementOptions::cpu_moe_override());
    overrides.extend(
        placement
            .overrides
            .drain(..)
            .filter(|o| !o.pattern.ends_with(EXPERTS_REGEX)),
    );
    placement.overrides = overrides;
}

/// Sets `flag value` in the extra arguments, replacing the flag where it is already given.
/// The value `off` removes the flag; an empty value leaves it as a switch.
fn set_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    if let Some(at) = args.iter().position(|a| a == flag) {
        let takes_value = args.get(at + 1).is_some_and(|next| !next.starts_with('-'));
        args.drain(at..at + 1 + usize::from(takes_value));
    }
    match value {
        "off" => {}
        "" => args.push(flag.to_owned()),
        _ => args.extend([flag.to_owned(), value.to_owned()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_land_in_the_placement() {
        let mut profile = LaunchProfile::default();
        apply(&mut profile, "threads", "8").expect("threads");
        apply(&mut profile, "ubatch", "256").expect("ubatch");
        apply(&mut profile, "cache_type", "q8_0").expect("kv");
        apply(&mut profile, "tensor_split", "3/1").expect("split");
        apply(&mut profile, "flash_attention", "off").expect("fa");
        let p = &profile.placement;
        assert_eq!((p.threads, p.ubatch), (Some(8), 256));
        assert_eq!(
            (p.cache_type_k, p.cache_type_v),
            (KvType::Q8_0, KvType::Q8_0)
        );
        assert_eq!(p.tensor_split, [3.0, 1.0]);
        assert!(!p.flash_attention);
    }

    #[test]
    fn cpu_moe_replaces_earlier_expert_overrides_and_keeps_others() {
        let mut profile = LaunchProfile::default();
        let custom = TensorOverride {
            pattern: r"blk\.40\.".into(),
            device: DeviceId::Gpu(1),
        };
        profile.placement.overrides = vec![PlacementOptions::cpu_moe_override(), custom.clone()];
        apply(&mut profile, "n_cpu_moe", "3").expect("ncmoe");
        let overrides = &profile.placement.overrides;
        assert_eq!(overrides.len(), 4);
        assert!(overrides[0].pattern.starts_with(r"blk\.0"));
        assert_eq!(overrides[3], custom);
        apply(&mut profile, "n_cpu_moe", "0").expect("none");
        assert_eq!(profile.placement.overrides, [custom]);
    }

    #[test]
    fn gpu_expert_layers_put_leading_experts_on_each_gpu_and_the_rest_on_the_cpu() {
        let mut profile = LaunchProfile::default();
        apply(&mut profile, "n_cpu_moe", "4").expect("ncmoe");
        apply(&mut profile, "gpu_expert_layers", "2,1").expect("per gpu");
        let overrides = &profile.placement.overrides;
        let devices: Vec<DeviceId> = overrides.iter().map(|o| o.device).collect();
        assert_eq!(
            devices,
            [
                DeviceId::Gpu(0),
                DeviceId::Gpu(0),
                DeviceId::Gpu(1),
                DeviceId::Cpu
            ]
        );
        assert!(overrides[2].pattern.starts_with(r"blk\.2\."));
        assert_eq!(overrides[3], PlacementOptions::cpu_moe_override());
        assert!(apply(&mut profile, "gpu_expert_layers", "x")
            .expect_err("x")
            .contains("8,6"));
    }

    #[test]
    fn flags_are_set_replaced_and_removed() {
        let mut profile = LaunchProfile {
            extra_args: vec!["--draft-max".into(), "4".into(), "--no-mmap".into()],
            ..LaunchProfile::default()
        };
        apply(&mut profile, "draft_max", "16").expect("draft");
        assert_eq!(profile.extra_args, ["--no-mmap", "--draft-max", "16"]);
        apply(&mut profile, "--no-mmap", "off").expect("remove");
        apply(&mut profile, "--mlock", "").expect("switch");
        assert_eq!(profile.extra_args, ["--draft-max", "16", "--mlock"]);
    }

    #[test]
    fn kv_types_flash_attention_and_unknown_flags_change_numerics_placement_does_not() {
        for knob in [
            "cache_type",
            "cache_type_k",
            "cache_type_v",
            "flash_attention",
            "-mla",
            "-fmoe",
            "--model",
            "--rope-scaling",
        ] {
            assert!(changes_numerics(knob), "{knob}");
        }
        for knob in SETTINGS
            .iter()
            .filter(|k| !k.starts_with("cache_type") && **k != "flash_attention")
        {
            assert!(!changes_numerics(knob), "{knob}");
        }
        for knob in [
            "-t",
            "--threads",
            "-ub",
            "-ngl",
            "-ot",
            "--no-mmap",
            "--draft-max",
        ] {
            assert!(!changes_numerics(knob), "{knob}");
        }
    }

    #[test]
    fn trials_differing_only_in_placement_share_their_numerics() {
        let base = LaunchProfile {
            extra_args: vec!["-mla".into(), "2".into()],
            ..LaunchProfile::default()
        };
        let values = |pairs: &[(&str, &str)]| -> Assignment {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let as_saved = numerics_of(&base, &Assignment::new()).expect("base");
        let threads =
            numerics_of(&base, &values(&[("threads", "8"), ("ubatch", "256")])).expect("threads");
        assert_eq!(threads, as_saved);
        // The value the profile already has is the same numerics, spelled out.
        let same_kv = numerics_of(&base, &values(&[("cache_type", "f16")])).expect("f16");
        assert_eq!(same_kv, as_saved);
        let q4 =
            numerics_of(&base, &values(&[("cache_type", "q4_0"), ("threads", "8")])).expect("q4_0");
        assert_ne!(q4, as_saved);
        let mla = numerics_of(&base, &values(&[("-mla", "3")])).expect("mla");
        assert_ne!(mla, as_saved);
        assert!(numerics_of(&base, &values(&[("cache_type", "q9")])).is_err());
    }

    #[test]
    fn bad_values_and_names_say_what_to_use() {
        let mut profile = LaunchProfile::default();
        assert!(apply(&mut profile, "threads", "0")
            .expect_err("0")
            .contains("at least 1"));
        assert!(apply(&mut profile, "cache_type", "q9")
            .expect_err("q9")
            .contains("q8_0"));
        assert!(apply(&mut profile, "tensor_split", "a,b")
            .expect_err("ab")
            .contains("3,1"));
        assert!(apply(&mut profile, "speed", "11")
            .expect_err("name")
            .contains("threads"));
        assert!(apply(&mut profile, "flash_attention", "maybe").is_err());
        assert_eq!(profile, LaunchProfile::default());
    }
}
