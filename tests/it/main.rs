//! The one integration-test binary: every test drives the real `forage-ctl` binary
//! against the real Docker engine (and real git / jj where a mode needs them).
//! Each test gets its own FORAGE_HOME, so tests run in parallel without sharing state.
//!
//! The crate's lints are for the product: tests may be long, read the
//! environment, print what they saw, and set up namespaces with `unsafe`.
#![allow(unsafe_code, clippy::too_many_lines, clippy::disallowed_methods, clippy::print_stdout, clippy::print_stderr)]

mod private_engine;
mod support;

mod agent_state;
mod agent_trees;
mod cli;
mod cow;
mod direct;
mod engine;
mod errors;
mod faults;
mod git;
mod git_isolation;
mod honesty;
mod host_paths;
mod host_safety;
mod image;
mod inject;
mod jj;
mod jj_isolation;
mod jobs;
mod mcp;
mod merge_conflicts;
mod network;
mod next_step;
mod output;
mod ports;
mod real_agent;
mod reset;
mod restore_review;
mod review;
mod serve;
mod templates;
mod terminal;
mod toolchain;
