//! The host's memory read bandwidth, measured: a buffer well above the last-level cache, filled
//! once, then read by one thread per physical core (summing its share as `u64`s), best of a
//! few passes within a time budget. It is the speed ceiling of weights in CPU RAM, which no
//! interface of the machine reports.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The largest buffer the probe reads: far above any last-level cache (a few hundred MiB at
/// most on today's CPUs), small enough to fill in a fraction of a second.
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// The smallest buffer worth measuring with: below it the caches would answer, not the memory.
pub const MIN_BUFFER_BYTES: u64 = 64 << 20;

/// Passes the probe makes at most; it keeps the fastest.
pub const PASSES: u32 = 5;

/// After this much reading no further pass starts, so a slow or busy machine is not held up for
/// long (the one fill before comes on top: a fraction of a second).
pub const TIME_BUDGET: Duration = Duration::from_secs(2);

/// How big a measurement to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSize {
    pub buffer_bytes: u64,
    pub threads: u32,
    pub passes: u32,
}

impl ProbeSize {
    /// `min(1 GiB, available RAM / 8)` read by one thread per physical core; `None` when an
    /// eighth of the available RAM is below [`MIN_BUFFER_BYTES`] (the figure would be the
    /// cache's, and the memory is needed elsewhere).
    pub fn for_host(available_ram_bytes: u64, physical_cores: u32) -> Option<ProbeSize> {
        let buffer_bytes = (available_ram_bytes / 8).min(MAX_BUFFER_BYTES);
        (buffer_bytes >= MIN_BUFFER_BYTES).then_some(ProbeSize {
            buffer_bytes,
            threads: physical_cores.max(1),
            passes: PASSES,
        })
    }
}

/// One measurement and how it was taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandwidthReading {
    /// Bytes read per second in the fastest pass.
    pub bytes_per_s: u64,
    pub buffer_bytes: u64,
    pub threads: u32,
    /// Passes made (at most the size's, fewer when the time budget ran out).
    pub passes: u32,
    /// Time the whole probe took, filling included.
    pub elapsed_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot set aside {bytes} bytes to measure the memory bandwidth: free some memory and measure again")]
    NoMemory { bytes: u64 },
    #[error("a thread of the memory bandwidth probe failed: measure again")]
    ThreadFailed,
}

/// Measures with `size`: fills the buffer once (in parallel, so every page is real), then reads
/// it whole with `size.threads` threads per pass until `size.passes` passes or [`TIME_BUDGET`].
pub fn measure(size: ProbeSize) -> Result<BandwidthReading, ProbeError> {
    let started = Instant::now();
    let words = usize::try_from(size.buffer_bytes / 8).unwrap_or(usize::MAX);
    let mut buffer = zeroed_words(words).ok_or(ProbeError::NoMemory {
        bytes: size.buffer_bytes,
    })?;
    let threads = usize::try_from(size.threads.max(1)).unwrap_or(1);
    let share = words.div_ceil(threads).max(1);
    fill(&mut buffer, share)?;
    let reading = Instant::now();
    let mut best = Duration::MAX;
    let mut passes = 0;
    while passes < size.passes.max(1) {
        best = best.min(read_pass(&buffer, share)?);
        passes += 1;
        if reading.elapsed() >= TIME_BUDGET {
            break;
        }
    }
    let bytes_read = (words * 8) as f64;
    Ok(BandwidthReading {
        bytes_per_s: (bytes_read / best.as_secs_f64().max(1e-9)) as u64,
        buffer_bytes: (words * 8) as u64,
        threads: size.threads.max(1),
        passes,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// `words` zeros, `None` when the memory cannot be had. The zeros are the kernel's untouched
/// pages (no single-threaded pass over them): the fill's threads touch them first.
fn zeroed_words(words: usize) -> Option<Vec<u64>> {
    // Asked for first, so a refusal is an answer instead of an abort.
    Vec::<u64>::new().try_reserve_exact(words).ok()?;
    Some(vec![0u64; words])
}

/// Writes every word, each thread its own share (pages land near the thread that reads them).
fn fill(buffer: &mut [u64], share: usize) -> Result<(), ProbeError> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = buffer
            .chunks_mut(share)
            .enumerate()
            .map(|(n, chunk)| {
                scope.spawn(move || {
                    for (i, word) in chunk.iter_mut().enumerate() {
                        *word = (n * share + i) as u64;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| ProbeError::ThreadFailed))
    })
}

/// One full read of the buffer, each thread summing its share; the wall time of the slowest.
fn read_pass(buffer: &[u64], share: usize) -> Result<Duration, ProbeError> {
    let started = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = buffer
            .chunks(share)
            .map(|chunk| scope.spawn(move || sum(black_box(chunk))))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map(|total| {
                    black_box(total);
                })
                .map_err(|_| ProbeError::ThreadFailed)
        })
    })?;
    Ok(started.elapsed())
}

fn sum(words: &[u64]) -> u64 {
    words.iter().fold(0u64, |acc, &w| acc.wrapping_add(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_is_an_eighth_of_free_ram_up_to_a_gib_and_never_cache_sized() {
        let big = ProbeSize::for_host(64 << 30, 16).unwrap();
        assert_eq!(
            (big.buffer_bytes, big.threads, big.passes),
            (MAX_BUFFER_BYTES, 16, PASSES)
        );
        let small = ProbeSize::for_host(4 << 30, 0).unwrap();
        assert_eq!((small.buffer_bytes, small.threads), (512 << 20, 1));
        assert_eq!(ProbeSize::for_host(256 << 20, 4), None);
    }

    #[test]
    fn a_reading_says_how_it_was_taken() {
        let size = ProbeSize {
            buffer_bytes: 8 << 20,
            threads: 3,
            passes: 2,
        };
        let reading = measure(size).unwrap();
        assert_eq!(reading.buffer_bytes, 8 << 20);
        assert_eq!((reading.threads, reading.passes), (3, 2));
        assert!(reading.bytes_per_s > 0);
    }

    #[test]
    fn every_word_is_summed_once() {
        let mut buffer = vec![0u64; 1000];
        fill(&mut buffer, 334).unwrap();
        assert_eq!(sum(&buffer), (0..1000).sum::<u64>());
    }
}
