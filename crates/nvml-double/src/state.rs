//! Process-global state of the double: NVML's init reference count, the rig in use, and
//! the cheap "has the rig file changed?" check that lets a test script a live rig.
//!
//! NVML itself is process-global (one `nvmlInit` serves every caller), so one `static`
//! behind a `Mutex` is the faithful model, and it keeps the exports free of any handle state.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nvml_wrapper_sys::bindings::{nvmlDevice_st, nvmlDevice_t};

use crate::codes::*;
use crate::rig::{Gpu, Rig};

/// Names the rig description file the double plays.
pub const RIG_ENV: &str = "RIGDECK_NVML_DOUBLE_RIG";

/// A stat per query would be cheap, but a telemetry loop polling 8 GPUs × 20 fields would
/// still do hundreds per tick; 100 ms keeps that bounded while a test that rewrites the
/// file only has to wait a little over 100 ms to see the change.
const RECHECK_EVERY: Duration = Duration::from_millis(100);

/// What identifies one version of the rig file without reading it. The inode is in there
/// so an atomic replace (write temp + rename) is noticed even with an equal size and a
/// coarse mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl FileStamp {
    /// None when the file cannot be stat'ed (e.g. deleted mid-run).
    fn of(path: &Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some(FileStamp {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode,
        })
    }
}

/// The rig currently answered from, and what is known about its file.
struct Loaded {
    path: PathBuf,
    rig: Rig,
    /// Stamp of the file version last looked at, good or bad: a bad version is reported
    /// once, not on every check.
    seen: Option<FileStamp>,
    last_check: Instant,
}

struct State {
    /// NVML reference-counts `nvmlInit`; the rig is (re)loaded only on the 0 → 1 step so a
    /// later session in the same process can point the env var at another rig.
    init_count: u32,
    loaded: Option<Loaded>,
}

static STATE: Mutex<State> = Mutex::new(State {
    init_count: 0,
    loaded: None,
});

/// A panic while holding the lock is already turned into NVML_ERROR_UNKNOWN by the export
/// guard; the state itself stays consistent, so poisoning is ignored rather than making
/// every later call fail.
fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `nvmlInit_v2` / `nvmlInitWithFlags`.
pub fn init() -> nvmlReturn_t {
    let mut state = lock();
    if state.init_count > 0 {
        state.init_count = state.init_count.saturating_add(1);
        return SUCCESS;
    }
    match load_from_env() {
        Ok(loaded) => {
            state.loaded = Some(loaded);
            state.init_count = 1;
            SUCCESS
        }
        Err(message) => {
            // The only channel to a person running a test: nvml-wrapper turns the code
            // into a bare `NvmlError::Unknown`.
            eprintln!("rigdeck nvml double: {message}");
            UNKNOWN
        }
    }
}

/// `nvmlShutdown`: the last one forgets the rig, like NVML dropping its device state.
pub fn shutdown() -> nvmlReturn_t {
    let mut state = lock();
    match state.init_count {
        0 => UNINITIALIZED,
        1 => {
            state.init_count = 0;
            state.loaded = None;
            SUCCESS
        }
        n => {
            state.init_count = n - 1;
            SUCCESS
        }
    }
}

fn load_from_env() -> Result<Loaded, String> {
    let path = match std::env::var_os(RIG_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            return Err(format!(
                "{RIG_ENV} is not set; set it to the path of a rig description JSON file \
                 (see tests/fixtures/rigs/README.md)"
            ))
        }
    };
    // Stamp before reading: if the file changes in between, the next check sees a newer
    // stamp and re-reads, instead of missing the change.
    let seen = FileStamp::of(&path);
    let rig = read_rig(&path)?;
    Ok(Loaded {
        path,
        rig,
        seen,
        last_check: Instant::now(),
    })
}

fn read_rig(path: &Path) -> Result<Rig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("rig file '{}' cannot be read: {e}", path.display()))?;
    Rig::parse(&text).map_err(|e| format!("rig file '{}' is not valid: {e}", path.display()))
}

impl Loaded {
    /// Re-reads the rig file if it changed since it was last looked at, at most every
    /// `RECHECK_EVERY`. A broken or missing new version keeps the last good rig in play.
    fn refresh(&mut self) {
        if self.last_check.elapsed() < RECHECK_EVERY {
            return;
        }
        self.last_check = Instant::now();
        let stamp = FileStamp::of(&self.path);
        if stamp == self.seen {
            return;
        }
        self.seen = stamp;
        match read_rig(&self.path) {
            Ok(rig) => self.rig = rig,
            Err(message) => {
                eprintln!(
                    "rigdeck nvml double: {message}; still answering from the last good version"
                )
            }
        }
    }
}

/// Seconds since the Unix epoch, the clock `wave` values run on.
pub fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Runs `f` on the current rig (refreshed first) at the current time; UNINITIALIZED
/// before `nvmlInit` or after the last `nvmlShutdown`.
pub fn with_rig<T>(
    f: impl FnOnce(&Rig, f64) -> Result<T, nvmlReturn_t>,
) -> Result<T, nvmlReturn_t> {
    let mut state = lock();
    let loaded = match (state.init_count, state.loaded.as_mut()) {
        (1.., Some(loaded)) => loaded,
        _ => return Err(UNINITIALIZED),
    };
    loaded.refresh();
    f(&loaded.rig, now_s())
}

/// Runs `f` on the GPU a handle names. A stale handle (the rig shrank) is
/// INVALID_ARGUMENT; a `lost` GPU answers GPU_IS_LOST to every query.
pub fn with_gpu<T>(
    device: nvmlDevice_t,
    f: impl FnOnce(&Gpu, usize, f64) -> Result<T, nvmlReturn_t>,
) -> Result<T, nvmlReturn_t> {
    with_rig(|rig, now| {
        let index = index_of(device).ok_or(INVALID_ARGUMENT)?;
        let gpu = rig.gpus.get(index).ok_or(INVALID_ARGUMENT)?;
        if gpu.lost {
            return Err(GPU_IS_LOST);
        }
        f(gpu, index, now)
    })
}

/// Device handles are opaque to callers, so they simply carry `index + 1`; the `+ 1` keeps
/// index 0 from becoming a null handle. Nothing ever dereferences them.
pub fn handle_for(index: usize) -> nvmlDevice_t {
    std::ptr::without_provenance_mut::<nvmlDevice_st>(index.wrapping_add(1))
}

/// The index a handle carries; None for null.
pub fn index_of(device: nvmlDevice_t) -> Option<usize> {
    device.addr().checked_sub(1)
}
