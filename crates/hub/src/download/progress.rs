//! A download's progress as counters the transfer bumps and anyone may read (the CLI's bar,
//! the daemon's events), and the rate and time left computed from them.

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shared between the transfer and its watchers.
#[derive(Debug, Default)]
pub struct DownloadProgress {
    /// Bytes of the whole download (every file).
    pub total_bytes: AtomicU64,
    /// Bytes on disk or received, including what earlier runs left (so a resume starts at
    /// its real percentage).
    pub done_bytes: Arc<AtomicU64>,
    pub files_total: AtomicUsize,
    pub files_done: AtomicUsize,
    /// The file being fetched now.
    pub current: Mutex<String>,
}

/// A moment's view for display.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProgressView {
    pub total_bytes: u64,
    pub done_bytes: u64,
    pub files_total: usize,
    pub files_done: usize,
    pub current: String,
    /// Bytes per second over the last few seconds.
    pub rate_bps: u64,
    /// Seconds left at that rate (None before a rate is known).
    pub eta_s: Option<u64>,
}

impl DownloadProgress {
    pub fn set_current(&self, file: &str) {
        if let Ok(mut current) = self.current.lock() {
            file.clone_into(&mut current);
        }
    }
}

/// Turns successive readings of the counters into a rate over a sliding window: smooth enough
/// to read, quick to show a stall.
#[derive(Debug)]
pub struct RateMeter {
    window: Duration,
    samples: VecDeque<(Instant, u64)>,
}

impl RateMeter {
    pub fn new(window: Duration) -> RateMeter {
        RateMeter {
            window,
            samples: VecDeque::new(),
        }
    }

    /// Reads the counters now and returns the view with rate and ETA.
    pub fn view(&mut self, progress: &DownloadProgress) -> ProgressView {
        self.view_at(progress, Instant::now())
    }

    fn view_at(&mut self, progress: &DownloadProgress, now: Instant) -> ProgressView {
        let done = progress.done_bytes.load(Ordering::Relaxed);
        let total = progress.total_bytes.load(Ordering::Relaxed);
        self.samples.push_back((now, done));
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > self.window)
        {
            self.samples.pop_front();
        }
        let rate = match self.samples.front() {
            Some((at, first)) if now.duration_since(*at) >= Duration::from_millis(200) => {
                let seconds = now.duration_since(*at).as_secs_f64();
                (done.saturating_sub(*first) as f64 / seconds) as u64
            }
            _ => 0,
        };
        ProgressView {
            total_bytes: total,
            done_bytes: done,
            files_total: progress.files_total.load(Ordering::Relaxed),
            files_done: progress.files_done.load(Ordering::Relaxed),
            current: progress
                .current
                .lock()
                .map(|c| c.clone())
                .unwrap_or_default(),
            rate_bps: rate,
            eta_s: (rate > 0).then(|| total.saturating_sub(done) / rate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_eta_follow_the_recent_window() {
        let progress = DownloadProgress::default();
        progress.total_bytes.store(1000, Ordering::Relaxed);
        let mut meter = RateMeter::new(Duration::from_secs(5));
        let start = Instant::now();
        assert_eq!(meter.view_at(&progress, start).rate_bps, 0);
        progress.done_bytes.store(100, Ordering::Relaxed);
        let view = meter.view_at(&progress, start + Duration::from_secs(1));
        assert_eq!((view.rate_bps, view.eta_s), (100, Some(9)));
        // Nothing for ten seconds: the old samples leave the window and the rate falls to 0.
        meter.view_at(&progress, start + Duration::from_secs(8));
        let stalled = meter.view_at(&progress, start + Duration::from_secs(11));
        assert_eq!((stalled.rate_bps, stalled.eta_s), (0, None));
    }
}
