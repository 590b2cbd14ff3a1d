//! The one integration-test binary: every test drives the real `forage-ctl` binary
//! against the real Docker engine (and real git / jj where a mode needs them).
//! Each test gets its own FORAGE_HOME, so tests run in parallel without sharing state.

mod private_engine;
mod support;

mod cli;
mod direct;
mod engine;
mod errors;
mod faults;
mod git;
mod git_isolation;
mod honesty;
mod host_safety;
mod image;
mod jj;
mod jj_isolation;
mod reset;
mod templates;
