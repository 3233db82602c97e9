//! `saint-sandbox-runner`: the exec server inside every sandbox. It listens on a unix
//! socket the agent reaches through a shared volume and runs `sh -c` commands with a
//! clean environment, streaming their output as frames, or keeps them running in the
//! background for later polls, or drives a headless browser for its owner; and it relays the sandbox's
//! only way out — a loopback port commands' `HTTPS_PROXY` names — to Porter's proxy
//! socket.

pub mod accessibility;
pub mod background;
pub mod browser;
pub mod command_env;
pub mod connection;
pub mod network_cut;
pub mod output_ring;
pub mod process_group;
pub mod seed;
pub mod server;
pub mod state;
pub mod wire;
pub mod working_directory;
