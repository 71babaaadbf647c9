//! The preflight of a llama.cpp gang whose devices are lent by paired rigs over RPC: the model on
//! this rig, the same llama.cpp build on every lender, each lender's devices taken once to read
//! their free memory, the link to each measured through the fleet's channel (a few round trips
//! and a few MB), and the plan made with the lent devices as `RPC…` devices at that link. A
//! split the devices or the link cannot carry is refused before anything starts.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use rigdeck_core::events::TelemetryFrame;
use rigdeck_core::live_rig::live_devices;
use rigdeck_core::placement::link::{Link, RemoteBox};
use rigdeck_core::placement::report::report_across;
use rigdeck_core::placement::rig::Margins;
use rigdeck_core::placement::{DeviceId, DeviceSpec, ModelShape, PlacementOptions};
use rigdeck_fleet::rpc_lend::RpcDevice;

use super::member::{Crew, Member, MemberKind};
use super::preflight::CheckRequest;

/// Bytes moved once to measure a link's throughput.
pub const PROBE_BYTES: u64 = 4 << 20;
/// Round trips timed to measure a link's latency (the fastest counts).
const PROBE_ROUND_TRIPS: usize = 5;
/// How long one probe call may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
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

/// Takes each lease once, measures each link, plans with what they give, and releases the
/// leases: the placement, or each problem with its figures.
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
    for member in taken {
        if let Err(why) = member.stop(crew).await {
            tracing::warn!("{}: {why}", member.label());
        }
    }
    planned
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
        let link = measure_link(crew, rig)
            .await
            .map_err(|why| vec![format!("the link to '{rig}' could not be measured: {why}")])?;
        let live = lender_devices(crew, rig).await;
        lent.push(LentBox {
            rig: rig.clone(),
            endpoint: lease.endpoint,
            devices: lease.devices,
            link,
            live,
        });
    }
    plan_split(planning, model, base, &lent)
}

/// One lender as the plan sees it: its lease's endpoint and devices (with their free memory),
/// the link measured to it, and its own live devices (for their memory bandwidth).
pub struct LentBox {
    pub rig: String,
    pub endpoint: String,
    pub devices: Vec<RpcDevice>,
    pub link: Link,
    pub live: Vec<DeviceSpec>,
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
        notes.push(format!(
            "the link to '{}': {}",
            lender.rig,
            lender.link.describe()
        ));
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

/// The lender's live devices from its latest telemetry (empty when it has none to give).
async fn lender_devices(crew: &Crew, rig: &str) -> Vec<DeviceSpec> {
    let answer = super::member::call_peer(
        crew,
        rig,
        axum::http::Method::GET,
        "/api/v1/telemetry/latest",
        None,
        super::member::PEER_CALL_TIMEOUT,
    )
    .await;
    let frame = match answer {
        Ok((200, frame)) => serde_json::from_value::<TelemetryFrame>(frame).ok(),
        _ => None,
    };
    frame.map_or_else(Vec::new, |f| live_devices(&f.sample, &Margins::default()))
}

/// The link to `rig` through the fleet's channel: one-way latency as half the fastest of a few
/// empty round trips, throughput as [`PROBE_BYTES`] over the time the big answer took beyond it.
pub async fn measure_link(crew: &Crew, rig: &str) -> Result<Link, String> {
    let mut fastest = f64::INFINITY;
    for _ in 0..PROBE_ROUND_TRIPS {
        fastest = fastest.min(probe(crew, rig, 0).await?);
    }
    let big = probe(crew, rig, PROBE_BYTES).await?;
    let moving = (big - fastest).max(1e-6);
    Link::measured((PROBE_BYTES as f64 / moving) as u64, fastest / 2.0).map_err(|e| e.to_string())
}

/// Seconds `GET /api/v1/gang/probe?bytes=N` on `rig` took, its whole answer read.
async fn probe(crew: &Crew, rig: &str, bytes: u64) -> Result<f64, String> {
    let fleet = crew.fleet()?;
    let request = Request::get(format!("/api/v1/gang/probe?bytes={bytes}"))
        .body(Body::empty())
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let answer = fleet
        .relay(rig, request, PROBE_TIMEOUT)
        .await
        .map_err(|err| err.message)?;
    if !answer.status().is_success() {
        return Err(format!(
            "it answered the probe with {} (update Rigdeck there)",
            answer.status()
        ));
    }
    let body = axum::body::to_bytes(Body::new(answer.into_body()), (PROBE_BYTES + 1024) as usize)
        .await
        .map_err(|err| format!("the probe's answer broke off: {err}"))?;
    if body.len() as u64 != bytes {
        return Err(format!("the probe sent {} bytes, not {bytes}", body.len()));
    }
    Ok(started.elapsed().as_secs_f64())
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
            live: vec![gpu(DeviceId::Gpu(0), 24 * GIB)],
        }
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
                && said.contains("at 2 MB/s with 20.00 ms latency")
                && said.contains("the link to 'tower': measured (2 MB/s, 20.00 ms)"),
            "{said}"
        );
    }
}
