//! Rigdeck's NVML test double: a shared library (`libnvml_double.so`) exporting the NVML C
//! functions nvml-wrapper 0.13 calls, answered from a JSON rig description.
//!
//! Production code loads it instead of libnvidia-ml when `RIGDECK_NVML_LIBRARY` names it
//! (through `Nvml::builder().lib_path(..)`); the double plays the rig file named by
//! `RIGDECK_NVML_DOUBLE_RIG`. It exists so tests, benchmarks and UI work can run a 4×3090 or
//! 2×GH200 rig on a laptop. It is never shipped. The file format is described in
//! `tests/fixtures/rigs/README.md`.

mod codes;
pub mod ffi;
mod rig;
mod state;
