//! Porter's registry: one entry per CLI of `spec.porter.clis` and one (`mcp-<server>`)
//! per MCP server of `spec.mcp.servers` holding a credential, each credential only as
//! the path of a Secret key mounted into the `porter` container, never as a value. Pure.

use std::collections::BTreeMap;

use porter_protocol::registry::{
    CliEntry, GraphqlRule, InjectAt, OAuth2, REGISTRY_VERSION, Registry, RegistryError,
    RequestRule, SecretSource, split_host,
};
use saint_config::mcp::{placeholder_env_name, porter_entry_name};

use super::{PORTER_SECRETS_DIR, ValidateError};
use crate::crd::{
    SecretKeyReference,
    formats::is_allowed_env_name,
    mcp::{McpServerSpec, McpSpec},
    saintbot::{InjectSpec, PorterCliSpec, PorterSpec, RequestRuleSpec},
};

/// File name, under the entry's directory, of its credential (`secretKeyRef`).
const SECRET_FILE_NAME: &str = "secret";
/// File name, under the CLI's directory, of the OAuth client secret.
const OAUTH2_CLIENT_SECRET_FILE_NAME: &str = "oauth2-client-secret";

/// One Secret key the porter container mounts as a file for a registry entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PorterSecretFile {
    /// The registry entry: a CLI's name, or `mcp-<server>`.
    pub entry: String,
    /// Path relative to [`PORTER_SECRETS_DIR`] (`<entry>/secret`,
    /// `<entry>/oauth2-client-secret`).
    pub relative_path: String,
    /// Where the value comes from.
    pub secret: SecretKeyReference,
}

impl PorterSecretFile {
    fn new(entry: &str, file_name: &str, secret: &SecretKeyReference) -> Self {
        Self {
            entry: entry.to_string(),
            relative_path: format!("{entry}/{file_name}"),
            secret: secret.clone(),
        }
    }

    /// Where Porter reads it: a file only the porter container mounts.
    fn source(&self) -> SecretSource {
        SecretSource::File(format!("{PORTER_SECRETS_DIR}/{}", self.relative_path))
    }
}

/// The registry and the credentials the `porter` container mounts for it.
pub(super) struct RenderedPorter {
    /// The registry, without credential values; Porter accepts it.
    pub registry: Registry,
    /// Credentials mounted as files, sorted.
    pub secret_files: Vec<PorterSecretFile>,
}

/// Whose registry entry: a CLI of `spec.porter.clis` or an MCP server of
/// `spec.mcp.servers`. Refusals name the SaintBot's field through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner<'a> {
    Cli(&'a str),
    Mcp(&'a str),
}

impl Owner<'_> {
    fn field(self, field: &str) -> String {
        match self {
            Owner::Cli(name) => format!("spec.porter.clis[{name}].{field}"),
            Owner::Mcp(name) => format!("spec.mcp.servers[{name}].{field}"),
        }
    }

    fn invalid(self, field: &str, message: String) -> ValidateError {
        let field = self.field(field);
        match self {
            Owner::Cli(_) => ValidateError::InvalidPorterCli { field, message },
            Owner::Mcp(_) => ValidateError::InvalidMcpServer { field, message },
        }
    }
}

impl std::fmt::Display for Owner<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Cli(name) => formatter.write_str(name),
            Owner::Mcp(name) => write!(formatter, "MCP server {name}"),
        }
    }
}

pub(super) fn render_porter(
    spec: &PorterSpec,
    mcp: &McpSpec,
) -> Result<RenderedPorter, ValidateError> {
    let mut registry = Registry {
        version: REGISTRY_VERSION,
        clis: BTreeMap::new(),
    };
    let mut secret_files = Vec::new();
    // Registry entry → whose it is, in spec order (CLIs, then MCP servers).
    let mut owners: Vec<(String, Owner<'_>)> = Vec::new();
    // Placeholder variable → the entry whose placeholder it holds.
    let mut placeholder_owners: BTreeMap<String, Owner<'_>> = BTreeMap::new();
    for cli in &spec.clis {
        check_name(cli)?;
        let owner = Owner::Cli(&cli.name);
        if registry.clis.contains_key(&cli.name) {
            return Err(owner.invalid("name", "is listed twice".to_string()));
        }
        check_required(cli)?;
        claim_placeholders(owner, &cli.placeholder_env, &mut placeholder_owners)?;
        let secret = PorterSecretFile::new(&cli.name, SECRET_FILE_NAME, &cli.secret_key_ref);
        let client_secret = cli
            .oauth2
            .as_ref()
            .and_then(|oauth2| oauth2.client_secret_key_ref.as_ref())
            .map(|reference| {
                PorterSecretFile::new(&cli.name, OAUTH2_CLIENT_SECRET_FILE_NAME, reference)
            });
        registry.clis.insert(
            cli.name.clone(),
            cli_entry(cli, &secret, client_secret.as_ref())?,
        );
        owners.push((cli.name.clone(), owner));
        secret_files.push(secret);
        secret_files.extend(client_secret);
    }
    // An MCP server with a credential is one more entry; one without has none (a stdio
    // server that reaches no host).
    for server in &mcp.servers {
        let Some(reference) = &server.secret_key_ref else {
            continue;
        };
        let owner = Owner::Mcp(&server.name);
        let name = porter_entry_name(&server.name);
        if registry.clis.contains_key(&name) {
            return Err(Owner::Cli(&name).invalid(
                "name",
                format!(
                    "{name} is the Porter entry of spec.mcp.servers[{}]: give the CLI another name",
                    server.name
                ),
            ));
        }
        let placeholder_env = mcp_placeholder_env(server);
        claim_placeholders(owner, &placeholder_env, &mut placeholder_owners)?;
        let secret = PorterSecretFile::new(&name, SECRET_FILE_NAME, reference);
        registry.clis.insert(
            name.clone(),
            mcp_entry(owner, server, placeholder_env, &secret)?,
        );
        owners.push((name, owner));
        secret_files.push(secret);
    }
    check_hosts(&registry, &owners)?;
    // Porter's own load: what it would refuse (a host in two entries, an oauth2 token
    // URL outside the hosts, a reserved header) is refused here, naming the field.
    let registry = Registry::from_json(&registry.to_json())
        .map_err(|error| registry_refusal(error, &owners))?;
    secret_files.sort();
    Ok(RenderedPorter {
        registry,
        secret_files,
    })
}

/// The variables holding an MCP server's placeholder: `SAINT_MCP_<NAME>_TOKEN` (which
/// the bot config names) and the spec's own.
fn mcp_placeholder_env(server: &McpServerSpec) -> Vec<String> {
    let own = placeholder_env_name(&server.name);
    let extra = server
        .placeholder_env
        .iter()
        .filter(|name| **name != own)
        .cloned();
    std::iter::once(own.clone()).chain(extra).collect()
}

/// Every sandbox command gets every placeholder variable: one name, one entry, and none
/// that loads code or picks a program.
fn claim_placeholders<'a>(
    owner: Owner<'a>,
    names: &[String],
    owners: &mut BTreeMap<String, Owner<'a>>,
) -> Result<(), ValidateError> {
    for name in names {
        if !is_allowed_env_name(name) {
            return Err(owner.invalid(
                "placeholderEnv",
                format!("{name:?} is not an environment variable name a placeholder may take"),
            ));
        }
        if let Some(previous) = owners.insert(name.clone(), owner) {
            return Err(owner.invalid(
                "placeholderEnv",
                format!("{name} already holds the placeholder of {previous}"),
            ));
        }
    }
    Ok(())
}

/// A host carries one credential: each host (name and port) belongs to one entry,
/// whether a CLI's or an MCP server's. Porter refuses the registry otherwise; here the
/// refusal names both SaintBot fields, the later one first.
fn check_hosts(registry: &Registry, owners: &[(String, Owner<'_>)]) -> Result<(), ValidateError> {
    let mut claimed: BTreeMap<(String, u16), Owner<'_>> = BTreeMap::new();
    for (name, owner) in owners {
        let Some(entry) = registry.clis.get(name) else {
            continue;
        };
        for host in entry.hosts.iter().filter_map(|host| split_host(host)) {
            match claimed.get(&host) {
                Some(previous) if previous != owner => {
                    return Err(owner.invalid(
                        "hosts",
                        format!(
                            "{}:{} is already a host of {previous}: a host carries one credential, \
                             so it belongs to one entry of porter.clis and mcp.servers only",
                            host.0, host.1
                        ),
                    ));
                }
                _ => {
                    claimed.insert(host, *owner);
                }
            }
        }
    }
    Ok(())
}

fn invalid(cli: &PorterCliSpec, field: &str, message: String) -> ValidateError {
    Owner::Cli(&cli.name).invalid(field, message)
}

/// The name is what the audit log and the agent show, and a directory of mounted
/// secrets: a plain file name.
fn check_name(cli: &PorterCliSpec) -> Result<(), ValidateError> {
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
    Ok(())
}

/// `hosts` and `secretKeyRef` are required by the CRD, but a bot stored in the shape
/// where Porter ran the CLI reaches here without them (the API server pruned `bin`,
/// `secretEnv`, …): say what the entry needs now.
fn check_required(cli: &PorterCliSpec) -> Result<(), ValidateError> {
    const NEW_SHAPE: &str = "Porter no longer runs CLIs (bin, env, secretEnv, envFromSecrets, \
                             passthroughEnv, args, roleArgs and profile are gone): name the \
                             hosts the credential may reach and the Secret key holding it";
    if cli.hosts.is_empty() {
        return Err(invalid(
            cli,
            "hosts",
            format!("an entry needs hosts; {NEW_SHAPE}"),
        ));
    }
    if cli.secret_key_ref.name.is_empty() || cli.secret_key_ref.key.is_empty() {
        return Err(invalid(
            cli,
            "secretKeyRef",
            format!("an entry needs a Secret name and key; {NEW_SHAPE}"),
        ));
    }
    Ok(())
}

fn inject_at(owner: Owner<'_>, place: &InjectSpec) -> Result<InjectAt, ValidateError> {
    match place {
        InjectSpec {
            authorization: Some(true),
            header: None,
            query: None,
        } => Ok(InjectAt::Authorization),
        InjectSpec {
            authorization: None,
            header: Some(name),
            query: None,
        } => Ok(InjectAt::Header(name.clone())),
        InjectSpec {
            authorization: None,
            header: None,
            query: Some(name),
        } => Ok(InjectAt::Query(name.clone())),
        _ => Err(owner.invalid(
            "inject",
            "each entry is exactly one of {authorization: true}, {header: NAME} or {query: NAME}"
                .to_string(),
        )),
    }
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

/// The registry entry: credentials only as file paths, never values.
fn cli_entry(
    cli: &PorterCliSpec,
    secret: &PorterSecretFile,
    client_secret: Option<&PorterSecretFile>,
) -> Result<CliEntry, ValidateError> {
    Ok(CliEntry {
        hosts: cli.hosts.clone(),
        secret: secret.source(),
        inject: cli
            .inject
            .iter()
            .map(|place| inject_at(Owner::Cli(&cli.name), place))
            .collect::<Result<_, _>>()?,
        oauth2: cli.oauth2.as_ref().map(|oauth2| OAuth2 {
            token_url: oauth2.token_url.clone(),
            client_id: oauth2.client_id.clone(),
            client_secret: client_secret.map(PorterSecretFile::source),
            placeholder_ttl_seconds: oauth2.placeholder_ttl_seconds,
        }),
        placeholder_env: cli.placeholder_env.clone(),
        git: cli.git,
        requests: requests(&cli.requests),
        mode: None,
    })
}

fn requests(spec: &BTreeMap<String, Vec<RequestRuleSpec>>) -> BTreeMap<String, Vec<RequestRule>> {
    spec.iter()
        .map(|(role, rules)| (role.clone(), rules.iter().map(request_rule).collect()))
        .collect()
}

/// An MCP server's entry: its hosts, the credential as a file path, where it goes on
/// the wire, the variables holding its placeholder and each role's requests.
fn mcp_entry(
    owner: Owner<'_>,
    server: &McpServerSpec,
    placeholder_env: Vec<String>,
    secret: &PorterSecretFile,
) -> Result<CliEntry, ValidateError> {
    Ok(CliEntry {
        hosts: server.hosts.clone(),
        secret: secret.source(),
        inject: server
            .inject
            .iter()
            .map(|place| inject_at(owner, place))
            .collect::<Result<_, _>>()?,
        oauth2: None,
        placeholder_env,
        git: false,
        requests: requests(&server.requests),
        mode: None,
    })
}

/// Porter's refusal of the rendered registry, with its field in the SaintBot's terms.
fn registry_refusal(error: RegistryError, owners: &[(String, Owner<'_>)]) -> ValidateError {
    match error {
        RegistryError::Entry {
            name,
            field,
            message,
        } => {
            // The registry's `secret` is the SaintBot's `secretKeyRef`.
            let field = match field {
                "secret" | "secret.file" => "secretKeyRef",
                field => field,
            };
            owners
                .iter()
                .find(|(entry, _)| *entry == name)
                .map_or(Owner::Cli(&name), |(_, owner)| *owner)
                .invalid(field, message)
        }
        other => ValidateError::InvalidPorterCli {
            field: "spec.porter.clis".to_string(),
            message: saint_config::ErrorChain(&other).to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn render_porter_clis(spec: &PorterSpec) -> Result<RenderedPorter, ValidateError> {
        render_porter(spec, &McpSpec::default())
    }

    fn porter(clis: serde_json::Value) -> PorterSpec {
        serde_json::from_value(json!({"clis": clis})).expect("porter parses")
    }

    /// A `gh` entry with `extra` fields added or replaced.
    fn gh(extra: serde_json::Value) -> serde_json::Value {
        let mut entry = json!({
            "name": "gh",
            "hosts": ["api.github.com", "github.com"],
            "secretKeyRef": {"name": "acme-github", "key": "token"},
        });
        entry
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        entry
    }

    fn refusal(clis: serde_json::Value) -> String {
        match render_porter_clis(&porter(clis)) {
            Ok(_) => "accepted".to_string(),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn placeholder_names_the_crd_refuses_are_refused_here_naming_the_field() {
        assert!(
            render_porter_clis(&porter(json!([gh(
                json!({"placeholderEnv": ["GH_TOKEN"]})
            )])))
            .is_ok()
        );
        for name in ["LD_PRELOAD", "PATH", "BAD KEY=1", "NODE_OPTIONS"] {
            let message = refusal(json!([gh(json!({"placeholderEnv": [name]}))]));
            assert!(
                message.contains("spec.porter.clis[gh].placeholderEnv"),
                "{name}: {message}"
            );
        }
        let shared = refusal(json!([
            gh(json!({"placeholderEnv": ["TOKEN"]})),
            {"name": "maps", "hosts": ["maps.example"], "secretKeyRef": {"name": "m", "key": "k"},
             "placeholderEnv": ["TOKEN"]},
        ]));
        assert!(
            shared.contains(
                "spec.porter.clis[maps].placeholderEnv: TOKEN already holds the placeholder of gh"
            ),
            "{shared}"
        );
    }

    #[test]
    fn an_entry_stored_in_the_old_shape_is_refused_with_what_it_needs_now() {
        // What the API server leaves of `{name: gh, bin: /usr/bin/gh, secretEnv: […]}`.
        let message = refusal(json!([{"name": "gh"}]));
        assert!(
            message.contains("spec.porter.clis[gh].hosts: an entry needs hosts")
                && message.contains("Porter no longer runs CLIs"),
            "{message}"
        );
        let message = refusal(json!([{"name": "gh", "hosts": ["api.github.com"]}]));
        assert!(
            message.contains("spec.porter.clis[gh].secretKeyRef"),
            "{message}"
        );
    }

    #[test]
    fn what_porter_refuses_is_refused_naming_the_saintbot_field() {
        for (clis, expected) in [
            (
                json!([gh(json!({})), {"name": "hub", "hosts": ["GitHub.com:443"],
                    "secretKeyRef": {"name": "h", "key": "k"}}]),
                "spec.porter.clis[hub].hosts: github.com:443 is already a host of gh",
            ),
            (
                json!([gh(json!({"inject": [{"header": "Cookie"}]}))]),
                "spec.porter.clis[gh].inject",
            ),
            (
                json!([gh(
                    json!({"inject": [{"query": "access_token"}], "git": true})
                )]),
                "spec.porter.clis[gh].git",
            ),
            (
                json!([gh(
                    json!({"inject": [{"authorization": true, "header": "X-Api-Key"}]})
                )]),
                "spec.porter.clis[gh].inject: each entry is exactly one of",
            ),
            (
                json!([gh(
                    json!({"requests": {"employee": [{"methods": ["GET"], "paths": ["pulls"]}]}})
                )]),
                "spec.porter.clis[gh].requests: employee: path \"pulls\" must start with /",
            ),
        ] {
            let message = refusal(clis.clone());
            assert!(message.contains(expected), "{clis}: {message}");
        }
    }

    #[test]
    fn credentials_become_files_under_the_porter_secrets_directory() {
        let rendered = render_porter_clis(&porter(json!([{
            "name": "gog",
            "hosts": ["oauth2.googleapis.com", "www.googleapis.com"],
            "secretKeyRef": {"name": "google", "key": "refresh-token"},
            "oauth2": {
                "tokenUrl": "https://oauth2.googleapis.com/token",
                "clientId": "1234.apps.googleusercontent.com",
                "clientSecretKeyRef": {"name": "google", "key": "client-secret"},
            },
        }])))
        .expect("gog renders");
        let gog = &rendered.registry.clis["gog"];
        assert_eq!(
            gog.secret,
            SecretSource::File("/etc/porter-secrets/gog/secret".into())
        );
        assert_eq!(
            gog.oauth2.as_ref().unwrap().client_secret,
            Some(SecretSource::File(
                "/etc/porter-secrets/gog/oauth2-client-secret".into()
            ))
        );
        let files: Vec<(&str, &str, &str)> = rendered
            .secret_files
            .iter()
            .map(|file| {
                (
                    file.relative_path.as_str(),
                    file.secret.name.as_str(),
                    file.secret.key.as_str(),
                )
            })
            .collect();
        assert_eq!(
            files,
            [
                ("gog/oauth2-client-secret", "google", "client-secret"),
                ("gog/secret", "google", "refresh-token"),
            ]
        );
    }
}
