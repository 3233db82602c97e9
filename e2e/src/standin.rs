//! A stand-in for GitHub's API that the node scenario's Porter is pointed at: an HTTPS
//! server with its own test CA and one certificate for `api.github.com`, `github.com`
//! and `uploads.github.com`, recording every request with the credential it carried.
//! It answers the two calls the scenario's `gh` makes (`gh api user`, `gh api
//! repos/OWNER/REPO/pulls`) when that credential is the real token, and `401` with
//! GitHub's "Bad credentials" otherwise, as GitHub would to a placeholder.
//!
//! The CA's certificate is what the test copy of the porter image trusts upstream
//! (`PORTER_UPSTREAM_CA_FILE`); nothing else in the cluster knows it.

use std::{convert::Infallible, net::SocketAddr, sync::Arc};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;

/// The names the stand-in's certificate covers: the example SaintBot's `gh` hosts.
pub const HOSTS: [&str; 3] = ["api.github.com", "github.com", "uploads.github.com"];

/// The pull request every repository of the stand-in has open.
pub const PULL_REQUEST_TITLE: &str = "Stand-in pull request";
pub const PULL_REQUEST_NUMBER: u64 = 7;

/// The login `GET /user` answers with.
pub const LOGIN: &str = "acme-assistant-standin";

/// Why the stand-in could not start.
#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    #[error("failed to make the stand-in's test certificates")]
    Certificate(#[source] rcgen::Error),
    #[error("failed to configure the stand-in's TLS")]
    Tls(#[source] rustls::Error),
    #[error("failed to listen on {address}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// One request as the stand-in received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The `Host` header (without a port).
    pub host: String,
    pub method: String,
    pub path: String,
    /// The `Authorization` header exactly as received.
    pub authorization: Option<String>,
}

impl Recorded {
    /// The secret of a `token …` or `Bearer …` Authorization header.
    pub fn credential(&self) -> Option<&str> {
        let (scheme, value) = self.authorization.as_deref()?.split_once(' ')?;
        ["token", "bearer"]
            .contains(&scheme.to_ascii_lowercase().as_str())
            .then_some(value.trim())
    }
}

/// The running stand-in; stops serving when dropped.
pub struct GithubStandIn {
    pub address: SocketAddr,
    /// The test CA's certificate (PEM), to trust upstream.
    pub ca_pem: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for GithubStandIn {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl GithubStandIn {
    /// Listens on `address` (on the caller's runtime); `token` is the only credential
    /// it accepts.
    pub async fn start(address: SocketAddr, token: &str) -> Result<Self, StandInError> {
        let ca_key = KeyPair::generate().map_err(StandInError::Certificate)?;
        let mut ca_parameters =
            CertificateParams::new(Vec::<String>::new()).map_err(StandInError::Certificate)?;
        ca_parameters.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_parameters.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_certificate = ca_parameters
            .self_signed(&ca_key)
            .map_err(StandInError::Certificate)?;
        let issuer = Issuer::new(ca_parameters, ca_key);
        let leaf_key = KeyPair::generate().map_err(StandInError::Certificate)?;
        let leaf = CertificateParams::new(HOSTS.map(str::to_owned).to_vec())
            .and_then(|parameters| parameters.signed_by(&leaf_key, &issuer))
            .map_err(StandInError::Certificate)?;
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(StandInError::Tls)?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .map_err(StandInError::Tls)?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| StandInError::Bind { address, source })?;
        let address = listener
            .local_addr()
            .map_err(|source| StandInError::Bind { address, source })?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Answers {
            token: token.to_owned(),
            requests: requests.clone(),
        });
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, answers) = (acceptor.clone(), answers.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |request| {
                        let answers = answers.clone();
                        async move { Ok::<_, Infallible>(answers.answer(&request)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Ok(Self {
            address,
            ca_pem: ca_certificate.pem(),
            requests,
            server,
        })
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().clone()
    }
}

struct Answers {
    token: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a static response")
}

impl Answers {
    fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let recorded = Recorded {
            host: request
                .headers()
                .get(header::HOST)
                .and_then(|value| value.to_str().ok())
                .map(|host| host.split(':').next().unwrap_or_default().to_owned())
                .unwrap_or_default(),
            method: request.method().as_str().to_owned(),
            path: request.uri().path().to_owned(),
            authorization: request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
        };
        let authorized = recorded.credential() == Some(self.token.as_str());
        let (method, path) = (recorded.method.clone(), recorded.path.clone());
        self.requests.lock().push(recorded);
        if !authorized {
            return json_response(
                StatusCode::UNAUTHORIZED,
                &json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}),
            );
        }
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method.as_str(), segments.as_slice()) {
            ("GET", ["user"]) => json_response(StatusCode::OK, &json!({"login": LOGIN, "id": 1})),
            ("GET", ["repos", owner, repository, "pulls"]) => json_response(
                StatusCode::OK,
                &json!([{
                    "number": PULL_REQUEST_NUMBER,
                    "title": PULL_REQUEST_TITLE,
                    "state": "open",
                    "html_url": format!("https://github.com/{owner}/{repository}/pull/{PULL_REQUEST_NUMBER}"),
                    "user": {"login": "ana"},
                }]),
            ),
            _ => json_response(
                StatusCode::NOT_FOUND,
                &json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
            ),
        }
    }
}
