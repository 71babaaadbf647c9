//! The lending side of llama.cpp RPC: a paired peer asks for some of this rig's devices, and the
//! rig starts its own build's `rpc-server` for them, bound to loopback only (the peer reaches it
//! through the channel's tunnel, never the network). A lease belongs to the certificate that took
//! it and ends when that peer releases it, is unpinned, or when the daemon stops.

use std::collections::{BTreeMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::error::{FleetError, FleetErrorKind};
use crate::fingerprint::Fingerprint;

/// How long an `rpc-server` may take to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long its device list may take to appear once it took a connection.
const DEVICES_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of an `rpc-server`'s output kept for messages.
const KEPT_LINES: usize = 200;
/// The most devices one lease asks for.
const MAX_DEVICES: usize = 16;

/// Which llama.cpp build a side runs: RPC needs the very same one on both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcBuild {
    pub version: String,
    pub commit: Option<String>,
}

impl std::fmt::Display for RpcBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.commit {
            Some(commit) if !self.version.contains(commit.as_str()) => {
                write!(f, "{} ({commit})", self.version)
            }
            _ => write!(f, "{}", self.version),
        }
    }
}

/// The rig's build that lends: its `rpc-server` and what it is.
#[derive(Debug, Clone)]
pub struct LendingBuild {
    pub rpc_server: PathBuf,
    pub build: RpcBuild,
}

/// Finds the rig's llama.cpp build with an `rpc-server` (the daemon knows its engine registry;
/// the fleet does not). `Err` says why there is none and how to get one.
pub type LendingBuildSource =
    Arc<dyn Fn() -> BoxFuture<'static, Result<LendingBuild, String>> + Send + Sync>;

/// A peer's request for devices.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// Device names as llama.cpp's `--list-devices` gives them: `CPU`, `CUDA0`, `Vulkan1`…
    pub devices: Vec<String>,
    /// The caller's llama.cpp build.
    pub build: RpcBuild,
}

/// A lent device as the `rpc-server` reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcDevice {
    pub name: String,
    pub description: String,
    pub total_mib: u64,
    pub free_mib: u64,
}

/// The lender's answer to a lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseGranted {
    pub lease: String,
    pub build: RpcBuild,
    pub devices: Vec<RpcDevice>,
}

/// A lease as the lender lists it.
#[derive(Debug, Clone, Serialize)]
pub struct LentLease {
    pub lease: String,
    pub peer: Fingerprint,
    pub pid: Option<u32>,
    /// The loopback address the `rpc-server` listens on.
    pub listen: SocketAddr,
    pub devices: Vec<RpcDevice>,
    pub since_ms: i64,
    /// Whether its `rpc-server` still runs (a head's gang stops when it ended).
    pub running: bool,
}

/// One running `rpc-server`, killed when dropped.
pub struct RpcServer {
    child: Child,
    pub listen: SocketAddr,
    pub devices: Vec<RpcDevice>,
    output: Arc<Mutex<VecDeque<String>>>,
    /// The tasks reading its stdout and stderr into `output`.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl RpcServer {
    /// Starts `program` on `127.0.0.1:port` for `devices` and waits until it listens; its
    /// devices parsed from what it prints.
    pub async fn start(
        program: &std::path::Path,
        port: u16,
        devices: &[String],
    ) -> Result<Self, FleetError> {
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut command = Command::new(program);
        command
            .arg("-H")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(port.to_string())
            .arg("-d")
            .arg(devices.join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_the_daemon(&mut command);
        let mut child = command.spawn().map_err(|err| {
            FleetError::new(
                FleetErrorKind::Internal,
                format!("cannot start {}: {err}", program.display()),
            )
        })?;
        let output = Arc::new(Mutex::new(VecDeque::new()));
        let readers = [
            keep_lines(child.stdout.take(), output.clone()),
            keep_lines(child.stderr.take(), output.clone()),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut server = Self {
            child,
            listen,
            devices: Vec::new(),
            output,
            readers,
        };
        server.wait_listening().await?;
        Ok(server)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the process still runs (it is reaped once it ended).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its output so far, one line each.
    pub fn output(&self) -> Vec<String> {
        self.output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Until a connection is taken by this very process (a probe: the server then prints its
    /// devices), or why not.
    async fn wait_listening(&mut self) -> Result<(), FleetError> {
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        loop {
            self.check_running().await?;
            if tokio::net::TcpStream::connect(self.listen).await.is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return Err(self.failure(&format!(
                    "did not listen on {} within {} s",
                    self.listen,
                    LISTEN_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The probe reached the port: the server says it accepted it, or it died because another
        // process holds the port (and answered the probe).
        let deadline = Instant::now() + DEVICES_TIMEOUT;
        loop {
            self.check_running().await?;
            let lines = self.output();
            if lines
                .iter()
                .any(|l| l.contains("Accepted client connection"))
            {
                self.devices = parse_devices(&lines);
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.failure(&format!(
                    "something answers on {} but the rpc-server did not take the connection within {} s: \
                     another process holds the port",
                    self.listen,
                    DEVICES_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn check_running(&mut self) -> Result<(), FleetError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                // Its last words are read before they are told.
                for reader in &mut self.readers {
                    let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
                }
                Err(self.exited(&status.to_string()))
            }
            Err(err) => Err(self.failure(&format!("cannot be watched: {err}"))),
        }
    }

    fn exited(&self, status: &str) -> FleetError {
        let lines = self.output();
        if lines
            .iter()
            .any(|l| l.contains("Failed to create server socket"))
        {
            return FleetError::new(
                FleetErrorKind::Conflict,
                format!(
                    "the RPC port {} is taken by another process (the rpc-server could not bind it): \
                     ask for the lease again (another free port is picked), or see who holds it with `ss -ltnp 'sport = :{}'`",
                    self.listen,
                    self.listen.port()
                ),
            );
        }
        if let Some(line) = lines.iter().find(|l| l.contains("unknown device")) {
            let available: Vec<&str> = lines
                .iter()
                .filter_map(|l| parse_device_line(l).map(|_| l.trim()))
                .collect();
            return FleetError::new(
                FleetErrorKind::BadInput,
                format!(
                    "this rig has no such device ({}): it has {}",
                    line.trim().trim_start_matches("error: "),
                    if available.is_empty() {
                        "none listed".to_owned()
                    } else {
                        available.join("; ")
                    }
                ),
            );
        }
        self.failure(&format!("stopped ({status})"))
    }

    fn failure(&self, what: &str) -> FleetError {
        let lines = self.output();
        let tail = lines[lines.len().saturating_sub(8)..].join(" | ");
        FleetError::new(
            FleetErrorKind::Internal,
            format!(
                "the rpc-server for {} {what}; its last output: {tail}",
                self.listen
            ),
        )
    }
}

/// The lender's leases.
#[derive(Default)]
pub struct Lent {
    leases: Mutex<BTreeMap<String, Lease>>,
}

struct Lease {
    peer: Fingerprint,
    server: RpcServer,
    since_ms: i64,
    use_: Arc<Mutex<LeaseUse>>,
}

/// How a lease is used: its tunnels open now, and since when none is.
#[derive(Debug)]
struct LeaseUse {
    open: usize,
    idle_since: Instant,
}

/// One open tunnel of a lease; the lease counts as idle again once every one is dropped.
pub struct TunnelInUse(Arc<Mutex<LeaseUse>>);

impl Drop for TunnelInUse {
    fn drop(&mut self) {
        let mut use_ = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        use_.open = use_.open.saturating_sub(1);
        if use_.open == 0 {
            use_.idle_since = Instant::now();
        }
    }
}

impl Lent {
    /// Grants `request` to `peer` with `lending`'s `rpc-server`, once the builds match.
    pub async fn grant(
        &self,
        peer: Fingerprint,
        request: &LeaseRequest,
        lending: &LendingBuild,
    ) -> Result<LeaseGranted, FleetError> {
        check_devices(&request.devices)?;
        check_same_build(&lending.build, &request.build)?;
        let port = free_loopback_port()?;
        let server = RpcServer::start(&lending.rpc_server, port, &request.devices).await?;
        let lease = lease_id()?;
        let granted = LeaseGranted {
            lease: lease.clone(),
            build: lending.build.clone(),
            devices: server.devices.clone(),
        };
        tracing::info!(
            "fleet: lent {} to {peer} (lease {lease}, rpc-server pid {:?} on {})",
            request.devices.join(","),
            server.pid(),
            server.listen
        );
        let since_ms = rigdeck_supervisor::now_ms();
        let use_ = Arc::new(Mutex::new(LeaseUse {
            open: 0,
            idle_since: Instant::now(),
        }));
        self.lock().insert(
            lease,
            Lease {
                peer,
                server,
                since_ms,
                use_,
            },
        );
        Ok(granted)
    }

    /// The loopback address of `peer`'s lease `id`, for a tunnel counted as open until the
    /// returned [`TunnelInUse`] is dropped.
    pub fn open_tunnel(
        &self,
        id: &str,
        peer: Fingerprint,
    ) -> Result<(SocketAddr, TunnelInUse), FleetError> {
        let leases = self.lock();
        let lease = leases
            .get(id)
            .filter(|l| l.peer == peer)
            .ok_or_else(|| no_lease(id))?;
        lease
            .use_
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open += 1;
        Ok((lease.server.listen, TunnelInUse(lease.use_.clone())))
    }

    /// Ends the leases without a tunnel for `limit` or longer (their head went away without
    /// releasing them). Returns how many.
    pub fn end_idle(&self, limit: Duration) -> usize {
        let mut leases = self.lock();
        let before = leases.len();
        leases.retain(|id, lease| {
            let use_ = lease.use_.lock().unwrap_or_else(PoisonError::into_inner);
            let idle = use_.open == 0 && use_.idle_since.elapsed() >= limit;
            if idle {
                tracing::info!(
                    "fleet: lease {id} ended: no tunnel for {} s (its head went away without releasing it)",
                    limit.as_secs()
                );
            }
            !idle
        });
        before - leases.len()
    }

    /// Ends `peer`'s lease `id`: its `rpc-server` is killed.
    pub fn end(&self, id: &str, peer: Fingerprint) -> Result<(), FleetError> {
        let mut leases = self.lock();
        if leases.get(id).is_none_or(|l| l.peer != peer) {
            return Err(no_lease(id));
        }
        leases.remove(id);
        tracing::info!("fleet: lease {id} ended by its peer");
        Ok(())
    }

    /// Ends every lease of `peer` (it was unpinned). Returns how many.
    pub fn end_all_of(&self, peer: Fingerprint) -> usize {
        let mut leases = self.lock();
        let before = leases.len();
        leases.retain(|_, l| l.peer != peer);
        before - leases.len()
    }

    /// Ends every lease (the daemon stops).
    pub fn end_all(&self) {
        self.lock().clear();
    }

    pub fn list(&self) -> Vec<LentLease> {
        self.lock()
            .iter_mut()
            .map(|(id, l)| LentLease {
                running: l.server.is_running(),
                lease: id.clone(),
                peer: l.peer,
                pid: l.server.pid(),
                listen: l.server.listen,
                devices: l.server.devices.clone(),
                since_ms: l.since_ms,
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Lease>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn no_lease(id: &str) -> FleetError {
    FleetError::new(
        FleetErrorKind::NotFound,
        format!("this rig has no lease '{id}' of yours: it was released, its daemon restarted, or another peer took it"),
    )
}

/// The same llama.cpp on both sides, or a refusal naming both.
pub fn check_same_build(lender: &RpcBuild, caller: &RpcBuild) -> Result<(), FleetError> {
    let commits_differ = matches!((&lender.commit, &caller.commit), (Some(a), Some(b)) if a != b);
    if lender.version == caller.version && !commits_differ {
        return Ok(());
    }
    Err(FleetError::new(
        FleetErrorKind::Conflict,
        format!(
            "different llama.cpp builds: this rig (the lender) runs {lender}, the caller {caller}; \
             llama.cpp's RPC needs the very same build on both sides: build the same version on both \
             (`rigdeck engines build`) and take the lease again"
        ),
    ))
}

fn check_devices(devices: &[String]) -> Result<(), FleetError> {
    let usable = |d: &String| {
        !d.is_empty() && d.len() <= 32 && d.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if devices.is_empty() || devices.len() > MAX_DEVICES || !devices.iter().all(usable) {
        return Err(FleetError::new(
            FleetErrorKind::BadInput,
            format!(
                "{devices:?} is not a list of devices to lend: give 1 to {MAX_DEVICES} names as llama.cpp lists them \
                 (`llama-server --list-devices` on the lender), e.g. [\"CPU\"] or [\"CUDA0\", \"CUDA1\"]"
            ),
        ));
    }
    Ok(())
}

/// `  CUDA0: NVIDIA GeForce RTX 3090 (24135 MiB, 23800 MiB free)` read back.
fn parse_device_line(line: &str) -> Option<RpcDevice> {
    let (name, rest) = line.trim().split_once(": ")?;
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    let rest = rest.strip_suffix(" MiB free)")?;
    let (description, sizes) = rest.rsplit_once(" (")?;
    let (total, free) = sizes.split_once(" MiB, ")?;
    Some(RpcDevice {
        name: name.to_owned(),
        description: description.to_owned(),
        total_mib: total.parse().ok()?,
        free_mib: free.parse().ok()?,
    })
}

/// The devices an `rpc-server` listed as it started.
pub fn parse_devices(lines: &[String]) -> Vec<RpcDevice> {
    lines.iter().filter_map(|l| parse_device_line(l)).collect()
}

fn keep_lines(
    stream: Option<impl AsyncRead + Unpin + Send + 'static>,
    kept: Arc<Mutex<VecDeque<String>>>,
) -> Option<tokio::task::JoinHandle<()>> {
    let stream = stream?;
    Some(tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.len() == KEPT_LINES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    }))
}

/// A port free on loopback now (the `rpc-server` binds it a moment later; taken meanwhile, the
/// start says so).
fn free_loopback_port() -> Result<u16, FleetError> {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|err| {
            FleetError::new(
                FleetErrorKind::Internal,
                format!("cannot find a free port on 127.0.0.1 for the rpc-server: {err}"),
            )
        })
}

fn lease_id() -> Result<String, FleetError> {
    let mut bytes = [0u8; 8];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).map_err(|_| {
        FleetError::new(
            FleetErrorKind::Internal,
            "the system's random source failed",
        )
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The `rpc-server` is killed when the daemon's process ends, however it ends (a SIGKILLed
/// daemon runs no destructor).
fn die_with_the_daemon(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only makes one system call
    // (prctl), which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_read_from_the_servers_printout() {
        let lines: Vec<String> = [
            "Starting RPC server v3.0.0",
            "  endpoint       : 127.0.0.1:50052",
            "Devices:",
            "  CPU: AMD Ryzen 9 7950X 16-Core Processor (63412 MiB, 60000 MiB free)",
            "  CUDA0: NVIDIA GeForce RTX 3090 (24135 MiB, 23800 MiB free)",
            "  transport      : TCP",
            "Accepted client connection",
        ]
        .map(String::from)
        .to_vec();
        let devices = parse_devices(&lines);
        assert_eq!(devices.len(), 2, "{devices:?}");
        assert_eq!(devices[1].name, "CUDA0");
        assert_eq!(devices[1].description, "NVIDIA GeForce RTX 3090");
        assert_eq!((devices[1].total_mib, devices[1].free_mib), (24135, 23800));
        assert_eq!(
            devices[0].description,
            "AMD Ryzen 9 7950X 16-Core Processor"
        );
    }

    #[test]
    fn different_builds_are_refused_with_both_named() {
        let ours = RpcBuild {
            version: "0c1e570".into(),
            commit: Some("0c1e570".into()),
        };
        assert!(check_same_build(&ours, &ours.clone()).is_ok());
        let theirs = RpcBuild {
            version: "b6500".into(),
            commit: Some("1a2b3c4".into()),
        };
        let err = check_same_build(&ours, &theirs).unwrap_err();
        assert_eq!(err.kind, FleetErrorKind::Conflict);
        assert!(
            err.message
                .contains("runs 0c1e570, the caller b6500 (1a2b3c4)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn device_lists_are_checked() {
        for bad in [
            vec![],
            vec!["CPU,CUDA0".to_owned()],
            vec!["-H".to_owned()],
            vec![String::new()],
        ] {
            let err = check_devices(&bad).unwrap_err();
            assert_eq!(err.kind, FleetErrorKind::BadInput, "{bad:?}");
        }
        assert!(check_devices(&["CPU".to_owned(), "CUDA0".to_owned()]).is_ok());
    }
}
