//! A local HTTPS stand-in for GitHub on loopback: its own test CA, one certificate for
//! `api.github.com`, `github.com` and `uploads.github.com`; the REST and GraphQL
//! endpoints `gh pr list`, `gh pr merge` and `gh api` use; git smart HTTP through the
//! real `git http-backend` CGI. Every request is recorded with the credential it
//! carried. Answers 401 unless that credential is the real token. Two more hosts stand
//! in for other credential kinds: `keys.example` (an API key in a query parameter or a
//! named header) and `oauth.example` (an OAuth 2.0 token endpoint that trades the real
//! refresh token for an access token, and an API that takes only that access token).
//! `mcp.example` is an MCP server over Streamable HTTP ([`mcp`]).

#![allow(dead_code)]

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
};

use base64::{Engine, engine::general_purpose::STANDARD};
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub mod mcp;

pub const HOSTS: &[&str] = &["api.github.com", "github.com", "uploads.github.com"];

/// Every name the stand-in's certificate covers.
pub const ALL_HOSTS: &[&str] = &[
    "api.github.com",
    "github.com",
    "uploads.github.com",
    "keys.example",
    "oauth.example",
    "mcp.example",
];

/// The access token `oauth.example` issues for the real refresh token `token`.
pub fn access_token_for(token: &str) -> String {
    format!("ya29_{}", token.chars().rev().collect::<String>())
}

/// One request as the stand-in received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub host: String,
    pub method: String,
    pub path: String,
    /// The `Authorization` header exactly as received.
    pub authorization: Option<String>,
    /// The body for GraphQL and token requests.
    pub body: String,
    /// The query string as received.
    pub query: String,
    /// Every header as received (name, value), for checks that no placeholder or other
    /// header carried the secret.
    pub headers: Vec<(String, String)>,
}

impl Recorded {
    /// The secret this request carried: the token of `token`/`Bearer`, or the password
    /// of `Basic`.
    pub fn credential(&self) -> Option<String> {
        let header = self.authorization.as_deref()?;
        let (scheme, value) = header.split_once(' ')?;
        match scheme.to_ascii_lowercase().as_str() {
            "token" | "bearer" => Some(value.to_owned()),
            "basic" => {
                let decoded = String::from_utf8(STANDARD.decode(value).ok()?).ok()?;
                decoded
                    .split_once(':')
                    .map(|(_, password)| password.to_owned())
            }
            _ => None,
        }
    }
}

pub struct StandIn {
    pub address: SocketAddr,
    /// The stand-in's CA certificate (PEM file) for Porter's upstream trust.
    pub ca_file: PathBuf,
    /// Bare repositories served over smart HTTP (`<root>/<owner>/<repo>.git`).
    pub git_root: PathBuf,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for StandIn {
    /// Shut down without blocking, so a stand-in may end inside an async test.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl StandIn {
    /// Starts the stand-in; only `token` is accepted as a credential. Its own runtime
    /// starts on a thread of its own, so async tests may start one too.
    pub fn start(directory: &Path, token: &str) -> Self {
        let (directory, token) = (directory.to_owned(), token.to_owned());
        std::thread::spawn(move || Self::start_here(&directory, &token))
            .join()
            .expect("the stand-in started")
    }

    fn start_here(directory: &Path, token: &str) -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_certificate = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(
            ALL_HOSTS
                .iter()
                .map(|host| (*host).to_owned())
                .collect::<Vec<_>>(),
        )
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
        let ca_file = directory.join("standin-ca.pem");
        std::fs::write(&ca_file, ca_certificate.pem()).unwrap();
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let git_root = directory.join("git-root");
        std::fs::create_dir_all(&git_root).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Shared {
            token: token.to_owned(),
            git_root: git_root.clone(),
            requests: requests.clone(),
        });
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, shared) = (acceptor.clone(), shared.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(shared.serve(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self {
            address,
            ca_file,
            git_root,
            requests,
            runtime: Some(runtime),
        }
    }

    /// Creates a bare repository `owner/repo.git` with one commit on `main`.
    pub fn create_repository(&self, owner: &str, repo: &str) {
        let bare = self.git_root.join(owner).join(format!("{repo}.git"));
        let work = self.git_root.join(format!("{owner}-{repo}-seed"));
        git(
            &self.git_root,
            &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        );
        git(
            &self.git_root,
            &["init", "-q", "-b", "main", work.to_str().unwrap()],
        );
        std::fs::write(work.join("README.md"), "hello from the stand-in\n").unwrap();
        git(&work, &["add", "README.md"]);
        git(&work, &["commit", "-q", "-m", "first"]);
        git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
        // Pushes over smart HTTP need this on the served repository.
        git(&bare, &["config", "http.receivepack", "true"]);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// Runs git for test fixtures (not through Porter), with a fixed identity.
pub fn git(directory: &Path, arguments: &[&str]) {
    let status = std::process::Command::new("git")
        .args(arguments)
        .current_dir(directory)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", directory)
        .env("GIT_AUTHOR_NAME", "Stand In")
        .env("GIT_AUTHOR_EMAIL", "standin@example.com")
        .env("GIT_COMMITTER_NAME", "Stand In")
        .env("GIT_COMMITTER_EMAIL", "standin@example.com")
        .status()
        .unwrap();
    assert!(status.success(), "git {arguments:?} failed");
}

struct Shared {
    token: String,
    git_root: PathBuf,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

type Body = Full<Bytes>;

fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()))
        .unwrap()
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    respond(status, "application/json", value.to_string())
}

impl Shared {
    async fn serve(&self, request: Request<Incoming>) -> Response<Body> {
        // An absolute request target names the host before any Host header does.
        let host = request
            .uri()
            .authority()
            .map(|authority| authority.as_str().to_owned())
            .or_else(|| {
                request
                    .headers()
                    .get(header::HOST)
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned)
            })
            .unwrap_or_default()
            .split(':')
            .next()
            .unwrap_or("")
            .to_owned();
        let method = request.method().as_str().to_owned();
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or("").to_owned();
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let content_encoding = request
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let mut recorded = Recorded {
            host: host.clone(),
            method: method.clone(),
            path: path.clone(),
            authorization,
            body: String::new(),
            query: query.clone(),
            headers,
        };
        if path == "/graphql" || host == "oauth.example" || host == "mcp.example" {
            recorded.body = String::from_utf8_lossy(&body).into_owned();
        }
        if host == "mcp.example" {
            self.requests.lock().unwrap().push(recorded.clone());
            return mcp::answer(&recorded, &self.token);
        }
        if host == "keys.example" || host == "oauth.example" {
            self.requests.lock().unwrap().push(recorded.clone());
            return self.other_kinds(&recorded);
        }
        let authorized = recorded.credential().as_deref() == Some(self.token.as_str());
        self.requests.lock().unwrap().push(recorded.clone());

        if host == "github.com" {
            if !authorized {
                return Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .header(header::WWW_AUTHENTICATE, "Basic realm=\"GitHub\"")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
            }
            return self
                .git_backend(
                    &method,
                    &path,
                    &query,
                    &content_type,
                    content_encoding,
                    body,
                )
                .await;
        }
        if !authorized {
            return json(
                StatusCode::UNAUTHORIZED,
                serde_json::json!({ "message": "Bad credentials" }),
            );
        }
        match (method.as_str(), path.as_str()) {
            ("POST", "/graphql") => json(StatusCode::OK, graphql_answer(&recorded.body)),
            ("GET", "/repos/o/r/pulls") => json(
                StatusCode::OK,
                serde_json::json!([{ "number": 1, "title": "Fix the thing", "state": "open" }]),
            ),
            ("PUT", "/repos/o/r/pulls/1/merge") => json(
                StatusCode::OK,
                serde_json::json!({ "merged": true, "message": "Pull Request successfully merged", "sha": "abc" }),
            ),
            ("GET", "/user") => json(StatusCode::OK, serde_json::json!({ "login": "o" })),
            // A careless (or hostile) upstream that echoes the credential back in every
            // encoding, in headers and body.
            ("GET", "/echo") => {
                let secret = recorded.credential().unwrap_or_default();
                let encodings = [
                    secret.clone(),
                    STANDARD.encode(&secret),
                    base64::engine::general_purpose::URL_SAFE.encode(format!("x{secret}")),
                    hex::encode(&secret),
                    secret.bytes().map(|byte| format!("%{byte:02X}")).collect(),
                ];
                Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, "text/plain")
                    .header("x-echo", encodings.join(" "))
                    .header("x-echo-base64", STANDARD.encode(format!("token={secret}")))
                    .body(Full::new(Bytes::from(encodings.join("\n"))))
                    .unwrap()
            }
            _ => json(
                StatusCode::NOT_FOUND,
                serde_json::json!({ "message": "Not Found" }),
            ),
        }
    }

    /// `keys.example`: `/v1/query?key=…` and `/v1/header` (`X-Api-Key`) take the real
    /// token. `oauth.example`: `POST /token` trades the real refresh token for the
    /// access token; `/v1/me` takes only that access token as Bearer.
    fn other_kinds(&self, recorded: &Recorded) -> Response<Body> {
        let header = |name: &str| {
            recorded
                .headers
                .iter()
                .find(|(header, _)| header.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.clone())
        };
        let query_key = form_urlencoded::parse(recorded.query.as_bytes())
            .find(|(name, _)| name == "key")
            .map(|(_, value)| value.into_owned());
        let access = access_token_for(&self.token);
        let ok = |what: &str| json(StatusCode::OK, serde_json::json!({ "ok": what }));
        let denied = || {
            json(
                StatusCode::UNAUTHORIZED,
                serde_json::json!({ "message": "Bad credentials" }),
            )
        };
        match (recorded.host.as_str(), recorded.path.as_str()) {
            ("keys.example", "/v1/query") if query_key.as_deref() == Some(&self.token) => {
                ok("query")
            }
            ("keys.example", "/v1/header")
                if header("x-api-key").as_deref() == Some(&self.token) =>
            {
                ok("header")
            }
            ("oauth.example", "/token") => {
                let form: std::collections::HashMap<String, String> =
                    form_urlencoded::parse(recorded.body.as_bytes())
                        .into_owned()
                        .collect();
                if form.get("grant_type").map(String::as_str) == Some("refresh_token")
                    && form.get("refresh_token") == Some(&self.token)
                {
                    json(
                        StatusCode::OK,
                        serde_json::json!({ "access_token": access, "token_type": "Bearer", "expires_in": 3600 }),
                    )
                } else {
                    json(
                        StatusCode::BAD_REQUEST,
                        serde_json::json!({ "error": "invalid_grant" }),
                    )
                }
            }
            ("oauth.example", "/v1/me")
                if header("authorization").as_deref() == Some(&format!("Bearer {access}")) =>
            {
                ok("me")
            }
            _ => denied(),
        }
    }

    /// Runs `git http-backend` as a CGI for one request.
    async fn git_backend(
        &self,
        method: &str,
        path: &str,
        query: &str,
        content_type: &str,
        content_encoding: Option<String>,
        body: Bytes,
    ) -> Response<Body> {
        let mut command = tokio::process::Command::new("git");
        command
            .arg("http-backend")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &self.git_root)
            .env("GIT_PROJECT_ROOT", &self.git_root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("REQUEST_METHOD", method)
            .env("PATH_INFO", path)
            .env("QUERY_STRING", query)
            .env("CONTENT_TYPE", content_type)
            .env("CONTENT_LENGTH", body.len().to_string())
            .env("REMOTE_USER", "x-access-token")
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(encoding) = content_encoding {
            command.env("HTTP_CONTENT_ENCODING", encoding);
        }
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(&body).await;
        });
        let mut output = Vec::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut output)
            .await
            .unwrap();
        let _ = writer.await;
        let _ = child.wait().await;
        // CGI output: headers, a blank line, the body.
        let split = output
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .map(|index| (index, 4))
            .or_else(|| {
                output
                    .windows(2)
                    .position(|window| window == b"\n\n")
                    .map(|index| (index, 2))
            })
            .expect("CGI output has headers");
        let head = String::from_utf8_lossy(&output[..split.0]).into_owned();
        let mut response = Response::builder().status(StatusCode::OK);
        for line in head.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("status") {
                let code: u16 = value.split_whitespace().next().unwrap().parse().unwrap();
                response = response.status(code);
            } else {
                response = response.header(name, value);
            }
        }
        response
            .body(Full::new(Bytes::copy_from_slice(
                &output[split.0 + split.1..],
            )))
            .unwrap()
    }
}

/// Answers the GraphQL operations gh 2.23 sends for `pr list` and `pr merge`.
fn graphql_answer(body: &str) -> serde_json::Value {
    if body.contains("PullRequestList") {
        serde_json::json!({ "data": { "repository": { "pullRequests": {
            "totalCount": 1,
            "nodes": [{
                "number": 1, "title": "Fix the thing", "state": "OPEN",
                "url": "https://github.com/o/r/pull/1", "headRefName": "fix",
                "isDraft": false, "createdAt": "2026-01-01T00:00:00Z",
                "isCrossRepository": false,
                "headRepositoryOwner": { "id": "U_1", "login": "o" }
            }],
            "pageInfo": { "hasNextPage": false, "endCursor": "" }
        }}}})
    } else if body.contains("PullRequestByNumber") {
        serde_json::json!({ "data": { "repository": { "pullRequest": {
            "id": "PR_1", "number": 1, "state": "OPEN", "title": "Fix the thing",
            "commits": { "nodes": [{ "commit": { "oid": "abc" } }] },
            "mergeStateStatus": "CLEAN",
            "headRepositoryOwner": { "id": "U_1", "login": "o" },
            "headRefName": "fix", "baseRefName": "main", "headRefOid": "abc"
        }}}})
    } else if body.contains("mergePullRequest") {
        serde_json::json!({ "data": { "mergePullRequest": { "clientMutationId": null } } })
    } else {
        serde_json::json!({ "data": {} })
    }
}

/// Every form of `secret` a leak could take: literal, reversed, base64 (standard and
/// URL-safe, with and without a newline), hex, percent-encoded — as windows, so split
/// halves are caught too. Whitespace is ignored (od and base64 wrap their output).
pub fn assert_no_secret(label: &str, haystack: &str, secret: &str) {
    use base64::{
        Engine,
        engine::general_purpose::{STANDARD, URL_SAFE},
    };
    let squeezed: String = haystack.chars().filter(|c| !c.is_whitespace()).collect();
    let lower = squeezed.to_ascii_lowercase();
    let reversed: String = secret.chars().rev().collect();
    let utf16: String = secret.chars().flat_map(|c| [c, '\0']).collect();
    let encodings = [
        (secret.to_owned(), 12),
        (reversed, 12),
        (STANDARD.encode(secret), 16),
        (URL_SAFE.encode(secret), 16),
        (STANDARD.encode(format!("{secret}\n")), 16),
        (STANDARD.encode(&utf16), 16),
        (hex::encode(secret), 24),
    ];
    for (encoded, window) in encodings {
        for start in 0..=encoded.len() - window {
            let piece = &encoded[start..start + window];
            let found = if piece.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                lower.contains(&piece.to_ascii_lowercase())
            } else {
                squeezed.contains(piece)
            };
            assert!(
                !found,
                "{label}: the secret leaked as {encoded:?} (piece {piece:?})"
            );
        }
    }
    let utf16_bytes: Vec<u8> = secret.bytes().flat_map(|byte| [byte, 0]).collect();
    assert!(
        !haystack
            .as_bytes()
            .windows(utf16_bytes.len())
            .any(|window| window == utf16_bytes),
        "{label}: the secret leaked as UTF-16"
    );
}
