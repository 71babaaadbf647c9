//! `rigdeck gpus`: a table of the GPUs and their PCIe links, or JSON for scripts.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use rigdeck_core::findings::{self, Thresholds};
use rigdeck_core::telemetry::gpu::NvmlSource;
use rigdeck_core::telemetry::snapshot::{
    DriverState, GpuReadout, GpuSnapshot, HostSnapshot, RigSample,
};

#[derive(Debug, clap::Args)]
pub struct GpusArgs {
    /// Print the full readout as JSON (raw units: bytes, milli-watts, milli-°C).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: GpusArgs) -> anyhow::Result<ExitCode> {
    let readout = NvmlSource::from_env().read(&HashMap::new());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&readout)?);
    } else {
        print!("{}", render(&readout));
    }
    Ok(ExitCode::SUCCESS)
}

/// The human table, with the GPU findings (degraded links first of all) under it.
pub fn render(readout: &GpuReadout) -> String {
    let mut out = String::new();
    match &readout.driver {
        DriverState::Ready { driver_version, .. } => {
            let version = driver_version.as_deref().unwrap_or("unknown");
            let _ = writeln!(
                out,
                "NVIDIA driver {version}, {} GPU(s)",
                readout.gpus.len()
            );
        }
        DriverState::NoDriver { message } | DriverState::Failed { message } => {
            let _ = writeln!(out, "{message}");
            return out;
        }
    }
    let header = [
        "#",
        "NAME",
        "VRAM USED/TOTAL",
        "UTIL",
        "TEMP",
        "POWER/LIMIT",
        "PCIE LINK",
        "BUS ID",
        "NUMA",
    ];
    let rows: Vec<Vec<String>> = readout.gpus.iter().map(row).collect();
    out.push_str(&super::table::render(&header, &rows));
    let sample = RigSample {
        at_ms: 0,
        gpus: readout.clone(),
        host: HostSnapshot::default(),
    };
    for finding in findings::evaluate(&sample, &Thresholds::default()) {
        let _ = writeln!(
            out,
            "\n! {}: {}\n  {}",
            finding.subject, finding.title, finding.explanation
        );
    }
    out
}

fn row(gpu: &GpuSnapshot) -> Vec<String> {
    let dash = || "-".to_owned();
    let name = gpu.name.clone().unwrap_or_else(dash);
    if let Some(reason) = &gpu.lost {
        return vec![
            gpu.index.to_string(),
            name,
            format!("LOST: {reason}"),
            dash(),
            dash(),
            dash(),
            dash(),
            gpu.pci_bus_id.clone().unwrap_or_else(dash),
            dash(),
        ];
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    vec![
        gpu.index.to_string(),
        name,
        gpu.memory.map_or_else(dash, |m| {
            format!("{:.1}/{:.1} GiB", gib(m.used_bytes), gib(m.total_bytes))
        }),
        gpu.utilization_gpu_pct
            .map_or_else(dash, |u| format!("{u}%")),
        gpu.temperature_mc
            .map_or_else(dash, |t| format!("{}°C", t / 1000)),
        match (gpu.power_mw, gpu.power_limit_mw) {
            (Some(p), Some(l)) => format!("{}/{} W", p / 1000, l / 1000),
            (Some(p), None) => format!("{} W", p / 1000),
            _ => dash(),
        },
        pcie_text(gpu),
        gpu.pci_bus_id.clone().unwrap_or_else(dash),
        gpu.numa_node.map_or_else(dash, |n| n.to_string()),
    ]
}

/// "Gen4 x16", or "Gen4 x1 (max Gen4 x16) !" when the link is narrower than the card allows.
pub fn pcie_text(gpu: &GpuSnapshot) -> String {
    let link = &gpu.pcie;
    let (Some(generation), Some(width)) = (link.gen_current, link.width_current) else {
        return "-".to_owned();
    };
    let current = format!("Gen{generation} x{width}");
    let narrow = link.width_max.is_some_and(|max| width < max);
    let slower = link.gen_max.is_some_and(|max| generation < max);
    if !narrow && !slower {
        return current;
    }
    let max = format!(
        "Gen{} x{}",
        link.gen_max
            .map_or_else(|| "?".to_owned(), |g| g.to_string()),
        link.width_max
            .map_or_else(|| "?".to_owned(), |w| w.to_string())
    );
    let mark = if narrow { " !" } else { "" };
    format!("{current} (max {max}){mark}")
}
