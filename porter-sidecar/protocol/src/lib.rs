//! The Porter wire protocol and registry format, shared by every side: the Porter
//! daemon, `cliport-proxy`, `cliport`, the sandbox runner, the agent and the operator.
//!
//! Pure: no sockets, no processes. The daemon and clients bring their own I/O.

pub mod registry;
