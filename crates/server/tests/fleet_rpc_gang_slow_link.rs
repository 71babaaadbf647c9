//! A lent CPU split over a link shaped to 1 Mbit/s is refused before the start, with the link's
//! measured figures: two real daemons with the real `llama-server` build, the head reaching the
//! lender's fleet listener through a relay that listens inside a network namespace joined to this
//! one by a veth pair, each end of it shaped with `tc … tbf rate 1mbit`. Both hosts' memory
//! bandwidth is set in their settings, so the lent CPU and the head's have one in the plan.

mod support;

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};
use support::fleet_member::Member;

/// A network namespace joined to this one by a veth pair shaped to 1 Mbit/s each way; removed
/// (with the link) when dropped.
struct SlowHost {
    name: String,
    ip: String,
}

impl SlowHost {
    /// `None`, with the reason printed, where namespaces or `tc` cannot be used (not root).
    fn make() -> Option<Self> {
        let id = std::process::id() % 100_000;
        let host = SlowHost {
            name: format!("rdslow{id}"),
            ip: "10.252.0.2".to_owned(),
        };
        let (ns, here, there) = (&host.name, format!("rds{id}h"), format!("rds{id}t"));
        let tbf = "root tbf rate 1mbit burst 32kbit latency 400ms";
        let steps = [
            format!("ip netns add {ns}"),
            format!("ip link add {here} type veth peer name {there} netns {ns}"),
            format!("ip addr add 10.252.0.1/30 dev {here}"),
            format!("ip link set {here} up"),
            format!("ip -n {ns} link set lo up"),
            format!("ip -n {ns} addr add {}/30 dev {there}", host.ip),
            format!("ip -n {ns} link set {there} up"),
            format!("tc qdisc add dev {here} {tbf}"),
            format!("tc -n {ns} qdisc add dev {there} {tbf}"),
        ];
        for step in &steps {
            let mut words = step.split(' ');
            let program = words.next().unwrap_or_default();
            match Command::new(program).args(words).output() {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    let why = String::from_utf8_lossy(&out.stderr);
                    println!("skipped: cannot shape a link (`{step}`: {})", why.trim());
                    return None;
                }
                Err(err) => {
                    println!("skipped: cannot run `{program}`: {err}");
                    return None;
                }
            }
        }
        Some(host)
    }

    /// A TCP listener on the namespace's address (bound from a thread that entered it).
    fn listen(&self) -> std::net::TcpListener {
        let path = format!("/var/run/netns/{}", self.name);
        let ip = self.ip.clone();
        std::thread::spawn(move || {
            let namespace = std::fs::File::open(&path).unwrap();
            // Only this thread enters the namespace; the socket stays in it after.
            let entered = unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(entered, 0, "setns: {}", std::io::Error::last_os_error());
            std::net::TcpListener::bind(format!("{ip}:0")).unwrap()
        })
        .join()
        .unwrap()
    }

    /// Relays each connection made to the namespace's listener to `target` (here): the bytes
    /// cross the shaped veth both ways. The relay's address.
    fn relay_to(&self, target: SocketAddr) -> String {
        let listener = self.listen();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        address
    }
}

impl Drop for SlowHost {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A daemon on a CPU-only rig with `program` registered and its memory bandwidth set; the
/// build's id.
async fn member(root: &Path, name: &str, program: &Path) -> (Member, i64) {
    let mut member = Member::new(root, name, "cpu-only.json");
    let build = support::register_engine(&member.dir.join("data"), program).await;
    member.serve().await;
    let body = json!({"cpu_bandwidth_gb_s": 50});
    let (status, answer) = member.call("PUT", "/api/v1/settings", Some(body)).await;
    assert_eq!(status, 200, "{answer}");
    (member, build.id)
}

/// The throughput in `… (measured) … at X MB/s` of the planner's refusal.
fn refused_throughput(message: &str) -> f64 {
    let at = message
        .split("(measured) is too slow for this split")
        .nth(1)
        .and_then(|rest| rest.split(" at ").nth(1))
        .and_then(|rest| rest.split(" MB/s").next())
        .unwrap_or_else(|| panic!("no measured throughput in: {message}"));
    at.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_split_over_a_slow_link_is_refused_with_the_measured_figures() {
    let Some(slow) = SlowHost::make() else {
        return;
    };
    let root = tempfile::Builder::new()
        .prefix("rigdeck-slow-link")
        .tempdir()
        .unwrap();
    let program = support::llama_server().await;
    let (lender, _) = member(root.path(), "lender", &program).await;
    let (head, build) = member(root.path(), "head", &program).await;
    let target: SocketAddr = format!("127.0.0.1:{}", lender.fleet_port).parse().unwrap();
    let relay = slow.relay_to(target);
    let (status, invite) = lender
        .call(
            "POST",
            "/api/v1/fleet/invites",
            Some(json!({"address": relay})),
        )
        .await;
    assert_eq!(status, 201, "{invite}");
    let body = json!({ "code": invite["code"] });
    let (status, joined) = head.call("POST", "/api/v1/fleet/join", Some(body)).await;
    assert_eq!(status, 200, "{joined}");

    let model = support::tiny_runnable(root.path());
    let profile = json!({
        "name": "lent", "engine_build_id": build, "model": model,
        "placement": {"context": 512, "threads": 1},
        "lenders": [{"rig": "lender", "devices": ["CPU"]}],
    });
    let (status, saved) = head.call("POST", "/api/v1/profiles", Some(profile)).await;
    assert_eq!(status, 201, "{saved}");

    let started = Instant::now();
    let (status, refused) = head.call("POST", "/api/v1/profiles/lent/start", None).await;
    println!(
        "refused after {:.1} s: {refused:#}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(status, 409, "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the link to lender (measured) is too slow for this split")
            && message.contains("after the first byte")
            && message.contains("median round trip")
            && message.contains("over one connection"),
        "{message}"
    );
    // The link is shaped to 1 Mbit/s (0.125 MB/s): what the probe measured is below 1 MB/s.
    let throughput = refused_throughput(message);
    assert!(throughput < 1.0, "{throughput} MB/s: {message}");

    // Nothing started: no lease left on the lender, no instance on the head.
    let (_, leases) = lender.call("GET", "/api/v1/fleet/rpc", None).await;
    let lent = leases["lent"].as_array().cloned().unwrap_or_default();
    assert!(lent.is_empty(), "{leases}");
    let (_, instances) = head.call("GET", "/api/v1/instances", None).await;
    assert!(
        instances
            .as_array()
            .is_none_or(|all| all.iter().all(|i| i["name"] != "lent")),
        "{instances}"
    );
    let _: Value = refused;
}
