//! Porter: the credential broker sidecar. The daemon runs registered CLIs with their
//! credentials for callers in the sandbox and streams the output back over the frame
//! protocol of `porter-protocol`; `cliport-proxy` is the sandbox side; `cliport`
//! manages the registry in local mode.

pub mod argv;
pub mod audit;
pub mod call;
pub mod capacity;
pub mod child_env;
pub mod control;
pub mod cwd;
pub mod git_guard;
pub mod home;
pub mod inject;
pub mod manage;
pub mod metrics;
pub mod policy;
pub mod profiles;
pub mod proxy;
pub mod redact;
pub mod registry_store;
pub mod server;
pub mod state;
pub mod supervisor;
pub mod tokens;
pub mod view;
