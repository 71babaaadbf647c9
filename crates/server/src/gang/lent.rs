//! The preflight of a llama.cpp gang whose devices are lent by paired rigs over RPC: the model on
//! this rig, the same llama.cpp build on every lender, each lender's devices taken once to read
//! their free memory, the link to each measured through the fleet's channel (a few round trips
//! and a few MB), and the plan made with the lent devices as `RPC…` devices at that link. A
//! split the devices or the link cannot carry is refused before anything starts.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use rigdeck_core::placement::link::{Link, RemoteBox};
use rigdeck_core::placement::report::report_across;
use rigdeck_core::placement::{DeviceId, DeviceSpec, ModelShape, PlacementOptions};
use rigdeck_fleet::rpc_tunnel::TakenLease;

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
    let (mut devices, head_cpu): (Vec<DeviceSpec>, Vec<DeviceSpec>) = planning
        .head_devices
        .iter()
        .cloned()
        .partition(|d| d.id != DeviceId::Cpu);
    let mut boxes = Vec::new();
    let mut notes = Vec::new();
    let mut next = 0u32;
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
        notes.push(format!("the link to '{rig}': {}", link.describe()));
        let ids = lent_devices(&lease, rig, &link, &mut next, &mut devices);
        boxes.push(RemoteBox {
            name: rig.clone(),
            endpoint: lease.endpoint.clone(),
            link,
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

/// The lease's devices as the planner's `RPC…` devices, their free memory as capacity.
fn lent_devices(
    lease: &TakenLease,
    rig: &str,
    link: &Link,
    next: &mut u32,
    devices: &mut Vec<DeviceSpec>,
) -> Vec<DeviceId> {
    let mut ids = Vec::new();
    for device in &lease.devices {
        let id = DeviceId::Rpc(*next);
        devices.push(DeviceSpec {
            id,
            name: format!(
                "RPC{next} · {} {} · on '{rig}' over {}",
                device.name, device.description, link.name
            ),
            capacity_bytes: device.free_mib * MIB,
            reserve_bytes: 0,
            overhead_bytes: 0,
            bandwidth_bytes_per_s: None,
            link_degraded: false,
            correction: None,
        });
        ids.push(id);
        *next += 1;
    }
    ids
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
