//! The environment one sandbox command gets: its proxy URL (the key as the password,
//! the runner's loopback relay as the address), the CA to trust, each credential's
//! placeholder in the variables the registry names, and git settings that make git
//! answer the placeholder for the credential's hosts. Nothing here is a secret: a
//! placeholder and a key are worthless outside the command's own lifetime.
//!
//! Pure.

use std::collections::BTreeMap;

use saint_config::sandbox_contract::{PORTER_CA_PATH, PORTER_RELAY_ADDRESS};

use crate::{keys::Key, registry_store::LoadedRegistry};

/// The user name git's credential helper answers (GitHub and GitLab accept any).
pub const GIT_USERNAME: &str = "x-access-token";

/// Variables that point a command's TLS stack at Porter's CA: OpenSSL and Go
/// (`SSL_CERT_FILE`), git/curl, Node and Python requests.
pub const CA_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "GIT_SSL_CAINFO",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
];

/// Proxy variables (both spellings: curl reads lower case, Go both).
pub const PROXY_VARIABLES: &[&str] = &["HTTPS_PROXY", "https_proxy"];

/// The environment for the command holding `token`.
pub fn build(token: &str, key: &Key, registry: &LoadedRegistry) -> BTreeMap<String, String> {
    let mut environment = BTreeMap::new();
    let proxy_url = format!("http://porter:{token}@{PORTER_RELAY_ADDRESS}");
    for variable in PROXY_VARIABLES {
        environment.insert((*variable).to_owned(), proxy_url.clone());
    }
    for variable in CA_VARIABLES {
        environment.insert((*variable).to_owned(), PORTER_CA_PATH.to_owned());
    }
    environment.insert("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned());
    let mut git_config = vec![
        // curl sends the proxy credential at once instead of waiting for a 407.
        ("http.proxyAuthMethod".to_owned(), "basic".to_owned()),
    ];
    let mut names: Vec<&String> = key.placeholders.keys().collect();
    names.sort();
    for name in names {
        let (Some(entry), Some(placeholders)) =
            (registry.entries.get(name), key.placeholders.get(name))
        else {
            continue;
        };
        for variable in &entry.placeholder_env {
            environment.insert(variable.clone(), placeholders.secret.clone());
        }
        if entry.git {
            for (host, port) in &entry.hosts {
                let url = if *port == 443 {
                    format!("https://{host}")
                } else {
                    format!("https://{host}:{port}")
                };
                // An empty helper first clears any the repository configured.
                git_config.push((format!("credential.{url}.helper"), String::new()));
                git_config.push((
                    format!("credential.{url}.helper"),
                    git_credential_helper(&placeholders.secret),
                ));
            }
        }
    }
    for (index, (name, value)) in git_config.iter().enumerate() {
        environment.insert(format!("GIT_CONFIG_KEY_{index}"), name.clone());
        environment.insert(format!("GIT_CONFIG_VALUE_{index}"), value.clone());
    }
    environment.insert("GIT_CONFIG_COUNT".to_owned(), git_config.len().to_string());
    environment
}

/// A credential helper that answers `get` with the placeholder (git runs `!` helpers
/// through the shell with the action as argument).
fn git_credential_helper(placeholder: &str) -> String {
    format!(
        "!f() {{ test \"$1\" = get && printf 'username={GIT_USERNAME}\\npassword={placeholder}\\n'; }}; f"
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use porter_protocol::registry::Registry;

    use super::*;
    use crate::keys::{Grant, KeyStore};

    #[test]
    fn a_command_gets_placeholders_proxy_and_git_settings_but_no_secret() {
        let registry = LoadedRegistry::resolve(
            Registry::from_json(
                r#"{"clis":{"gh":{"hosts":["api.github.com","github.com"],"secret":{"value":"ghp_real_secret"},
                    "placeholderEnv":["GH_TOKEN","GITHUB_TOKEN"],"git":true},
                    "maps":{"hosts":["maps.example:8443"],"secret":{"value":"maps_real_key"},"inject":[{"query":"key"}],"placeholderEnv":["MAPS_KEY"]}}}"#,
            )
            .unwrap(),
            &|_| None,
        )
        .unwrap();
        let store = KeyStore::default();
        let (token, key) = store.register(
            Grant::default(),
            registry.credentials(),
            crate::inject::holds::KeyApprovals::default(),
            Duration::from_secs(60),
            Instant::now(),
        );
        let environment = build(&token, &key, &registry);
        assert!(
            !environment
                .values()
                .any(|value| value.contains("real_secret") || value.contains("real_key"))
        );
        assert_eq!(environment["GH_TOKEN"], key.placeholders["gh"].secret);
        assert_eq!(environment["GITHUB_TOKEN"], key.placeholders["gh"].secret);
        assert_eq!(environment["MAPS_KEY"], key.placeholders["maps"].secret);
        assert_eq!(
            environment["HTTPS_PROXY"],
            format!("http://porter:{token}@{PORTER_RELAY_ADDRESS}")
        );
        assert_eq!(environment["SSL_CERT_FILE"], PORTER_CA_PATH);
        let git: Vec<(&str, &str)> = (0..environment["GIT_CONFIG_COUNT"].parse().unwrap())
            .map(|index: usize| {
                (
                    environment[&format!("GIT_CONFIG_KEY_{index}")].as_str(),
                    environment[&format!("GIT_CONFIG_VALUE_{index}")].as_str(),
                )
            })
            .collect();
        assert_eq!(git[0], ("http.proxyAuthMethod", "basic"));
        assert!(git.contains(&("credential.https://github.com.helper", "")));
        assert!(git.iter().any(|(name, value)| *name
            == "credential.https://api.github.com.helper"
            && value.contains(&key.placeholders["gh"].secret)));
        assert!(
            !git.iter().any(|(name, _)| name.contains("maps")),
            "only git credentials get a helper"
        );
    }
}
