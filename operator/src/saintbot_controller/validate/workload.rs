//! What the pod and sandbox builders need besides the config: images, resources, the
//! sandbox and the workspace claim, each defaulted from the operator's settings or
//! [`super::defaults`]. Pure.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::ResourceRequirements, apimachinery::pkg::api::resource::Quantity,
};
use saint_config::{SandboxBackend, SandboxConfig};

use super::defaults::{
    AGENT_RESOURCES, DEFAULT_EXEC_TIMEOUT_SECONDS, DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS,
    DEFAULT_SANDBOX_MAX_LIFETIME_SECONDS, DEFAULT_STORAGE_SIZE, PORTER_RESOURCES,
    SANDBOX_RESOURCES,
};
use crate::{
    crd::saintbot::{SaintBotSpec, SandboxSpec},
    saintbot_controller::dereference::Dereferenced,
    settings::OperatorSettings,
};

/// The sandbox as the builders need it.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedSandbox {
    /// Sandbox image.
    pub image: String,
    /// Container resources.
    pub resources: ResourceRequirements,
    /// Optional RuntimeClass.
    pub runtime_class_name: Option<String>,
    /// Hard lifetime of a sandbox Job in seconds.
    pub max_lifetime_seconds: i64,
}

/// Images, resources, sandbox and storage, defaulted.
pub(super) struct Workload {
    pub agent_image: String,
    pub porter_image: String,
    pub agent_resources: ResourceRequirements,
    pub porter_resources: ResourceRequirements,
    pub sandbox: ValidatedSandbox,
    pub storage_size: Quantity,
    pub storage_class_name: Option<String>,
}

pub(super) fn render_workload(spec: &SaintBotSpec, settings: &OperatorSettings) -> Workload {
    let image =
        |own: &Option<String>, default: &String| own.clone().unwrap_or_else(|| default.clone());
    Workload {
        agent_image: image(&spec.images.agent, &settings.agent_image),
        porter_image: image(&spec.images.porter, &settings.porter_image),
        agent_resources: spec
            .agent_resources
            .clone()
            .unwrap_or_else(|| AGENT_RESOURCES.requirements()),
        porter_resources: spec
            .porter_resources
            .clone()
            .unwrap_or_else(|| PORTER_RESOURCES.requirements()),
        sandbox: ValidatedSandbox {
            image: image(&spec.images.sandbox, &settings.sandbox_image),
            resources: spec
                .sandbox
                .resources
                .clone()
                .unwrap_or_else(|| SANDBOX_RESOURCES.requirements()),
            runtime_class_name: spec.sandbox.runtime_class_name.clone(),
            max_lifetime_seconds: spec
                .sandbox
                .max_lifetime_seconds
                .unwrap_or(DEFAULT_SANDBOX_MAX_LIFETIME_SECONDS),
        },
        storage_size: spec
            .storage
            .size
            .clone()
            .unwrap_or_else(|| Quantity(DEFAULT_STORAGE_SIZE.to_string())),
        storage_class_name: spec.storage.storage_class_name.clone(),
    }
}

/// The sandbox section of the config, without the Job template (the config map builder
/// adds it).
pub(super) fn sandbox_config(spec: &SandboxSpec) -> SandboxConfig {
    SandboxConfig {
        backend: SandboxBackend::Kubernetes,
        scope: spec.scope,
        idle_timeout_seconds: spec
            .idle_timeout_seconds
            .unwrap_or(DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS),
        exec_timeout_seconds: spec
            .exec_timeout_seconds
            .unwrap_or(DEFAULT_EXEC_TIMEOUT_SECONDS),
        job_template: None,
    }
}

/// Persona files: the ConfigMap's keys, then the inline files, which win.
pub(super) fn persona_files(
    spec: &SaintBotSpec,
    dereferenced: &Dereferenced,
) -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, String> = spec
        .persona
        .config_map_name
        .as_ref()
        .and_then(|name| dereferenced.config_maps.get(name))
        .and_then(|config_map| config_map.data.clone())
        .unwrap_or_default();
    files.extend(spec.persona.files.clone());
    files
}
