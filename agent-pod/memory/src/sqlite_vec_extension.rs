//! Registers the statically linked sqlite-vec extension with SQLite, once per process,
//! so every connection opened afterwards has `vec0` and the `vec_*` functions.
//!
//! This is the crate's only `unsafe`: `sqlite3_auto_extension` takes a raw C entry
//! point, and the `sqlite-vec` crate exposes `sqlite3_vec_init` with a placeholder
//! signature, so the pointer has to be cast to the entry-point type SQLite expects.
//! The cast is sound because `sqlite3_vec_init` *is* a standard SQLite extension entry
//! point (`int (sqlite3*, char**, const sqlite3_api_routines*)`), compiled with
//! `SQLITE_CORE` against the same bundled SQLite that rusqlite links. Nothing else in
//! this module touches SQLite.

use std::sync::OnceLock;

use rusqlite::auto_extension::{RawAutoExtension, register_auto_extension};

/// Why the extension could not be registered.
#[derive(Debug, Clone, thiserror::Error)]
#[error("failed to register the sqlite-vec extension: {0}")]
pub struct ExtensionError(String);

static REGISTRATION: OnceLock<Result<(), ExtensionError>> = OnceLock::new();

/// Makes sqlite-vec available on every connection opened after this call.
pub fn ensure_registered() -> Result<(), ExtensionError> {
    REGISTRATION.get_or_init(register).clone()
}

#[allow(unsafe_code)]
fn register() -> Result<(), ExtensionError> {
    // SAFETY: see the module documentation: `sqlite3_vec_init` has exactly the
    // `RawAutoExtension` signature; only its Rust declaration is a placeholder.
    unsafe {
        let entry_point: RawAutoExtension = std::mem::transmute::<*const (), RawAutoExtension>(
            sqlite_vec::sqlite3_vec_init as *const (),
        );
        register_auto_extension(entry_point).map_err(|error| ExtensionError(error.to_string()))
    }
}
