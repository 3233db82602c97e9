//! The proxy's certificate authority: made at start-up, its key kept only in this
//! process's memory, issuing one leaf certificate per allowed host on first use. Only
//! the CA certificate (public) is written out, for the children's trust variables.

use std::{collections::HashMap, sync::Arc};

use parking_lot::Mutex;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, date_time_ymd,
};
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
};

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("failed to make a certificate")]
    Certificate(#[from] rcgen::Error),
    #[error("failed to build the TLS configuration")]
    Tls(#[from] rustls::Error),
}

/// The in-memory CA.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    certificate: CertificateDer<'static>,
    pem: String,
    /// Server configurations by host name, each with its leaf and the CA.
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        formatter
            .debug_struct("CertificateAuthority")
            .finish_non_exhaustive()
    }
}

/// A validity window around today (leaf and CA alike): clocks in containers drift, and
/// the CA dies with the process anyway.
fn validity(params: &mut CertificateParams) {
    let year = i32::from(jiff::Zoned::now().year());
    params.not_before = date_time_ymd(year - 1, 1, 1);
    params.not_after = date_time_ymd(year + 2, 1, 1);
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl CertificateAuthority {
    /// A fresh CA with a new key.
    pub fn generate() -> Result<Self, CaError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "Porter injecting proxy CA");
        name.push(DnType::OrganizationName, "Saint Porter");
        params.distinguished_name = name;
        // Signs leaves only, never another CA.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity(&mut params);
        let certificate = params.self_signed(&key)?;
        Ok(Self {
            pem: certificate.pem(),
            certificate: certificate.der().clone(),
            issuer: Issuer::new(params, key),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate in PEM, for the children's trust variables.
    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    /// The TLS server configuration presenting a leaf for `host` (made once per host).
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        if let Some(config) = self.leaves.lock().get(host) {
            return Ok(config.clone());
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.to_owned()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, host.to_owned());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params);
        let leaf = params.signed_by(&key, &self.issuer)?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone(), self.certificate.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        // HTTP/1.1 only: the proxy reads requests one at a time per connection.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.leaves.lock().insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

/// The TLS client configuration for upstream connections: the system roots plus any
/// extra CA certificates (PEM) the daemon was given.
pub fn upstream_config(extra_roots_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, CaError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::warn!(%error, "failed to load a system root certificate");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "system roots loaded for upstream TLS");
    for certificate in CertificateDer::pem_slice_iter(extra_roots_pem) {
        let certificate = certificate.map_err(|error| {
            rustls::Error::General(format!("extra upstream CA is not PEM: {error}"))
        })?;
        roots.add(certificate)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
