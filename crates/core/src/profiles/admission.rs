//! VRAM admission: does a profile's planned memory per GPU fit in what the GPUs have free now?
//!
//! Pure functions over a telemetry readout, so they are tested with constructed samples. The
//! daemon refuses a start that does not fit (the user may force it), counts instances that are
//! still loading as taking their planned memory (their VRAM is not allocated yet, so free memory
//! alone would let two big models start side by side), and before starting again waits until
//! NVML no longer lists the previous engine's process (a restart right after a crash OOMed while
//! the old process still held its memory).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use rigdeck_telemetry::snapshot::GpuReadout;

/// Kept free on top of the plan: allocator slack and the plan's own error.
pub const ADMISSION_MARGIN_BYTES: u64 = 256 << 20;

/// Memory the planner predicted on one GPU (by NVML index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedGpu {
    pub gpu: u32,
    pub bytes: u64,
}

/// One engine's claim on the GPUs.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub name: &'a str,
    pub planned: &'a [PlannedGpu],
}

/// One GPU that would be short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    pub gpu: u32,
    /// The new engines' planned memory plus the margin.
    pub needs_bytes: u64,
    pub free_bytes: u64,
    /// Planned memory of instances still loading, counted as taken.
    pub pending_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdmissionError {
    #[error("{message}")]
    DoesNotFit {
        shortfalls: Vec<Shortfall>,
        message: String,
    },
    #[error("the memory of the previous engine (pid {pid}) is still held on GPU {gpu} ({}) after {waited_s} s: wait a little, check `nvidia-smi`, or use --force", gib(*bytes))]
    StillHeld {
        pid: u32,
        gpu: u32,
        bytes: u64,
        waited_s: u64,
    },
}

/// `21.3 GiB`.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Checks that `new` engines (started together) fit next to `pending` ones (still loading,
/// claims already reduced by what they hold, see [`outstanding`]).
pub fn admit(
    new: &[Claim<'_>],
    pending: &[Claim<'_>],
    gpus: &GpuReadout,
    margin_bytes: u64,
) -> Result<(), AdmissionError> {
    let needs = per_gpu(new);
    let taken = per_gpu(pending);
    let mut shortfalls = Vec::new();
    for (&gpu, &planned) in &needs {
        if planned == 0 {
            continue;
        }
        let free = gpus
            .gpus
            .iter()
            .find(|g| g.index == gpu && g.lost.is_none())
            .and_then(|g| g.memory)
            .map_or(0, |m| m.free_bytes);
        let pending_bytes = taken.get(&gpu).copied().unwrap_or(0);
        // Saturating: planned bytes come from model headers, and a wrapped sum would admit.
        let needs_bytes = planned.saturating_add(margin_bytes);
        if needs_bytes.saturating_add(pending_bytes) > free {
            shortfalls.push(Shortfall {
                gpu,
                needs_bytes,
                free_bytes: free,
                pending_bytes,
            });
        }
    }
    if shortfalls.is_empty() {
        return Ok(());
    }
    let message = explain(new, pending, &shortfalls);
    Err(AdmissionError::DoesNotFit {
        shortfalls,
        message,
    })
}

fn per_gpu(claims: &[Claim<'_>]) -> BTreeMap<u32, u64> {
    let mut sums = BTreeMap::new();
    for claim in claims {
        for p in claim.planned {
            let sum = sums.entry(p.gpu).or_insert(0u64);
            *sum = sum.saturating_add(p.bytes);
        }
    }
    sums
}

fn explain(new: &[Claim<'_>], pending: &[Claim<'_>], shortfalls: &[Shortfall]) -> String {
    let lines: Vec<String> = shortfalls
        .iter()
        .map(|s| {
            let after = if s.pending_bytes > 0 {
                let loading: Vec<&str> = pending
                    .iter()
                    .filter(|c| c.planned.iter().any(|p| p.gpu == s.gpu && p.bytes > 0))
                    .map(|c| c.name)
                    .collect();
                format!(
                    " ({} still loading on it will take {} more)",
                    loading.join(", "),
                    gib(s.pending_bytes)
                )
            } else {
                String::new()
            };
            format!(
                "GPU {} needs {}, {} free{after}",
                s.gpu,
                gib(s.needs_bytes),
                gib(s.free_bytes)
            )
        })
        .collect();
    let fix = "stop what holds it or use --force";
    if new.len() > 1 {
        let names: Vec<&str> = new.iter().map(|c| c.name).collect();
        format!(
            "starting {} together would need more memory than there is: {}; start them on different GPUs or one at a time, or use --force",
            names.join(" and "),
            lines.join("; ")
        )
    } else {
        format!("{}: {fix}", lines.join("; "))
    }
}

/// What a loading instance will still take: its plan minus what NVML shows its pid holding.
pub fn outstanding(planned: &[PlannedGpu], pid: Option<u32>, gpus: &GpuReadout) -> Vec<PlannedGpu> {
    planned
        .iter()
        .map(|p| {
            let held: u64 = pid
                .map(|pid| {
                    held_by(gpus, &[pid])
                        .iter()
                        .filter(|h| h.gpu == p.gpu)
                        .map(|h| h.bytes)
                        .sum()
                })
                .unwrap_or(0);
            PlannedGpu {
                gpu: p.gpu,
                bytes: p.bytes.saturating_sub(held),
            }
        })
        .collect()
}

/// A process holding memory on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Held {
    pub gpu: u32,
    pub pid: u32,
    pub bytes: u64,
}

/// Where NVML lists any of `pids` (a process listed without a figure counts as holding).
pub fn held_by(gpus: &GpuReadout, pids: &[u32]) -> Vec<Held> {
    gpus.gpus
        .iter()
        .flat_map(|g| {
            g.processes
                .iter()
                .filter(|p| pids.contains(&p.pid))
                .map(move |p| Held {
                    gpu: g.index,
                    pid: p.pid,
                    bytes: p.used_bytes.unwrap_or(0),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rigdeck_telemetry::snapshot::{
        DriverState, GpuMemory, GpuProcess, GpuProcessKind, GpuSnapshot,
    };

    const GIB: u64 = 1 << 30;

    fn rig(free_gib: &[f64], procs: &[(u32, u32, u64)]) -> GpuReadout {
        let gpus = free_gib
            .iter()
            .enumerate()
            .map(|(i, free)| {
                let mut g = GpuSnapshot::blank(i as u32);
                let free = (free * GIB as f64) as u64;
                g.memory = Some(GpuMemory {
                    total_bytes: 24 * GIB,
                    used_bytes: 24 * GIB - free,
                    free_bytes: free,
                });
                g.processes = procs
                    .iter()
                    .filter(|(gpu, _, _)| *gpu == i as u32)
                    .map(|(_, pid, bytes)| GpuProcess {
                        pid: *pid,
                        name: None,
                        used_bytes: Some(*bytes),
                        kind: GpuProcessKind::Compute,
                        started_by_rigdeck: false,
                        rigdeck_instance: None,
                    })
                    .collect();
                g
            })
            .collect();
        GpuReadout {
            driver: DriverState::Ready {
                driver_version: None,
                cuda_driver_version: None,
            },
            gpus,
        }
    }

    fn plan(gpu: u32, gib: f64) -> PlannedGpu {
        PlannedGpu {
            gpu,
            bytes: (gib * GIB as f64) as u64,
        }
    }

    #[test]
    fn refuses_with_the_gpu_and_the_numbers() {
        let gpus = rig(&[20.0, 14.2], &[]);
        let planned = [plan(0, 10.0), plan(1, 21.05)];
        let err = admit(
            &[Claim {
                name: "big",
                planned: &planned,
            }],
            &[],
            &gpus,
            ADMISSION_MARGIN_BYTES,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "GPU 1 needs 21.3 GiB, 14.2 GiB free: stop what holds it or use --force"
        );
        let small = [plan(0, 10.0), plan(1, 12.0)];
        assert!(admit(
            &[Claim {
                name: "s",
                planned: &small
            }],
            &[],
            &gpus,
            ADMISSION_MARGIN_BYTES
        )
        .is_ok());
    }

    #[test]
    fn a_missing_gpu_counts_as_no_memory() {
        let gpus = rig(&[20.0], &[]);
        let planned = [plan(3, 1.0)];
        let err = admit(
            &[Claim {
                name: "x",
                planned: &planned,
            }],
            &[],
            &gpus,
            0,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("GPU 3 needs 1.0 GiB, 0.0 GiB free"),
            "{err}"
        );
    }

    #[test]
    fn two_profiles_that_cannot_coexist_are_refused_together() {
        let gpus = rig(&[20.0], &[]);
        let a = [plan(0, 12.0)];
        let b = [plan(0, 9.0)];
        let both = [
            Claim {
                name: "a",
                planned: &a,
            },
            Claim {
                name: "b",
                planned: &b,
            },
        ];
        let err = admit(&both, &[], &gpus, ADMISSION_MARGIN_BYTES)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("starting a and b together would need"),
            "{err}"
        );
        assert!(err.contains("GPU 0 needs 21.2 GiB, 20.0 GiB free"), "{err}");
        assert!(admit(&both[..1], &[], &gpus, ADMISSION_MARGIN_BYTES).is_ok());
    }

    #[test]
    fn a_loading_instance_keeps_what_it_has_not_allocated_yet() {
        // "a" planned 12 GiB and holds 4 so far: 8 more will go, leaving 12 - 8 = 4 of 12 free.
        let gpus = rig(&[12.0], &[(0, 500, 4 * GIB)]);
        let left = outstanding(&[plan(0, 12.0)], Some(500), &gpus);
        assert_eq!(left, vec![plan(0, 8.0)]);
        let b = [plan(0, 6.0)];
        let err = admit(
            &[Claim {
                name: "b",
                planned: &b,
            }],
            &[Claim {
                name: "a",
                planned: &left,
            }],
            &gpus,
            0,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("(a still loading on it will take 8.0 GiB more)"),
            "{err}"
        );
    }

    #[test]
    fn finds_the_old_process_in_the_process_lists() {
        let gpus = rig(&[1.0, 1.0], &[(1, 42, GIB), (0, 7, GIB)]);
        assert_eq!(
            held_by(&gpus, &[42]),
            vec![Held {
                gpu: 1,
                pid: 42,
                bytes: GIB
            }]
        );
        assert!(held_by(&gpus, &[43]).is_empty());
    }
}
