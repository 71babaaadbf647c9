//! One window per rig: an exclusive lock file plus a Unix socket, so a second `rigdeck-desktop`
//! asks the first one to show its window instead of starting a second server.
//!
//! Why not D-Bus (what tauri-plugin-single-instance uses on Linux): there may be no session bus at
//! all (Xvfb in CI, a bare X session over SSH), and the lock must also work there. `flock` is
//! released by the kernel when the process dies, so a crash never leaves a stale lock behind; the
//! socket file may stay, and the next owner of the lock simply replaces it.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

/// What a second instance sends, and what the first answers once it has acted on it.
const FOCUS_REQUEST: &str = "focus";
const FOCUS_DONE: &str = "ok";

/// How long a second instance waits for the first one to listen (it binds its socket right after
/// taking the lock, so this only covers two launches at the same instant).
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);
/// How long it waits for the answer: the first instance answers once its window exists, which
/// can take a while when it was itself still starting its server.
const ANSWER_PATIENCE: Duration = Duration::from_secs(60);

/// The outcome of [`claim`].
pub enum Claim {
    /// This process is the only one: it owns the lock and must serve [`Owner::take_focus_server`].
    Owner(Owner),
    /// Another process owns the lock and has been asked to bring its window to the front.
    Forwarded,
}

/// Holds the lock for the life of the process; dropping it removes the socket and frees the lock.
pub struct Owner {
    socket_path: PathBuf,
    listener: Option<UnixListener>,
    // Declared last so it is dropped (and the lock released) after the socket file is removed.
    _lock: File,
}

/// Where the lock and the socket live: `$XDG_RUNTIME_DIR/rigdeck` (private to the user, emptied at
/// logout), or the config folder when the session has no runtime dir.
pub fn runtime_dir(config_dir: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("rigdeck"),
        _ => config_dir.to_path_buf(),
    }
}

/// Takes the instance lock `<dir>/<name>.lock`, or, when another process holds it, asks that one
/// to show its window.
pub fn claim(dir: &Path, name: &str) -> anyhow::Result<Claim> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let lock_path = dir.join(format!("{name}.lock"));
    let socket_path = dir.join(format!("{name}.sock"));
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .with_context(|| format!("cannot open the lock file {}", lock_path.display()))?;
    if !try_lock(&lock).with_context(|| format!("cannot lock {}", lock_path.display()))? {
        ask_owner_to_focus(&socket_path)?;
        return Ok(Claim::Forwarded);
    }
    // We own the lock, so any socket file there is left over from a crashed owner.
    match fs::remove_file(&socket_path) {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::NotFound => {}
        Err(err) => {
            return Err(err)
                .with_context(|| format!("cannot remove the stale {}", socket_path.display()))
        }
    }
    let listener = UnixListener::bind(&socket_path)
        .with_context(|| format!("cannot listen on {}", socket_path.display()))?;
    // The folder is already private; this also covers the config-folder fallback.
    fs::set_permissions(&socket_path, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", socket_path.display()))?;
    Ok(Claim::Owner(Owner {
        socket_path,
        listener: Some(listener),
        _lock: lock,
    }))
}

impl Owner {
    /// The socket side, to be served once the window exists (see [`FocusServer::spawn`]). The
    /// lock itself stays with the `Owner`, which the caller keeps until the server has stopped.
    pub fn take_focus_server(&mut self) -> Option<FocusServer> {
        self.listener.take().map(FocusServer)
    }
}

/// Answers focus requests from later instances.
pub struct FocusServer(UnixListener);

impl FocusServer {
    /// Answers on a background thread, calling `on_focus` for each request.
    pub fn spawn(self, on_focus: impl Fn() + Send + 'static) -> anyhow::Result<()> {
        let listener = self.0;
        std::thread::Builder::new()
            .name("rigdeck-instance".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    match stream {
                        Ok(stream) => {
                            if let Err(err) = answer(stream, &on_focus) {
                                tracing::warn!(
                                    "a second rigdeck-desktop could not be answered: {err:#}"
                                );
                            }
                        }
                        Err(err) => tracing::warn!("instance socket: {err}"),
                    }
                }
            })
            .context("cannot start the instance socket thread")?;
        Ok(())
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.socket_path);
    }
}

fn answer(stream: UnixStream, on_focus: &impl Fn()) -> anyhow::Result<()> {
    // A client that connects and says nothing must not block the next one for long.
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    if line.trim() != FOCUS_REQUEST {
        anyhow::bail!("unexpected request {:?}", line.trim());
    }
    on_focus();
    (&stream).write_all(format!("{FOCUS_DONE}\n").as_bytes())?;
    Ok(())
}

fn ask_owner_to_focus(socket_path: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let stream = loop {
        match UnixStream::connect(socket_path) {
            Ok(stream) => break stream,
            Err(err) if started.elapsed() < CONNECT_PATIENCE => {
                tracing::debug!("waiting for the running Rigdeck window to listen: {err}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(err) => {
                return Err(err).with_context(|| {
                    format!(
                        "another Rigdeck desktop is running (it holds the lock next to {}) but does not answer; \
                         close it, or end it with `pkill -x rigdeck-desktop`",
                        socket_path.display()
                    )
                })
            }
        }
    };
    stream.set_read_timeout(Some(ANSWER_PATIENCE))?;
    (&stream)
        .write_all(format!("{FOCUS_REQUEST}\n").as_bytes())
        .context("cannot talk to the running Rigdeck desktop")?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .context("the running Rigdeck desktop did not answer")?;
    if reply.trim() != FOCUS_DONE {
        anyhow::bail!(
            "the running Rigdeck desktop answered {:?} instead of {FOCUS_DONE:?}",
            reply.trim()
        );
    }
    Ok(())
}

/// `flock(LOCK_EX | LOCK_NB)`: true when taken, false when another process holds it.
/// (`File::try_lock` would do, but it needs a newer Rust than the workspace's rust-version.)
fn try_lock(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock only reads the descriptor, which `file` keeps open for the duration of the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.kind() == ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(err)
    }
}

/// A short, stable name for a lock (FNV-1a): the same rig always maps to the same lock file.
pub fn lock_name(kind: &str, key: &str) -> String {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("desktop-{kind}-{:08x}", hash >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("rigdeck-instance-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn second_claim_forwards_a_focus_request_to_the_first() {
        let dir = temp_dir("forward");
        let Claim::Owner(mut owner) = claim(&dir, "t").expect("first claim") else {
            panic!("the first claim must own the lock");
        };
        let focused = Arc::new(AtomicUsize::new(0));
        let counter = focused.clone();
        owner
            .take_focus_server()
            .expect("a focus server")
            .spawn(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            })
            .expect("listen");
        // flock locks belong to the open file description, so a second open in the same process
        // conflicts just as a second process would.
        assert!(matches!(
            claim(&dir, "t").expect("second claim"),
            Claim::Forwarded
        ));
        assert_eq!(focused.load(Ordering::SeqCst), 1);
        drop(owner);
        assert!(
            !dir.join("t.sock").exists(),
            "the socket is removed with the owner"
        );
        assert!(matches!(
            claim(&dir, "t").expect("claim after the owner left"),
            Claim::Owner(_)
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_socket_file_is_replaced() {
        let dir = temp_dir("stale");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("t.sock"), b"left over").expect("write");
        assert!(matches!(claim(&dir, "t").expect("claim"), Claim::Owner(_)));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn lock_names_are_stable_and_distinct() {
        assert_eq!(lock_name("local", "/a"), lock_name("local", "/a"));
        assert_ne!(lock_name("local", "/a"), lock_name("local", "/b"));
        assert!(lock_name("remote", "http://x").starts_with("desktop-remote-"));
    }
}
