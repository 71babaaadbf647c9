//! Averages full-rate samples into fixed buckets (10 s by default) for the database.

use std::collections::BTreeMap;

use super::history::{gpu_key, GpuPoint};
use super::snapshot::{RigSample, UnixMillis};

/// One GPU's averages over one bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuBucket {
    pub gpu_key: String,
    pub index: u32,
    pub name: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub averages: GpuPoint,
    pub samples: u32,
}

/// The host's averages over one bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBucket {
    pub cpu_usage_pct: f64,
    pub memory_used_bytes: f64,
    pub swap_used_bytes: f64,
    pub samples: u32,
}

/// A finished bucket, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Start of the bucket, a multiple of the bucket length.
    pub start_ms: UnixMillis,
    pub gpus: Vec<GpuBucket>,
    pub host: HostBucket,
}

/// Running sums for one metric; a metric absent in some samples averages over the others.
#[derive(Debug, Default, Clone, Copy)]
struct Mean {
    sum: f64,
    count: u32,
}

impl Mean {
    fn add(&mut self, value: Option<f64>) {
        if let Some(v) = value {
            self.sum += v;
            self.count += 1;
        }
    }

    fn value(self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / f64::from(self.count))
    }
}

#[derive(Debug, Default)]
struct GpuSums {
    index: u32,
    name: Option<String>,
    memory_total_bytes: Option<u64>,
    utilization: Mean,
    memory_used: Mean,
    temperature: Mean,
    power: Mean,
    samples: u32,
}

#[derive(Debug, Default)]
struct HostSums {
    cpu: Mean,
    memory_used: Mean,
    swap_used: Mean,
    samples: u32,
}

/// Collects samples into the current bucket and hands back a bucket when time moves past it.
pub struct BucketAverager {
    bucket_ms: i64,
    start_ms: Option<UnixMillis>,
    gpus: BTreeMap<String, GpuSums>,
    host: HostSums,
}

impl BucketAverager {
    pub fn new(bucket_ms: i64) -> Self {
        Self {
            bucket_ms: bucket_ms.max(1),
            start_ms: None,
            gpus: BTreeMap::new(),
            host: HostSums::default(),
        }
    }

    /// Adds a sample; returns the previous bucket once a sample falls into a later one.
    pub fn push(&mut self, sample: &RigSample) -> Option<Bucket> {
        let start = sample.at_ms - sample.at_ms.rem_euclid(self.bucket_ms);
        let finished = match self.start_ms {
            Some(current) if current != start => self.take(),
            _ => None,
        };
        self.start_ms = Some(start);
        self.add(sample);
        finished
    }

    /// Hands back the bucket in progress (at shutdown), if it holds anything.
    pub fn take(&mut self) -> Option<Bucket> {
        let start_ms = self.start_ms.take()?;
        let gpus = std::mem::take(&mut self.gpus)
            .into_iter()
            .map(|(gpu_key, s)| GpuBucket {
                gpu_key,
                index: s.index,
                name: s.name,
                memory_total_bytes: s.memory_total_bytes,
                averages: GpuPoint {
                    utilization_gpu_pct: s.utilization.value(),
                    memory_used_bytes: s.memory_used.value(),
                    temperature_mc: s.temperature.value(),
                    power_mw: s.power.value(),
                },
                samples: s.samples,
            })
            .collect();
        let h = std::mem::take(&mut self.host);
        (h.samples > 0).then(|| Bucket {
            start_ms,
            gpus,
            host: HostBucket {
                cpu_usage_pct: h.cpu.value().unwrap_or(0.0),
                memory_used_bytes: h.memory_used.value().unwrap_or(0.0),
                swap_used_bytes: h.swap_used.value().unwrap_or(0.0),
                samples: h.samples,
            },
        })
    }

    fn add(&mut self, sample: &RigSample) {
        for gpu in &sample.gpus.gpus {
            let sums = self.gpus.entry(gpu_key(gpu)).or_default();
            let point = GpuPoint::of(gpu);
            sums.index = gpu.index;
            sums.name = gpu.name.clone().or(sums.name.take());
            sums.memory_total_bytes = gpu
                .memory
                .map(|m| m.total_bytes)
                .or(sums.memory_total_bytes);
            sums.utilization.add(point.utilization_gpu_pct);
            sums.memory_used.add(point.memory_used_bytes);
            sums.temperature.add(point.temperature_mc);
            sums.power.add(point.power_mw);
            sums.samples += 1;
        }
        let host = &sample.host;
        self.host.cpu.add(Some(f64::from(host.cpu.usage_pct)));
        self.host
            .memory_used
            .add(Some(host.memory.used_bytes as f64));
        self.host
            .swap_used
            .add(Some(host.memory.swap_used_bytes as f64));
        self.host.samples += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::sample_at;

    #[test]
    fn averages_each_bucket_and_emits_it_when_the_next_begins() {
        let mut avg = BucketAverager::new(10_000);
        assert!(avg.push(&sample_at(20_000, &[(0, "a", 10)])).is_none());
        assert!(avg.push(&sample_at(25_000, &[(0, "a", 30)])).is_none());
        let bucket = avg
            .push(&sample_at(31_000, &[(0, "a", 90)]))
            .expect("bucket 20 s finished");
        assert_eq!(bucket.start_ms, 20_000);
        assert_eq!(bucket.gpus.len(), 1);
        assert_eq!(bucket.gpus[0].averages.utilization_gpu_pct, Some(20.0));
        assert_eq!(bucket.gpus[0].samples, 2);
        assert_eq!(bucket.host.samples, 2);
        let last = avg.take().expect("bucket 30 s in progress");
        assert_eq!(last.start_ms, 30_000);
        assert_eq!(last.gpus[0].averages.utilization_gpu_pct, Some(90.0));
        assert!(avg.take().is_none());
    }

    #[test]
    fn a_metric_missing_in_some_samples_averages_over_the_rest() {
        let mut avg = BucketAverager::new(10_000);
        let mut partial = sample_at(1_000, &[(0, "a", 10)]);
        partial.gpus.gpus[0].power_mw = None;
        avg.push(&partial);
        avg.push(&sample_at(2_000, &[(0, "a", 10)]));
        let bucket = avg.take().unwrap();
        assert_eq!(bucket.gpus[0].averages.power_mw, Some(100_000.0));
    }
}
