//! Injection on the wire: a sandbox command holds placeholders, never a secret. Porter's
//! HTTPS proxy (a unix socket on the shared volume, reached through the sandbox
//! runner's loopback relay and the command's `HTTPS_PROXY`) terminates TLS with a CA
//! made at start-up for the hosts a credential may reach, refuses every other host,
//! checks each request against the caller's role, swaps the placeholder for the secret
//! in the one place the credential declares and forwards over verified TLS.
//!
//! This module holds the proxy's fixed parts (CA, upstream trust) and builds a
//! command's environment; `proxy` serves the wire.

pub mod ca;
pub mod command_env;
pub mod graphql;
pub mod holds;
pub mod oauth;
pub mod placeholder;
pub mod proxy;
pub mod request_policy;
pub mod scrub;
pub mod upstream;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::Serialize;

use self::ca::CertificateAuthority;

/// Why injection could not start.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error(transparent)]
    Ca(#[from] ca::CaError),
    #[error("failed to write the proxy CA certificate to {path}")]
    WriteCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read the extra upstream CA file {path}")]
    ReadUpstreamCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How the proxy starts.
#[derive(Clone, Debug, Default)]
pub struct InjectConfig {
    /// Where the CA certificate is written for sandboxes to trust.
    pub ca_certificate: PathBuf,
    /// For tests and air-gapped mirrors only: connect to this address instead of
    /// resolving the host name (TLS is still verified against the host name).
    pub upstream_overrides: BTreeMap<String, SocketAddr>,
    /// For tests and air-gapped mirrors only: PEM file of extra CAs trusted upstream.
    pub upstream_ca_file: Option<PathBuf>,
}

/// The proxy's fixed parts; one per daemon.
pub struct Injector {
    pub ca: CertificateAuthority,
    pub upstream_tls: Arc<rustls::ClientConfig>,
    pub upstream_overrides: BTreeMap<String, SocketAddr>,
    ca_file: PathBuf,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Injector")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl Injector {
    /// Makes the CA and writes its certificate (never its key) where sandboxes read it.
    pub fn new(config: &InjectConfig) -> Result<Self, InjectError> {
        let ca = CertificateAuthority::generate()?;
        write_certificate(&config.ca_certificate, ca.certificate_pem()).map_err(|source| {
            InjectError::WriteCa {
                path: config.ca_certificate.clone(),
                source,
            }
        })?;
        let extra_roots = match &config.upstream_ca_file {
            Some(path) => std::fs::read(path).map_err(|source| InjectError::ReadUpstreamCa {
                path: path.clone(),
                source,
            })?,
            None => Vec::new(),
        };
        Ok(Self {
            ca,
            upstream_tls: ca::upstream_config(&extra_roots)?,
            upstream_overrides: config.upstream_overrides.clone(),
            ca_file: config.ca_certificate.clone(),
        })
    }

    /// The CA certificate file sandboxes trust.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }
}

/// Writes the certificate under a temporary name and renames it into place, so a
/// sandbox never reads half a file, and a file left by an earlier Porter is replaced.
fn write_certificate(path: &Path, pem: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let temporary = path.with_extension("pem.tmp");
    std::fs::write(&temporary, pem)?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o444))?;
    std::fs::rename(&temporary, path)
}

/// One proxy decision in the audit log: who, where, what — never a header value or a
/// query string.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestAudit {
    pub ts: String,
    /// Always `request`.
    pub kind: &'static str,
    pub session: String,
    pub contact: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The credential (registry entry) the host belongs to, if any.
    pub cli: String,
    pub host: String,
    pub method: String,
    /// Without the query string (which may carry values).
    pub path: String,
    /// `allowed`, `refused`, `held` (admitted by the role, but waiting for an
    /// approval: refused and reported to the agent), `answered` (Porter answered
    /// itself: OAuth 2.0 token endpoint) or `upstream_error` (admitted, but the upstream
    /// could not be reached or verified).
    pub decision: &'static str,
    /// The approval whose one-time grant let this held request through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The upstream's status, when forwarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The connecting process's uid (`SO_PEERCRED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_certificate_is_written_without_its_key_and_replaced_on_restart() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("porter/ca.pem");
        let config = InjectConfig {
            ca_certificate: path.clone(),
            ..InjectConfig::default()
        };
        let first = Injector::new(&config).unwrap();
        let pem = std::fs::read_to_string(first.ca_file()).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----") && !pem.contains("PRIVATE"));
        let second = Injector::new(&config).unwrap();
        assert_ne!(std::fs::read_to_string(second.ca_file()).unwrap(), pem);
    }
}
