//! Rigdeck's server: the HTTP + WebSocket API over the core, the embedded web UI, and `start`,
//! which both `rigdeck serve` and the desktop shell call to run it.

pub mod cli;
mod gang;
pub mod http;
mod running;

pub use running::{start, RunningServer, ServeOptions};
