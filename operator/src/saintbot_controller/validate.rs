//! Turns a SaintBot plus what `dereference` read into a `ValidatedSaintBot`: typed,
//! defaulted, with the rendered config and Porter registry decided. Pure: no client.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::core::v1::ResourceRequirements,
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::OwnerReference},
};
use kube::{Resource, ResourceExt};
use porter_protocol::registry::{
    ArgPolicy, CliEntry, CliMode, DEFAULT_TIMEOUT_SECONDS, GraphqlRule, REGISTRY_VERSION,
    RateLimit, Registry, RequestRule, split_host,
};
use saint_config::{
    BotConfig, BotIdentity, ChannelConfig, ChannelKind, FileAccessConfig, MemoryConfig,
    ModelConfig, ModelPrice, ModelProvider, PorterConfig, RoleConfig, SCHEMA_VERSION,
    SandboxBackend, SandboxConfig, SandboxScope, SessionsConfig, SessionsVisibility, Skills,
    ToolPolicy, WebConfig, WebSearchConfig, is_known_tool_pattern,
};

use super::dereference::Dereferenced;
use crate::{
    crd::{
        Role, SaintBot, SecretKeyReference,
        role::SessionsVisibilityName,
        saintbot::{
            ArgPolicySpec, ChannelKindName, ModelProviderName, PorterCliSpec, RateLimitSpec,
            RequestRuleSpec, SandboxScopeName,
        },
    },
    identity::{self, ContactInput, IdentityReport},
    labels::channel_secret_env,
    selection::{bot_uses_contact, bot_uses_role},
    settings::OperatorSettings,
};

/// Env var of the agent container holding the model API key.
pub const MODEL_API_KEY_ENV: &str = "SAINT_MODEL_API_KEY";
/// Env var of the agent container holding the web search API key.
pub const WEB_SEARCH_API_KEY_ENV: &str = "SAINT_WEB_SEARCH_API_KEY";
/// Where the porter container sees Secret keys of CLI credentials.
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
    #[error("failed to render Role {role:?}: {field}: {message}")]
    InvalidRole {
        role: String,
        field: String,
        message: String,
    },
    #[error("failed to render channels: {field}: {message}")]
    InvalidChannel { field: String, message: String },
    #[error("failed to render porter CLIs: {field}: {message}")]
    InvalidPorterCli { field: String, message: String },
    #[error("failed to validate the rendered config: {0}")]
    RenderedConfig(#[source] saint_config::ConfigError),
}

impl ValidateError {
    /// The status reason this error shows as (`RoleNotFound` or `InvalidSpec`).
    pub fn reason(&self) -> &'static str {
        match self {
            ValidateError::DefaultRoleNotFound { .. } => "RoleNotFound",
            _ => "InvalidSpec",
        }
    }
}

/// One Secret key the porter container mounts as a file for a CLI.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PorterSecretFile {
    /// CLI name.
    pub cli: String,
    /// Env var name the CLI gets.
    pub env_name: String,
    /// Path relative to [`PORTER_SECRETS_DIR`] (`<cli>/<ENV>`).
    pub relative_path: String,
    /// Where the value comes from.
    pub secret: SecretKeyReference,
}

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
    /// Channel secrets as (env var, Secret key), sorted (agent container only).
    pub channel_secrets: Vec<(String, SecretKeyReference)>,
    /// Web search API key (agent container only).
    pub web_search_api_key: Option<SecretKeyReference>,
    /// CLI credentials mounted as files (porter container only), sorted.
    pub porter_secret_files: Vec<PorterSecretFile>,
    /// Secrets loaded with `envFrom` into the porter container only, sorted.
    pub porter_env_from_secrets: Vec<String>,
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
    /// Identity resolution result (what was linked, what was left out and why).
    pub identity: IdentityReport,
}

fn resources(
    cpu_request: &str,
    memory_request: &str,
    cpu_limit: &str,
    memory_limit: &str,
) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu_request.to_string())),
            ("memory".to_string(), Quantity(memory_request.to_string())),
        ])),
        limits: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu_limit.to_string())),
            ("memory".to_string(), Quantity(memory_limit.to_string())),
        ])),
        ..Default::default()
    }
}

fn invalid_role(role: &str, field: &str, message: impl Into<String>) -> ValidateError {
    ValidateError::InvalidRole {
        role: role.to_string(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// Converts a Role resource into the rendered role, re-checking what CEL may not have
/// (the CRD could be installed without validation, or an older version).
pub fn render_role(role: &Role) -> Result<RoleConfig, ValidateError> {
    let name = role.name_any();
    let spec = &role.spec;
    for (list, patterns) in [
        ("spec.tools.allow", &spec.tools.allow),
        ("spec.tools.deny", &spec.tools.deny),
    ] {
        if let Some(pattern) = patterns
            .iter()
            .find(|pattern| !is_known_tool_pattern(pattern))
        {
            return Err(invalid_role(
                &name,
                list,
                format!("{pattern:?} is not a known tool, group:<name> or a glob matching one"),
            ));
        }
    }
    if let Some(budget) = &spec.budget
        && !(budget.usd.is_finite() && budget.usd >= 0.0)
    {
        return Err(invalid_role(
            &name,
            "spec.budget.usd",
            "must be a number ≥ 0",
        ));
    }
    let skills = match spec.skills.as_slice() {
        [] => Skills::None,
        [only] if only == "*" => Skills::All,
        list if list.iter().any(|skill| skill == "*") => {
            return Err(invalid_role(
                &name,
                "spec.skills",
                "'*' must be the only entry",
            ));
        }
        list => Skills::Only(list.to_vec()),
    };
    let sessions_visibility = match spec.sessions_visibility {
        SessionsVisibilityName::All => SessionsVisibility::All,
        SessionsVisibilityName::Own => SessionsVisibility::Own,
        SessionsVisibilityName::None => SessionsVisibility::None,
        SessionsVisibilityName::OwnAndRoles => {
            SessionsVisibility::OwnAndRoles(spec.sessions_visible_roles.clone())
        }
    };
    Ok(RoleConfig {
        description: spec.description.clone(),
        tools: ToolPolicy {
            allow: spec.tools.allow.clone(),
            deny: spec.tools.deny.clone(),
        },
        model: spec.model.clone(),
        exec_blocklist: spec.exec_blocklist.clone(),
        memory_scope: spec
            .memory_scope
            .iter()
            .map(|scope| (*scope).into())
            .collect(),
        files: saint_config::FileGlobs {
            read: spec.files.read.clone(),
            write: spec.files.write.clone(),
            deny_write: spec.files.deny_write.clone(),
        },
        skills,
        budget: spec.budget.as_ref().map(|budget| saint_config::Budget {
            usd: budget.usd,
            period: budget.period.into(),
        }),
        bootstrap: spec.bootstrap.clone(),
        inject: spec.inject.clone(),
        sessions_visibility,
        external: spec.external,
    })
}

fn channel_kind(kind: ChannelKindName) -> ChannelKind {
    match kind {
        ChannelKindName::Http => ChannelKind::Http,
        ChannelKindName::Whatsapp => ChannelKind::Whatsapp,
        ChannelKindName::Telegram => ChannelKind::Telegram,
        ChannelKindName::Email => ChannelKind::Email,
        ChannelKindName::Slack => ChannelKind::Slack,
        ChannelKindName::Discord => ChannelKind::Discord,
    }
}

fn rate_limit(spec: &RateLimitSpec) -> RateLimit {
    RateLimit {
        per_minute: spec.per_minute,
        burst: spec.burst.unwrap_or(10),
    }
}

/// The same checks as the CRD's CEL and Porter's registry load, so a bad entry stops
/// here with its field named instead of in Porter.
fn check_injection(cli: &PorterCliSpec) -> Result<(), ValidateError> {
    let invalid = |field: &str, message: String| ValidateError::InvalidPorterCli {
        field: format!("spec.porter.clis[{}].{field}", cli.name),
        message,
    };
    if cli.inject == Some(true) && cli.hosts.is_empty() {
        return Err(invalid(
            "inject",
            "needs hosts (the only hosts its proxy lets it reach)".to_string(),
        ));
    }
    if !cli.requests.is_empty() && (cli.hosts.is_empty() || cli.inject == Some(false)) {
        return Err(invalid(
            "requests",
            "applies to injected CLIs: set hosts (and leave inject unset or true)".to_string(),
        ));
    }
    if let Some(host) = cli.hosts.iter().find(|host| split_host(host).is_none()) {
        return Err(invalid(
            "hosts",
            format!("{host:?} is not a host name[:port]"),
        ));
    }
    for (role, rules) in &cli.requests {
        if let Some(path) = rules
            .iter()
            .flat_map(|rule| &rule.paths)
            .find(|path| !path.starts_with('/'))
        {
            return Err(invalid(
                &format!("requests.{role}"),
                format!("path {path:?} must start with /"),
            ));
        }
    }
    Ok(())
}

fn request_rule(spec: &RequestRuleSpec) -> RequestRule {
    RequestRule {
        methods: spec.methods.clone(),
        paths: spec.paths.clone(),
        graphql: spec.graphql.as_ref().map(|graphql| GraphqlRule {
            queries: graphql.queries,
            mutations: graphql.mutations.clone(),
        }),
    }
}

fn arg_policy(spec: &ArgPolicySpec) -> ArgPolicy {
    ArgPolicy {
        allow: spec.allow.clone(),
        deny: spec.deny.clone(),
    }
}

fn is_env_name(name: &str) -> bool {
    let mut characters = name.chars();
    matches!(characters.next(), Some(first) if first.is_ascii_alphabetic() || first == '_')
        && characters.all(|character| character.is_ascii_alphanumeric() || character == '_')
}

/// Validates `bot` against what the cluster holds and decides everything builders need.
pub fn validate(
    bot: &SaintBot,
    dereferenced: &Dereferenced,
    settings: &OperatorSettings,
) -> Result<ValidatedSaintBot, ValidateError> {
    let name = bot
        .metadata
        .name
        .clone()
        .ok_or(ValidateError::MissingMetadata { field: "name" })?;
    let namespace = bot
        .metadata
        .namespace
        .clone()
        .ok_or(ValidateError::MissingMetadata { field: "namespace" })?;
    let owner_reference = bot
        .controller_owner_ref(&())
        .ok_or(ValidateError::MissingMetadata { field: "uid" })?;
    let spec = &bot.spec;

    // Roles: the selected ones, by name.
    let mut roles = BTreeMap::new();
    for role in dereferenced
        .roles
        .iter()
        .filter(|role| bot_uses_role(bot, role))
    {
        roles.insert(role.name_any(), render_role(role)?);
    }
    if !roles.contains_key(&spec.default_role) {
        return Err(ValidateError::DefaultRoleNotFound {
            role: spec.default_role.clone(),
        });
    }
    let role_names: BTreeSet<String> = roles.keys().cloned().collect();

    // Contacts and identity links.
    let contacts: Vec<ContactInput> = dereferenced
        .contacts
        .iter()
        .filter(|contact| bot_uses_contact(bot, contact))
        .map(|contact| ContactInput {
            slug: contact.name_any(),
            display_name: contact.spec.display_name.clone(),
            role: contact.spec.role.clone(),
            identifiers: contact.spec.identifiers.clone(),
        })
        .collect();
    let identity = identity::resolve(&contacts, &role_names);

    // Channels: secret settings become agent env vars.
    let mut channels = Vec::new();
    let mut channel_secrets = Vec::new();
    let mut seen_env = BTreeMap::new();
    for channel in &spec.channels {
        let mut secret_env = BTreeMap::new();
        for (setting, secret) in &channel.secrets {
            if secret.name.is_empty() || secret.key.is_empty() {
                return Err(ValidateError::InvalidChannel {
                    field: format!("spec.channels[{}].secrets.{setting}", channel.name),
                    message: "needs a non-empty Secret name and key".to_string(),
                });
            }
            let env = channel_secret_env(&channel.name, setting);
            if let Some(previous) =
                seen_env.insert(env.clone(), format!("{}.{setting}", channel.name))
            {
                return Err(ValidateError::InvalidChannel {
                    field: format!("spec.channels[{}].secrets.{setting}", channel.name),
                    message: format!("maps to env var {env}, already used by {previous}"),
                });
            }
            secret_env.insert(setting.clone(), env.clone());
            channel_secrets.push((env, secret.clone()));
        }
        channels.push(ChannelConfig {
            name: channel.name.clone(),
            kind: channel_kind(channel.kind),
            settings: channel.settings.clone(),
            secret_env,
        });
    }
    channel_secrets.sort();

    // Porter CLIs: credentials as mounted files or envFrom, never values in the registry.
    let mut registry = Registry {
        version: REGISTRY_VERSION,
        global_rate_limit: spec.porter.global_rate_limit.as_ref().map(rate_limit),
        clis: BTreeMap::new(),
    };
    let mut porter_secret_files = Vec::new();
    let mut porter_env_from_secrets = BTreeSet::new();
    for cli in &spec.porter.clis {
        let plain = !cli.name.is_empty()
            && cli.name != "."
            && cli.name != ".."
            && !cli.name.starts_with('-')
            && !cli.name.contains(['/', '\0']);
        if !plain {
            return Err(ValidateError::InvalidPorterCli {
                field: "spec.porter.clis[].name".to_string(),
                message: format!("{:?} is not a plain command name", cli.name),
            });
        }
        if !cli.bin.starts_with('/') {
            return Err(ValidateError::InvalidPorterCli {
                field: format!("spec.porter.clis[{}].bin", cli.name),
                message: "must be an absolute path".to_string(),
            });
        }
        if registry.clis.contains_key(&cli.name) {
            return Err(ValidateError::InvalidPorterCli {
                field: format!("spec.porter.clis[{}].name", cli.name),
                message: "is listed twice".to_string(),
            });
        }
        let mut env_from_files = BTreeMap::new();
        for secret_env in &cli.secret_env {
            if !is_env_name(&secret_env.name)
                || secret_env.secret_key_ref.name.is_empty()
                || secret_env.secret_key_ref.key.is_empty()
            {
                return Err(ValidateError::InvalidPorterCli {
                    field: format!(
                        "spec.porter.clis[{}].secretEnv[{}]",
                        cli.name, secret_env.name
                    ),
                    message: "needs an env var name and a Secret name and key".to_string(),
                });
            }
            let relative_path = format!("{}/{}", cli.name, secret_env.name);
            env_from_files.insert(
                secret_env.name.clone(),
                format!("{PORTER_SECRETS_DIR}/{relative_path}"),
            );
            porter_secret_files.push(PorterSecretFile {
                cli: cli.name.clone(),
                env_name: secret_env.name.clone(),
                relative_path,
                secret: secret_env.secret_key_ref.clone(),
            });
        }
        check_injection(cli)?;
        porter_env_from_secrets.extend(cli.env_from_secrets.iter().cloned());
        let mut passthrough = cli.passthrough_env.clone();
        passthrough.sort();
        passthrough.dedup();
        registry.clis.insert(
            cli.name.clone(),
            CliEntry {
                bin: cli.bin.clone(),
                env: cli.env.clone(),
                env_from_files,
                env_passthrough: passthrough,
                timeout_seconds: cli.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
                rate_limit: cli.rate_limit.as_ref().map(rate_limit),
                args: arg_policy(&cli.args),
                role_args: cli
                    .role_args
                    .iter()
                    .map(|(role, policy)| (role.clone(), arg_policy(policy)))
                    .collect(),
                // Absent `inject` stays absent: Porter injects whenever hosts are set.
                mode: cli.inject.map(|inject| {
                    if inject {
                        CliMode::Inject
                    } else {
                        CliMode::Env
                    }
                }),
                hosts: cli.hosts.clone(),
                requests: cli
                    .requests
                    .iter()
                    .map(|(role, rules)| (role.clone(), rules.iter().map(request_rule).collect()))
                    .collect(),
                ..CliEntry::default()
            },
        );
    }
    porter_secret_files.sort();

    let (provider, default_base_url) = match spec.model.provider {
        ModelProviderName::Anthropic => (ModelProvider::Anthropic, "https://api.anthropic.com"),
        ModelProviderName::Openai => (ModelProvider::Openai, "https://api.openai.com/v1"),
    };
    let model = ModelConfig {
        provider,
        name: spec.model.name.clone(),
        base_url: spec
            .model
            .base_url
            .clone()
            .unwrap_or_else(|| default_base_url.to_string()),
        api_key_env: spec
            .model
            .api_key_secret_ref
            .as_ref()
            .map(|_| MODEL_API_KEY_ENV.to_string()),
        context_window: spec.model.context_window.unwrap_or(200_000),
        max_output_tokens: spec.model.max_output_tokens.unwrap_or(4_096),
        prices: spec
            .model
            .prices
            .iter()
            .map(|(model, price)| {
                (
                    model.clone(),
                    ModelPrice {
                        input_per_mtok: price.input_per_mtok,
                        output_per_mtok: price.output_per_mtok,
                    },
                )
            })
            .collect(),
    };

    let sandbox_defaults = SandboxConfig {
        backend: SandboxBackend::Kubernetes,
        scope: match spec.sandbox.scope {
            SandboxScopeName::Session => SandboxScope::Session,
            SandboxScopeName::Agent => SandboxScope::Agent,
            SandboxScopeName::Shared => SandboxScope::Shared,
        },
        idle_timeout_seconds: spec.sandbox.idle_timeout_seconds.unwrap_or(1_800),
        exec_timeout_seconds: spec.sandbox.exec_timeout_seconds.unwrap_or(120),
        job_template: None,
    };

    let config = BotConfig {
        schema_version: SCHEMA_VERSION.to_string(),
        bot: BotIdentity {
            name: name.clone(),
            namespace: namespace.clone(),
        },
        model,
        channels,
        default_role: spec.default_role.clone(),
        roles,
        contacts: identity.contacts.clone(),
        identity_links: identity.identity_links.clone(),
        sessions: SessionsConfig::default(),
        file_access: FileAccessConfig::default(),
        web: WebConfig {
            url_blocklist: spec.web.url_blocklist.clone(),
            search: spec
                .web
                .search_api_key_secret_ref
                .as_ref()
                .map(|_| WebSearchConfig {
                    base_url: "https://api.search.brave.com".to_string(),
                    api_key_env: WEB_SEARCH_API_KEY_ENV.to_string(),
                }),
        },
        sandbox: sandbox_defaults,
        porter: PorterConfig {
            clis: registry.clis.keys().cloned().collect(),
            ..PorterConfig::default()
        },
        memory: MemoryConfig::default(),
    };
    // The agent re-checks the same rules; refusing here turns a crash loop into a status.
    // The job template is filled by the config map builder, so check with a stand-in.
    let mut checked = config.clone();
    checked.sandbox.job_template = Some(serde_json::json!({}));
    saint_config::validate(&checked).map_err(ValidateError::RenderedConfig)?;

    let mut persona_files: BTreeMap<String, String> = dereferenced
        .persona_config_map
        .as_ref()
        .and_then(|config_map| config_map.data.clone())
        .unwrap_or_default();
    persona_files.extend(spec.persona.files.clone());

    Ok(ValidatedSaintBot {
        name,
        namespace,
        owner_reference,
        agent_image: spec
            .images
            .agent
            .clone()
            .unwrap_or_else(|| settings.agent_image.clone()),
        porter_image: spec
            .images
            .porter
            .clone()
            .unwrap_or_else(|| settings.porter_image.clone()),
        config,
        registry,
        model_api_key: spec.model.api_key_secret_ref.clone(),
        channel_secrets,
        web_search_api_key: spec.web.search_api_key_secret_ref.clone(),
        porter_secret_files,
        porter_env_from_secrets: porter_env_from_secrets.into_iter().collect(),
        sandbox: ValidatedSandbox {
            image: spec
                .images
                .sandbox
                .clone()
                .unwrap_or_else(|| settings.sandbox_image.clone()),
            resources: spec
                .sandbox
                .resources
                .clone()
                .unwrap_or_else(|| resources("100m", "256Mi", "1", "1Gi")),
            runtime_class_name: spec.sandbox.runtime_class_name.clone(),
            max_lifetime_seconds: spec.sandbox.max_lifetime_seconds.unwrap_or(86_400),
        },
        storage_size: spec
            .storage
            .size
            .clone()
            .unwrap_or_else(|| Quantity("5Gi".to_string())),
        storage_class_name: spec.storage.storage_class_name.clone(),
        persona_files,
        suspend: spec.suspend,
        agent_resources: spec
            .agent_resources
            .clone()
            .unwrap_or_else(|| resources("100m", "256Mi", "2", "1Gi")),
        porter_resources: spec
            .porter_resources
            .clone()
            .unwrap_or_else(|| resources("50m", "64Mi", "1", "256Mi")),
        api_server_cidrs: settings.api_server_cidrs.clone(),
        api_server_port: settings.api_server_port,
        identity,
    })
}
