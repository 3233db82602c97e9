//! Sandbox exec benchmark (being written; see sandbox/local.rs).

fn main() {}
