//! Every value the operator fills in for a field a SaintBot leaves out, in one place.
//! Values the agent assumes too come from `saint-config`, so the two cannot drift.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::ResourceRequirements, apimachinery::pkg::api::resource::Quantity,
};
pub use saint_config::{
    DEFAULT_BRAVE_SEARCH_URL, DEFAULT_CONTEXT_WINDOW, DEFAULT_EXEC_TIMEOUT_SECONDS,
    DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS,
};

// The CRD's serde default for `spec.defaultRole` owns this value; listed here with the rest.
pub use crate::crd::saintbot::DEFAULT_ROLE;

/// Hard lifetime of one sandbox Job (`activeDeadlineSeconds`).
pub const DEFAULT_SANDBOX_MAX_LIFETIME_SECONDS: i64 = 86_400;

/// Size of the workspace claim.
pub const DEFAULT_STORAGE_SIZE: &str = "5Gi";

/// Requests and limits of one container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceDefaults {
    /// CPU request.
    pub cpu_request: &'static str,
    /// Memory request.
    pub memory_request: &'static str,
    /// CPU limit.
    pub cpu_limit: &'static str,
    /// Memory limit.
    pub memory_limit: &'static str,
}

impl ResourceDefaults {
    /// As a container's `resources`.
    pub fn requirements(self) -> ResourceRequirements {
        let pair = |cpu: &str, memory: &str| {
            BTreeMap::from([
                ("cpu".to_string(), Quantity(cpu.to_string())),
                ("memory".to_string(), Quantity(memory.to_string())),
            ])
        };
        ResourceRequirements {
            requests: Some(pair(self.cpu_request, self.memory_request)),
            limits: Some(pair(self.cpu_limit, self.memory_limit)),
            ..Default::default()
        }
    }
}

/// The `agent` container: the turn loop, channels and the memory index's embeddings.
pub const AGENT_RESOURCES: ResourceDefaults = ResourceDefaults {
    cpu_request: "100m",
    memory_request: "256Mi",
    cpu_limit: "2",
    memory_limit: "1Gi",
};

/// The `porter` container: a broker that mostly waits on its CLIs.
pub const PORTER_RESOURCES: ResourceDefaults = ResourceDefaults {
    cpu_request: "50m",
    memory_request: "64Mi",
    cpu_limit: "1",
    memory_limit: "256Mi",
};

/// Each sandbox container.
pub const SANDBOX_RESOURCES: ResourceDefaults = ResourceDefaults {
    cpu_request: "100m",
    memory_request: "256Mi",
    cpu_limit: "1",
    memory_limit: "1Gi",
};
