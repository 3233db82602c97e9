//! Turns a SaintBot plus what `dereference` read into a `ValidatedSaintBot`: typed,
//! defaulted, with the rendered config and Porter registry decided. Pure: no client.
//!
//! [`validate`] is a short driver over one module per concern — [`roles`], `channels`,
//! `mcp` (tool servers), `porter` (the credential registry, CLIs' and MCP servers'),
//! `model` (and web tools), `workload` (images, resources, sandbox, storage); every
//! default is a named constant in [`defaults`].

mod channels;
pub mod defaults;
mod mcp;
mod media;
mod memory;
mod model;
mod porter;
pub mod proactive;
pub mod roles;
pub mod telemetry;
mod transcription;
pub mod webhook_ingress;
mod workload;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::core::v1::ResourceRequirements,
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::OwnerReference},
};
use kube::{Resource, ResourceExt};
use porter_protocol::registry::Registry;
use saint_config::{
    BotConfig, BotIdentity, FileAccessConfig, PERSONA_MOUNT_PATH, PersonaConfig, PorterConfig,
    SCHEMA_VERSION, SessionsConfig,
};

use super::dereference::Dereferenced;
use crate::{
    crd::{Contact, SaintBot, SecretKeyReference},
    identity::{self, ContactInput, IdentityReport},
    selection::bot_uses_contact,
    settings::OperatorSettings,
    status::Reason,
};

pub use self::{
    porter::PorterSecretFile,
    proactive::ValidatedSkill,
    roles::{LeftOutRole, RoleError, render_role},
    workload::ValidatedSandbox,
};

/// Env var of the agent container holding the model API key.
pub const MODEL_API_KEY_ENV: &str = saint_config::MODEL_API_KEY_ENV;
/// Env var of the agent container holding the web search API key.
pub const WEB_SEARCH_API_KEY_ENV: &str = "SAINT_WEB_SEARCH_API_KEY";
/// Where the porter container (and only it) sees the Secret keys of CLI and MCP server
/// credentials; the registry names them as files here.
pub const PORTER_SECRETS_DIR: &str = "/etc/porter-secrets";

/// Why a SaintBot cannot be rendered. Each message names the field.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("failed to validate SaintBot: metadata.{field} is missing")]
    MissingMetadata { field: &'static str },
    #[error(
        "failed to render roles: spec.defaultRole names Role {role:?}, which does not exist or is not selected"
    )]
    DefaultRoleNotFound { role: String },
    #[error("failed to render roles: {field} names Role {role:?}, which is invalid")]
    RoleInvalid {
        field: &'static str,
        role: String,
        source: roles::RoleError,
    },
    #[error(
        "failed to render the heartbeat: spec.heartbeat.role names Role {role:?}, which does not exist or is not selected"
    )]
    HeartbeatRoleNotFound { role: String },
    #[error("failed to render {field}: {message}")]
    InvalidSetting { field: String, message: String },
    #[error("failed to mount skills: {field} names {}, which does not exist; retrying until it does", missing_config_map(name, key.as_deref()))]
    SkillConfigMapNotFound {
        field: String,
        name: String,
        key: Option<String>,
    },
    #[error("failed to render channels: {field}: {message}")]
    InvalidChannel { field: String, message: String },
    #[error("failed to render porter CLIs: {field}: {message}")]
    InvalidPorterCli { field: String, message: String },
    #[error("failed to render MCP servers: {field}: {message}")]
    InvalidMcpServer { field: String, message: String },
    #[error("failed to validate the rendered config")]
    RenderedConfig(#[source] saint_config::ConfigError),
}

fn missing_config_map(name: &str, key: Option<&str>) -> String {
    match key {
        None => format!("ConfigMap {name:?}"),
        Some(key) => format!("key {key:?} of ConfigMap {name:?}"),
    }
}

impl ValidateError {
    /// The status reason this error shows as (`RoleNotFound`, `ConfigMapNotFound` or
    /// `InvalidSpec`).
    pub fn reason(&self) -> Reason {
        match self {
            ValidateError::DefaultRoleNotFound { .. }
            | ValidateError::HeartbeatRoleNotFound { .. } => Reason::RoleNotFound,
            ValidateError::SkillConfigMapNotFound { .. } => Reason::ConfigMapNotFound,
            _ => Reason::InvalidSpec,
        }
    }
}

/// Everything the builders read. Built only by [`validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedSaintBot {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// Controller owner reference to the SaintBot, put on every child.
    pub owner_reference: OwnerReference,
    /// `agent` container image.
    pub agent_image: String,
    /// `porter` container image.
    pub porter_image: String,
    /// Rendered config, except `sandbox.jobTemplate` which the config map builder adds.
    pub config: BotConfig,
    /// Rendered Porter registry.
    pub registry: Registry,
    /// Model API key (agent container only).
    pub model_api_key: Option<SecretKeyReference>,
    /// The failover chain's other model keys as (env var, Secret key), in chain order
    /// (agent container only).
    pub model_api_keys: Vec<(String, SecretKeyReference)>,
    /// Channel secrets as (env var, Secret key), sorted (agent container only).
    pub channel_secrets: Vec<(String, SecretKeyReference)>,
    /// Web search API key (agent container only).
    pub web_search_api_key: Option<SecretKeyReference>,
    /// Transcription API key (agent container only).
    pub transcription_api_key: Option<SecretKeyReference>,
    /// The speech endpoint's API key (agent container only, as
    /// `saint_config::media::SPEECH_API_KEY_ENV`).
    pub speech_api_key: Option<SecretKeyReference>,
    /// The OTLP collector's header values as (env var, Secret key), in
    /// `spec.telemetry.otlp.headers` order (agent container only).
    pub telemetry_secrets: Vec<(String, SecretKeyReference)>,
    /// The shared embedder the bot's memory uses, if it uses one (its NetworkPolicy
    /// opens egress to it).
    pub shared_embedder: Option<crate::settings::SharedEmbedder>,
    /// CLI and MCP server credentials mounted as files (porter container only), sorted.
    pub porter_secret_files: Vec<PorterSecretFile>,
    /// Sandbox settings.
    pub sandbox: ValidatedSandbox,
    /// Workspace claim size.
    pub storage_size: Quantity,
    /// Workspace StorageClass.
    pub storage_class_name: Option<String>,
    /// Persona files: file name → contents (inline wins over the ConfigMap).
    pub persona_files: BTreeMap<String, String>,
    /// Scale to zero.
    pub suspend: bool,
    /// `agent` container resources.
    pub agent_resources: ResourceRequirements,
    /// `porter` container resources.
    pub porter_resources: ResourceRequirements,
    /// API server endpoint CIDRs and port the bot pod may reach.
    pub api_server_cidrs: Vec<String>,
    /// API server port.
    pub api_server_port: i32,
    /// The ClusterRole the agent account is bound to (`--agent-cluster-role`).
    pub agent_cluster_role: String,
    /// Identity resolution result (what was linked, what was left out and why).
    pub identity: IdentityReport,
    /// Selected Roles left out of the config because they cannot be rendered, with the
    /// Contacts left out with them; sorted by Role name.
    pub left_out_roles: Vec<LeftOutRole>,
    /// The webhook Ingress, when `spec.webhookIngress` is set, a channel takes webhooks
    /// and no earlier bot routes the host and a path.
    pub webhook_ingress: Option<ValidatedWebhookIngress>,
    /// `HostClaimed` and its message when an earlier bot routes the host and a path this
    /// bot asks for: everything else is applied, the Ingress is not (a stale one is
    /// deleted), and `Ready` says why.
    pub webhook_problem: Option<(Reason, String)>,
    /// Skills mounted under `saint_config::SKILLS_MOUNT_PATH`, in spec order.
    pub skills: Vec<ValidatedSkill>,
}

/// `spec.webhookIngress`, defaulted, with the paths it routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedWebhookIngress {
    /// IngressClass; `None`: the cluster default.
    pub class_name: Option<String>,
    /// Public host.
    pub host: String,
    /// TLS Secret for `host`.
    pub tls_secret_name: Option<String>,
    /// Namespace whose pods the agent NetworkPolicy admits to the HTTP port.
    pub controller_namespace: String,
    /// Annotations of the Ingress.
    pub annotations: BTreeMap<String, String>,
    /// `/channels/<name>/webhook` of every webhook channel, in spec order.
    pub paths: Vec<String>,
}

/// `metadata.name`, `metadata.namespace` and the owner reference every child carries.
fn metadata(bot: &SaintBot) -> Result<(String, String, OwnerReference), ValidateError> {
    let missing = |field| ValidateError::MissingMetadata { field };
    let name = bot.metadata.name.clone().ok_or(missing("name"))?;
    let namespace = bot.metadata.namespace.clone().ok_or(missing("namespace"))?;
    let owner_reference = bot.controller_owner_ref(&()).ok_or(missing("uid"))?;
    Ok((name, namespace, owner_reference))
}

/// Contacts the bot selects, resolved into contacts and identity links for its roles.
fn resolve_contacts(
    bot: &SaintBot,
    contacts: &[Contact],
    roles: &BTreeMap<String, saint_config::RoleConfig>,
) -> IdentityReport {
    let inputs: Vec<ContactInput> = contacts
        .iter()
        .filter(|contact| bot_uses_contact(bot, contact))
        .map(|contact| ContactInput {
            slug: contact.name_any(),
            display_name: contact.spec.display_name.clone(),
            role: contact.spec.role.clone(),
            identifiers: contact.spec.identifiers.clone(),
        })
        .collect();
    let role_names: BTreeSet<String> = roles.keys().cloned().collect();
    let mut report = identity::resolve(&inputs, &role_names);
    // A Contact marked for erasure is rendered with `erase: true`: the agent erases the
    // person's data when it loads the config.
    for rendered in &mut report.contacts {
        rendered.erase = contacts
            .iter()
            .any(|contact| contact.spec.erase && rendered.slug == contact.name_any());
    }
    report
}

/// The kinds of channel each Contact declares a well-formed identifier for, by name.
fn identifier_kinds(contacts: &[Contact]) -> BTreeMap<String, BTreeSet<saint_config::ChannelKind>> {
    contacts
        .iter()
        .map(|contact| {
            let (found, _) = identity::identities(&contact.spec.identifiers);
            (
                contact.name_any(),
                found.iter().map(|identity| identity.kind()).collect(),
            )
        })
        .collect()
}

/// Each unusable Role with the Contacts the resolver left out for holding it.
fn left_out_roles(invalid: &[RoleError], identity: &IdentityReport) -> Vec<LeftOutRole> {
    invalid
        .iter()
        .map(|error| LeftOutRole {
            error: error.clone(),
            // `problems` is keyed by slug, so these come out sorted.
            contacts: identity
                .problems
                .iter()
                .filter(|(_, problems)| problems.missing_role.as_deref() == Some(&error.role))
                .map(|(slug, _)| slug.clone())
                .collect(),
        })
        .collect()
}

/// `spec.heartbeat` without the Contacts left out with an unusable Role: they are not
/// this bot's contacts now, and a Role's problem must not stop the bot's config.
fn heartbeat_without(
    heartbeat: Option<&crate::crd::proactive::HeartbeatSpec>,
    left_out: &[LeftOutRole],
) -> Option<crate::crd::proactive::HeartbeatSpec> {
    let mut heartbeat = heartbeat?.clone();
    heartbeat.notify.retain(|name| {
        !left_out
            .iter()
            .any(|role| role.contacts.iter().any(|contact| contact == name))
    });
    Some(heartbeat)
}

/// The agent re-checks the same rules; refusing here turns a crash loop into a status.
fn check_rendered(config: &BotConfig) -> Result<(), ValidateError> {
    // The job template is filled by the config map builder, so check with a stand-in.
    let mut checked = config.clone();
    checked.sandbox.job_template = Some(serde_json::json!({}));
    saint_config::validate(&checked).map_err(ValidateError::RenderedConfig)
}

/// Validates `bot` against what the cluster holds and decides everything builders need.
pub fn validate(
    bot: &SaintBot,
    dereferenced: &Dereferenced,
    settings: &OperatorSettings,
) -> Result<ValidatedSaintBot, ValidateError> {
    let (name, namespace, owner_reference) = metadata(bot)?;
    let spec = &bot.spec;
    // Skills first: Roles are checked against the skills the bot declares.
    let (skills_config, skills) = proactive::render_skills(spec, &dereferenced.config_maps)?;
    let (selected, identity) = settle_roles(bot, dereferenced)?;
    let roles = selected.rendered;
    let left_out_roles = left_out_roles(&selected.invalid, &identity);
    let channels = channels::render_channels(&spec.channels)?;

    // MCP servers before the registry: a server's own mistakes are named as such, not
    // as a Porter entry's.
    let mcp = mcp::render_mcp(&spec.mcp)?;
    mcp::check_roles(&roles, &mcp)?;
    let porter = porter::render_porter(&spec.porter, &spec.mcp)?;
    let heartbeat = render_heartbeat(spec, dereferenced, &roles, &identity, &left_out_roles)?;
    let schedule = proactive::render_schedule(spec.schedule.as_ref())?;

    let model = model::render_model(&spec.model);
    check_model_endpoint(&model)?;
    let telemetry = telemetry::render_telemetry(spec.telemetry.as_ref())?;
    let (mut media_config, speech_api_key) = media::render_media(spec.media.as_ref())?;
    media_config.transcription = transcription::render_transcription(spec)?;
    let config = BotConfig {
        schema_link: None,
        schema_version: SCHEMA_VERSION.to_string(),
        bot: BotIdentity {
            name: name.clone(),
            namespace: namespace.clone(),
        },
        model,
        channels: channels.channels,
        default_role: spec.default_role.clone(),
        roles,
        contacts: identity.contacts.clone(),
        identity_links: identity.identity_links.clone(),
        sessions: SessionsConfig::default(),
        file_access: FileAccessConfig::default(),
        web: model::render_web(&spec.web),
        sandbox: workload::sandbox_config(&spec.sandbox),
        porter: porter_config(spec),
        memory: memory::render_memory(&spec.memory, settings.shared_embedder.as_ref())?,
        // The persona ConfigMap is always mounted there (build/workload.rs).
        persona: Some(PersonaConfig {
            directory: PERSONA_MOUNT_PATH.to_string(),
        }),
        heartbeat,
        schedule,
        // Names the mount of `skills` (build/workload.rs) when any skill is declared.
        skills: skills_config,
        budget: budget_config(spec),
        mcp,
        telemetry: telemetry.config,
        media: media_config,
    };
    check_rendered(&config)?;
    // Last: a spec with other mistakes names those first, whoever owns the host.
    let (webhook_ingress, webhook_problem) = render_webhook_ingress(bot, dereferenced, settings)?;
    let workload = workload::render_workload(spec, settings);
    let shared_embedder = operator_embedder(&config, settings);

    Ok(ValidatedSaintBot {
        name,
        namespace,
        owner_reference,
        agent_image: workload.agent_image,
        porter_image: workload.porter_image,
        config,
        registry: porter.registry,
        model_api_key: spec.model.api_key_secret_ref.clone(),
        model_api_keys: model::model_key_secrets(&spec.model),
        channel_secrets: channels.secrets,
        web_search_api_key: spec.web.search_api_key_secret_ref.clone(),
        transcription_api_key: transcription_api_key(spec),
        speech_api_key,
        telemetry_secrets: telemetry.secrets,
        porter_secret_files: porter.secret_files,
        sandbox: workload.sandbox,
        storage_size: workload.storage_size,
        storage_class_name: workload.storage_class_name,
        persona_files: workload::persona_files(spec, dereferenced),
        suspend: spec.suspend,
        agent_resources: workload.agent_resources,
        porter_resources: workload.porter_resources,
        api_server_cidrs: settings.api_server_cidrs.clone(),
        api_server_port: settings.api_server_port,
        agent_cluster_role: settings.agent_cluster_role.clone(),
        shared_embedder,
        identity,
        left_out_roles,
        webhook_ingress,
        webhook_problem,
        skills,
    })
}

/// The selected Roles that survive validation and the Contacts resolved against them.
fn settle_roles(
    bot: &SaintBot,
    dereferenced: &Dereferenced,
) -> Result<(roles::SelectedRoles, IdentityReport), ValidateError> {
    let spec = &bot.spec;
    let mut selected = roles::selected_roles(bot, &dereferenced.roles)?;
    // Contacts holding an unusable Role name a role the config lacks, so the resolver
    // leaves them out (strangers to the bot), as it does for a Role that is not selected.
    // A Role whose approvers this bot cannot honour is left out too, and with it its
    // Contacts, so they are resolved again until every approval rule holds.
    let identity = roles::settle_approvals(bot, &mut selected, |roles| {
        resolve_contacts(bot, &dereferenced.contacts, roles)
    });
    // The Roles the bot names must have survived that.
    selected.require("spec.defaultRole", &spec.default_role, || {
        ValidateError::DefaultRoleNotFound {
            role: spec.default_role.clone(),
        }
    })?;
    if let Some(heartbeat) = &spec.heartbeat {
        selected.require("spec.heartbeat.role", &heartbeat.role, || {
            ValidateError::HeartbeatRoleNotFound {
                role: heartbeat.role.clone(),
            }
        })?;
    }
    Ok((selected, identity))
}

/// The heartbeat, without the Contacts of left-out Roles among those it notifies.
fn render_heartbeat(
    spec: &crate::crd::SaintBotSpec,
    dereferenced: &Dereferenced,
    roles: &BTreeMap<String, saint_config::RoleConfig>,
    identity: &IdentityReport,
    left_out_roles: &[LeftOutRole],
) -> Result<Option<saint_config::HeartbeatConfig>, ValidateError> {
    proactive::render_heartbeat(
        heartbeat_without(spec.heartbeat.as_ref(), left_out_roles).as_ref(),
        roles,
        &identity.contacts,
        &identifier_kinds(&dereferenced.contacts),
        &spec.channels.iter().map(|channel| channel.kind).collect(),
    )
}

/// The webhook Ingress, or the problem that keeps it from being served: a host another
/// bot claimed first is a status problem, not an invalid spec.
#[allow(clippy::type_complexity)]
fn render_webhook_ingress(
    bot: &SaintBot,
    dereferenced: &Dereferenced,
    settings: &OperatorSettings,
) -> Result<(Option<ValidatedWebhookIngress>, Option<(Reason, String)>), ValidateError> {
    Ok(
        match webhook_ingress::render(
            bot,
            &settings.allowed_ingress_annotations,
            &dereferenced.host_claims,
        )? {
            Ok(ingress) => (ingress, None),
            Err(claimed) => (None, Some((Reason::HostClaimed, claimed.to_string()))),
        },
    )
}

/// Refuses a model endpoint the bot's network policy would never let it reach.
fn check_model_endpoint(model: &saint_config::ModelConfig) -> Result<(), ValidateError> {
    if let Some(why) =
        crate::saintbot_controller::build::network_policy::refused_endpoint(&model.base_url)
    {
        return Err(ValidateError::InvalidSetting {
            field: "spec.model.baseUrl".to_string(),
            message: format!("bot pods never reach {why}"),
        });
    }
    Ok(())
}

/// The config's `porter` section.
fn porter_config(spec: &crate::crd::SaintBotSpec) -> PorterConfig {
    PorterConfig {
        // CLI names only: the agent registers a Porter key for `exec` and meters
        // `porter: true` by them. An MCP server's entry (`mcp-<server>`) is named by
        // its `mcp.servers[].credential` instead.
        clis: spec
            .porter
            .clis
            .iter()
            .map(|cli| cli.name.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        ..PorterConfig::default()
    }
}

/// The config's `budget` section.
fn budget_config(spec: &crate::crd::SaintBotSpec) -> saint_config::BudgetConfig {
    saint_config::BudgetConfig {
        unpriced_models: spec
            .budget
            .as_ref()
            .map(|budget| budget.unpriced_models)
            .unwrap_or_default(),
        tool_prices: spec
            .budget
            .as_ref()
            .map(|budget| budget.tool_prices.clone())
            .unwrap_or_default(),
    }
}

/// The operator's shared embedder, when the bot's memory uses it. Rendering refused
/// `shared` without a shared embedder, so an OpenAI-compatible endpoint here is always
/// the operator's.
fn operator_embedder(
    config: &BotConfig,
    settings: &OperatorSettings,
) -> Option<crate::settings::SharedEmbedder> {
    match config.memory.embeddings {
        saint_config::EmbeddingsConfig::Openai { .. } if config.memory.enabled => {
            settings.shared_embedder.clone()
        }
        _ => None,
    }
}

/// The Secret key of the transcription service's API key, if one is set.
fn transcription_api_key(spec: &crate::crd::SaintBotSpec) -> Option<SecretKeyReference> {
    spec.media
        .as_ref()
        .and_then(|media| media.transcription.as_ref())
        .and_then(|transcription| transcription.api_key_secret_ref.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::crd::Role;

    fn object<T: serde::de::DeserializeOwned>(kind: &str, name: &str, spec: Value) -> T {
        serde_json::from_value(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "acme", "uid": "u-1"}, "spec": spec,
        }))
        .unwrap()
    }

    fn bot(extra: Value) -> SaintBot {
        let mut spec =
            json!({"model": {"provider": "anthropic", "name": "m"}, "defaultRole": "visitor"});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        object("SaintBot", "my-bot", spec)
    }

    fn role(name: &str, spec: Value) -> Role {
        object("Role", name, spec)
    }

    fn contact(name: &str, role: &str, email: &str) -> Contact {
        object(
            "Contact",
            name,
            json!({"displayName": name, "role": role, "identifiers": {"email": email}}),
        )
    }

    /// A namespace with a usable `visitor` and `clerk` Role, the Role `other`, and one
    /// Contact for each.
    fn namespace(other: Value) -> Dereferenced {
        Dereferenced {
            roles: vec![
                role("visitor", json!({"tools": {"allow": ["read"]}})),
                role("clerk", json!({"tools": {"allow": ["read", "write"]}})),
                role("other", other),
            ],
            contacts: vec![
                contact("vesna", "clerk", "vesna@acme.example"),
                contact("mirko", "other", "mirko@acme.example"),
            ],
            ..Dereferenced::default()
        }
    }

    fn settings() -> OperatorSettings {
        OperatorSettings::with_tag("0.1.0")
    }

    #[test]
    fn a_role_with_an_unmatched_tool_pattern_leaves_out_only_itself_and_its_contacts() {
        let dereferenced = namespace(json!({"tools": {"allow": ["teleport*"]}}));
        let bot = bot(json!({
            "heartbeat": {"everySeconds": 1800, "role": "clerk", "notify": ["vesna", "mirko"]},
            "channels": [{
                "name": "mail", "kind": "email",
                "settings": {"address": "bot@acme.example", "imapHost": "imap.acme.example",
                    "smtpHost": "smtp.acme.example"},
                "secrets": {"password": {"name": "mail", "key": "password"}},
            }],
        }));
        let validated = validate(&bot, &dereferenced, &settings()).expect("the bot renders");
        let config = &validated.config;
        assert_eq!(
            config.roles.keys().collect::<Vec<_>>(),
            ["clerk", "visitor"]
        );
        let contacts: Vec<&str> = config
            .contacts
            .iter()
            .map(|contact| contact.slug.as_str())
            .collect();
        assert_eq!(contacts, ["vesna"], "mirko holds the unusable Role");
        let notify: Vec<&str> = config
            .heartbeat
            .as_ref()
            .unwrap()
            .notify
            .iter()
            .map(|slug| slug.as_str())
            .collect();
        assert_eq!(notify, ["vesna"]);
        assert_eq!(validated.left_out_roles.len(), 1);
        let left_out = &validated.left_out_roles[0];
        assert_eq!(
            (
                left_out.error.role.as_str(),
                left_out.error.field.as_str(),
                left_out.contacts.as_slice()
            ),
            (
                "other",
                "spec.tools.allow",
                ["mirko".to_string()].as_slice()
            )
        );
        // The bot's report names the Role and the contact, as missing for this bot.
        assert_eq!(
            validated.identity.contacts_with_missing_role(),
            [("mirko", "other")]
        );
        let summary = roles::left_out_summary(&validated.left_out_roles).unwrap();
        assert!(
            summary.contains("other (contacts mirko; spec.tools.allow: \"teleport*\""),
            "{summary}"
        );
    }

    /// The invariant behind keeping the rule in `render_role`: whatever is wrong with a
    /// Role the bot only selects, the bot still renders a config the agent accepts.
    #[test]
    fn no_problem_of_a_merely_selected_role_fails_the_bot() {
        let problems = [
            json!({"tools": {"allow": ["teleport*"]}}),
            json!({"tools": {"deny": ["[z]"]}}),
            json!({"bootstrap": ["EVIL.md"]}),
            json!({"files": {"read": ["/**"]}}),
            json!({"inject": ["../../../etc/passwd"]}),
            json!({"budget": {"usd": -1.0, "period": "month"}}),
            json!({"skills": ["*", "x"]}),
            json!({"cron": {"minIntervalSeconds": 1, "maxJobs": 5000}}),
            json!({"spawn": {"maxConcurrent": 0, "timeoutSeconds": 0, "maxDepth": 9}}),
            json!({"approvals": [{"tools": [], "approvers": {"roles": ["clerk"]}}]}),
            // What only the bot can tell: approvers it lacks, and an only approver who is
            // the Role's one member (mirko).
            json!({"approvals": [{"tools": ["exec"], "approvers": {"roles": ["boss"]}}]}),
            json!({"approvals": [{"tools": ["exec"], "approvers": {"contacts": ["ghost"]}}]}),
            json!({"approvals": [{"tools": ["exec"], "approvers": {"roles": ["other"]}}]}),
        ];
        for problem in problems {
            let validated = validate(&bot(json!({})), &namespace(problem.clone()), &settings())
                .unwrap_or_else(|error| panic!("{problem}: {}", saint_config::ErrorChain(&error)));
            assert!(
                !validated.config.roles.contains_key("other")
                    && validated.left_out_roles[0].error.role == "other",
                "{problem}"
            );
        }
    }

    #[test]
    fn a_porter_approval_rule_is_rendered_and_a_bad_path_glob_names_its_field() {
        let rule = |path: &str| {
            json!({"tools": {"allow": ["exec"]}, "approvals": [
                {"porter": {"hosts": ["api.github.com"], "methods": ["PUT"], "paths": [path]},
                 "approvers": {"roles": ["clerk"]}}]})
        };
        let config = validate(
            &bot(json!({})),
            &namespace(rule("/repos/*/*/pulls/*/merge")),
            &settings(),
        )
        .expect("the bot renders")
        .config;
        assert_eq!(
            config.roles["other"].approvals[0].porter,
            Some(saint_config::PorterRequests {
                hosts: vec!["api.github.com".into()],
                methods: vec!["PUT".into()],
                paths: vec!["/repos/*/*/pulls/*/merge".into()],
            })
        );
        assert!(config.roles["other"].approvals[0].tools.is_empty());
        let validated = validate(&bot(json!({})), &namespace(rule("/repos/[o")), &settings())
            .expect("a merely selected Role's problem does not fail the bot");
        let summary = saint_config::ErrorChain(&validated.left_out_roles[0].error).to_string();
        assert!(
            summary.contains("spec.approvals[0].porter.paths"),
            "{summary}"
        );
    }

    #[test]
    fn a_contact_marked_erase_and_a_roles_retention_are_rendered_for_the_agent() {
        let mut dereferenced = namespace(json!({
            "tools": {"allow": ["read"]},
            "retention": {"transcriptsDays": 30, "usageDays": 400},
        }));
        dereferenced.contacts[1].spec.erase = true;
        let config = validate(&bot(json!({})), &dereferenced, &settings())
            .expect("the bot renders")
            .config;
        let mut erased: Vec<(&str, bool)> = config
            .contacts
            .iter()
            .map(|contact| (contact.slug.as_ref(), contact.erase))
            .collect();
        erased.sort_unstable();
        assert_eq!(erased, [("mirko", true), ("vesna", false)]);
        assert_eq!(
            config.roles["other"].retention,
            Some(saint_config::Retention {
                transcripts_days: Some(30),
                usage_days: Some(400),
                ..saint_config::Retention::default()
            })
        );
        assert_eq!(config.roles["clerk"].retention, None);
    }

    #[test]
    fn the_unpriced_models_setting_is_rendered_and_refuse_is_the_default() {
        let rendered = |extra| {
            validate(&bot(extra), &namespace(json!({})), &settings())
                .expect("the bot renders")
                .config
                .budget
                .unpriced_models
        };
        assert_eq!(rendered(json!({})), saint_config::UnpricedModels::Refuse);
        assert_eq!(
            rendered(json!({"budget": {"unpricedModels": "allow"}})),
            saint_config::UnpricedModels::Allow
        );
    }

    #[test]
    fn an_unusable_default_or_heartbeat_role_fails_the_bot_naming_the_field_and_role() {
        let dereferenced = namespace(json!({"tools": {"allow": ["teleport*"]}}));
        for (extra, field) in [
            (json!({"defaultRole": "other"}), "spec.defaultRole"),
            (
                json!({"heartbeat": {"everySeconds": 1800, "role": "other"}}),
                "spec.heartbeat.role",
            ),
        ] {
            let error = validate(&bot(extra), &dereferenced, &settings()).expect_err(field);
            assert_eq!(error.reason(), Reason::InvalidSpec);
            let message = saint_config::ErrorChain(&error).to_string();
            assert!(
                message.contains(&format!("{field} names Role \"other\", which is invalid"))
                    && message.contains("spec.tools.allow: \"teleport*\""),
                "{message}"
            );
        }
    }

    /// The Role `other` (held by mirko alone) with `approvals`, in [`namespace`].
    fn with_approvals(approvals: Value) -> Dereferenced {
        namespace(json!({"tools": {"allow": ["read", "exec"]}, "approvals": approvals}))
    }

    /// Why `other` is left out of the bot, as (field, message); `None` if it renders.
    fn left_out_other(dereferenced: &Dereferenced) -> Option<(String, String)> {
        let validated = validate(&bot(json!({})), dereferenced, &settings())
            .unwrap_or_else(|error| panic!("{}", saint_config::ErrorChain(&error)));
        let left_out = validated
            .left_out_roles
            .iter()
            .find(|left_out| left_out.error.role == "other")?;
        assert!(!validated.config.roles.contains_key("other"));
        assert_eq!(
            left_out.contacts,
            ["mirko"],
            "its holder is left out with it"
        );
        Some((left_out.error.field.clone(), left_out.error.message.clone()))
    }

    #[test]
    fn approvers_the_bot_does_not_have_leave_the_role_out_naming_the_field() {
        let (field, message) = left_out_other(&with_approvals(json!([
            {"tools": ["exec"], "approvers": {"roles": ["clerk"]}},
            {"tools": ["message"], "approvers": {"roles": ["clerk", "boss"]}},
        ])))
        .expect("boss is no Role of the bot");
        assert_eq!(field, "spec.approvals[1].approvers.roles");
        assert!(
            message.contains("\"boss\"")
                && message.contains("not a Role SaintBot \"my-bot\" selects"),
            "{message}"
        );
        let (field, message) = left_out_other(&with_approvals(json!([
            {"tools": ["exec"], "approvers": {"contacts": ["vesna", "ghost"]}},
        ])))
        .expect("ghost is no Contact of the bot");
        assert_eq!(field, "spec.approvals[0].approvers.contacts");
        assert!(
            message.contains("\"ghost\"")
                && message.contains("not a Contact SaintBot \"my-bot\" knows"),
            "{message}"
        );
        // Approvers the bot has: the rules are rendered as written.
        let dereferenced = with_approvals(json!([
            {"tools": ["exec"], "when": {"command": "git push*"},
             "approvers": {"roles": ["clerk"], "contacts": ["vesna"]}},
        ]));
        assert_eq!(left_out_other(&dereferenced), None);
        let validated = validate(&bot(json!({})), &dereferenced, &settings()).unwrap();
        assert_eq!(validated.config.roles["other"].approvals.len(), 1);
    }

    /// A Role left out takes its Contacts with it, who may be another Role's approvers:
    /// that Role is left out too, and the bot still renders.
    #[test]
    fn an_approver_left_out_with_an_invalid_role_leaves_out_the_roles_it_approves_for() {
        let mut dereferenced = namespace(json!({"tools": {"allow": ["teleport*"]}}));
        dereferenced.roles[1] = role(
            "clerk",
            json!({"tools": {"allow": ["read"]},
                "approvals": [{"tools": ["read"], "approvers": {"contacts": ["mirko"]}}]}),
        );
        let validated = validate(&bot(json!({})), &dereferenced, &settings())
            .unwrap_or_else(|error| panic!("{}", saint_config::ErrorChain(&error)));
        assert_eq!(
            validated.config.roles.keys().collect::<Vec<_>>(),
            ["visitor"]
        );
        assert!(validated.config.contacts.is_empty());
        let left_out: Vec<(&str, &str)> = validated
            .left_out_roles
            .iter()
            .map(|left| (left.error.role.as_str(), left.error.field.as_str()))
            .collect();
        assert_eq!(
            left_out,
            [
                ("clerk", "spec.approvals[0].approvers.contacts"),
                ("other", "spec.tools.allow")
            ]
        );
    }

    /// The issue's rule — "an approver equal to the requester's own role when it has one
    /// member who is the requester" — is the agent's own check, so the two agree: the
    /// operator's message is the agent's, naming the Role's field instead of the config's.
    #[test]
    fn an_only_approver_who_is_the_roles_one_member_leaves_the_role_out_naming_the_field() {
        for approvers in [
            json!({"roles": ["other"]}),
            json!({"contacts": ["mirko"]}),
            json!({"roles": ["other"], "contacts": ["mirko"]}),
        ] {
            let rules = json!([
                {"tools": ["read"], "approvers": {"roles": ["clerk"]}},
                {"tools": ["exec"], "approvers": approvers.clone()},
            ]);
            let (field, message) = left_out_other(&with_approvals(rules.clone()))
                .unwrap_or_else(|| panic!("{approvers}: mirko would approve himself"));
            assert_eq!(field, "spec.approvals[1].approvers", "{approvers}");

            // The agent, given the same Role and Contacts, refuses with the same words.
            let validated = validate(&bot(json!({})), &with_approvals(rules), &settings()).unwrap();
            let mut config = validated.config.clone();
            config.sandbox.job_template = Some(json!({}));
            let other = render_role(&role(
                "other",
                json!({"tools": {"allow": ["read", "exec"]}, "approvals": [
                    {"tools": ["read"], "approvers": {"roles": ["clerk"]}},
                    {"tools": ["exec"], "approvers": approvers.clone()},
                ]}),
            ))
            .unwrap();
            config.roles.insert("other".into(), other);
            config.contacts.push(saint_config::ContactConfig {
                slug: saint_config::ContactSlug::parse("mirko").unwrap(),
                name: "mirko".into(),
                role: "other".into(),
                identities: Vec::new(),
                erase: false,
            });
            match saint_config::validate(&config) {
                Err(saint_config::ConfigError::Invalid {
                    field: agent_field,
                    message: agent_message,
                }) => {
                    assert_eq!(agent_field, "roles.other.approvals[1].approvers");
                    assert_eq!(agent_message, message);
                }
                other => panic!("{approvers}: the agent should refuse it: {other:?}"),
            }
            assert!(
                message.contains("\"mirko\"")
                    && message.contains("nobody approves their own request"),
                "{message}"
            );
        }
        // With a second holder they decide for each other; with another approver beside
        // mirko someone else can decide.
        let mut two =
            with_approvals(json!([{"tools": ["exec"], "approvers": {"roles": ["other"]}}]));
        two.contacts
            .push(contact("mila", "other", "mila@acme.example"));
        assert_eq!(left_out_other(&two), None);
        let beside = with_approvals(json!([
            {"tools": ["exec"], "approvers": {"roles": ["other", "clerk"]}},
        ]));
        assert_eq!(left_out_other(&beside), None);
    }

    /// The default Role cannot be left out: the bot fails, naming the field and the rule.
    #[test]
    fn a_default_role_whose_approvers_fail_fails_the_bot_naming_both_fields() {
        let dereferenced =
            with_approvals(json!([{"tools": ["exec"], "approvers": {"roles": ["boss"]}}]));
        let error = validate(
            &bot(json!({"defaultRole": "other"})),
            &dereferenced,
            &settings(),
        )
        .expect_err("the default role is unusable");
        assert_eq!(error.reason(), Reason::InvalidSpec);
        let message = saint_config::ErrorChain(&error).to_string();
        assert!(
            message.contains("spec.defaultRole names Role \"other\", which is invalid")
                && message.contains("spec.approvals[0].approvers.roles"),
            "{message}"
        );
    }
}
