//! Scripted platform servers for tests of this and other crates: real servers on
//! loopback that speak each platform's wire protocol as the platform documents it
//! (payload shapes, error bodies, rate-limit answers, socket frames), check
//! credentials, record every request, and fail on cue.

pub mod discord;
pub mod slack;
pub mod telegram;
pub mod whatsapp;

// The WhatsApp server came first; its names stay reachable at the module's root.
pub use whatsapp::*;
