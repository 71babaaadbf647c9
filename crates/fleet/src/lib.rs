//! Rigdeck's fleet: daemons paired over mutual TLS with pinned certificates. Each daemon has a
//! self-signed certificate made at first start; a rig hands a one-time join code to a desk, the
//! desk dials the code's address, accepts only the code's fingerprint and proves the code's
//! secret; from then on the two pinned certificates alone authenticate every request.

pub mod channel;
pub mod dial;
pub mod error;
pub mod fingerprint;
pub mod gateway_peers;
pub mod identity;
pub mod invites;
pub mod join_code;
pub mod link_probe;
pub mod overview;
pub mod peers;
pub mod relay;
pub mod rpc_leases;
pub mod rpc_lend;
pub mod rpc_pipe;
pub mod rpc_records;
mod rpc_routes;
pub mod rpc_tunnel;
pub mod service;
pub mod verifier;
pub mod watch;

pub use error::{FleetError, FleetErrorKind};
pub use fingerprint::Fingerprint;
pub use identity::Identity;
pub use join_code::{CodeError, JoinCode};
pub use peers::{Peer, Role};
pub use service::{start, Fleet, Hello, Invite, Joined, PeerStatus, StartError};
pub use watch::{RigState, RigView};
