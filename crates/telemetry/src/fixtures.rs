//! Samples made up for tests of history, downsampling and storage (in this crate and in the ones
//! that store telemetry).

use crate::snapshot::*;

/// A sample at `t` ms with GPUs `(index, uuid, utilization %)`, 40 of 100 bytes of VRAM used.
pub fn sample_at(t: i64, gpus: &[(u32, &str, u32)]) -> RigSample {
    RigSample {
        at_ms: t,
        gpus: GpuReadout {
            driver: DriverState::Ready {
                driver_version: None,
                cuda_driver_version: None,
            },
            gpus: gpus
                .iter()
                .map(|(index, uuid, util)| GpuSnapshot {
                    name: Some("RTX".into()),
                    uuid: Some((*uuid).into()),
                    memory: Some(GpuMemory {
                        total_bytes: 100,
                        used_bytes: 40,
                        free_bytes: 60,
                    }),
                    utilization_gpu_pct: Some(*util),
                    temperature_mc: Some(50_000),
                    power_mw: Some(100_000),
                    ..GpuSnapshot::blank(*index)
                })
                .collect(),
        },
        host: HostSnapshot {
            cpu: CpuSnapshot {
                usage_pct: 12.5,
                ..Default::default()
            },
            memory: HostMemory {
                used_bytes: 1000,
                ..Default::default()
            },
            ..Default::default()
        },
    }
}
