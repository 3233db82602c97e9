//! `saint-scripted`: the test doubles, for the tests and benchmarks of every crate (a
//! dev-dependency only; nothing shipped links it). Where a platform has no server to
//! run here, a scripted one: real servers on loopback that speak each wire protocol as
//! its owner documents it (payload shapes, error bodies, rate-limit answers, socket
//! frames), check credentials, record every request, and fail on cue:
//!
//! - [`whatsapp`] (the Graph API, its names also at the root), [`telegram`] (the Bot
//!   API), [`slack`] (the Web API and Socket Mode), [`discord`] (REST and the Gateway);
//! - [`llm`]: a model server speaking Anthropic Messages and OpenAI Chat Completions,
//!   answering from a script.

use base64::Engine;
use serde_json::{Map, Value, json};

pub mod discord;
pub mod llm;
pub mod slack;
pub mod telegram;
pub mod whatsapp;

// The WhatsApp server came first; its names stay reachable at the module's root.
pub use whatsapp::*;

/// A `multipart/form-data` body as a JSON object, the way the servers record requests:
/// text fields as values (numbers parsed), files as `{"fileName", "contentType",
/// "size", "base64"}`; `null` when it is not a readable form.
pub fn form_parameters(content_type: &str, body: &[u8]) -> Value {
    let Some(parts) = saint_channels::multipart::parse(content_type, body) else {
        return Value::Null;
    };
    let mut object = Map::new();
    for part in parts {
        let value = match &part.file_name {
            Some(file_name) => json!({
                "fileName": file_name,
                "contentType": part.content_type,
                "size": part.data.len(),
                "base64": base64::engine::general_purpose::STANDARD.encode(&part.data),
            }),
            None => {
                let text = part.text();
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            }
        };
        object.insert(part.name, value);
    }
    Value::Object(object)
}

/// The bytes of a file recorded by [`form_parameters`].
pub fn file_bytes(file: &Value) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(file["base64"].as_str()?)
        .ok()
}
