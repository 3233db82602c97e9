//! The SaintBot controller: `reconcile` is a short driver of named steps —
//! `dereference` (reads) → `validate` (pure) → `build` (pure) → `apply` (writes children)
//! → `update_status` (writes status, Events).

pub mod build;
pub mod dereference;
pub mod validate;
