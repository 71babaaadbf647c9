//! Findings: rules over a telemetry sample that point out what a home-lab owner should know,
//! each with a plain-language explanation of what it means for running models.

use serde::{Deserialize, Serialize};

use crate::snapshot::{GpuSnapshot, HostSnapshot, RigSample};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    PcieNarrow,
    PcieGenLow,
    GpuHot,
    MemoryHot,
    ThermalThrottle,
    PowerThrottle,
    ForeignVram,
    GpuLost,
    RamNearlyFull,
    SwapInUse,
}

impl Rule {
    fn key(self) -> &'static str {
        match self {
            Rule::PcieNarrow => "pcie_narrow",
            Rule::PcieGenLow => "pcie_gen_low",
            Rule::GpuHot => "gpu_hot",
            Rule::MemoryHot => "memory_hot",
            Rule::ThermalThrottle => "thermal_throttle",
            Rule::PowerThrottle => "power_throttle",
            Rule::ForeignVram => "foreign_vram",
            Rule::GpuLost => "gpu_lost",
            Rule::RamNearlyFull => "ram_nearly_full",
            Rule::SwapInUse => "swap_in_use",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable across ticks (rule + GPU UUID or index), so the UI can keep state per finding.
    pub id: String,
    pub rule: Rule,
    pub severity: Severity,
    pub subject: String,
    pub gpu_index: Option<u32>,
    pub title: String,
    pub explanation: String,
}

/// Where the rules draw their lines. The defaults follow vendor limits and common practice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub gpu_warm_mc: i64,
    pub gpu_hot_mc: i64,
    pub memory_warm_mc: i64,
    pub memory_hot_mc: i64,
    /// Utilization at or above which a GPU counts as busy (a link downshift then matters).
    pub busy_pct: u32,
    /// VRAM a foreign process may hold before it is worth mentioning (a desktop holds a little).
    pub foreign_vram_bytes: u64,
    pub ram_low_fraction: f64,
    pub ram_critical_fraction: f64,
    pub swap_bytes: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            gpu_warm_mc: 83_000,
            gpu_hot_mc: 90_000,
            // GDDR6X throttles at 110 °C; HBM is specified to about 95–105 °C.
            memory_warm_mc: 95_000,
            memory_hot_mc: 105_000,
            busy_pct: 30,
            foreign_vram_bytes: 256 << 20,
            ram_low_fraction: 0.05,
            ram_critical_fraction: 0.02,
            swap_bytes: 256 << 20,
        }
    }
}

/// Evaluates every rule over one sample, most severe first.
pub fn evaluate(sample: &RigSample, limits: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    for gpu in &sample.gpus.gpus {
        gpu_findings(gpu, limits, &mut out);
    }
    host_findings(&sample.host, limits, &mut out);
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

fn gpu_subject(gpu: &GpuSnapshot) -> String {
    match &gpu.name {
        Some(name) => format!("GPU {} · {name}", gpu.index),
        None => format!("GPU {}", gpu.index),
    }
}

fn push_gpu(
    out: &mut Vec<Finding>,
    gpu: &GpuSnapshot,
    rule: Rule,
    severity: Severity,
    title: String,
    explanation: String,
) {
    let who = gpu.uuid.clone().unwrap_or_else(|| gpu.index.to_string());
    out.push(Finding {
        id: format!("{}:{who}", rule.key()),
        rule,
        severity,
        subject: gpu_subject(gpu),
        gpu_index: Some(gpu.index),
        title,
        explanation,
    });
}

fn gpu_findings(gpu: &GpuSnapshot, limits: &Thresholds, out: &mut Vec<Finding>) {
    if let Some(reason) = &gpu.lost {
        push_gpu(out, gpu, Rule::GpuLost, Severity::Critical, "GPU stopped answering".into(), format!(
            "{reason}. Anything running on it has likely crashed. Common causes: a loose riser or power cable, \
             an overheating card, or a driver fault (check `dmesg` for Xid errors). A reboot usually brings it back."
        ));
        return;
    }
    pcie_findings(gpu, limits, out);
    temperature_findings(gpu, limits, out);
    throttle_findings(gpu, limits, out);
    foreign_vram(gpu, limits, out);
}

fn pcie_findings(gpu: &GpuSnapshot, limits: &Thresholds, out: &mut Vec<Finding>) {
    let link = &gpu.pcie;
    if let (Some(width), Some(max)) = (link.width_current, link.width_max) {
        if width < max {
            let (severity, explanation) = narrow_link_explanation(width, max);
            push_gpu(
                out,
                gpu,
                Rule::PcieNarrow,
                severity,
                format!("PCIe link x{width} (card supports x{max})"),
                explanation,
            );
        }
    }
    if let (Some(generation), Some(max)) = (link.gen_current, link.gen_max) {
        let busy = gpu
            .utilization_gpu_pct
            .is_some_and(|u| u >= limits.busy_pct);
        if generation < max && busy {
            push_gpu(out, gpu, Rule::PcieGenLow, Severity::Warning, format!("PCIe Gen{generation} under load (card supports Gen{max})"), format!(
                "The link runs at PCIe Gen{generation} while the GPU is busy. Dropping to a lower generation when idle \
                 is normal power saving, but under load it means the slot, a riser, the chipset or a BIOS setting caps \
                 the link, halving bandwidth per step. Model loading and any CPU/GPU split get slower."
            ));
        }
    }
}

/// x8 of x16 costs little for inference; x4 and below (risers, chipset slots) changes what the card is good for.
fn narrow_link_explanation(width: u32, max: u32) -> (Severity, String) {
    if width >= 8 {
        return (Severity::Info, format!(
            "The card uses {width} of its {max} PCIe lanes, as in most multi-GPU boards that share lanes between slots. \
             Decoding barely notices; loading a model and prompt processing with weights in CPU RAM take somewhat longer."
        ));
    }
    (Severity::Warning, format!(
        "The card talks to the system over {width} of its {max} PCIe lanes — typically an x1/x4 riser, a \
         chipset slot, or a card that is not fully seated. That is fine for a single-model sidecar: the model \
         loads once and little crosses the link afterwards. It is bad for splitting a model across cards or \
         offloading experts to CPU RAM, where activations cross the link for every token."
    ))
}

fn temperature_findings(gpu: &GpuSnapshot, limits: &Thresholds, out: &mut Vec<Finding>) {
    if let Some(t) = gpu.temperature_mc {
        if t >= limits.gpu_warm_mc {
            let severity = if t >= limits.gpu_hot_mc {
                Severity::Critical
            } else {
                Severity::Warning
            };
            push_gpu(out, gpu, Rule::GpuHot, severity, format!("GPU at {} °C", t / 1000), 
                "The GPU core is hot. Above about 83 °C most cards lower their clocks, so tokens per second drop. \
                 Improve airflow, space the cards out, or lower the power limit (e.g. `nvidia-smi -pl`): a 20 % lower \
                 limit usually costs only a few percent of inference speed.".into());
        }
    }
    if let Some(t) = gpu.memory_temperature_mc {
        if t >= limits.memory_warm_mc {
            let severity = if t >= limits.memory_hot_mc {
                Severity::Critical
            } else {
                Severity::Warning
            };
            push_gpu(out, gpu, Rule::MemoryHot, severity, format!("VRAM at {} °C", t / 1000),
                "The memory chips are hot. GDDR6X throttles near 110 °C, and LLM decoding reads VRAM constantly, so \
                 memory temperature limits speed before the core does. Backplate cooling, fan curves and a lower \
                 power limit help.".into());
        }
    }
}

fn throttle_findings(gpu: &GpuSnapshot, limits: &Thresholds, out: &mut Vec<Finding>) {
    let Some(reasons) = &gpu.throttle_reasons else {
        return;
    };
    let has = |name: &str| reasons.iter().any(|r| r == name);
    if has("hw_thermal_slowdown") || has("sw_thermal_slowdown") {
        let severity = if has("hw_thermal_slowdown") {
            Severity::Critical
        } else {
            Severity::Warning
        };
        push_gpu(out, gpu, Rule::ThermalThrottle, severity, "Clocks reduced: too hot".into(),
            "The driver is lowering clocks to cool the card down, so generation is slower than it could be. Check \
             fans, airflow and dust; a lower power limit keeps clocks steadier.".into());
    }
    let busy = gpu
        .utilization_gpu_pct
        .is_some_and(|u| u >= limits.busy_pct);
    if has("hw_slowdown") || has("hw_power_brake_slowdown") {
        push_gpu(out, gpu, Rule::PowerThrottle, Severity::Warning, "Clocks reduced: hardware power slowdown".into(),
            "The card's hardware asked for a slowdown — usually the power supply or its cables cannot deliver the \
             peak current. Check PSU capacity and use separate PCIe power cables per connector.".into());
    } else if has("sw_power_cap") && busy {
        let limit = gpu
            .power_limit_mw
            .map(|mw| format!(" of {} W", mw / 1000))
            .unwrap_or_default();
        push_gpu(out, gpu, Rule::PowerThrottle, Severity::Info, format!("At its power limit{limit}"),
            "The GPU is holding its clocks down to stay within the power limit. That is expected if you capped the \
             power on purpose (many multi-GPU rigs do, at little cost in tokens per second); otherwise raise the limit.".into());
    }
}

fn foreign_vram(gpu: &GpuSnapshot, limits: &Thresholds, out: &mut Vec<Finding>) {
    let foreign: Vec<_> = gpu
        .processes
        .iter()
        .filter(|p| !p.started_by_rigdeck && p.used_bytes.unwrap_or(0) >= limits.foreign_vram_bytes)
        .collect();
    if foreign.is_empty() {
        return;
    }
    let total: u64 = foreign.iter().filter_map(|p| p.used_bytes).sum();
    let list = foreign
        .iter()
        .map(|p| {
            let name = p.name.as_deref().unwrap_or("unknown");
            format!(
                "{name} (pid {}, {} MiB)",
                p.pid,
                p.used_bytes.unwrap_or(0) >> 20
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    push_gpu(out, gpu, Rule::ForeignVram, Severity::Info, format!("{} MiB held by processes Rigdeck did not start", total >> 20), format!(
        "{list}. This memory is not available to models Rigdeck launches. If it is a leftover server, stop it; \
         after a process exits the driver can take a moment to release its memory."
    ));
}

fn host_findings(host: &HostSnapshot, limits: &Thresholds, out: &mut Vec<Finding>) {
    let mem = &host.memory;
    if mem.total_bytes > 0 {
        let free_fraction = mem.available_bytes as f64 / mem.total_bytes as f64;
        if free_fraction < limits.ram_low_fraction {
            let severity = if free_fraction < limits.ram_critical_fraction {
                Severity::Critical
            } else {
                Severity::Warning
            };
            out.push(host_finding(Rule::RamNearlyFull, severity, format!("RAM nearly full: {} MiB available", mem.available_bytes >> 20),
                "System memory is almost exhausted. Model weights kept in RAM (CPU offload, experts on CPU) will be \
                 paged out or the kernel's OOM killer will stop an engine. Offload fewer layers to the CPU, use a \
                 smaller quantization, or close other programs.".into()));
        }
    }
    if mem.swap_used_bytes >= limits.swap_bytes {
        out.push(host_finding(Rule::SwapInUse, Severity::Warning, format!("{} MiB of swap in use", mem.swap_used_bytes >> 20),
            "Part of memory has been swapped to disk. If model weights are among it, tokens per second collapse. \
             Free RAM, or start engines with `--mlock` so weights stay resident.".into()));
    }
}

fn host_finding(rule: Rule, severity: Severity, title: String, explanation: String) -> Finding {
    Finding {
        id: rule.key().to_owned(),
        rule,
        severity,
        subject: "Host".into(),
        gpu_index: None,
        title,
        explanation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::*;

    fn gpu(index: u32) -> GpuSnapshot {
        GpuSnapshot {
            name: Some("NVIDIA GeForce RTX 3090".into()),
            uuid: Some(format!("GPU-{index}")),
            utilization_gpu_pct: Some(0),
            temperature_mc: Some(50_000),
            power_limit_mw: Some(200_000),
            pcie: PcieLink {
                gen_current: Some(4),
                gen_max: Some(4),
                width_current: Some(16),
                width_max: Some(16),
                ..Default::default()
            },
            throttle_reasons: Some(vec![]),
            ..GpuSnapshot::blank(index)
        }
    }

    fn sample(gpus: Vec<GpuSnapshot>, memory: HostMemory) -> RigSample {
        RigSample {
            at_ms: 0,
            gpus: GpuReadout {
                driver: DriverState::Ready {
                    driver_version: None,
                    cuda_driver_version: None,
                },
                gpus,
            },
            host: HostSnapshot {
                memory,
                ..Default::default()
            },
        }
    }

    fn healthy_ram() -> HostMemory {
        HostMemory {
            total_bytes: 64 << 30,
            used_bytes: 8 << 30,
            available_bytes: 56 << 30,
            swap_total_bytes: 0,
            swap_used_bytes: 0,
        }
    }

    fn rules(findings: &[Finding]) -> Vec<Rule> {
        findings.iter().map(|f| f.rule).collect()
    }

    #[test]
    fn a_healthy_rig_has_no_findings() {
        assert!(evaluate(
            &sample(vec![gpu(0), gpu(1)], healthy_ram()),
            &Thresholds::default()
        )
        .is_empty());
    }

    #[test]
    fn an_x1_card_is_flagged_with_the_sidecar_advice() {
        let mut narrow = gpu(3);
        narrow.pcie.width_current = Some(1);
        let findings = evaluate(
            &sample(vec![gpu(0), narrow], healthy_ram()),
            &Thresholds::default(),
        );
        assert_eq!(rules(&findings), vec![Rule::PcieNarrow]);
        assert_eq!(findings[0].gpu_index, Some(3));
        assert_eq!(findings[0].title, "PCIe link x1 (card supports x16)");
        assert!(findings[0].explanation.contains("sidecar"));
        assert!(findings[0].explanation.contains("splitting a model"));
        assert_eq!(findings[0].severity, Severity::Warning);
    }

    #[test]
    fn an_x8_slot_is_only_information() {
        let mut shared = gpu(1);
        shared.pcie.width_current = Some(8);
        let findings = evaluate(&sample(vec![shared], healthy_ram()), &Thresholds::default());
        assert_eq!(rules(&findings), vec![Rule::PcieNarrow]);
        assert_eq!(findings[0].severity, Severity::Info);
    }

    #[test]
    fn a_generation_downshift_counts_only_under_load() {
        let mut idle = gpu(0);
        idle.pcie.gen_current = Some(1);
        assert!(evaluate(
            &sample(vec![idle.clone()], healthy_ram()),
            &Thresholds::default()
        )
        .is_empty());
        let mut busy = idle;
        busy.utilization_gpu_pct = Some(95);
        assert_eq!(
            rules(&evaluate(
                &sample(vec![busy], healthy_ram()),
                &Thresholds::default()
            )),
            vec![Rule::PcieGenLow]
        );
    }

    #[test]
    fn heat_and_throttling_are_graded() {
        let mut hot = gpu(0);
        hot.temperature_mc = Some(91_000);
        hot.memory_temperature_mc = Some(98_000);
        hot.throttle_reasons = Some(vec!["hw_thermal_slowdown".into()]);
        let findings = evaluate(&sample(vec![hot], healthy_ram()), &Thresholds::default());
        let by_rule = |r| findings.iter().find(|f| f.rule == r).unwrap().severity;
        assert_eq!(by_rule(Rule::GpuHot), Severity::Critical);
        assert_eq!(by_rule(Rule::MemoryHot), Severity::Warning);
        assert_eq!(by_rule(Rule::ThermalThrottle), Severity::Critical);
        assert_eq!(
            findings[0].severity,
            Severity::Critical,
            "most severe first"
        );
    }

    #[test]
    fn a_deliberate_power_cap_is_only_information() {
        let mut capped = gpu(0);
        capped.utilization_gpu_pct = Some(100);
        capped.throttle_reasons = Some(vec!["sw_power_cap".into()]);
        let findings = evaluate(&sample(vec![capped], healthy_ram()), &Thresholds::default());
        assert_eq!(rules(&findings), vec![Rule::PowerThrottle]);
        assert_eq!(findings[0].severity, Severity::Info);
        assert_eq!(findings[0].title, "At its power limit of 200 W");
    }

    #[test]
    fn vram_held_by_others_is_named_but_ours_and_small_ones_are_not() {
        let mut g = gpu(0);
        let process = |pid, mib: u64, ours| GpuProcess {
            pid,
            name: Some(format!("p{pid}")),
            used_bytes: Some(mib << 20),
            kind: GpuProcessKind::Compute,
            started_by_rigdeck: ours,
            rigdeck_instance: None,
        };
        g.processes = vec![
            process(10, 20_000, true),
            process(11, 9_000, false),
            process(12, 40, false),
        ];
        let findings = evaluate(&sample(vec![g], healthy_ram()), &Thresholds::default());
        assert_eq!(rules(&findings), vec![Rule::ForeignVram]);
        assert_eq!(
            findings[0].title,
            "9000 MiB held by processes Rigdeck did not start"
        );
        assert!(findings[0]
            .explanation
            .starts_with("p11 (pid 11, 9000 MiB)"));
    }

    #[test]
    fn a_lost_gpu_is_critical_and_nothing_else_is_said_about_it() {
        let mut lost = gpu(2);
        lost.lost = Some("the GPU has fallen off the bus".into());
        lost.pcie.width_current = Some(1);
        let findings = evaluate(&sample(vec![lost], healthy_ram()), &Thresholds::default());
        assert_eq!(rules(&findings), vec![Rule::GpuLost]);
        assert_eq!(findings[0].severity, Severity::Critical);
    }

    #[test]
    fn low_ram_and_swap_are_host_findings() {
        let memory = HostMemory {
            total_bytes: 192 << 30,
            used_bytes: 190 << 30,
            available_bytes: 2 << 30,
            swap_total_bytes: 8 << 30,
            swap_used_bytes: 1 << 30,
        };
        let findings = evaluate(&sample(vec![], memory), &Thresholds::default());
        assert_eq!(rules(&findings), vec![Rule::RamNearlyFull, Rule::SwapInUse]);
        assert_eq!(findings[0].severity, Severity::Critical);
        assert_eq!(findings[0].gpu_index, None);
    }
}
