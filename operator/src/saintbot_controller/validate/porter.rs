//! Porter CLIs: the registry Porter loads, with credentials only as files mounted into
//! the `porter` container or `envFrom` Secrets, never as values. Pure.

use std::collections::{BTreeMap, BTreeSet};

use porter_protocol::registry::{
    ArgPolicy, CliEntry, CliMode, DEFAULT_TIMEOUT_SECONDS, GraphqlRule, REGISTRY_VERSION,
    RateLimit, Registry, RequestRule, split_host,
};

use super::{PORTER_SECRETS_DIR, ValidateError, defaults::DEFAULT_RATE_LIMIT_BURST};
use crate::crd::{
    SecretKeyReference,
    formats::is_allowed_env_name,
    saintbot::{ArgPolicySpec, PorterCliSpec, PorterSpec, RateLimitSpec, RequestRuleSpec},
};

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

/// The registry and the credentials the `porter` container mounts for it.
pub(super) struct RenderedPorter {
    /// The registry, without credential values.
    pub registry: Registry,
    /// CLI credentials mounted as files, sorted.
    pub secret_files: Vec<PorterSecretFile>,
    /// Secrets loaded with `envFrom`, sorted.
    pub env_from_secrets: Vec<String>,
}

fn rate_limit(spec: &RateLimitSpec) -> RateLimit {
    RateLimit {
        per_minute: spec.per_minute,
        burst: spec.burst.unwrap_or(DEFAULT_RATE_LIMIT_BURST),
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

pub(super) fn render_porter(spec: &PorterSpec) -> Result<RenderedPorter, ValidateError> {
    let mut registry = Registry {
        version: REGISTRY_VERSION,
        global_rate_limit: spec.global_rate_limit.as_ref().map(rate_limit),
        clis: BTreeMap::new(),
    };
    let mut secret_files = Vec::new();
    let mut env_from_secrets = BTreeSet::new();
    for cli in &spec.clis {
        check_name_and_bin(cli)?;
        if registry.clis.contains_key(&cli.name) {
            return Err(ValidateError::InvalidPorterCli {
                field: format!("spec.porter.clis[{}].name", cli.name),
                message: "is listed twice".to_string(),
            });
        }
        let files = credential_files(cli)?;
        check_injection(cli)?;
        env_from_secrets.extend(cli.env_from_secrets.iter().cloned());
        let env_from_files = files
            .iter()
            .map(|file| {
                let path = format!("{PORTER_SECRETS_DIR}/{}", file.relative_path);
                (file.env_name.clone(), path)
            })
            .collect();
        registry
            .clis
            .insert(cli.name.clone(), cli_entry(cli, env_from_files));
        secret_files.extend(files);
    }
    secret_files.sort();
    Ok(RenderedPorter {
        registry,
        secret_files,
        env_from_secrets: env_from_secrets.into_iter().collect(),
    })
}

/// The name is what Porter matches exactly and the sandbox links to: a plain file name.
fn check_name_and_bin(cli: &PorterCliSpec) -> Result<(), ValidateError> {
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
    Ok(())
}

/// The CRD's environment variable rules again (the same lists, [`is_allowed_env_name`]):
/// every name a CLI gets is a name and none that loads code, and a `secretEnv` name is
/// neither repeated nor also a literal `env` key.
fn check_env_names(cli: &PorterCliSpec) -> Result<(), ValidateError> {
    let invalid = |field: &str, message: String| ValidateError::InvalidPorterCli {
        field: format!("spec.porter.clis[{}].{field}", cli.name),
        message,
    };
    let names = cli
        .env
        .keys()
        .map(|name| ("env", name))
        .chain(
            cli.secret_env
                .iter()
                .map(|entry| ("secretEnv", &entry.name)),
        )
        .chain(
            cli.passthrough_env
                .iter()
                .map(|name| ("passthroughEnv", name)),
        );
    for (field, name) in names {
        if !is_allowed_env_name(name) {
            return Err(invalid(
                field,
                format!("{name:?} is not an environment variable name a CLI may be given"),
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for entry in &cli.secret_env {
        if !seen.insert(&entry.name) || cli.env.contains_key(&entry.name) {
            return Err(invalid(
                "secretEnv",
                format!(
                    "{:?} is set twice (secretEnv names are unique and not also env keys)",
                    entry.name
                ),
            ));
        }
    }
    Ok(())
}

/// One mounted file per `secretEnv` entry, at `<cli>/<ENV>` under [`PORTER_SECRETS_DIR`].
fn credential_files(cli: &PorterCliSpec) -> Result<Vec<PorterSecretFile>, ValidateError> {
    check_env_names(cli)?;
    cli.secret_env
        .iter()
        .map(|secret_env| {
            if !is_allowed_env_name(&secret_env.name)
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
            Ok(PorterSecretFile {
                cli: cli.name.clone(),
                env_name: secret_env.name.clone(),
                relative_path: format!("{}/{}", cli.name, secret_env.name),
                secret: secret_env.secret_key_ref.clone(),
            })
        })
        .collect()
}

/// The registry entry: credentials only as file paths, never values.
fn cli_entry(cli: &PorterCliSpec, env_from_files: BTreeMap<String, String>) -> CliEntry {
    let mut passthrough = cli.passthrough_env.clone();
    passthrough.sort();
    passthrough.dedup();
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
        profile: cli.profile,
        requests: cli
            .requests
            .iter()
            .map(|(role, rules)| (role.clone(), rules.iter().map(request_rule).collect()))
            .collect(),
        ..CliEntry::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn porter(cli: serde_json::Value) -> PorterSpec {
        let mut entry = serde_json::json!({"name": "gh", "bin": "/usr/bin/gh"});
        entry
            .as_object_mut()
            .unwrap()
            .extend(cli.as_object().unwrap().clone());
        serde_json::from_value(serde_json::json!({"clis": [entry]})).expect("porter parses")
    }

    fn refusal(cli: serde_json::Value) -> String {
        match render_porter(&porter(cli)) {
            Ok(_) => "accepted".to_string(),
            Err(error) => error.to_string(),
        }
    }

    fn secret_env(name: &str) -> serde_json::Value {
        serde_json::json!({"name": name, "secretKeyRef": {"name": "acme-porter", "key": "token"}})
    }

    #[test]
    fn env_names_the_crd_refuses_are_refused_here_naming_the_field() {
        assert!(
            render_porter(&porter(serde_json::json!({
                "env": {"GH_HOST": "github.com"},
                "secretEnv": [secret_env("GH_TOKEN")],
                "passthroughEnv": ["HTTPS_PROXY"],
            })))
            .is_ok()
        );
        for (cli, field) in [
            (
                serde_json::json!({"env": {"LD_PRELOAD": "/tmp/x.so"}}),
                "clis[gh].env",
            ),
            (
                serde_json::json!({"env": {"BAD KEY=1": "x"}}),
                "clis[gh].env",
            ),
            (
                serde_json::json!({"secretEnv": [secret_env("PATH")]}),
                "clis[gh].secretEnv",
            ),
            (
                serde_json::json!({"passthroughEnv": ["NODE_OPTIONS"]}),
                "clis[gh].passthroughEnv",
            ),
            (
                serde_json::json!({"secretEnv": [secret_env("GH_TOKEN"), secret_env("GH_TOKEN")]}),
                "clis[gh].secretEnv: \"GH_TOKEN\" is set twice",
            ),
            (
                serde_json::json!({"env": {"GH_TOKEN": "x"}, "secretEnv": [secret_env("GH_TOKEN")]}),
                "clis[gh].secretEnv: \"GH_TOKEN\" is set twice",
            ),
        ] {
            let message = refusal(cli.clone());
            assert!(message.contains(field), "{cli}: {message}");
        }
    }
}
