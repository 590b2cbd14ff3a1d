//! forage: a sandbox orchestrator for AI coding agents. The `forage-ctl` binary is
//! a thin layer over this library: `cli` parses, `sandbox` decides the order of
//! things, `workspace` and `runtime` each do one job.

pub mod agent_state;
pub mod cli;
pub mod egress;
pub mod env;
pub mod error;
pub mod host_paths;
pub mod inside;
pub mod jobs;
pub mod mcp;
pub mod mcp_stdio;
pub mod names;
pub mod ports;
pub mod progress;
pub mod record;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod service;
pub mod store;
pub mod template;
pub mod toolchain;
pub mod workspace;
