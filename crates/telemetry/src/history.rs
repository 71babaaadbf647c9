//! Recent history kept in memory (the last 15 minutes at full rate) and the column-oriented
//! `History` shape that charts consume, whether it comes from memory or from the database.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::snapshot::{GpuSnapshot, RigSample, UnixMillis};

/// The history ranges the UI offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HistoryRange {
    #[serde(rename = "15m")]
    FifteenMinutes,
    #[serde(rename = "1h")]
    OneHour,
    #[serde(rename = "24h")]
    OneDay,
}

impl HistoryRange {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "15m" => Some(Self::FifteenMinutes),
            "1h" => Some(Self::OneHour),
            "24h" => Some(Self::OneDay),
            _ => None,
        }
    }

    pub fn duration_ms(self) -> i64 {
        match self {
            Self::FifteenMinutes => 15 * 60_000,
            Self::OneHour => 60 * 60_000,
            Self::OneDay => 24 * 60 * 60_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistorySource {
    Memory,
    Database,
}

/// Column-oriented series, one array per metric, aligned on `t`; `None` is a gap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub range: HistoryRange,
    pub step_ms: i64,
    pub source: HistorySource,
    pub gpus: Vec<GpuHistory>,
    pub host: HostHistory,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHistory {
    pub uuid: Option<String>,
    pub index: u32,
    pub name: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub t: Vec<UnixMillis>,
    pub utilization_gpu_pct: Vec<Option<f64>>,
    pub memory_used_bytes: Vec<Option<f64>>,
    pub temperature_mc: Vec<Option<f64>>,
    pub power_mw: Vec<Option<f64>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostHistory {
    pub t: Vec<UnixMillis>,
    pub cpu_usage_pct: Vec<Option<f64>>,
    pub memory_used_bytes: Vec<Option<f64>>,
}

/// The metrics of one GPU at one instant, as charted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPoint {
    pub utilization_gpu_pct: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub temperature_mc: Option<f64>,
    pub power_mw: Option<f64>,
}

impl GpuPoint {
    pub fn of(gpu: &GpuSnapshot) -> Self {
        Self {
            utilization_gpu_pct: gpu.utilization_gpu_pct.map(f64::from),
            memory_used_bytes: gpu.memory.map(|m| m.used_bytes as f64),
            temperature_mc: gpu.temperature_mc.map(|t| t as f64),
            power_mw: gpu.power_mw.map(f64::from),
        }
    }
}

/// A GPU is followed by its UUID; without one (a lost card, say) by its index.
pub fn gpu_key(gpu: &GpuSnapshot) -> String {
    gpu.uuid
        .clone()
        .unwrap_or_else(|| format!("index:{}", gpu.index))
}

impl GpuHistory {
    fn push(&mut self, t: UnixMillis, point: GpuPoint) {
        self.t.push(t);
        self.utilization_gpu_pct.push(point.utilization_gpu_pct);
        self.memory_used_bytes.push(point.memory_used_bytes);
        self.temperature_mc.push(point.temperature_mc);
        self.power_mw.push(point.power_mw);
    }
}

impl HostHistory {
    pub fn push(
        &mut self,
        t: UnixMillis,
        cpu_usage_pct: Option<f64>,
        memory_used_bytes: Option<f64>,
    ) {
        self.t.push(t);
        self.cpu_usage_pct.push(cpu_usage_pct);
        self.memory_used_bytes.push(memory_used_bytes);
    }
}

struct GpuTrack {
    identity: GpuHistory,
    points: VecDeque<(UnixMillis, GpuPoint)>,
}

/// The last `window_ms` of samples at full rate.
pub struct RecentHistory {
    window_ms: i64,
    gpus: BTreeMap<String, GpuTrack>,
    host: VecDeque<(UnixMillis, f64, f64)>,
}

impl RecentHistory {
    pub fn new(window_ms: i64) -> Self {
        Self {
            window_ms,
            gpus: BTreeMap::new(),
            host: VecDeque::new(),
        }
    }

    pub fn record(&mut self, sample: &RigSample) {
        let t = sample.at_ms;
        for gpu in &sample.gpus.gpus {
            let track = self.gpus.entry(gpu_key(gpu)).or_insert_with(|| GpuTrack {
                identity: GpuHistory::default(),
                points: VecDeque::new(),
            });
            track.identity.uuid = gpu.uuid.clone();
            track.identity.index = gpu.index;
            track.identity.name = gpu.name.clone().or(track.identity.name.take());
            track.identity.memory_total_bytes = gpu
                .memory
                .map(|m| m.total_bytes)
                .or(track.identity.memory_total_bytes);
            track.points.push_back((t, GpuPoint::of(gpu)));
        }
        let mem = &sample.host.memory;
        self.host.push_back((
            t,
            f64::from(sample.host.cpu.usage_pct),
            mem.used_bytes as f64,
        ));
        self.trim(t);
    }

    fn trim(&mut self, now: UnixMillis) {
        let oldest = now - self.window_ms;
        for track in self.gpus.values_mut() {
            while track.points.front().is_some_and(|(t, _)| *t < oldest) {
                track.points.pop_front();
            }
        }
        // A GPU gone for the whole window (removed card) leaves the history.
        self.gpus.retain(|_, track| !track.points.is_empty());
        while self.host.front().is_some_and(|(t, _, _)| *t < oldest) {
            self.host.pop_front();
        }
    }

    /// Everything from `since` on, as column series.
    pub fn history(&self, range: HistoryRange, since: UnixMillis, step_ms: i64) -> History {
        let gpus = self
            .gpus
            .values()
            .map(|track| {
                let mut series = GpuHistory {
                    t: Vec::new(),
                    ..track.identity.clone()
                };
                for (t, point) in track.points.iter().filter(|(t, _)| *t >= since) {
                    series.push(*t, *point);
                }
                series
            })
            .collect::<Vec<_>>();
        let mut host = HostHistory::default();
        for (t, cpu, mem) in self.host.iter().filter(|(t, _, _)| *t >= since) {
            host.push(*t, Some(*cpu), Some(*mem));
        }
        let mut gpus = gpus;
        gpus.sort_by_key(|g| g.index);
        History {
            range,
            step_ms,
            source: HistorySource::Memory,
            gpus,
            host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::sample_at;

    #[test]
    fn keeps_only_the_window_and_drops_gpus_gone_for_all_of_it() {
        let mut recent = RecentHistory::new(10_000);
        recent.record(&sample_at(0, &[(0, "a", 10), (1, "b", 20)]));
        recent.record(&sample_at(5_000, &[(0, "a", 30)]));
        recent.record(&sample_at(12_000, &[(0, "a", 50)]));
        let h = recent.history(HistoryRange::FifteenMinutes, 0, 1000);
        assert_eq!(h.gpus.len(), 1, "GPU b had no point in the last 10 s");
        assert_eq!(h.gpus[0].t, vec![5_000, 12_000]);
        assert_eq!(h.gpus[0].utilization_gpu_pct, vec![Some(30.0), Some(50.0)]);
        assert_eq!(h.host.t, vec![5_000, 12_000]);
        assert_eq!(h.host.cpu_usage_pct[0], Some(12.5));
    }

    #[test]
    fn series_come_out_in_gpu_order_with_identity() {
        let mut recent = RecentHistory::new(60_000);
        recent.record(&sample_at(0, &[(1, "zzz", 1), (0, "aaa-late", 2)]));
        let h = recent.history(HistoryRange::FifteenMinutes, 0, 1000);
        assert_eq!(
            h.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(h.gpus[0].memory_total_bytes, Some(100));
        assert_eq!(h.source, HistorySource::Memory);
    }
}
