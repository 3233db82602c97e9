//! Deterministic guards the tools apply before touching the workspace or the network.
//!
//! Pure checks and capability-style file access only: no model, no config loading.

pub mod caller_view;
pub mod paths;
pub mod role_paths;
pub mod ssrf;
