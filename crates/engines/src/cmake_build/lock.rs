//! One build per folder at a time: an exclusive `flock` on the folder's lock file.

use std::fs;
use std::io::{self, Write as _};
use std::path::Path;

use super::{io_err, BuildError, BuildStep, Reporter, LOCK_FILE};

/// An exclusive `flock` on the build folder's lock file, so two builds never share a folder: a
/// second build (another click, another process, a parallel test) waits for the first and then
/// usually reuses its result. The kernel drops the lock when its holder exits, so a build that
/// died never leaves the folder locked. The file itself stays (removing a locked file would let
/// a third build lock a fresh inode beside the second).
pub(super) struct BuildLock {
    _file: fs::File,
}

impl BuildLock {
    pub(super) async fn acquire(dir: &Path, reporter: &Reporter<'_>) -> Result<Self, BuildError> {
        let path = dir.join(LOCK_FILE);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("open", &path))?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(io_err("lock", &path))? {
            let holder = fs::read_to_string(&path).unwrap_or_default();
            reporter.emit(
                BuildStep::Configure,
                None,
                Some(&format!(
                    "waiting for the build already running in {} (process {})",
                    dir.display(),
                    holder.trim()
                )),
            );
            let waiting = file.try_clone().map_err(io_err("lock", &path))?;
            tokio::task::spawn_blocking(move || flock(&waiting, libc::LOCK_EX))
                .await
                .map_err(|e| io_err("lock", &path)(io::Error::other(e)))?
                .map_err(io_err("lock", &path))?;
        }
        // Who holds it, for the message a waiting build shows.
        let _ = file.set_len(0);
        let _ = write!(file, "{}", std::process::id());
        Ok(Self { _file: file })
    }
}

/// `flock(2)` on `file`; `Ok(false)` when `LOCK_NB` was asked and another holder has it.
fn flock(file: &fs::File, operation: libc::c_int) -> io::Result<bool> {
    use std::os::fd::AsRawFd as _;
    loop {
        // SAFETY: the descriptor belongs to `file`, which outlives the call.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}
