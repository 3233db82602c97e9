//! The injecting HTTPS proxy on the wire. A sandbox command's `CONNECT` (its per-command
//! key in `Proxy-Authorization`) arrives on Porter's unix socket through the runner's
//! relay; only hosts of a registered credential are opened; TLS is terminated with a
//! leaf from Porter's CA; each request is checked against the caller's role; the
//! placeholder is swapped for the secret only where the credential declares it; the
//! request is forwarded over TLS verified against real roots, and what comes back is
//! scrubbed of the secret in any encoding. One upstream connection per tunnel.
//!
//! Serves the unix socket it is given only; opens upstream connections only to the
//! hosts of registered credentials.

use std::{
    convert::Infallible,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::STANDARD};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::{
    body::{Body, Frame, Incoming},
    client::conn::http1::SendRequest,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use porter_protocol::registry::{InjectAt, split_host};
use saint_config::ErrorChain;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{UnixListener, UnixStream},
};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::{
    RequestAudit,
    holds::HoldDecision,
    oauth, placeholder,
    request_policy::{HeadDecision, RequestPolicy},
    scrub::{Scrubber, StreamScrubber},
    upstream,
};
use crate::{
    keys::{Key, Placeholders},
    registry_store::LoadedEntry,
    state::State,
};

/// Largest `CONNECT` head read.
const MAX_HEAD: usize = 16 * 1024;

/// How long a connection has to present its `CONNECT` with a live key: a keyless
/// connection holds nothing for longer.
pub const KEYLESS_DEADLINE: Duration = Duration::from_secs(3);

/// How long the TLS handshake inside an opened tunnel may take.
const TLS_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest body buffered for a policy check (GraphQL) or the token endpoint.
const MAX_CHECKED_BODY: usize = 1 << 20;

/// Headers some servers read as the real method of a request.
pub const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-method",
    "x-forwarded-method",
];

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Accepts connections until `stop` is cancelled.
pub async fn serve(state: Arc<State>, listener: UnixListener, stop: CancellationToken) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => accept(&state, stream),
                Err(error) => {
                    // Out of descriptors: back off instead of spinning on accept.
                    tracing::warn!(%error, "proxy failed to accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = stop.cancelled() => return,
        }
    }
}

fn accept(state: &Arc<State>, stream: UnixStream) {
    let uid = stream.peer_cred().map(|credentials| credentials.uid()).ok();
    let allowed = uid.is_some_and(|uid| {
        state.config.allowed_uids.is_empty() || state.config.allowed_uids.contains(&uid)
    });
    if !allowed {
        state.metrics.refused_connection("peer_uid");
        let mut audit = RequestAudit::new(None, "", "", "", "");
        audit.uid = uid;
        audit.refuse(&format!(
            "peer uid {} may not use porter's proxy",
            uid.map_or_else(|| "unknown".to_owned(), |uid| uid.to_string())
        ));
        state.audit.write_json(&audit);
        return;
    }
    let uid = uid.expect("checked");
    // Every connection of a uid counts, keyed or not: one uid cannot take every slot.
    let Some(connection) = state.uid_connections.acquire(&uid.to_string()) else {
        state.metrics.refused_connection("uid_connections");
        return;
    };
    let state = state.clone();
    tokio::spawn(async move {
        tunnel(&state, stream, uid).await;
        drop(connection);
    });
}

/// A parsed `CONNECT`.
struct Connect {
    host: String,
    port: u16,
    key: Option<String>,
}

fn plain_response(status: StatusCode, extra_headers: &str, message: &str) -> String {
    format!(
        "HTTP/1.1 {} {}\r\n{extra_headers}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{message}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        message.len()
    )
}

/// Reads the `CONNECT` head (nothing may follow it before our answer).
async fn read_head(stream: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0_u8; 2048];
    loop {
        let count = stream.read(&mut buffer).await?;
        if count == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buffer[..count]);
        if let Some(end) = head.windows(4).position(|window| window == b"\r\n\r\n") {
            if end + 4 != head.len() {
                return Err(std::io::Error::other("data after the CONNECT head"));
            }
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(std::io::Error::other("CONNECT head too large"));
        }
    }
}

fn parse_connect(head: &[u8]) -> Result<Connect, (StatusCode, &'static str)> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err((StatusCode::BAD_REQUEST, "malformed proxy request\n")),
    }
    if request.method != Some("CONNECT") {
        return Err((
            StatusCode::METHOD_NOT_ALLOWED,
            "porter's proxy only tunnels HTTPS (CONNECT)\n",
        ));
    }
    // CONNECT names host:port; split_host also refuses anything but a plain host name.
    let (host, port) = request
        .path
        .filter(|authority| authority.contains(':'))
        .and_then(split_host)
        .ok_or((StatusCode::BAD_REQUEST, "CONNECT needs host:port\n"))?;
    let key = request
        .headers
        .iter()
        .find(|header| header.name.eq_ignore_ascii_case("proxy-authorization"))
        .and_then(|header| {
            let value = std::str::from_utf8(header.value).ok()?;
            let (scheme, encoded) = value.trim().split_once(' ')?;
            if !scheme.eq_ignore_ascii_case("basic") {
                return None;
            }
            let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
            decoded.split_once(':').map(|(_, key)| key.to_owned())
        });
    Ok(Connect { host, port, key })
}

impl RequestAudit {
    fn new(key: Option<&Key>, cli: &str, host: &str, method: &str, path: &str) -> Self {
        let grant = key.map(|key| key.grant.clone()).unwrap_or_default();
        Self {
            ts: jiff::Timestamp::now().to_string(),
            kind: "request",
            session: grant.session,
            contact: grant.contact,
            role: grant.role,
            command: grant.command,
            cli: cli.to_owned(),
            host: host.to_owned(),
            method: method.chars().take(32).collect(),
            path: path.chars().take(1024).collect(),
            decision: "allowed",
            approval: None,
            reason: None,
            status: None,
            uid: None,
        }
    }

    fn refuse(&mut self, reason: &str) {
        self.decision = "refused";
        self.reason = Some(reason.to_owned());
    }
}

async fn tunnel(state: &Arc<State>, mut stream: UnixStream, uid: u32) {
    let Ok(Ok(head)) = tokio::time::timeout(KEYLESS_DEADLINE, read_head(&mut stream)).await else {
        state.metrics.refused_connection("no_connect");
        return;
    };
    let connect = match parse_connect(&head) {
        Ok(connect) => connect,
        Err((status, message)) => {
            let _ = stream
                .write_all(plain_response(status, "", message).as_bytes())
                .await;
            return;
        }
    };
    let caller = ConnectCaller {
        state,
        host: &connect.host,
        uid,
    };
    let Some(admitted) = admit(&caller, &mut stream, &connect).await else {
        return;
    };
    let config = match state.injector.ca.server_config(&connect.host) {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(error = %ErrorChain(&error), host = %connect.host, "failed to issue a proxy certificate");
            return;
        }
    };
    if stream
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let key = admitted.key;
    let accepted = tokio::select! {
        accepted = tokio::time::timeout(TLS_TIMEOUT, TlsAcceptor::from(config).accept(stream)) => accepted,
        () = key.ended.cancelled() => return,
    };
    let Ok(Ok(tls)) = accepted else {
        return;
    };
    state.metrics.open_tunnels.inc();
    let tunnel = Arc::new(Tunnel {
        state: state.clone(),
        key: key.clone(),
        entry: admitted.entry,
        placeholders: admitted.placeholders,
        scrubber: admitted.scrubber,
        host: connect.host,
        port: connect.port,
        uid,
        upstream: tokio::sync::Mutex::new(None),
    });
    let service = service_fn(move |request| {
        let tunnel = tunnel.clone();
        async move { Ok::<_, Infallible>(tunnel.forward(request).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tls), service);
    // The tunnel dies with its command's key, whatever the command keeps open.
    tokio::select! {
        _ = connection => {}
        () = key.ended.cancelled() => {}
        () = state.shutdown.cancelled() => {}
    }
    state.metrics.open_tunnels.dec();
    drop(admitted.slots);
}

/// Who asked to open a tunnel, and to where: what every refusal is audited with.
struct ConnectCaller<'a> {
    state: &'a Arc<State>,
    host: &'a str,
    uid: u32,
}

/// A `CONNECT` let through: the command's live key, the credential of the host, the
/// command's placeholders for it, and the tunnel slots it holds while open.
struct Admitted {
    key: Arc<Key>,
    entry: Arc<LoadedEntry>,
    placeholders: Placeholders,
    scrubber: Arc<Scrubber>,
    slots: (crate::capacity::Slot, tokio::sync::OwnedSemaphorePermit),
}

/// Checks a `CONNECT` in order: a live key, a host of a credential registered before
/// the command started, and room for one more tunnel of the command and of Porter.
/// Answers and audits the first refusal; `None` then.
async fn admit(
    caller: &ConnectCaller<'_>,
    stream: &mut UnixStream,
    connect: &Connect,
) -> Option<Admitted> {
    let state = caller.state;
    let Some(key) = connect
        .key
        .as_deref()
        .and_then(|presented| state.keys.find(presented, Instant::now()))
    else {
        // No key, or the key of a command that has ended.
        let refusal = Refusal {
            key: None,
            cli: String::new(),
            status: StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            extra: "Proxy-Authenticate: Basic realm=\"porter\"\r\n",
            reason: "porter's proxy serves only running sandbox commands (no live key)".into(),
        };
        refuse(caller, stream, refusal).await;
        return None;
    };
    let refused = |cli: &str, status: StatusCode, reason: String| Refusal {
        key: Some(&*key),
        cli: cli.to_owned(),
        status,
        extra: "",
        reason,
    };
    let registry = state.registry.snapshot();
    let Some(entry) = registry
        .entry_for_host(&connect.host, connect.port)
        .cloned()
    else {
        let reason = format!(
            "{}:{} is not a host of any credential",
            connect.host, connect.port
        );
        refuse(caller, stream, refused("", StatusCode::FORBIDDEN, reason)).await;
        return None;
    };
    let Some(placeholders) = key.placeholders.get(&entry.name).cloned() else {
        let reason = format!("{} was registered after this command started", entry.name);
        refuse(
            caller,
            stream,
            refused(&entry.name, StatusCode::FORBIDDEN, reason),
        )
        .await;
        return None;
    };
    // A command may hold a bounded number of tunnels, and all together a bounded total.
    let Some(key_slot) = state.key_tunnels.acquire(&key_slot_name(&key)) else {
        let reason = "this command has too many open tunnels".to_owned();
        let refusal = refused(&entry.name, StatusCode::TOO_MANY_REQUESTS, reason);
        refuse(caller, stream, refusal).await;
        return None;
    };
    let Ok(total_slot) = state.tunnels.clone().try_acquire_owned() else {
        let reason = "porter's proxy is at its tunnel limit".to_owned();
        let refusal = refused(&entry.name, StatusCode::SERVICE_UNAVAILABLE, reason);
        refuse(caller, stream, refusal).await;
        return None;
    };
    Some(Admitted {
        key: key.clone(),
        entry,
        placeholders,
        scrubber: registry.scrubber.clone(),
        slots: (key_slot, total_slot),
    })
}

/// A refused `CONNECT`: whose, which credential, and what it is answered.
struct Refusal<'k> {
    key: Option<&'k Key>,
    cli: String,
    status: StatusCode,
    /// Extra response header lines.
    extra: &'static str,
    reason: String,
}

/// Audits and counts a refused `CONNECT` and answers it.
async fn refuse(caller: &ConnectCaller<'_>, stream: &mut UnixStream, refusal: Refusal<'_>) {
    let Refusal {
        key,
        cli,
        status,
        extra,
        reason,
    } = refusal;
    let mut audit = RequestAudit::new(key, &cli, caller.host, "CONNECT", "");
    audit.uid = Some(caller.uid);
    audit.refuse(&reason);
    caller.state.audit.write_json(&audit);
    caller.state.metrics.request(&cli, "refused");
    let message = format!("porter: {reason}\n");
    let _ = stream
        .write_all(plain_response(status, extra, &message).as_bytes())
        .await;
}

/// The slot name of a key's tunnels: the key's address, stable while it lives (never
/// the key itself, which must not linger in memory maps longer than the key).
fn key_slot_name(key: &Key) -> String {
    format!("{:p}", std::ptr::from_ref(key))
}

/// Why a request was not forwarded (or failed upstream).
enum Failure {
    Refused(String),
    /// Admitted by the role, but it waits for an approval.
    Held(porter_protocol::control::HeldRequest),
    Upstream(String),
}

/// The `porter` field of a held request's answer, and the value of its
/// `X-Porter-Decision` header: what tells a held request from a refused one.
pub const HELD_MARKER: &str = "held-for-approval";

/// One open tunnel: its command's key, its credential, its host, and the upstream
/// connection it reuses.
struct Tunnel {
    state: Arc<State>,
    key: Arc<Key>,
    entry: Arc<LoadedEntry>,
    placeholders: Placeholders,
    scrubber: Arc<Scrubber>,
    host: String,
    port: u16,
    uid: u32,
    upstream: tokio::sync::Mutex<Option<SendRequest<ProxyBody>>>,
}

fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<ProxyBody> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(full(body.to_string()))
        .expect("static response")
}

/// `403` with the marker, for a request that waits for an approval: the command fails
/// now, and the agent, told by the key's revoke, asks the approver.
fn held_response(held: &porter_protocol::control::HeldRequest) -> Response<ProxyBody> {
    let mut response = json_response(
        StatusCode::FORBIDDEN,
        &serde_json::json!({
            "message": format!(
                "porter: {} {}{} needs an approval; the assistant asks for it when this command ends",
                held.method, held.host, held.path
            ),
            "porter": HELD_MARKER,
        }),
    );
    response.headers_mut().insert(
        http::HeaderName::from_static("x-porter-decision"),
        HeaderValue::from_static(HELD_MARKER),
    );
    response
}

fn error_response(status: StatusCode, message: &str) -> Response<ProxyBody> {
    // JSON with `message`, which gh and most API clients print.
    json_response(
        status,
        &serde_json::json!({ "message": format!("porter: {message}") }),
    )
}

impl Tunnel {
    async fn forward(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        let method = request.method().as_str().to_owned();
        let path = request.uri().path().to_owned();
        let mut audit = RequestAudit::new(
            Some(&self.key),
            &self.entry.name,
            &self.host,
            &method,
            &path,
        );
        audit.uid = Some(self.uid);
        let response = match self
            .admit_and_send(request, &method, &path, &mut audit)
            .await
        {
            Ok(response) => {
                audit.status.get_or_insert(response.status().as_u16());
                response
            }
            Err(Failure::Refused(reason)) => {
                audit.refuse(&reason);
                error_response(StatusCode::FORBIDDEN, &format!("refused: {reason}"))
            }
            Err(Failure::Held(held)) => {
                audit.decision = "held";
                audit.reason = Some(format!("held for approval (hold {})", held.hold));
                held_response(&held)
            }
            Err(Failure::Upstream(reason)) => {
                // Admitted by the policy, but never answered by a verified upstream.
                audit.decision = "upstream_error";
                audit.reason = Some(reason.clone());
                error_response(StatusCode::BAD_GATEWAY, &reason)
            }
        };
        self.state.metrics.request(&self.entry.name, audit.decision);
        self.state.audit.write_json(&audit);
        response
    }

    async fn admit_and_send(
        &self,
        request: Request<Incoming>,
        method: &str,
        path: &str,
        audit: &mut RequestAudit,
    ) -> Result<Response<ProxyBody>, Failure> {
        let role = self.key.grant.role.as_deref();
        let (mut parts, body) = request.into_parts();
        // Inside the tunnel only plain requests: no second tunnel, no protocol switch
        // (whose bytes the policy could not read).
        if parts.method == Method::CONNECT || parts.headers.contains_key(header::UPGRADE) {
            return Err(Failure::Refused(
                "CONNECT and protocol upgrades are not proxied".into(),
            ));
        }
        // Some APIs run a POST as the method these name: the policy judged the POST.
        if let Some(name) = METHOD_OVERRIDES
            .iter()
            .find(|name| parts.headers.contains_key(**name))
        {
            return Err(Failure::Refused(format!(
                "method override headers ({name}) are refused"
            )));
        }
        // Origin form only: an absolute URI could name another authority than the
        // tunnel's host.
        let origin_form = parts
            .uri
            .path_and_query()
            .map_or("/", |path_and_query| path_and_query.as_str())
            .to_owned();
        if let Some(oauth2) = &self.entry.oauth2
            && oauth2.token_host == (self.host.clone(), self.port)
            && oauth2.token_path == path
        {
            // Porter is the token endpoint for the command: the real refresh token
            // never travels through the sandbox, in either direction.
            if parts.method != Method::POST {
                return Err(Failure::Refused("the token endpoint takes POST".into()));
            }
            let body = read_bounded(body).await?;
            let (status, answer) =
                oauth::token_endpoint_answer(&body, &self.placeholders, oauth2.placeholder_ttl);
            audit.decision = "answered";
            audit.status = Some(status);
            let status = StatusCode::from_u16(status).expect("200 or 400");
            return Ok(json_response(status, &answer));
        }
        let body = match self.entry.policy.check_head(role, method, path) {
            HeadDecision::Allowed => body.boxed(),
            HeadDecision::Refused(reason) => return Err(Failure::Refused(reason)),
            HeadDecision::NeedsBody(rules) => {
                if parts
                    .headers
                    .get(header::CONTENT_ENCODING)
                    .is_some_and(|encoding| encoding != "identity")
                {
                    return Err(Failure::Refused(
                        "an encoded GraphQL body cannot be checked".into(),
                    ));
                }
                let bytes = read_bounded(body).await?;
                RequestPolicy::check_graphql(&rules, &bytes)
                    .map_err(|refusal| Failure::Refused(refusal.to_string()))?;
                full(bytes)
            }
        };
        // The role admits it; an approval rule may still make it wait. Only after the
        // policy, so an approval never lets through what the role may not do at all.
        match self
            .key
            .approvals
            .decide(&self.entry.name, &self.host, self.port, method, path)
        {
            HoldDecision::Free => {}
            HoldDecision::Granted { approval } => audit.approval = Some(approval),
            HoldDecision::Held(held) => return Err(Failure::Held(held)),
        }
        for name in ["proxy-authorization", "proxy-connection", "expect"] {
            parts.headers.remove(name);
        }
        let authority = if self.port == 443 {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        };
        // Whatever Host the command wrote, the request goes to the tunnel's host.
        parts.headers.insert(
            header::HOST,
            HeaderValue::from_str(&authority).expect("checked host name"),
        );
        let origin_form = self.inject(&mut parts.headers, &origin_form).await?;
        parts.uri = origin_form
            .parse()
            .map_err(|_| Failure::Refused("unparsable request target".into()))?;
        parts.version = Version::HTTP_11;
        let response = self.send(Request::from_parts(parts, body)).await?;
        let (mut parts, body) = response.into_parts();
        // An upstream echoing a secret (in any encoding) gives the command only a mask.
        for (_, value) in &mut parts.headers {
            let mut bytes = value.as_bytes().to_vec();
            if self.scrubber.scrub_in_place(&mut bytes)
                && let Ok(masked) = HeaderValue::from_bytes(&bytes)
            {
                *value = masked;
            }
        }
        let body = ScrubbedBody {
            inner: body,
            scrubber: self.scrubber.stream(),
            finished: false,
        };
        Ok(Response::from_parts(parts, body.boxed()))
    }

    /// Puts the secret where the credential declares it — the only place a placeholder
    /// is swapped — and refuses a request carrying a placeholder anywhere else in its
    /// head (another header, another parameter, another command's placeholder).
    /// Returns the request target with an injected query parameter.
    async fn inject(&self, headers: &mut HeaderMap, target: &str) -> Result<String, Failure> {
        let mut target = target.to_owned();
        for place in &self.entry.inject {
            match place {
                InjectAt::Authorization => {
                    let Some(value) = headers.get(header::AUTHORIZATION) else {
                        continue;
                    };
                    let Some(swapped) = self.swap_authorization(value.as_bytes()).await? else {
                        continue;
                    };
                    headers.insert(header::AUTHORIZATION, sensitive(&swapped)?);
                }
                InjectAt::Header(name) => {
                    let Some(value) = headers.get(name.as_str()) else {
                        continue;
                    };
                    if value.as_bytes() == self.placeholders.secret.as_bytes() {
                        let swapped = sensitive(self.entry.secret.as_bytes())?;
                        headers.insert(
                            http::HeaderName::from_bytes(name.as_bytes())
                                .map_err(|_| Failure::Refused("bad header name".into()))?,
                            swapped,
                        );
                    }
                }
                InjectAt::Query(name) => {
                    target =
                        swap_query(&target, name, &self.placeholders.secret, &self.entry.secret);
                }
            }
        }
        let stray_header = headers
            .iter()
            .find(|(_, value)| placeholder::contains(value.as_bytes()))
            .map(|(name, _)| name.as_str().to_owned());
        let stray_query = placeholder::contains(
            percent_encoding::percent_decode_str(&target)
                .collect::<Vec<u8>>()
                .as_slice(),
        );
        if let Some(name) = stray_header {
            return Err(Failure::Refused(format!(
                "a placeholder in {name}, where {}'s credential is not injected (or of another command)",
                self.entry.name
            )));
        }
        if stray_query {
            return Err(Failure::Refused(format!(
                "a placeholder in the request target, where {}'s credential is not injected (or of another command)",
                self.entry.name
            )));
        }
        Ok(target)
    }

    /// `Bearer`/`token <placeholder>` or `Basic` with the placeholder as user or
    /// password, swapped; `None` when the header holds no placeholder of this command.
    async fn swap_authorization(&self, value: &[u8]) -> Result<Option<Vec<u8>>, Failure> {
        let text = std::str::from_utf8(value)
            .map_err(|_| Failure::Refused("non-text Authorization".into()))?;
        let Some((scheme, credential)) = text.trim().split_once(' ') else {
            return Ok(None);
        };
        let credential = credential.trim();
        if scheme.eq_ignore_ascii_case("basic") {
            let Ok(decoded) = STANDARD.decode(credential) else {
                return Ok(None);
            };
            let Ok(decoded) = String::from_utf8(decoded) else {
                return Ok(None);
            };
            let Some((user, password)) = decoded.split_once(':') else {
                return Ok(None);
            };
            let ours = |part: &str| part == self.placeholders.secret;
            if !ours(user) && !ours(password) {
                return Ok(None);
            }
            if self.entry.oauth2.is_some() {
                return Err(Failure::Refused(
                    "an OAuth 2.0 credential is sent as a Bearer access token".into(),
                ));
            }
            let secret = &self.entry.secret;
            let (user, password) = if ours(password) {
                (user, secret.as_str())
            } else {
                (secret.as_str(), password)
            };
            let encoded = STANDARD.encode(format!("{user}:{password}"));
            return Ok(Some(format!("Basic {encoded}").into_bytes()));
        }
        if !(scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token")) {
            return Ok(None);
        }
        let real = match (&self.entry.oauth2, &self.placeholders.access) {
            (Some(_), Some(access)) if credential == access => self
                .state
                .access_tokens
                .get(&self.state.injector, &self.entry)
                .await
                .map_err(|error| Failure::Upstream(error.to_string()))?,
            (None, _) if credential == self.placeholders.secret => self.entry.secret.clone(),
            _ => return Ok(None),
        };
        Ok(Some(format!("{scheme} {real}").into_bytes()))
    }

    async fn send(&self, request: Request<ProxyBody>) -> Result<Response<Incoming>, Failure> {
        let mut upstream = self.upstream.lock().await;
        let reusable = upstream.as_ref().is_some_and(|sender| !sender.is_closed());
        if !reusable {
            *upstream = Some(self.connect().await?);
        }
        let sender = upstream.as_mut().expect("just connected");
        if sender.ready().await.is_err() {
            *upstream = Some(self.connect().await?);
        }
        let sender = upstream.as_mut().expect("just connected");
        sender
            .send_request(request)
            .await
            .map_err(|error| Failure::Upstream(format!("upstream {}: {error}", self.host)))
    }

    async fn connect(&self) -> Result<SendRequest<ProxyBody>, Failure> {
        upstream::connect(&self.state.injector, &self.host, self.port)
            .await
            .map_err(|error| Failure::Upstream(error.to_string()))
    }
}

fn sensitive(bytes: &[u8]) -> Result<HeaderValue, Failure> {
    let mut value = HeaderValue::from_bytes(bytes)
        .map_err(|_| Failure::Refused("the secret cannot be carried in a header".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

async fn read_bounded(body: Incoming) -> Result<Bytes, Failure> {
    Ok(Limited::new(body, MAX_CHECKED_BODY)
        .collect()
        .await
        .map_err(|_| Failure::Refused("the body is too large to check".into()))?
        .to_bytes())
}

/// Replaces the value of query parameter `name` when it is exactly `placeholder`
/// (after percent-decoding), keeping every other byte of the target as it was.
fn swap_query(target: &str, name: &str, placeholder: &str, secret: &str) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded_key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            let decoded_value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
            if decoded_key == name && decoded_value == placeholder {
                let encoded: String = form_urlencoded::byte_serialize(secret.as_bytes()).collect();
                format!("{key}={encoded}")
            } else {
                pair.to_owned()
            }
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

/// A response body passed through the stream scrubber.
struct ScrubbedBody {
    inner: Incoming,
    scrubber: StreamScrubber,
    finished: bool,
}

impl Body for ScrubbedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        loop {
            if self.finished {
                return Poll::Ready(None);
            }
            match Pin::new(&mut self.inner).poll_frame(context) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let scrubbed = self.scrubber.push(&data);
                        if !scrubbed.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(scrubbed)))));
                        }
                    }
                    // Trailers: what was held back goes first, the trailers are dropped
                    // (they could carry values the scrubber did not see whole).
                    Err(_) => {
                        self.finished = true;
                        let rest = self.scrubber.finish();
                        if !rest.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                        }
                    }
                },
                Poll::Ready(None) => {
                    self.finished = true;
                    let rest = self.scrubber.finish();
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_heads_give_host_port_and_the_key() {
        let credential = STANDARD.encode("porter:porter_key_abc");
        let head = format!(
            "CONNECT API.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\nProxy-Authorization: Basic {credential}\r\n\r\n"
        );
        let connect = parse_connect(head.as_bytes()).ok().unwrap();
        assert_eq!(
            (connect.host.as_str(), connect.port, connect.key.as_deref()),
            ("api.github.com", 443, Some("porter_key_abc"))
        );
        for refused in [
            "GET http://example.com/ HTTP/1.1\r\n\r\n",
            "CONNECT example.com HTTP/1.1\r\n\r\n",
            "CONNECT exa_mple.com:443 HTTP/1.1\r\n\r\n",
            "CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse_connect(refused.as_bytes()).is_err(), "{refused}");
        }
    }

    #[test]
    fn only_the_declared_query_parameter_is_swapped() {
        assert_eq!(
            swap_query(
                "/v1/geo?q=a%20b&key=porter_ph_1&other=porter_ph_1",
                "key",
                "porter_ph_1",
                "s/e+c"
            ),
            "/v1/geo?q=a%20b&key=s%2Fe%2Bc&other=porter_ph_1"
        );
        assert_eq!(
            swap_query("/v1/geo?key=porter%5Fph_1", "key", "porter_ph_1", "s"),
            "/v1/geo?key=s"
        );
        assert_eq!(swap_query("/v1/geo", "key", "porter_ph_1", "s"), "/v1/geo");
        assert_eq!(
            swap_query("/v1/geo?key=porter_ph_2", "key", "porter_ph_1", "s"),
            "/v1/geo?key=porter_ph_2"
        );
    }
}
