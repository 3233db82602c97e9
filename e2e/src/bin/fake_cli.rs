//! A stand-in for a credentialed CLI (`gh`), put into a test copy of the porter image
//! by the node scenarios and registered in the SaintBot like the real one.
//!
//! It proves where it ran and what it held without ever printing a credential: its
//! arguments, its uid (from `/proc/self/status`) and the SHA-256 of `GH_TOKEN`, which
//! the scenario compares with the hash of the canary it put into the Secret.

use sha2::{Digest, Sha256};

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let token = match std::env::var("GH_TOKEN") {
        Ok(token) => format!("sha256:{:x}", Sha256::digest(token.as_bytes())),
        Err(_) => "unset".to_owned(),
    };
    println!(
        "fake-gh version 0.0.0-e2e args=[{}] uid={uid} GH_TOKEN={token}",
        arguments.join(" ")
    );
}
