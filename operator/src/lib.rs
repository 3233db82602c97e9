//! The Saint operator: CRD types, identity links, the SaintBot controller and the
//! references controller (Contact and Role status), sharing one typed status module.

pub mod api_server;
pub mod cache;
pub mod crd;
pub mod events;
pub mod identity;
pub mod labels;
pub mod leader;
pub mod metrics;
pub mod offline;
pub mod references_controller;
pub mod saintbot_controller;
pub mod selection;
pub mod settings;
pub mod status;
pub mod web;
