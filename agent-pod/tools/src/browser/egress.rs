//! The browser's guarded egress proxy: an HTTP proxy on a unix socket (in the
//! sandbox's runner directory) that a sandboxed Chromium reaches through the runner's
//! loopback relay. It is the browser's only way out.
//!
//! Every connection must carry the session's key (`Proxy-Authorization: Basic`, user
//! [`EGRESS_USER`]); without it the answer is 407, which the browser's DevTools client
//! answers and a plain command in the sandbox cannot. Each `CONNECT host:443` (https,
//! tunnelled without terminating TLS: no secret is involved) and each absolute-URI
//! request (`GET http://host/...`) is checked with exactly `web_fetch`'s rules: the
//! [`SsrfGuard`] parses the URL, resolves the name once, refuses it if any address is
//! private, loopback, link-local or metadata, applies the bot's URL blocklist, and the
//! proxy connects to the checked address itself (DNS pinned per request). Only ports 80
//! (http) and 443 (https) are reachable. Every redirect and sub-request the page makes
//! is a new request here, checked again.
//!
//! Touches the network only to connect to addresses the guard accepted.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use base64::Engine;
use subtle::ConstantTimeEq;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpStream, UnixListener},
    task::JoinSet,
};

use crate::guard::ssrf::{SsrfError, SsrfGuard};

/// The user name the browser answers the challenge with (the key is the password).
pub const EGRESS_USER: &str = "saint-browser";

/// Largest request head read before a verdict.
const MAX_HEAD: usize = 16 * 1024;

/// How long a client may take to send its request head.
const HEAD_DEADLINE: Duration = Duration::from_secs(30);

/// How long connecting to a checked address may take.
const CONNECT_DEADLINE: Duration = Duration::from_secs(15);

/// Most connections one session's proxy serves at once.
const MAX_CONNECTIONS: usize = 64;

/// What one session's proxy did, for metering.
#[derive(Debug, Default)]
pub struct EgressCounts {
    /// Requests (CONNECTs and plain ones) let through.
    pub allowed: AtomicU64,
    /// Requests refused by the guard, the port rule or a bad request.
    pub refused: AtomicU64,
    /// Connections without the key.
    pub unauthenticated: AtomicU64,
    /// Bytes from the browser to sites.
    pub bytes_sent: AtomicU64,
    /// Bytes from sites to the browser.
    pub bytes_received: AtomicU64,
}

/// One browser session's egress: the guard, the bot's blocklist and the session's key.
pub struct Egress {
    guard: Arc<SsrfGuard>,
    blocklist: Vec<String>,
    key: String,
    /// What it did.
    pub counts: Arc<EgressCounts>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Egress")
            .field("blocklist", &self.blocklist)
            .field("key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Why one request got no connection; the text goes back in the proxy's answer.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("{0}")]
    Guard(#[from] SsrfError),
    #[error(
        "port {0} is not reachable through the browser's proxy (only 80 for http and 443 for https)"
    )]
    Port(u16),
    #[error("malformed proxy request: {0}")]
    Malformed(String),
    #[error("failed to connect to {0}")]
    Connect(String),
}

impl Egress {
    /// The egress of one session.
    pub fn new(guard: Arc<SsrfGuard>, blocklist: Vec<String>, key: String) -> Self {
        Self {
            guard,
            blocklist,
            key,
            counts: Arc::default(),
        }
    }

    /// Serves `listener` until the returned task is aborted; aborting it drops every
    /// connection too (the session ended: its tunnels end with it).
    pub fn serve(self: Arc<Self>, listener: UnixListener) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                while connections.try_join_next().is_some() {}
                if connections.len() >= MAX_CONNECTIONS {
                    continue;
                }
                let egress = self.clone();
                connections.spawn(async move { egress.handle(stream).await });
            }
        })
    }

    fn key_matches(&self, head: &httparse::Request<'_, '_>) -> bool {
        let Some(value) = head
            .headers
            .iter()
            .find(|header| header.name.eq_ignore_ascii_case("proxy-authorization"))
            .and_then(|header| std::str::from_utf8(header.value).ok())
        else {
            return false;
        };
        let Some(encoded) = value
            .strip_prefix("Basic ")
            .or(value.strip_prefix("basic "))
        else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let expected = format!("{EGRESS_USER}:{}", self.key);
        bool::from(decoded.as_slice().ct_eq(expected.as_bytes()))
    }

    /// Serves one connection: reads the head, checks the key and the target, then
    /// tunnels (CONNECT) or forwards one request (absolute URI).
    async fn handle<S: AsyncRead + AsyncWrite + Unpin>(&self, mut client: S) {
        let Ok(Ok(Some((head_bytes, leftover)))) =
            tokio::time::timeout(HEAD_DEADLINE, read_head(&mut client)).await
        else {
            return;
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Request::new(&mut headers);
        if !matches!(head.parse(&head_bytes), Ok(httparse::Status::Complete(_))) {
            self.counts.refused.fetch_add(1, Ordering::Relaxed);
            let _ = answer(&mut client, 400, "Bad Request", "malformed request head").await;
            return;
        }
        if !self.key_matches(&head) {
            self.counts.unauthenticated.fetch_add(1, Ordering::Relaxed);
            let _ = client
                .write_all(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n\
                      Proxy-Authenticate: Basic realm=\"saint-browser\"\r\n\
                      Content-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            return;
        }
        let method = head.method.unwrap_or_default().to_string();
        let target = head.path.unwrap_or_default().to_string();
        let connected = if method.eq_ignore_ascii_case("CONNECT") {
            self.open(&format!("https://{target}/"), 443).await
        } else {
            self.open(&target, 80).await
        };
        let (mut upstream, shown) = match connected {
            Ok(connected) => connected,
            Err(refused) => {
                self.counts.refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%method, target = %shown_target(&target), reason = %refused, "browser egress refused");
                let _ = answer(&mut client, 403, "Forbidden", &refused.to_string()).await;
                return;
            }
        };
        self.counts.allowed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%method, target = %shown, "browser egress allowed");
        if method.eq_ignore_ascii_case("CONNECT") {
            if client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            if !leftover.is_empty() && upstream.write_all(&leftover).await.is_err() {
                return;
            }
        } else {
            let forwarded = origin_form_head(&head);
            if upstream.write_all(&forwarded).await.is_err()
                || upstream.write_all(&leftover).await.is_err()
            {
                return;
            }
        }
        if let Ok((sent, received)) =
            tokio::io::copy_bidirectional(&mut client, &mut upstream).await
        {
            self.counts.bytes_sent.fetch_add(sent, Ordering::Relaxed);
            self.counts
                .bytes_received
                .fetch_add(received, Ordering::Relaxed);
        }
    }

    /// Checks `url` as `web_fetch` would and connects to a checked address on
    /// `expected_port`.
    async fn open(&self, url: &str, expected_port: u16) -> Result<(TcpStream, String), Refused> {
        let checked = self.guard.check_url(url, &self.blocklist)?;
        let scheme_port = if expected_port == 443 {
            "https"
        } else {
            "http"
        };
        if checked.url.scheme() != scheme_port {
            return Err(Refused::Malformed(format!(
                "expected an {scheme_port} target, got {url:?}"
            )));
        }
        let port = checked
            .url
            .port_or_known_default()
            .ok_or_else(|| Refused::Malformed(format!("no port in {url:?}")))?;
        if port != expected_port {
            return Err(Refused::Port(port));
        }
        let addresses = self
            .guard
            .resolve_checked(&checked, &self.blocklist)
            .await?;
        let shown = format!("{}:{port}", checked.host);
        for address in addresses {
            let target: SocketAddr = self.guard.route(address, port);
            if let Ok(Ok(stream)) =
                tokio::time::timeout(CONNECT_DEADLINE, TcpStream::connect(target)).await
            {
                let _ = stream.set_nodelay(true);
                return Ok((stream, shown));
            }
        }
        Err(Refused::Connect(shown))
    }
}

/// The target as logged: scheme, host and port only (paths and queries may carry what
/// a page sends away).
fn shown_target(target: &str) -> String {
    match url::Url::parse(target) {
        Ok(url) => format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default()),
        Err(_) => target.split('/').next().unwrap_or_default().to_string(),
    }
}

/// Reads until the end of the request head; returns the head and any bytes after it.
async fn read_head<S: AsyncRead + Unpin>(
    client: &mut S,
) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 4096];
    loop {
        let read = client.read(&mut chunk).await?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            let leftover = buffer.split_off(end + 4);
            return Ok(Some((buffer, leftover)));
        }
        if buffer.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// The request as the site gets it: origin-form target, no proxy headers, one request
/// per connection (a second request on it could not be checked).
fn origin_form_head(head: &httparse::Request<'_, '_>) -> Vec<u8> {
    let target = head.path.unwrap_or("/");
    let origin_form = match url::Url::parse(target) {
        Ok(url) => {
            let mut path = url.path().to_string();
            if let Some(query) = url.query() {
                path.push('?');
                path.push_str(query);
            }
            path
        }
        Err(_) => "/".to_string(),
    };
    let mut out = format!(
        "{} {origin_form} HTTP/1.1\r\n",
        head.method.unwrap_or("GET")
    )
    .into_bytes();
    for header in head.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "proxy-authorization" | "proxy-connection" | "connection" | "keep-alive"
        ) {
            continue;
        }
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

async fn answer<S: AsyncWrite + Unpin>(
    client: &mut S,
    status: u16,
    reason: &str,
    message: &str,
) -> std::io::Result<()> {
    let body = format!("{message}\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(response.as_bytes()).await
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, net::IpAddr};

    use futures::future::BoxFuture;
    use tokio::net::TcpListener;

    use super::*;
    use crate::guard::ssrf::Resolver;

    const PUBLIC: &str = "93.184.215.14";

    struct Names(HashMap<&'static str, Vec<IpAddr>>);

    impl Resolver for Names {
        fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
            Box::pin(async move {
                self.0.get(host).cloned().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such name")
                })
            })
        }
    }

    /// A site on loopback that counts connections; the guard routes the public test
    /// address to it.
    async fn site() -> (SocketAddr, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let _ = read_head(&mut stream).await;
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        (address, hits)
    }

    fn egress(site: SocketAddr, probe: SocketAddr) -> Arc<Egress> {
        let names = Names(HashMap::from([
            ("site.acme-test.com", vec![PUBLIC.parse().unwrap()]),
            ("rebind.acme-test.com", vec![probe.ip()]),
            (
                "mixed.acme-test.com",
                vec![PUBLIC.parse().unwrap(), "10.0.0.7".parse().unwrap()],
            ),
        ]));
        let guard = SsrfGuard::new(Arc::new(names)).with_test_route(PUBLIC.parse().unwrap(), site);
        Arc::new(Egress::new(
            Arc::new(guard),
            vec!["*blocked.acme-test.com*".to_string()],
            "session-key".to_string(),
        ))
    }

    fn authorization(key: &str) -> String {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{EGRESS_USER}:{key}"));
        format!("Proxy-Authorization: Basic {encoded}\r\n")
    }

    async fn ask(egress: &Arc<Egress>, request: String) -> String {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let serving = {
            let egress = egress.clone();
            tokio::spawn(async move { egress.handle(server).await })
        };
        client.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
            .await
            .expect("the proxy answered within 10 s");
        // The site closed its side; the client closing its own ends the tunnel.
        drop(client);
        serving.await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn a_keyless_request_is_challenged_and_reaches_nothing() {
        let (site, site_hits) = site().await;
        let (probe, probe_hits) = super::tests::site().await;
        let egress = egress(site, probe);
        let answer = ask(
            &egress,
            "GET http://site.acme-test.com/ HTTP/1.1\r\nHost: site.acme-test.com\r\n\r\n"
                .to_string(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
        let wrong = ask(
            &egress,
            format!(
                "CONNECT site.acme-test.com:443 HTTP/1.1\r\n{}\r\n",
                authorization("another-key")
            ),
        )
        .await;
        assert!(wrong.starts_with("HTTP/1.1 407"), "{wrong}");
        assert_eq!(site_hits.load(Ordering::SeqCst), 0);
        assert_eq!(probe_hits.load(Ordering::SeqCst), 0);
        assert_eq!(egress.counts.unauthenticated.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_public_site_is_reached_and_internal_targets_are_refused() {
        let (site, site_hits) = site().await;
        let (probe, probe_hits) = super::tests::site().await;
        let egress = egress(site, probe);
        let key = authorization("session-key");
        let page = ask(
            &egress,
            format!("GET http://site.acme-test.com/a?b=c HTTP/1.1\r\nHost: site.acme-test.com\r\n{key}\r\n"),
        )
        .await;
        assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
        assert!(page.ends_with("ok"), "{page}");
        assert_eq!(site_hits.load(Ordering::SeqCst), 1);

        let probe_port = probe.port();
        for (request, expected) in [
            (
                format!("GET http://127.0.0.1:{probe_port}/ HTTP/1.1\r\n{key}\r\n"),
                "non-public",
            ),
            (
                format!("CONNECT 127.0.0.1:{probe_port} HTTP/1.1\r\n{key}\r\n"),
                "non-public",
            ),
            (
                format!("GET http://[::1]:{probe_port}/ HTTP/1.1\r\n{key}\r\n"),
                "non-public",
            ),
            (
                format!("GET http://169.254.169.254/latest/meta-data HTTP/1.1\r\n{key}\r\n"),
                "non-public",
            ),
            (
                format!("CONNECT 10.1.2.3:443 HTTP/1.1\r\n{key}\r\n"),
                "non-public",
            ),
            (
                format!("GET http://rebind.acme-test.com/ HTTP/1.1\r\n{key}\r\n"),
                "non-public",
            ),
            (
                format!("CONNECT mixed.acme-test.com:443 HTTP/1.1\r\n{key}\r\n"),
                "non-public",
            ),
            (
                format!("GET http://localhost/ HTTP/1.1\r\n{key}\r\n"),
                "internal or local",
            ),
            (
                format!("GET http://2130706433/ HTTP/1.1\r\n{key}\r\n"),
                "non-canonical",
            ),
            (
                format!("GET http://site.acme-test.com:8080/ HTTP/1.1\r\n{key}\r\n"),
                "port 8080",
            ),
            (
                format!("CONNECT site.acme-test.com:22 HTTP/1.1\r\n{key}\r\n"),
                "port 22",
            ),
            (
                format!("GET http://blocked.acme-test.com/ HTTP/1.1\r\n{key}\r\n"),
                "blocklist",
            ),
            (
                format!("GET ftp://site.acme-test.com/ HTTP/1.1\r\n{key}\r\n"),
                "http",
            ),
        ] {
            let answer = ask(&egress, request.clone()).await;
            assert!(answer.starts_with("HTTP/1.1 403"), "{request:?} → {answer}");
            assert!(answer.contains(expected), "{request:?} → {answer}");
        }
        assert_eq!(
            probe_hits.load(Ordering::SeqCst),
            0,
            "the probe saw a connection"
        );
        assert_eq!(site_hits.load(Ordering::SeqCst), 1);
        assert_eq!(egress.counts.refused.load(Ordering::SeqCst), 13);
        assert_eq!(egress.counts.allowed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_site_gets_an_origin_form_request_without_the_key() {
        let raw = format!(
            "GET http://site.acme-test.com/a?b=c HTTP/1.1\r\nHost: site.acme-test.com\r\n{}Proxy-Connection: keep-alive\r\n\r\n",
            authorization("session-key")
        );
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut head = httparse::Request::new(&mut headers);
        head.parse(raw.as_bytes()).unwrap();
        let forwarded = String::from_utf8(origin_form_head(&head)).unwrap();
        assert_eq!(
            forwarded,
            "GET /a?b=c HTTP/1.1\r\nHost: site.acme-test.com\r\nConnection: close\r\n\r\n"
        );
    }
}
