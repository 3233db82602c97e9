//! The Saint operator: CRD types, identity links and the SaintBot controller.

pub mod crd;
pub mod identity;
