//! Pairing real `rigdeck serve` daemons into a fleet with the command line: each with its own
//! config and data folders, its API and its fleet listener on loopback ports. A rig invites, a
//! desk joins; both list each other and say hello over pinned mutual TLS; every bad input is
//! refused with what to do and leaves nothing stored; removal on either side revokes.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rigdeck_fleet::JoinCode;
use serde_json::Value;
use support::daemon_process::{free_port, Daemon};

/// One daemon of the fleet: its folder, its network namespace (if any) and ports.
struct Member {
    dir: PathBuf,
    /// The namespace it runs in (`None`: this machine's).
    netns: Option<String>,
    /// The address its fleet listener binds.
    ip: String,
    api_port: u16,
    fleet_port: Option<u16>,
    daemon: Option<Daemon>,
}

impl Member {
    /// Starts `rigdeck serve` named `name` in `root/name`, with a fleet listener when asked.
    async fn start(root: &Path, name: &str, listens: bool) -> Self {
        Self::start_in(root, name, listens, None, "127.0.0.1").await
    }

    /// The same inside the network namespace `netns`, its fleet listener on `ip`.
    async fn start_in(
        root: &Path,
        name: &str,
        listens: bool,
        netns: Option<&str>,
        ip: &str,
    ) -> Self {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("config/fleet")).unwrap();
        std::fs::write(dir.join("config/fleet/name"), format!("{name}\n")).unwrap();
        let mut member = Self {
            dir,
            netns: netns.map(str::to_owned),
            ip: ip.to_owned(),
            api_port: free_port(),
            fleet_port: listens.then(free_port),
            daemon: None,
        };
        member.serve().await;
        member
    }

    /// `rigdeck` with this member's folders, inside its namespace when it has one.
    fn command(&self) -> Command {
        let base = support::rigdeck_in(&self.dir);
        let Some(netns) = &self.netns else {
            return base;
        };
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", netns])
            .arg(base.get_program());
        for (key, value) in base.get_envs() {
            if let Some(value) = value {
                command.env(key, value);
            }
        }
        command
    }

    async fn serve(&mut self) {
        let mut command = self.command();
        command.args(["serve", "--bind", &format!("127.0.0.1:{}", self.api_port)]);
        if let Some(port) = self.fleet_port {
            command.args(["--fleet-bind", &format!("{}:{port}", self.ip)]);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn rigdeck serve");
        self.daemon = Some(Daemon(child, self.dir.join("data")));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.fleet(&["identity"]).0 {
            assert!(Instant::now() < deadline, "the daemon did not start");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn stop(&mut self) {
        if let Some(daemon) = self.daemon.take() {
            assert!(daemon.stop(Duration::from_secs(20)), "the daemon stopped");
        }
    }

    fn fleet_address(&self) -> String {
        format!("{}:{}", self.ip, self.fleet_port.expect("a fleet listener"))
    }

    /// `rigdeck fleet ARGS` against this daemon: success, stdout, stderr.
    fn fleet(&self, args: &[&str]) -> (bool, String, String) {
        let output = self
            .command()
            .env("RIGDECK_URL", format!("http://127.0.0.1:{}", self.api_port))
            .arg("fleet")
            .args(args)
            .output()
            .expect("run rigdeck fleet");
        let (stdout, stderr) = support::output_text(&output);
        (output.status.success(), stdout, stderr)
    }

    /// A command that must succeed: its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.fleet(args);
        assert!(ok, "`rigdeck fleet {}` failed: {stderr}", args.join(" "));
        stdout
    }

    /// A command that must fail: its stderr.
    fn refused(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.fleet(args);
        assert!(
            !ok,
            "`rigdeck fleet {}` succeeded: {stdout}",
            args.join(" ")
        );
        stderr
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).expect("JSON")
    }

    fn fingerprint(&self) -> String {
        self.json(&["identity"])["fingerprint"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn invite(&self, extra: &[&str]) -> String {
        let mut args = vec!["invite"];
        args.extend_from_slice(extra);
        let code = self.ok(&args).trim().to_owned();
        assert!(code.starts_with("rdk1-") && !code.contains('\n'), "{code}");
        code
    }
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

#[tokio::test]
async fn two_daemons_pair_with_the_cli_list_each_other_and_revoke_from_either_side() {
    let root = tempdir();
    let rig = Member::start(root.path(), "rig", true).await;
    let desk = Member::start(root.path(), "desk", true).await;
    let (rig_print, desk_print) = (rig.fingerprint(), desk.fingerprint());
    assert_ne!(rig_print, desk_print);
    let key = std::fs::metadata(rig.dir.join("config/fleet/key.pem")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(key.permissions().mode() & 0o777, 0o600);

    let (ok, code, hint) = rig.fleet(&["invite", "--ttl", "10m"]);
    assert!(ok, "{hint}");
    let code = code.trim();
    assert!(hint.contains("rigdeck fleet join"), "{hint}");
    assert!(hint.contains(&rig.fleet_address()), "{hint}");
    let joined = desk.ok(&["join", code]);
    assert!(joined.contains("paired with the rig 'rig'"), "{joined}");

    // Each lists the other, with its role, address, fingerprint, and that it answers.
    let on_desk = desk.ok(&["list"]);
    for expected in ["rig", &rig.fleet_address(), &rig_print, "yes (Rigdeck"] {
        assert!(on_desk.contains(expected), "{expected} missing:\n{on_desk}");
    }
    let on_rig = rig.json(&["list"]);
    assert_eq!(on_rig.as_array().unwrap().len(), 1, "{on_rig}");
    assert_eq!(on_rig[0]["name"], "desk");
    assert_eq!(on_rig[0]["role"], "desk");
    assert_eq!(on_rig[0]["fingerprint"], desk_print.as_str());
    assert_eq!(on_rig[0]["answering"], true, "{on_rig}");
    let hello = desk.ok(&["hello", "rig"]);
    assert!(hello.contains("'rig' answers"), "{hello}");

    // The same code twice: used.
    let used = desk.refused(&["join", code]);
    assert!(used.contains("already used"), "{used}");
    // A second code: the pin is updated, not duplicated, and the message says so.
    let again = desk.ok(&["join", &rig.invite(&[])]);
    assert!(again.contains("already paired"), "{again}");
    assert!(again.contains("not duplicated"), "{again}");
    assert_eq!(desk.json(&["list"]).as_array().unwrap().len(), 1);
    assert_eq!(rig.json(&["list"]).as_array().unwrap().len(), 1);

    // The rig removes the desk: the desk's next request is refused, and it says so.
    let removed = rig.ok(&["remove", "desk"]);
    assert!(removed.contains("removed the desk 'desk'"), "{removed}");
    let refused = desk.refused(&["hello", "rig"]);
    assert!(
        refused.contains("the rig 'rig' no longer knows this desk: pair again"),
        "{refused}"
    );
    let listed = desk.ok(&["list"]);
    assert!(listed.contains("no, since"), "{listed}");
    assert!(listed.contains("no longer knows this desk"), "{listed}");

    // Paired again, then the desk removes the rig: the rig's next request is refused.
    desk.ok(&["join", &rig.invite(&[])]);
    assert!(desk.ok(&["hello", "rig"]).contains("answers"));
    desk.ok(&["remove", "rig"]);
    let refused = rig.refused(&["hello", "desk"]);
    assert!(
        refused.contains("the desk 'desk' no longer knows this rig: pair again"),
        "{refused}"
    );
    let unknown = desk.refused(&["remove", "rig"]);
    assert!(unknown.contains("no peer is named 'rig'"), "{unknown}");
}

#[tokio::test]
async fn bad_codes_and_addresses_are_refused_with_what_to_do_and_nothing_is_stored() {
    let root = tempdir();
    let rig = Member::start(root.path(), "rig", true).await;
    let desk = Member::start(root.path(), "desk", false).await;
    let code = rig.invite(&[]);

    // A typo: the checksum tells it from a wrong code.
    let mut typo = code.clone().into_bytes();
    let at = typo.len() / 2;
    typo[at] = if typo[at] == b'a' { b'b' } else { b'a' };
    let typo = String::from_utf8(typo).unwrap();
    let err = desk.refused(&["join", &typo]);
    assert!(
        err.contains("checksum") && err.contains("mistyped"),
        "{err}"
    );

    // A well-formed code whose secret the rig never made.
    let mut forged = JoinCode::decode(&code).unwrap();
    forged.secret[3] ^= 0x5a;
    let err = desk.refused(&["join", &forged.encode()]);
    assert!(err.contains("did not make this join code"), "{err}");

    // An address where nothing listens, and one that is not a fleet listener (the API port).
    let nowhere = JoinCode {
        address: format!("127.0.0.1:{}", free_port()),
        ..JoinCode::decode(&code).unwrap()
    };
    let err = desk.refused(&["join", &nowhere.encode()]);
    assert!(
        err.contains("nothing listens at") && err.contains("connection refused"),
        "{err}"
    );
    let api = JoinCode {
        address: format!("127.0.0.1:{}", rig.api_port),
        ..JoinCode::decode(&code).unwrap()
    };
    let err = desk.refused(&["join", &api.encode()]);
    assert!(err.contains("not as a Rigdeck fleet listener"), "{err}");

    // An expired code.
    let short = rig.invite(&["--ttl", "1s"]);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let err = desk.refused(&["join", &short]);
    assert!(err.contains("expired at"), "{err}");

    // A daemon without a fleet listener makes no codes, and says how to start one.
    let err = desk.refused(&["invite"]);
    assert!(err.contains("--fleet-bind"), "{err}");
    let err = rig.refused(&["invite", "--address", "no-port"]);
    assert!(err.contains("HOST:PORT"), "{err}");

    // Nothing was half-stored: no pins on either side, and the first code still works once.
    assert_eq!(rig.json(&["list"]), Value::Array(vec![]));
    assert_eq!(desk.json(&["list"]), Value::Array(vec![]));
    assert!(desk
        .ok(&["join", &code])
        .contains("paired with the rig 'rig'"));
    let listed = rig.ok(&["list"]);
    assert!(listed.contains("- (no listener to call)"), "{listed}");
}

#[tokio::test]
async fn a_certificate_that_changed_is_refused_with_both_fingerprints() {
    let root = tempdir();
    let mut rig = Member::start(root.path(), "rig", true).await;
    let desk = Member::start(root.path(), "desk", true).await;
    let impostor = Member::start(root.path(), "impostor", true).await;
    let (rig_print, impostor_print) = (rig.fingerprint(), impostor.fingerprint());

    // A code whose address leads to another daemon: its certificate is not the code's.
    let code = JoinCode {
        address: impostor.fleet_address(),
        ..JoinCode::decode(&rig.invite(&[])).unwrap()
    };
    let err = desk.refused(&["join", &code.encode()]);
    assert!(err.contains("not the one pinned"), "{err}");
    assert!(
        err.contains(&format!("expected fingerprint {rig_print}")),
        "{err}"
    );
    assert!(
        err.contains(&format!("presented {impostor_print}")),
        "{err}"
    );
    assert_eq!(desk.json(&["list"]), Value::Array(vec![]));
    assert_eq!(impostor.json(&["list"]), Value::Array(vec![]));

    // Paired for real, then the rig's certificate is replaced (a new identity at restart).
    desk.ok(&["join", &rig.invite(&[])]);
    rig.stop();
    for file in ["certificate.pem", "key.pem"] {
        std::fs::remove_file(rig.dir.join("config/fleet").join(file)).unwrap();
    }
    rig.serve().await;
    let new_print = rig.fingerprint();
    assert_ne!(new_print, rig_print);
    let err = desk.refused(&["hello", "rig"]);
    assert!(
        err.contains(&format!("expected fingerprint {rig_print}")),
        "{err}"
    );
    assert!(err.contains(&format!("presented {new_print}")), "{err}");
}

/// Two network namespaces joined by a veth pair: separate hosts on one machine. Removed (with
/// the link) when dropped.
struct TwoHosts {
    names: [String; 2],
    ips: [String; 2],
}

impl TwoHosts {
    /// `None`, with the reason printed, where namespaces cannot be made (not root, no iproute2,
    /// a sandbox without CAP_SYS_ADMIN).
    fn make() -> Option<Self> {
        let id = std::process::id() % 100_000;
        let hosts = Self {
            names: [format!("rdfleet{id}a"), format!("rdfleet{id}b")],
            ips: ["10.250.0.1".to_owned(), "10.250.0.2".to_owned()],
        };
        let ([a, b], [ip_a, ip_b]) = (&hosts.names, &hosts.ips);
        let (link_a, link_b) = (format!("rdf{id}a"), format!("rdf{id}b"));
        let steps = [
            format!("netns add {a}"),
            format!("netns add {b}"),
            format!("link add {link_a} netns {a} type veth peer name {link_b} netns {b}"),
            format!("-n {a} link set lo up"),
            format!("-n {b} link set lo up"),
            format!("-n {a} addr add {ip_a}/30 dev {link_a}"),
            format!("-n {b} addr add {ip_b}/30 dev {link_b}"),
            format!("-n {a} link set {link_a} up"),
            format!("-n {b} link set {link_b} up"),
        ];
        for step in &steps {
            match Command::new("ip").args(step.split(' ')).output() {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    let why = String::from_utf8_lossy(&out.stderr);
                    println!(
                        "skipped: cannot make network namespaces (`ip {step}`: {})",
                        why.trim()
                    );
                    return None;
                }
                Err(err) => {
                    println!("skipped: cannot run `ip` to make network namespaces: {err}");
                    return None;
                }
            }
        }
        Some(hosts)
    }

    /// Takes the rig's end of the link down: a partition.
    fn cut(&self) {
        let link = format!("rdf{}a", std::process::id() % 100_000);
        let status = Command::new("ip")
            .args(["-n", &self.names[0], "link", "set", &link, "down"])
            .status()
            .expect("run ip");
        assert!(status.success());
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

#[tokio::test]
async fn two_hosts_in_network_namespaces_pair_over_a_veth_link() {
    let Some(hosts) = TwoHosts::make() else {
        return;
    };
    let root = tempdir();
    let mut rig = Member::start_in(
        root.path(),
        "rig",
        true,
        Some(&hosts.names[0]),
        &hosts.ips[0],
    )
    .await;
    let mut desk = Member::start_in(
        root.path(),
        "desk",
        true,
        Some(&hosts.names[1]),
        &hosts.ips[1],
    )
    .await;
    let code = rig.invite(&[]);
    assert_eq!(
        JoinCode::decode(&code).unwrap().address,
        rig.fleet_address()
    );
    let joined = desk.ok(&["join", &code]);
    assert!(
        joined.contains(&format!(
            "paired with the rig 'rig' at {}",
            rig.fleet_address()
        )),
        "{joined}"
    );
    let on_rig = rig.json(&["list"]);
    assert_eq!(
        on_rig[0]["address"],
        desk.fleet_address().as_str(),
        "the rig dials the desk back where it came from"
    );
    assert_eq!(on_rig[0]["answering"], true, "{on_rig}");
    assert!(desk.ok(&["hello", "rig"]).contains("'rig' answers"));

    // A partition: the link goes down, and the desk says which way it fails.
    hosts.cut();
    let err = desk.refused(&["hello", "rig"]);
    assert!(err.contains(&rig.fleet_address()), "{err}");
    assert!(
        err.contains("no route") || err.contains("no answer"),
        "{err}"
    );
    desk.stop();
    rig.stop();
}
