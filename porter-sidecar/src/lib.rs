//! Porter: the credential sidecar. It holds the secrets and runs no program: sandbox
//! commands reach their hosts only through Porter's HTTPS proxy, which injects each
//! credential on the wire after the caller's role admits the request. The agent
//! registers a key per command on the control socket; `cliport` manages the registry in
//! local mode.

pub mod audit;
pub mod capacity;
pub mod control;
pub mod inject;
pub mod keys;
pub mod manage;
pub mod metrics;
pub mod registry_store;
pub mod seal;
pub mod server;
pub mod state;
