//! A vLLM or SGLang profile across boxes: the paired rigs that join this one (each with the
//! network interface it uses), how the model is split across them, and each member's seat at a
//! start: its rank, the head's address, the flags (`--nnodes --node-rank --master-addr`, or
//! SGLang's `--dist-init-addr`) and the environment (`VLLM_HOST_IP`, `NCCL_SOCKET_IFNAME`,
//! `GLOO_SOCKET_IFNAME`) that put its traffic on that interface.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::profile::{no_control, ProfileError};
use crate::engines::EngineKind;

/// torch.distributed's usual port.
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// How long the head may take to become ready once every member runs: the followers join it,
/// then the model loads on every box.
pub const DEFAULT_JOIN_TIMEOUT_S: u64 = 600;

/// The boxes of a multi-node profile; this rig is the head (rank 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MultiNode {
    /// This rig's interface for the engine's traffic (e.g. `eth1`).
    pub interface: String,
    /// The followers, rank 1 onwards: paired rigs (by their fleet name) this daemon joined.
    pub nodes: Vec<GangNode>,
    /// How the model is split across boxes (tensor parallel within each box either way).
    pub split: CrossBoxSplit,
    /// The port the head listens on for the followers, on its interface.
    pub master_port: u16,
    /// Seconds the head may take to be ready once every member runs.
    pub join_timeout_s: u64,
}

impl Default for MultiNode {
    fn default() -> Self {
        Self {
            interface: String::new(),
            nodes: Vec::new(),
            split: CrossBoxSplit::default(),
            master_port: DEFAULT_MASTER_PORT,
            join_timeout_s: DEFAULT_JOIN_TIMEOUT_S,
        }
    }
}

/// One follower: a paired rig and the interface it uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GangNode {
    pub peer: String,
    pub interface: String,
}

/// Across boxes: pipeline stages (one per box, the usual choice over Ethernet) or one tensor
/// split over every GPU of every box (needs a fast link).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrossBoxSplit {
    #[default]
    Pipeline,
    Tensor,
}

/// One member's place in a started gang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    pub nodes: u32,
    /// 0 for the head.
    pub rank: u32,
    pub master_addr: IpAddr,
    pub master_port: u16,
    /// This member's interface and its (private) address on it.
    pub interface: String,
    pub address: IpAddr,
    pub split: CrossBoxSplit,
}

impl Seat {
    /// A follower runs without an API of its own (`--headless`): it is ready once it runs.
    pub fn is_follower(&self) -> bool {
        self.rank > 0
    }
}

/// The head's seat on this box (its interface's private address), for a profile's view of its
/// command line before a start; `None` when the interface cannot be used.
pub fn head_seat(multi: &MultiNode) -> Option<Seat> {
    let address = crate::network_interfaces::private_address(&multi.interface).ok()?;
    Some(Seat {
        nodes: u32::try_from(multi.nodes.len() + 1).unwrap_or(u32::MAX),
        rank: 0,
        master_addr: address,
        master_port: multi.master_port,
        interface: multi.interface.clone(),
        address,
        split: multi.split,
    })
}

/// Flags the seat writes; refused in a multi-node profile's extra arguments.
pub const MANAGED_FLAGS: [&str; 9] = [
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
    "--dist-init-addr",
    "--pipeline-parallel-size",
    "-pp",
    "--pp-size",
];

/// What a multi-node profile must hold: vLLM or SGLang, at least one follower, each rig once,
/// interface names as Linux spells them.
pub fn validate(multi: &MultiNode, kind: EngineKind) -> Result<(), ProfileError> {
    let bad = |reason: String| Err(ProfileError::BadMultiNode { reason });
    if !kind.is_python() {
        return bad(format!(
            "{kind} does not run across boxes this way: multi-node profiles are for vLLM and SGLang (llama.cpp spans boxes by lending devices over RPC)"
        ));
    }
    check_interface(&multi.interface, "this rig's interface")?;
    if multi.nodes.is_empty() {
        return bad("no follower: add at least one paired rig (nodes: [{peer, interface}]) or remove multi_node".to_owned());
    }
    for (i, node) in multi.nodes.iter().enumerate() {
        no_control(&node.peer, || format!("multi_node follower {} peer", i + 1))?;
        if node.peer.trim().is_empty() {
            return bad(format!(
                "follower {} names no rig: give a paired rig's fleet name (`rigdeck fleet list`)",
                i + 1
            ));
        }
        if multi.nodes[..i].iter().any(|n| n.peer == node.peer) {
            return bad(format!(
                "rig '{}' is listed twice: each box joins once (its GPUs are split with tensor_parallel)",
                node.peer
            ));
        }
        check_interface(
            &node.interface,
            &format!("the interface of '{}'", node.peer),
        )?;
    }
    if multi.master_port == 0 {
        return bad(
            "master_port 0: give the port the head listens on for its followers (e.g. 29500)"
                .to_owned(),
        );
    }
    if multi.join_timeout_s == 0 {
        return bad(
            "join_timeout_s must be at least 1 (seconds the head may take to be ready)".to_owned(),
        );
    }
    Ok(())
}

/// Linux interface names: 1–15 characters, no '/', ':' or white space.
fn check_interface(name: &str, what: &str) -> Result<(), ProfileError> {
    no_control(name, || format!("multi_node {what}"))?;
    let usable = !name.is_empty()
        && name.len() <= 15
        && !name.contains(['/', ':'])
        && !name.chars().any(char::is_whitespace);
    if usable {
        return Ok(());
    }
    Err(ProfileError::BadMultiNode {
        reason: format!(
            "{what} {name:?} is not an interface name: give one as `ip link` lists it (e.g. eth1, enp3s0), at most 15 characters"
        ),
    })
}

/// The seat's flags, after the engine's own: the rank and the head's address, `--headless` on a
/// vLLM follower, and the pipeline split (one stage per box) unless the split is by tensor.
pub fn args(kind: EngineKind, seat: &Seat) -> Vec<String> {
    let mut args = vec![
        "--nnodes".to_owned(),
        seat.nodes.to_string(),
        "--node-rank".to_owned(),
        seat.rank.to_string(),
    ];
    match kind {
        EngineKind::Sglang => {
            args.push("--dist-init-addr".to_owned());
            args.push(socket_text(seat.master_addr, seat.master_port));
        }
        _ => {
            args.extend([
                "--master-addr".to_owned(),
                seat.master_addr.to_string(),
                "--master-port".to_owned(),
                seat.master_port.to_string(),
            ]);
            if seat.is_follower() {
                args.push("--headless".to_owned());
            }
        }
    }
    if seat.split == CrossBoxSplit::Pipeline {
        let flag = match kind {
            EngineKind::Sglang => "--pp-size",
            _ => "--pipeline-parallel-size",
        };
        args.extend([flag.to_owned(), seat.nodes.to_string()]);
    }
    args
}

/// The tensor-parallel size the engine is given: per box for a pipeline split, every GPU of
/// every box for a tensor split.
pub fn tensor_parallel(per_box: u32, seat: &Seat) -> u32 {
    match seat.split {
        CrossBoxSplit::Pipeline => per_box,
        CrossBoxSplit::Tensor => per_box * seat.nodes,
    }
}

/// The environment that puts the engine's traffic on the seat's interface.
pub fn env(kind: EngineKind, seat: &Seat) -> Vec<(String, String)> {
    let mut env = vec![
        ("NCCL_SOCKET_IFNAME".to_owned(), seat.interface.clone()),
        ("GLOO_SOCKET_IFNAME".to_owned(), seat.interface.clone()),
    ];
    if kind == EngineKind::Vllm {
        env.push(("VLLM_HOST_IP".to_owned(), seat.address.to_string()));
    }
    env
}

/// `ip:port`, bracketed for IPv6.
fn socket_text(ip: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}

/// What the profile exposes, said plainly for its view.
pub fn exposure(multi: &MultiNode) -> String {
    let followers: Vec<String> = multi
        .nodes
        .iter()
        .map(|n| format!("{} on '{}'", n.interface, n.peer))
        .collect();
    format!(
        "this profile's engine traffic (NCCL, Gloo, torch.distributed: model weights' activations and the head's port {}) goes unencrypted over {} on this rig and {}; it is not tunnelled through the fleet's TLS channel, so those interfaces must be on a private network",
        multi.master_port,
        multi.interface,
        followers.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(rank: u32, split: CrossBoxSplit) -> Seat {
        Seat {
            nodes: 2,
            rank,
            master_addr: "10.0.0.1".parse().unwrap(),
            master_port: 29500,
            interface: "eth1".into(),
            address: "10.0.0.2".parse().unwrap(),
            split,
        }
    }

    #[test]
    fn vllm_seats_name_the_head_and_followers_run_headless() {
        assert_eq!(
            args(EngineKind::Vllm, &seat(0, CrossBoxSplit::Pipeline)),
            [
                "--nnodes",
                "2",
                "--node-rank",
                "0",
                "--master-addr",
                "10.0.0.1",
                "--master-port",
                "29500",
                "--pipeline-parallel-size",
                "2"
            ]
        );
        let follower = args(EngineKind::Vllm, &seat(1, CrossBoxSplit::Tensor));
        assert_eq!(follower[3], "1");
        assert!(follower.contains(&"--headless".to_owned()));
        assert!(!follower.contains(&"--pipeline-parallel-size".to_owned()));
        assert_eq!(tensor_parallel(4, &seat(1, CrossBoxSplit::Tensor)), 8);
        assert_eq!(tensor_parallel(4, &seat(1, CrossBoxSplit::Pipeline)), 4);
    }

    #[test]
    fn sglang_seats_use_the_dist_init_address() {
        let follower = args(EngineKind::Sglang, &seat(1, CrossBoxSplit::Pipeline));
        assert_eq!(
            follower,
            [
                "--nnodes",
                "2",
                "--node-rank",
                "1",
                "--dist-init-addr",
                "10.0.0.1:29500",
                "--pp-size",
                "2"
            ]
        );
        let env = env(EngineKind::Sglang, &seat(1, CrossBoxSplit::Pipeline));
        assert!(env.iter().all(|(k, _)| k != "VLLM_HOST_IP"));
        let env = super::env(EngineKind::Vllm, &seat(1, CrossBoxSplit::Pipeline));
        assert!(env.contains(&("VLLM_HOST_IP".to_owned(), "10.0.0.2".to_owned())));
        assert!(env.contains(&("NCCL_SOCKET_IFNAME".to_owned(), "eth1".to_owned())));
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let ok = MultiNode {
            interface: "eth1".into(),
            nodes: vec![GangNode {
                peer: "mini".into(),
                interface: "enp3s0".into(),
            }],
            ..MultiNode::default()
        };
        assert!(validate(&ok, EngineKind::Vllm).is_ok());
        let problem = |kind: EngineKind, change: &dyn Fn(&mut MultiNode)| {
            let mut m = ok.clone();
            change(&mut m);
            validate(&m, kind).unwrap_err().to_string()
        };
        assert!(problem(EngineKind::LlamaCpp, &|_| {}).contains("for vLLM and SGLang"));
        assert!(problem(EngineKind::Vllm, &|m| m.nodes.clear()).contains("no follower"));
        assert!(
            problem(EngineKind::Vllm, &|m| m.nodes.push(m.nodes[0].clone()))
                .contains("'mini' is listed twice")
        );
        assert!(
            problem(EngineKind::Sglang, &|m| m.interface = "eth 1".into())
                .contains("not an interface name")
        );
        assert!(
            problem(EngineKind::Vllm, &|m| m.nodes[0].interface = String::new())
                .contains("the interface of 'mini'")
        );
    }
}
