//! Test support shared by the bench crate's integration tests: the truth server, an
//! in-process streaming engine that records what it really sent (see [`truth_server`]).

pub mod truth_server;
