//! Launch profiles, pure: what a profile holds and how it is checked, the exact argv it launches
//! (llama.cpp, vLLM, SGLang), and the planned memory per GPU that admission holds against free
//! VRAM. The store keeps profiles; the instances service (`crate::launch`) starts them.
//!
//! - [`profile`]: the profile itself, its checks, and its argv.
//! - [`python_engines`]: the same for vLLM and SGLang environments, and their planned memory.
//! - [`multi_node`]: vLLM and SGLang across paired rigs: followers, interfaces, each seat's flags.
//! - [`lenders`]: llama.cpp across paired rigs: the devices they lend over RPC.
//! - [`speculative`]: speculative decoding as a setting, in each engine's own flags.
//! - [`engine_settings`]: the engine knobs beyond placement (pinning, locking, vLLM batching).
//! - [`ik_memory`]: where ik_llama.cpp's memory use differs from the plan (MLA modes, -amb, -rtr).
//! - [`chat_templates`]: the chat templates llama-server knows by name, and each architecture's.
//! - [`admission`]: planned memory per GPU against live free VRAM (tested with samples).

pub mod admission;
pub mod chat_templates;
pub mod engine_settings;
pub mod ik_memory;
pub mod lenders;
pub mod multi_node;
pub mod profile;
pub mod python_engines;
pub mod speculative;
