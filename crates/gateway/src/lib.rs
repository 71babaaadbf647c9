//! Rigdeck's gateway: one OpenAI- and Anthropic-compatible endpoint for every launch profile.
//! Requests are routed by their `model` (a profile's name or alias) to the running instance,
//! streamed back chunk by chunk, and recorded with the engine's own token counts; stopped
//! models load on request under the daemon's VRAM admission, idle ones make room (least
//! recently used first, never a pinned one) or stop after their TTL. Clients hold API keys of
//! their own, kept hashed. The daemon implements [`fleet::Fleet`] over its instances; this
//! crate knows nothing of processes or GPUs beyond that.

pub mod activity;
pub mod clock;
pub mod elsewhere;
pub mod error;
pub mod eviction;
pub mod fleet;
pub mod keys;
pub mod metrics;
pub mod proxy;
pub mod route;
pub mod service;
pub mod usage;

pub use error::{Dialect, ErrorKind, GatewayError};

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A mutex's data even after a thread panicked holding it: what the gateway keeps behind its
/// mutexes is whole after every statement, so a poisoned one is still right to use.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
pub use elsewhere::{Elsewhere, RemoteAnswer, RigModel};
pub use fleet::{Fleet, Hold, ModelEntry, ModelState, ServePolicy, StartError, Upstream};
pub use keys::{Caller, KeyRing};
pub use route::Route;
pub use service::{Gateway, GatewayOptions};
