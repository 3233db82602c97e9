//! The injecting HTTPS proxy on the wire: `CONNECT` from a live call's child (its
//! per-call key in `Proxy-Authorization`), only to the entry's hosts; TLS terminated
//! with a leaf from Porter's CA; each request checked against the caller's role, its
//! placeholder swapped for the secret, and forwarded over TLS verified against real
//! roots. One upstream connection per tunnel, kept alive with it.
//!
//! Serves loopback TCP only; opens upstream connections only to allowed hosts.

use std::{convert::Infallible, sync::Arc, time::Duration};

use base64::{Engine, engine::general_purpose::STANDARD};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::{body::Incoming, client::conn::http1::SendRequest, service::service_fn};
use hyper_util::rt::TokioIo;
use porter_protocol::registry::split_host;
use saint_config::ErrorChain;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tokio_rustls::{TlsAcceptor, TlsConnector, rustls::pki_types::ServerName};
use tokio_util::sync::CancellationToken;

use super::{
    CallContext, Injector, RequestAudit, placeholder,
    request_policy::{HeadDecision, RequestPolicy},
};

/// Largest `CONNECT` head read.
const MAX_HEAD: usize = 16 * 1024;

/// How long a client has for its `CONNECT` and TLS handshake, and the upstream for its
/// connection and handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest GraphQL body buffered for the policy check.
const MAX_GRAPHQL_BODY: usize = 1 << 20;

/// Most tunnels open at once.
const MAX_TUNNELS: usize = 512;

/// Headers some servers read as the real method of a request.
const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Accepts tunnels until `stop` is cancelled.
pub async fn serve(injector: Arc<Injector>, stop: CancellationToken) {
    let Some(listener) = injector.take_listener() else {
        return;
    };
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "injecting proxy failed to start");
            return;
        }
    };
    tracing::info!(address = %injector.address, "injecting proxy listening");
    let tunnels = Arc::new(Semaphore::new(MAX_TUNNELS));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(permit) = tunnels.clone().try_acquire_owned() else {
                        // Over the limit: dropping the stream refuses it.
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let injector = injector.clone();
                    tokio::spawn(async move {
                        tunnel(injector, stream).await;
                        drop(permit);
                    });
                }
                Err(error) => {
                    // Out of descriptors: back off instead of spinning on accept.
                    tracing::warn!(%error, "injecting proxy failed to accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = stop.cancelled() => return,
        }
    }
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
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
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

async fn tunnel(injector: Arc<Injector>, mut stream: TcpStream) {
    let head = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        _ => return,
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
    let Some(call) = connect.key.as_deref().and_then(|key| injector.call(key)) else {
        // No key, or the key of a call that has ended.
        let mut audit = RequestAudit::new(None, &connect.host, "CONNECT", "");
        audit.refuse("no live porter call owns this proxy credential");
        injector.audit.write_json(&audit);
        let response = plain_response(
            StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            "Proxy-Authenticate: Basic realm=\"porter\"\r\n",
            "porter's proxy serves only its own running calls\n",
        );
        let _ = stream.write_all(response.as_bytes()).await;
        return;
    };
    if !call.allows_host(&connect.host, connect.port) {
        let mut audit = RequestAudit::new(Some(&call), &connect.host, "CONNECT", "");
        audit.refuse(&format!(
            "{}:{} is not among the hosts of {}",
            connect.host, connect.port, call.caller.cli
        ));
        injector.audit.write_json(&audit);
        let message = format!(
            "porter: {} may not reach {}:{}\n",
            call.caller.cli, connect.host, connect.port
        );
        let _ = stream
            .write_all(plain_response(StatusCode::FORBIDDEN, "", &message).as_bytes())
            .await;
        return;
    }
    let config = match injector.ca.server_config(&connect.host) {
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
    let accepted = tokio::select! {
        accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, TlsAcceptor::from(config).accept(stream)) => accepted,
        () = call.ended.cancelled() => return,
    };
    let Ok(Ok(tls)) = accepted else {
        return;
    };
    let tunnel = Arc::new(Tunnel {
        injector,
        call: call.clone(),
        host: connect.host,
        port: connect.port,
        upstream: tokio::sync::Mutex::new(None),
    });
    let service = service_fn(move |request| {
        let tunnel = tunnel.clone();
        async move { Ok::<_, Infallible>(tunnel.forward(request).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tls), service);
    // The tunnel dies with its call, whatever the child keeps open.
    tokio::select! {
        _ = connection => {}
        () = call.ended.cancelled() => {}
    }
}

/// Why a request was not forwarded (or failed upstream).
enum Failure {
    Refused(String),
    Upstream(String),
}

/// One open tunnel: its call, its host, and the upstream connection it reuses.
struct Tunnel {
    injector: Arc<Injector>,
    call: Arc<CallContext>,
    host: String,
    port: u16,
    upstream: tokio::sync::Mutex<Option<SendRequest<ProxyBody>>>,
}

impl RequestAudit {
    fn new(call: Option<&CallContext>, host: &str, method: &str, path: &str) -> Self {
        let caller = call.map(|call| call.caller.clone()).unwrap_or_default();
        Self {
            ts: jiff::Timestamp::now().to_string(),
            kind: "request",
            session: caller.session,
            contact: caller.contact,
            role: caller.role,
            cli: caller.cli,
            host: host.to_owned(),
            method: method.chars().take(32).collect(),
            path: path.chars().take(1024).collect(),
            decision: "allowed",
            reason: None,
            status: None,
        }
    }

    fn refuse(&mut self, reason: &str) {
        self.decision = "refused";
        self.reason = Some(reason.to_owned());
    }
}

fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn error_response(status: StatusCode, message: &str) -> Response<ProxyBody> {
    // JSON with `message`, which gh and most API clients print.
    let body = serde_json::json!({ "message": format!("porter: {message}") }).to_string();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .expect("static response")
}

impl Tunnel {
    async fn forward(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        let method = request.method().as_str().to_owned();
        let path = request.uri().path().to_owned();
        let mut audit = RequestAudit::new(Some(&self.call), &self.host, &method, &path);
        let response = match self.admit_and_send(request, &method, &path).await {
            Ok(response) => {
                audit.status = Some(response.status().as_u16());
                response
            }
            Err(Failure::Refused(reason)) => {
                audit.refuse(&reason);
                error_response(StatusCode::FORBIDDEN, &format!("refused: {reason}"))
            }
            Err(Failure::Upstream(reason)) => {
                // Admitted by the policy, but never answered by a verified upstream.
                audit.decision = "upstream_error";
                audit.reason = Some(reason.clone());
                error_response(StatusCode::BAD_GATEWAY, &reason)
            }
        };
        self.injector.audit.write_json(&audit);
        response
    }

    async fn admit_and_send(
        &self,
        request: Request<Incoming>,
        method: &str,
        path: &str,
    ) -> Result<Response<ProxyBody>, Failure> {
        let role = self.call.caller.role.as_deref();
        let (mut parts, body) = request.into_parts();
        // Inside the tunnel only plain requests: no second tunnel, no protocol switch
        // (whose bytes the policy could not read).
        if parts.method == Method::CONNECT || parts.headers.contains_key(header::UPGRADE) {
            return Err(Failure::Refused(
                "CONNECT and protocol upgrades are not proxied".into(),
            ));
        }
        // Some APIs run a POST as the method these name: the policy judged the POST.
        if METHOD_OVERRIDES
            .iter()
            .any(|name| parts.headers.contains_key(*name))
        {
            return Err(Failure::Refused(
                "method override headers are refused".into(),
            ));
        }
        // Origin form only: an absolute URI could name another authority than the
        // tunnel's host.
        let origin_form = parts
            .uri
            .path_and_query()
            .map_or("/", |path_and_query| path_and_query.as_str());
        parts.uri = origin_form
            .parse()
            .map_err(|_| Failure::Refused("unparsable request target".into()))?;
        let body = match self.call.entry.policy.check_head(role, method, path) {
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
                let bytes = Limited::new(body, MAX_GRAPHQL_BODY)
                    .collect()
                    .await
                    .map_err(|_| Failure::Refused("the GraphQL body is too large".into()))?
                    .to_bytes();
                RequestPolicy::check_graphql(&rules, &bytes).map_err(Failure::Refused)?;
                full(bytes)
            }
        };
        for name in ["proxy-authorization", "proxy-connection", "expect"] {
            parts.headers.remove(name);
        }
        let authority = if self.port == 443 {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        };
        // Whatever Host the child wrote, the request goes to the tunnel's host.
        parts.headers.insert(
            header::HOST,
            HeaderValue::from_str(&authority).expect("checked host name"),
        );
        for (_, value) in parts.headers.iter_mut() {
            match placeholder::swap(value.as_bytes(), &self.call.placeholders) {
                Ok(None) => {}
                Ok(Some(swapped)) => {
                    let mut swapped = HeaderValue::from_bytes(&swapped).map_err(|_| {
                        Failure::Refused("the secret cannot be carried in a header".into())
                    })?;
                    swapped.set_sensitive(true);
                    *value = swapped;
                }
                Err(placeholder::Foreign) => {
                    return Err(Failure::Refused(
                        "a placeholder that is not this call's (placeholders die with their call)"
                            .into(),
                    ));
                }
            }
        }
        parts.version = Version::HTTP_11;
        let response = self.send(Request::from_parts(parts, body)).await?;
        let (mut parts, body) = response.into_parts();
        // An upstream echoing the secret in a header gives the child only its placeholder.
        for (_, value) in parts.headers.iter_mut() {
            let mut text = value.as_bytes().to_vec();
            let mut changed = false;
            for (placeholder, secret) in &self.call.placeholders {
                if let Some(replaced) =
                    replace_all(&text, secret.as_bytes(), placeholder.as_bytes())
                {
                    text = replaced;
                    changed = true;
                }
            }
            if changed && let Ok(replaced) = HeaderValue::from_bytes(&text) {
                *value = replaced;
            }
        }
        Ok(Response::from_parts(parts, body.boxed()))
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
        let failed = |what: &str, error: &dyn std::fmt::Display| {
            Failure::Upstream(format!("failed to {what} {}: {error}", self.host))
        };
        let connecting = async {
            let stream = match self.injector.upstream_overrides.get(&self.host) {
                Some(address) => TcpStream::connect(address).await,
                None => TcpStream::connect((self.host.as_str(), self.port)).await,
            }
            .map_err(|error| failed("connect to", &error))?;
            let _ = stream.set_nodelay(true);
            let server_name =
                ServerName::try_from(self.host.clone()).map_err(|error| failed("name", &error))?;
            let tls = TlsConnector::from(self.injector.upstream_tls.clone())
                .connect(server_name, stream)
                .await
                .map_err(|error| failed("verify TLS of", &error))?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|error| failed("speak HTTP to", &error))?;
            tokio::spawn(connection);
            Ok(sender)
        };
        tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting)
            .await
            .map_err(|_| failed("connect to", &"timed out"))?
    }
}

fn replace_all(text: &[u8], needle: &[u8], replacement: &[u8]) -> Option<Vec<u8>> {
    if needle.is_empty() || !text.windows(needle.len()).any(|window| window == needle) {
        return None;
    }
    let mut output = Vec::with_capacity(text.len());
    let mut index = 0;
    while index < text.len() {
        if text[index..].starts_with(needle) {
            output.extend_from_slice(replacement);
            index += needle.len();
        } else {
            output.push(text[index]);
            index += 1;
        }
    }
    Some(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_heads_give_host_port_and_the_call_key() {
        let credential = STANDARD.encode("porter:porter_call_abc");
        let head = format!(
            "CONNECT API.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\nProxy-Authorization: Basic {credential}\r\n\r\n"
        );
        let connect = parse_connect(head.as_bytes()).ok().unwrap();
        assert_eq!(
            (connect.host.as_str(), connect.port, connect.key.as_deref()),
            ("api.github.com", 443, Some("porter_call_abc"))
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
    fn replace_all_swaps_every_occurrence() {
        assert_eq!(
            replace_all(b"a-SECRET-b-SECRET", b"SECRET", b"ph").unwrap(),
            b"a-ph-b-ph"
        );
        assert!(replace_all(b"nothing", b"SECRET", b"ph").is_none());
    }
}
