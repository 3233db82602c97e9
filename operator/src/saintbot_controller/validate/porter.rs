//! Porter CLIs: the registry Porter loads, with each credential only as the path of a
//! Secret key mounted into the `porter` container, never as a value. Pure.

use std::collections::BTreeMap;

use porter_protocol::registry::{
    CliEntry, GraphqlRule, InjectAt, OAuth2, REGISTRY_VERSION, Registry, RegistryError,
    RequestRule, SecretSource,
};

use super::{PORTER_SECRETS_DIR, ValidateError};
use crate::crd::{
    SecretKeyReference,
    formats::is_allowed_env_name,
    saintbot::{InjectSpec, PorterCliSpec, PorterSpec, RequestRuleSpec},
};

/// File name, under the CLI's directory, of the entry's credential (`secretKeyRef`).
const SECRET_FILE_NAME: &str = "secret";
/// File name, under the CLI's directory, of the OAuth client secret.
const OAUTH2_CLIENT_SECRET_FILE_NAME: &str = "oauth2-client-secret";

/// One Secret key the porter container mounts as a file for a CLI.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PorterSecretFile {
    /// CLI name.
    pub cli: String,
    /// Path relative to [`PORTER_SECRETS_DIR`] (`<cli>/secret`,
    /// `<cli>/oauth2-client-secret`).
    pub relative_path: String,
    /// Where the value comes from.
    pub secret: SecretKeyReference,
}

impl PorterSecretFile {
    fn new(cli: &str, file_name: &str, secret: &SecretKeyReference) -> Self {
        Self {
            cli: cli.to_string(),
            relative_path: format!("{cli}/{file_name}"),
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
    /// CLI credentials mounted as files, sorted.
    pub secret_files: Vec<PorterSecretFile>,
}

pub(super) fn render_porter(spec: &PorterSpec) -> Result<RenderedPorter, ValidateError> {
    let mut registry = Registry {
        version: REGISTRY_VERSION,
        clis: BTreeMap::new(),
    };
    let mut secret_files = Vec::new();
    // Placeholder variable → the CLI whose placeholder it holds.
    let mut placeholder_owners: BTreeMap<&str, &str> = BTreeMap::new();
    for cli in &spec.clis {
        check_name(cli)?;
        if registry.clis.contains_key(&cli.name) {
            return Err(invalid(cli, "name", "is listed twice".to_string()));
        }
        check_required(cli)?;
        for name in &cli.placeholder_env {
            if !is_allowed_env_name(name) {
                return Err(invalid(
                    cli,
                    "placeholderEnv",
                    format!("{name:?} is not an environment variable name a placeholder may take"),
                ));
            }
            // Every sandbox command gets every placeholder variable: one name, one entry.
            if let Some(owner) = placeholder_owners.insert(name, &cli.name) {
                return Err(invalid(
                    cli,
                    "placeholderEnv",
                    format!("{name} already holds the placeholder of {owner}"),
                ));
            }
        }
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
        secret_files.push(secret);
        secret_files.extend(client_secret);
    }
    // Porter's own load: what it would refuse (a host in two entries, an oauth2 token
    // URL outside the hosts, a reserved header) is refused here, naming the field.
    let registry = Registry::from_json(&registry.to_json()).map_err(registry_refusal)?;
    secret_files.sort();
    Ok(RenderedPorter {
        registry,
        secret_files,
    })
}

fn invalid(cli: &PorterCliSpec, field: &str, message: String) -> ValidateError {
    ValidateError::InvalidPorterCli {
        field: format!("spec.porter.clis[{}].{field}", cli.name),
        message,
    }
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

fn inject_at(cli: &PorterCliSpec, place: &InjectSpec) -> Result<InjectAt, ValidateError> {
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
        _ => Err(invalid(
            cli,
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
            .map(|place| inject_at(cli, place))
            .collect::<Result<_, _>>()?,
        oauth2: cli.oauth2.as_ref().map(|oauth2| OAuth2 {
            token_url: oauth2.token_url.clone(),
            client_id: oauth2.client_id.clone(),
            client_secret: client_secret.map(PorterSecretFile::source),
            placeholder_ttl_seconds: oauth2.placeholder_ttl_seconds,
        }),
        placeholder_env: cli.placeholder_env.clone(),
        git: cli.git,
        requests: cli
            .requests
            .iter()
            .map(|(role, rules)| (role.clone(), rules.iter().map(request_rule).collect()))
            .collect(),
        mode: None,
    })
}

/// Porter's refusal of the rendered registry, with its field in the SaintBot's terms.
fn registry_refusal(error: RegistryError) -> ValidateError {
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
            ValidateError::InvalidPorterCli {
                field: format!("spec.porter.clis[{name}].{field}"),
                message,
            }
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
        match render_porter(&porter(clis)) {
            Ok(_) => "accepted".to_string(),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn placeholder_names_the_crd_refuses_are_refused_here_naming_the_field() {
        assert!(
            render_porter(&porter(json!([gh(
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
        let rendered = render_porter(&porter(json!([{
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
