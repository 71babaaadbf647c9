//! The preflight of a llama.cpp gang whose devices are lent by paired rigs over RPC: the model on
//! this rig, the same llama.cpp build on every lender, each lender's devices taken once to read
//! their free memory, the link to each measured over one channel connection (a few round trips,
//! then tens of MB streamed: `rigdeck_fleet::link_probe`), and the plan made with the lent devices as `RPC…` devices at that link. A
//! split the devices or the link cannot carry is refused before anything starts.

use rigdeck_core::events::TelemetryFrame;
use rigdeck_core::live_rig::live_devices;
use rigdeck_core::placement::link::{Link, RemoteBox};
use rigdeck_core::placement::report::report_across;
use rigdeck_core::placement::rig::Margins;
use rigdeck_core::placement::{DeviceId, DeviceSpec, ModelShape, PlacementOptions};
use rigdeck_fleet::link_probe::{LinkMeasurement, ProbePlan};
use rigdeck_fleet::rpc_lend::RpcDevice;

use super::member::{Crew, Member, MemberKind};
use super::preflight::CheckRequest;

const MIB: u64 = 1024 * 1024;

/// What the head knows before it asks the lenders: the model's shape and its own devices.
pub struct LentPlanning {
    pub shape: ModelShape,
    pub head_devices: Vec<DeviceSpec>,
}

/// A lent gang's placement: the plan's options, whose `--rpc` servers (one per lease member, in
/// order) get each start's lease endpoints.
#[derive(Debug, Clone)]
pub struct LentPlacement {
    pub options: PlacementOptions,
}

impl LentPlacement {
    /// The options with the endpoints of the leases held now, in the lease members' order.
    pub fn with_endpoints(
        &self,
        crew: &Crew,
        leases: &[Member],
    ) -> Result<PlacementOptions, String> {
        let mut options = self.options.clone();
        for (server, member) in options.rpc_servers.iter_mut().zip(leases) {
            let lease = crew
                .lease(&member.instance)
                .ok_or_else(|| format!("{} is not held", member.label()))?;
            server.endpoint = lease.endpoint;
        }
        Ok(options)
    }
}

/// Every problem found before a lent gang starts, each naming its rig; empty when it may start.
pub async fn check_boxes(
    crew: &Crew,
    store: &rigdeck_core::store::Store,
    head: &CheckRequest,
    lenders: &[Member],
) -> Vec<String> {
    let mut problems: Vec<String> = super::preflight::check_here(store, head)
        .await
        .problems
        .into_iter()
        .map(|p| format!("this rig {p}"))
        .collect();
    let lender = CheckRequest {
        model: None,
        interface: None,
        ..head.clone()
    };
    for member in lenders {
        let place = member.place();
        match member.kind.check(crew, store, &lender).await {
            Ok(answer) => problems.extend(answer.problems.iter().map(|p| format!("{place} {p}"))),
            Err(why) => problems.push(format!(
                "{place} cannot be asked (is the rig up and paired?): {why}"
            )),
        }
    }
    problems
}

/// Takes each lease, measures each link and plans with what they give: the placement (the
/// leases kept for the start, so each lender's rpc-server starts once), or each problem with
/// its figures (the leases released).
pub async fn plan_across(
    crew: &Crew,
    planning: &LentPlanning,
    model: &str,
    base: &PlacementOptions,
    lenders: &[Member],
) -> Result<(LentPlacement, Vec<String>), Vec<String>> {
    let mut taken = Vec::new();
    let mut problems = Vec::new();
    for member in lenders {
        match member
            .start(
                crew,
                &Default::default(),
                (rigdeck_core::engines::EngineKind::LlamaCpp, ""),
            )
            .await
        {
            Ok(()) => taken.push(member),
            Err(why) => problems.push(format!("{} refused its lease: {why}", member.place())),
        }
    }
    let planned = match problems.is_empty() {
        true => plan_with_leases(crew, planning, model, base, lenders).await,
        false => Err(problems),
    };
    if planned.is_err() {
        release(crew, taken).await;
    }
    planned
}

/// Releases the leases `lenders` hold (a refused plan, a start that did not happen).
pub async fn release<'a>(crew: &Crew, lenders: impl IntoIterator<Item = &'a Member>) {
    for member in lenders {
        if let Err(why) = member.stop(crew).await {
            tracing::warn!("{}: {why}", member.label());
        }
    }
}

async fn plan_with_leases(
    crew: &Crew,
    planning: &LentPlanning,
    model: &str,
    base: &PlacementOptions,
    lenders: &[Member],
) -> Result<(LentPlacement, Vec<String>), Vec<String>> {
    let mut lent = Vec::new();
    for member in lenders {
        let MemberKind::Lease { rig, .. } = &member.kind else {
            continue;
        };
        let lease = crew
            .lease(&member.instance)
            .ok_or_else(|| vec![format!("{} is not held", member.label())])?;
        let (link, measurement) = measure_link(crew, rig)
            .await
            .map_err(|why| vec![format!("the link to '{rig}' could not be measured: {why}")])?;
        let live = lender_devices(crew, rig).await;
        lent.push(LentBox {
            rig: rig.clone(),
            endpoint: lease.endpoint,
            devices: lease.devices,
            link,
            measurement: Some(measurement),
            live,
        });
    }
    plan_split(planning, model, base, &lent)
}

/// One lender as the plan sees it: its lease's endpoint and devices (with their free memory),
/// the link measured to it (and what the measurement saw, when it was one), and its own live
/// devices (for their memory bandwidth).
pub struct LentBox {
    pub rig: String,
    pub endpoint: String,
    pub devices: Vec<RpcDevice>,
    pub link: Link,
    pub measurement: Option<LinkMeasurement>,
    pub live: Vec<DeviceSpec>,
}

impl LentBox {
    /// The link's figures for the plan's notes and problems.
    fn describe_link(&self) -> String {
        let measured = self
            .measurement
            .as_ref()
            .map(|m| format!(": {}", m.describe()))
            .unwrap_or_default();
        format!(
            "the link to '{}': {}{measured}",
            self.rig,
            self.link.describe()
        )
    }
}

/// The plan with `lent` as `RPC…` devices beside this rig's: its placement and notes, or each
/// problem (a split that does not fit, a link too slow for it) with the links' figures.
pub fn plan_split(
    planning: &LentPlanning,
    model: &str,
    base: &PlacementOptions,
    lent: &[LentBox],
) -> Result<(LentPlacement, Vec<String>), Vec<String>> {
    let (mut devices, head_cpu): (Vec<DeviceSpec>, Vec<DeviceSpec>) = planning
        .head_devices
        .iter()
        .cloned()
        .partition(|d| d.id != DeviceId::Cpu);
    let mut boxes = Vec::new();
    let mut notes = Vec::new();
    let mut next = 0u32;
    for lender in lent {
        notes.push(lender.describe_link());
        let ids = lent_devices(lender, &mut next, &mut devices);
        boxes.push(RemoteBox {
            name: lender.rig.clone(),
            endpoint: lender.endpoint.clone(),
            link: lender.link.clone(),
            devices: ids,
        });
    }
    devices.extend(head_cpu);
    let planned = |options: &PlacementOptions, auto: bool| {
        report_across(&planning.shape, model, &devices, &boxes, options, auto)
            .map_err(|err| vec![format!("the plan across the boxes failed: {err}")])
    };
    let mut report = planned(base, true)?;
    if report.options.rpc_servers.is_empty() {
        // The profile asks for its lenders: every layer offloaded, split as llama.cpp splits it.
        notes.push(format!(
            "the automatic placement would leave the lent devices out ({}), so every layer is offloaded across the devices as llama.cpp splits them",
            report.notes.join("; ")
        ));
        let every_layer = PlacementOptions {
            n_gpu_layers: Some(planning.shape.n_layer + 1),
            rpc_servers: Vec::new(),
            ..base.clone()
        };
        report = planned(&every_layer, false)?;
    }
    let mut problems = report.problems.clone();
    if !report.fits {
        problems.push("the model does not fit this rig and the lent devices together: lend more devices, or use a smaller quantization or context".to_owned());
    }
    if !problems.is_empty() {
        problems.extend(notes);
        return Err(problems);
    }
    notes.extend(report.notes);
    Ok((
        LentPlacement {
            options: report.options,
        },
        notes,
    ))
}

/// A lender's devices as the planner's `RPC…` devices: their free memory as capacity, their
/// bandwidth from the lender's own live devices (`CPU` its RAM, `CUDAn` its GPU n).
fn lent_devices(lender: &LentBox, next: &mut u32, devices: &mut Vec<DeviceSpec>) -> Vec<DeviceId> {
    let mut ids = Vec::new();
    for device in &lender.devices {
        let id = DeviceId::Rpc(*next);
        let own = match device.name.strip_prefix("CUDA").map(str::parse::<u32>) {
            Some(Ok(gpu)) => Some(DeviceId::Gpu(gpu)),
            _ => (device.name == "CPU").then_some(DeviceId::Cpu),
        };
        let bandwidth = own
            .and_then(|own| lender.live.iter().find(|d| d.id == own))
            .and_then(|d| d.bandwidth_bytes_per_s);
        devices.push(DeviceSpec {
            id,
            name: format!(
                "RPC{next} · {} {} · on '{}' over {}",
                device.name, device.description, lender.rig, lender.link.name
            ),
            capacity_bytes: device.free_mib * MIB,
            reserve_bytes: 0,
            overhead_bytes: 0,
            bandwidth_bytes_per_s: bandwidth,
            link_degraded: false,
            correction: None,
        });
        ids.push(id);
        *next += 1;
    }
    ids
}

/// The lender's live devices from its latest telemetry, its CPU with the host memory bandwidth
/// the lender plans with (empty when it has no telemetry to give).
async fn lender_devices(crew: &Crew, rig: &str) -> Vec<DeviceSpec> {
    let Ok((200, frame)) = ask_lender(crew, rig, "/api/v1/telemetry/latest").await else {
        return Vec::new();
    };
    let Ok(frame) = serde_json::from_value::<TelemetryFrame>(frame) else {
        return Vec::new();
    };
    let margins = Margins {
        cpu_bandwidth_bytes_per_s: lender_memory_bandwidth(crew, rig).await,
        ..Margins::default()
    };
    live_devices(&frame.sample, &margins)
}

/// The host memory bandwidth the lender's own planner uses (its measurement, or its settings').
async fn lender_memory_bandwidth(crew: &Crew, rig: &str) -> Option<u64> {
    match ask_lender(crew, rig, "/api/v1/host/memory-bandwidth").await {
        Ok((200, status)) => status["in_use_bytes_per_s"].as_u64().filter(|b| *b > 0),
        _ => None,
    }
}

async fn ask_lender(
    crew: &Crew,
    rig: &str,
    path: &str,
) -> Result<(u16, serde_json::Value), String> {
    super::member::call_peer(
        crew,
        rig,
        axum::http::Method::GET,
        path,
        None,
        super::member::PEER_CALL_TIMEOUT,
    )
    .await
}

/// The link to `rig` measured over one channel connection: one-way latency as half the median
/// of a few empty round trips, throughput from a streamed transfer after its first byte.
pub async fn measure_link(crew: &Crew, rig: &str) -> Result<(Link, LinkMeasurement), String> {
    let measurement = crew
        .fleet()?
        .measure_link(rig, ProbePlan::default())
        .await
        .map_err(|err| err.message)?;
    let link = Link::measured(measurement.throughput_bytes_per_s, measurement.latency_s())
        .map_err(|e| e.to_string())?;
    Ok((link, measurement))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rigdeck_core::placement::from_gguf::load_shape;

    const GIB: u64 = 1 << 30;

    fn gpu(id: DeviceId, capacity: u64) -> DeviceSpec {
        DeviceSpec {
            id,
            name: format!("{id:?}"),
            capacity_bytes: capacity,
            reserve_bytes: 0,
            overhead_bytes: 0,
            bandwidth_bytes_per_s: Some(900_000_000_000),
            link_degraded: false,
            correction: None,
        }
    }

    /// A 16-layer dense llama (about 400 MB) written with the real tokenizer, on a head whose
    /// one GPU holds 64 MiB: most of it must go to the lent GPU.
    fn planning(dir: &std::path::Path) -> LentPlanning {
        let vocab = rigdeck_core::engines::source::cached_llama_cpp_source()
            .unwrap()
            .join("models/ggml-vocab-llama-bpe.gguf");
        let model = rigdeck_gguf::tiny::TinyModel {
            n_layer: 16,
            n_embd: 1024,
            n_head: 8,
            n_head_kv: 8,
            n_ff: 2816,
            random_weights: false,
            ..rigdeck_gguf::tiny::TinyModel::dense_runnable()
        };
        let path = dir.join("dense.gguf");
        model.write(&vocab, &path).unwrap();
        let mut cpu = gpu(DeviceId::Cpu, 16 * GIB);
        cpu.bandwidth_bytes_per_s = Some(50_000_000_000);
        LentPlanning {
            shape: load_shape(&path).unwrap().shape,
            head_devices: vec![gpu(DeviceId::Gpu(0), 64 * MIB), cpu],
        }
    }

    fn lender(link: Link) -> LentBox {
        LentBox {
            rig: "tower".into(),
            endpoint: "127.0.0.1:40001".into(),
            devices: vec![RpcDevice {
                name: "CUDA0".into(),
                description: "NVIDIA GeForce RTX 3090".into(),
                total_mib: 24_576,
                free_mib: 24_000,
            }],
            link,
            measurement: None,
            live: vec![gpu(DeviceId::Gpu(0), 24 * GIB)],
        }
    }

    /// A lender of its CPU, whose own telemetry gives that CPU `bandwidth`.
    fn cpu_lender(link: Link, bandwidth: Option<u64>) -> LentBox {
        let mut cpu = gpu(DeviceId::Cpu, 16 * GIB);
        cpu.bandwidth_bytes_per_s = bandwidth;
        LentBox {
            devices: vec![RpcDevice {
                name: "CPU".into(),
                description: "AMD Ryzen 9 7950X".into(),
                total_mib: 32_768,
                free_mib: 16_000,
            }],
            live: vec![cpu],
            ..lender(link)
        }
    }

    #[test]
    fn a_lent_cpu_with_its_memory_bandwidth_gets_the_slow_link_check() {
        let dir = tempfile::tempdir().unwrap();
        let mut planning = planning(dir.path());
        planning.head_devices.retain(|d| d.id == DeviceId::Cpu);
        let base = PlacementOptions::default();
        let slow = || Link::measured(125_000, 0.000_5).unwrap();

        let problems = plan_split(
            &planning,
            "m.gguf",
            &base,
            &[cpu_lender(slow(), Some(50_000_000_000))],
        )
        .unwrap_err();
        let said = problems.join("; ");
        assert!(
            said.contains("the link to tower (measured) is too slow for this split"),
            "{said}"
        );
        // Without the lender's bandwidth the CPU split has no speed ceiling to check the link by.
        let unchecked = plan_split(&planning, "m.gguf", &base, &[cpu_lender(slow(), None)]);
        assert!(unchecked.is_ok(), "{unchecked:?}");
    }

    #[test]
    fn a_link_too_slow_for_the_split_is_refused_with_its_measured_figures() {
        let dir = tempfile::tempdir().unwrap();
        let planning = planning(dir.path());
        let base = PlacementOptions::default();

        let fast = lender(Link::measured(25_000_000_000, 0.000_005).unwrap());
        let (placement, notes) = plan_split(&planning, "m.gguf", &base, &[fast]).unwrap();
        assert_eq!(placement.options.rpc_servers.len(), 1, "{notes:?}");
        assert_eq!(placement.options.rpc_servers[0].endpoint, "127.0.0.1:40001");
        assert!(
            notes[0].starts_with("the link to 'tower': measured (25000 MB/s"),
            "{notes:?}"
        );

        let slow = lender(Link::measured(2_000_000, 0.02).unwrap());
        let problems = plan_split(&planning, "m.gguf", &base, &[slow]).unwrap_err();
        let said = problems.join("; ");
        assert!(
            said.contains("the link to tower (measured) is too slow for this split")
                && said.contains("at 2.0 MB/s with 20.00 ms latency")
                && said.contains("the link to 'tower': measured (2.0 MB/s, 20.00 ms)"),
            "{said}"
        );
    }
}
