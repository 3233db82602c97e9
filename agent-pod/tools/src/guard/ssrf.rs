//! SSRF guard for `web_fetch`: decides whether a URL may be fetched and fetches it
//! connecting only to addresses it has checked.
//!
//! Touches the network only through [`SsrfGuard::fetch`]. Decisions are made on the URL
//! as parsed by the `url` crate (never on the raw string) and on every address the host
//! resolves to: a host is refused if *any* of its addresses is non-public. Each redirect
//! hop is checked again (reqwest follows no redirects itself), and each request is
//! pinned to the checked addresses with `resolve_to_addrs` while every other name fails
//! to resolve, so a second DNS answer (rebinding) can never be used. No proxy is used.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt, future::BoxFuture};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use ipnet::{Ipv4Net, Ipv6Net};
use url::{Host, Url};

/// Why a URL was refused or a fetch failed. Messages are shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SsrfError {
    #[error("failed to parse URL: {0}")]
    InvalidUrl(String),
    #[error("only http and https URLs may be fetched, not {0:?}")]
    Scheme(String),
    #[error("URLs with user names or passwords are refused")]
    Credentials,
    #[error("host {0:?} is internal or local and may not be fetched")]
    BlockedHost(String),
    #[error(
        "host {0:?} is a non-canonical IP address spelling; write the address in dotted-quad form"
    )]
    NonCanonicalAddress(String),
    #[error("host {host:?} resolves to a non-public address ({address}) and may not be fetched")]
    BlockedAddress { host: String, address: IpAddr },
    #[error("URL {0:?} is on this bot's blocklist")]
    Blocklisted(String),
    #[error("failed to resolve host {0:?}")]
    Resolve(String),
    #[error("too many redirects (more than {0})")]
    TooManyRedirects(usize),
    #[error("redirect without a usable Location header")]
    BadRedirect,
    #[error("timed out after {0} s")]
    Timeout(u64),
    #[error("failed to fetch: {0}")]
    Fetch(String),
}

/// Resolves host names to addresses. Injectable so tests can make a public-looking name
/// resolve to loopback (which must then be refused).
pub trait Resolver: Send + Sync {
    /// All addresses of `host`.
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>>;
}

/// The system resolver (`getaddrinfo` via tokio).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addresses = tokio::net::lookup_host((host, 0)).await?;
            Ok(addresses.map(|address| address.ip()).collect())
        })
    }
}

/// Names that are never fetched, whatever they resolve to (exact names or suffixes).
const BLOCKED_NAMES: &[&str] = &[
    "localhost",
    "localhost.localdomain",
    "ip6-localhost",
    "ip6-loopback",
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "kubernetes",
];
const BLOCKED_SUFFIXES: &[&str] = &[
    ".localhost",
    ".localdomain",
    ".local",
    ".internal",
    ".intranet",
    ".corp",
    ".lan",
    ".home",
    ".home.arpa",
    ".arpa",
    ".svc",
    ".cluster.local",
    ".test",
    ".invalid",
    ".example",
];

/// IPv4 ranges that are not public unicast.
const BLOCKED_V4: &[&str] = &[
    "0.0.0.0/8",       // "this network", unspecified
    "10.0.0.0/8",      // private
    "100.64.0.0/10",   // CGNAT shared address space
    "127.0.0.0/8",     // loopback
    "169.254.0.0/16",  // link-local, cloud metadata (169.254.169.254)
    "172.16.0.0/12",   // private
    "192.0.0.0/24",    // IETF protocol assignments
    "192.0.2.0/24",    // documentation TEST-NET-1
    "192.31.196.0/24", // AS112
    "192.52.193.0/24", // AMT
    "192.88.99.0/24",  // 6to4 relay anycast
    "192.168.0.0/16",  // private
    "192.175.48.0/24", // AS112 direct delegation
    "198.18.0.0/15",   // benchmarking
    "198.51.100.0/24", // documentation TEST-NET-2
    "203.0.113.0/24",  // documentation TEST-NET-3
    "224.0.0.0/4",     // multicast
    "240.0.0.0/4",     // reserved, broadcast
];

/// IPv6 ranges refused inside global unicast (2000::/3); everything outside 2000::/3 is
/// refused too (loopback, unspecified, mapped, compatible, NAT64, ULA, link-local,
/// site-local, multicast, discard).
const BLOCKED_V6: &[&str] = &[
    "2001::/23", // IETF protocol assignments, including Teredo 2001::/32, benchmarking, ORCHID
    "2001:db8::/32", // documentation
    "2002::/16", // 6to4 (embeds an IPv4 address)
    "3fff::/20", // documentation
];

/// Whether `address` is a public unicast address a fetch may connect to.
pub fn is_public_address(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(address: Ipv4Addr) -> bool {
    !BLOCKED_V4.iter().any(|range| {
        range
            .parse::<Ipv4Net>()
            .expect("built-in IPv4 ranges parse")
            .contains(&address)
    })
}

fn is_public_v6(address: Ipv6Addr) -> bool {
    // Mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::/96, 64:ff9b:1::/48) addresses fall
    // outside 2000::/3 and are refused here, whatever IPv4 address they carry.
    let global_unicast: Ipv6Net = "2000::/3".parse().expect("valid range");
    if !global_unicast.contains(&address) {
        return false;
    }
    !BLOCKED_V6.iter().any(|range| {
        range
            .parse::<Ipv6Net>()
            .expect("built-in IPv6 ranges parse")
            .contains(&address)
    })
}

/// Whether a host name (lower case, without a trailing dot) is internal by name alone.
fn is_blocked_name(name: &str) -> bool {
    // Single-label names resolve through search domains to cluster-internal services.
    !name.contains('.')
        || BLOCKED_NAMES.contains(&name)
        || BLOCKED_SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
}

/// Extracts the host as written in the raw URL (after `://`, before path, port and
/// userinfo), lower-cased, to compare IPv4 spellings with their canonical form.
fn raw_host(raw: &str) -> Option<String> {
    let after_scheme = raw.split_once("://")?.1;
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host_port.starts_with('[') {
        return None;
    }
    let host = host_port.split(':').next().unwrap_or_default();
    Some(host.to_ascii_lowercase())
}

/// A URL that passed the name-level checks.
#[derive(Clone, Debug)]
pub struct CheckedUrl {
    /// The parsed URL.
    pub url: Url,
    /// The host, lower case, without a trailing dot.
    pub host: String,
    /// A literal IP host, if the URL named one.
    pub literal: Option<IpAddr>,
}

/// Size and time limits of one fetch.
#[derive(Clone, Copy, Debug)]
pub struct FetchLimits {
    /// Largest body kept, in bytes; the rest is dropped and the result marked truncated.
    pub max_bytes: usize,
    /// Time for the whole fetch, redirects included.
    pub timeout: Duration,
    /// Redirect hops followed.
    pub max_redirects: usize,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            max_bytes: 2 * 1024 * 1024,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
        }
    }
}

/// A fetched response.
#[derive(Clone, Debug)]
pub struct Fetched {
    /// The URL of the last hop.
    pub final_url: Url,
    /// HTTP status of the last hop.
    pub status: u16,
    /// `Content-Type` of the last hop.
    pub content_type: Option<String>,
    /// The body, at most `max_bytes`.
    pub body: Vec<u8>,
    /// Whether the body was cut at `max_bytes`.
    pub truncated: bool,
}

/// The guard: a resolver plus (for tests) a route from a checked public address to a
/// local test server.
#[derive(Clone)]
pub struct SsrfGuard {
    resolver: Arc<dyn Resolver>,
    test_routes: Vec<(IpAddr, SocketAddr)>,
    user_agent: String,
}

impl std::fmt::Debug for SsrfGuard {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SsrfGuard")
            .field("test_routes", &self.test_routes)
            .finish_non_exhaustive()
    }
}

impl Default for SsrfGuard {
    fn default() -> Self {
        Self::new(Arc::new(SystemResolver))
    }
}

impl SsrfGuard {
    /// A guard using `resolver`.
    pub fn new(resolver: Arc<dyn Resolver>) -> Self {
        Self {
            resolver,
            test_routes: Vec::new(),
            user_agent: "Mozilla/5.0 (compatible; assistant)".to_string(),
        }
    }

    /// Test support: after `public` has been checked (and accepted as public), connect to
    /// `actual` instead. The check still runs on `public`; this only lets a positive
    /// control reach a loopback server without exempting loopback from the checks.
    pub fn with_test_route(mut self, public: IpAddr, actual: SocketAddr) -> Self {
        self.test_routes.push((public, actual));
        self
    }

    /// Where to connect for a checked `address` and `port`: the address itself, or the
    /// test route's server when a test routes that address.
    pub fn route(&self, address: IpAddr, port: u16) -> SocketAddr {
        self.test_routes
            .iter()
            .find(|(public, _)| *public == address)
            .map_or(SocketAddr::new(address, port), |(_, actual)| *actual)
    }

    /// Name-level checks: scheme, credentials, blocked names, IPv4 spelling, literal
    /// addresses, the bot's blocklist.
    pub fn check_url(&self, raw: &str, blocklist: &[String]) -> Result<CheckedUrl, SsrfError> {
        let url =
            Url::parse(raw.trim()).map_err(|error| SsrfError::InvalidUrl(error.to_string()))?;
        self.check_parsed(url, raw.trim(), blocklist)
    }

    fn check_parsed(
        &self,
        url: Url,
        raw: &str,
        blocklist: &[String],
    ) -> Result<CheckedUrl, SsrfError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(SsrfError::Scheme(url.scheme().to_string()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(SsrfError::Credentials);
        }
        let (host, literal) = match url.host() {
            None => return Err(SsrfError::InvalidUrl("missing host".to_string())),
            Some(Host::Domain(domain)) => {
                let name = domain.trim_end_matches('.').to_ascii_lowercase();
                if name.is_empty() || is_blocked_name(&name) {
                    return Err(SsrfError::BlockedHost(name));
                }
                // A domain made only of digits and dots that the URL parser did not take
                // as an IPv4 address is some odd spelling: refuse rather than guess.
                if name
                    .chars()
                    .all(|character| character.is_ascii_digit() || character == '.')
                {
                    return Err(SsrfError::NonCanonicalAddress(name));
                }
                (name, None)
            }
            Some(Host::Ipv4(address)) => {
                // The URL parser accepts `127.1`, `0x7f.1`, `0177.0.0.1`, `2130706433`;
                // only the canonical dotted-quad spelling is accepted.
                let written = raw_host(raw).unwrap_or_default();
                let written = written.trim_end_matches('.');
                if written != address.to_string() {
                    return Err(SsrfError::NonCanonicalAddress(written.to_string()));
                }
                (address.to_string(), Some(IpAddr::V4(address)))
            }
            Some(Host::Ipv6(address)) => (address.to_string(), Some(IpAddr::V6(address))),
        };
        if let Some(address) = literal
            && !is_public_address(address)
        {
            return Err(SsrfError::BlockedAddress {
                host: host.clone(),
                address,
            });
        }
        let checked = CheckedUrl { url, host, literal };
        if blocklist_matches(blocklist, &checked, &[]) {
            return Err(SsrfError::Blocklisted(checked.url.to_string()));
        }
        Ok(checked)
    }

    /// Resolves a checked URL and returns the addresses to connect to; refuses if any
    /// address is non-public or blocklisted.
    pub async fn resolve_checked(
        &self,
        checked: &CheckedUrl,
        blocklist: &[String],
    ) -> Result<Vec<IpAddr>, SsrfError> {
        let addresses = match checked.literal {
            Some(address) => vec![address],
            None => self
                .resolver
                .resolve(&checked.host)
                .await
                .map_err(|_| SsrfError::Resolve(checked.host.clone()))?,
        };
        if addresses.is_empty() {
            return Err(SsrfError::Resolve(checked.host.clone()));
        }
        if let Some(address) = addresses
            .iter()
            .find(|address| !is_public_address(**address))
        {
            return Err(SsrfError::BlockedAddress {
                host: checked.host.clone(),
                address: *address,
            });
        }
        if blocklist_matches(blocklist, checked, &addresses) {
            return Err(SsrfError::Blocklisted(checked.url.to_string()));
        }
        Ok(addresses)
    }

    /// Fetches `raw` with GET, checking every hop and connecting only to checked addresses.
    pub async fn fetch(
        &self,
        raw: &str,
        blocklist: &[String],
        limits: FetchLimits,
    ) -> Result<Fetched, SsrfError> {
        let deadline = Instant::now() + limits.timeout;
        let timeout_seconds = limits.timeout.as_secs();
        let work = self.fetch_hops(raw, blocklist, limits, deadline);
        match tokio::time::timeout_at(deadline.into(), work).await {
            Ok(result) => result,
            Err(_) => Err(SsrfError::Timeout(timeout_seconds)),
        }
    }

    async fn fetch_hops(
        &self,
        raw: &str,
        blocklist: &[String],
        limits: FetchLimits,
        deadline: Instant,
    ) -> Result<Fetched, SsrfError> {
        let mut checked = self.check_url(raw, blocklist)?;
        let mut hops = 0;
        loop {
            let addresses = self.resolve_checked(&checked, blocklist).await?;
            let client = self.pinned_client(&checked, &addresses, deadline)?;
            let response = client
                .get(checked.url.clone())
                .send()
                .await
                .map_err(|error| SsrfError::Fetch(describe_reqwest_error(&error)))?;
            let status = response.status();
            if status.is_redirection() {
                hops += 1;
                if hops > limits.max_redirects {
                    return Err(SsrfError::TooManyRedirects(limits.max_redirects));
                }
                let location = response
                    .headers()
                    .get(http::header::LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .ok_or(SsrfError::BadRedirect)?;
                let next = checked
                    .url
                    .join(location)
                    .map_err(|_| SsrfError::BadRedirect)?;
                let next_raw = next.to_string();
                // Check the location as written too (a relative `//2130706433/` joins to
                // a canonical URL, so the spelling check needs the absolute form).
                let spelled = if location.contains("://") {
                    location.to_string()
                } else if location.starts_with("//") {
                    format!("{}:{location}", checked.url.scheme())
                } else {
                    next_raw.clone()
                };
                checked = self.check_parsed(next, &spelled, blocklist)?;
                continue;
            }
            let content_type = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .map(str::to_string);
            let mut body = Vec::new();
            let mut truncated = false;
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk =
                    chunk.map_err(|error| SsrfError::Fetch(describe_reqwest_error(&error)))?;
                let room = limits.max_bytes.saturating_sub(body.len());
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            return Ok(Fetched {
                final_url: checked.url,
                status: status.as_u16(),
                content_type,
                body,
                truncated,
            });
        }
    }

    /// A client for one hop: no redirects, no proxy, every name but this hop's host
    /// unresolvable, this host pinned to the checked addresses.
    fn pinned_client(
        &self,
        checked: &CheckedUrl,
        addresses: &[IpAddr],
        deadline: Instant,
    ) -> Result<reqwest::Client, SsrfError> {
        let port = checked.url.port_or_known_default().unwrap_or(80);
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(self.user_agent.clone())
            .dns_resolver(Arc::new(RefuseAllResolver))
            .timeout(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            );
        let targets: Vec<SocketAddr> = addresses
            .iter()
            .map(|address| self.route(*address, port))
            .collect();
        if checked.literal.is_none() {
            builder = builder.resolve_to_addrs(&checked.host, &targets);
        } else if targets.first().map(|target| target.ip()) != checked.literal {
            // A literal host is connected to directly; a test route cannot apply to it.
            return Err(SsrfError::Fetch("test routes need a host name".to_string()));
        }
        builder
            .build()
            .map_err(|error| SsrfError::Fetch(error.to_string()))
    }
}

/// A DNS resolver that resolves nothing: every host a hop may reach is pinned with
/// `resolve_to_addrs`, so any other lookup is a bug and must fail.
struct RefuseAllResolver;

impl reqwest::dns::Resolve for RefuseAllResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move { Err(format!("refusing unpinned DNS lookup of {host}").into()) })
    }
}

fn describe_reqwest_error(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "the request timed out".to_string()
    } else if error.is_connect() {
        "could not connect".to_string()
    } else if error.is_body() || error.is_decode() {
        "the response body could not be read".to_string()
    } else {
        "the request failed".to_string()
    }
}

/// Whether a blocklist glob matches the host, the whole URL, or a resolved address.
/// Patterns are case-insensitive; `*` matches any characters including `/` and `.`.
fn blocklist_matches(blocklist: &[String], checked: &CheckedUrl, addresses: &[IpAddr]) -> bool {
    if blocklist.is_empty() {
        return false;
    }
    let Some(set) = compile_blocklist(blocklist) else {
        // A malformed blocklist refuses everything rather than nothing.
        return true;
    };
    let url = checked.url.as_str();
    let url_without_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    set.is_match(&checked.host)
        || set.is_match(url)
        || set.is_match(url_without_scheme)
        || addresses
            .iter()
            .any(|address| set.is_match(address.to_string()))
}

fn compile_blocklist(blocklist: &[String]) -> Option<GlobSet> {
    let mut builder = GlobSetBuilder::new();
    for pattern in blocklist {
        let glob = GlobBuilder::new(&pattern.to_ascii_lowercase())
            .case_insensitive(true)
            .literal_separator(false)
            .build()
            .ok()?;
        builder.add(glob);
    }
    builder.build().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_addresses_pass_and_special_ranges_do_not() {
        for public in [
            "93.184.215.14",
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
        ] {
            assert!(is_public_address(public.parse().unwrap()), "{public}");
        }
        for blocked in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "198.18.0.1",
            "198.19.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "100::1",
        ] {
            assert!(!is_public_address(blocked.parse().unwrap()), "{blocked}");
        }
    }

    #[test]
    fn raw_host_extracts_the_written_host() {
        assert_eq!(
            raw_host("http://user@0x7f.1:80/x").as_deref(),
            Some("0x7f.1")
        );
        assert_eq!(
            raw_host("https://Example.COM/path?q").as_deref(),
            Some("example.com")
        );
    }

    #[test]
    fn blocklist_matches_hosts_urls_and_addresses() {
        let guard = SsrfGuard::default();
        let blocklist = vec![
            "admin.acme-corp.com".to_string(),
            "*.blocked.example.org".to_string(),
            "https://news.example.org/private/*".to_string(),
        ];
        assert!(matches!(
            guard.check_url("https://admin.acme-corp.com/", &blocklist),
            Err(SsrfError::Blocklisted(_))
        ));
        assert!(matches!(
            guard.check_url("https://ADMIN.acme-corp.com./x", &blocklist),
            Err(SsrfError::Blocklisted(_))
        ));
        assert!(matches!(
            guard.check_url("http://a.blocked.example.org/", &blocklist),
            Err(SsrfError::Blocklisted(_))
        ));
        assert!(matches!(
            guard.check_url("https://news.example.org/private/x", &blocklist),
            Err(SsrfError::Blocklisted(_))
        ));
        assert!(
            guard
                .check_url("https://news.example.org/public/x", &blocklist)
                .is_ok()
        );
        assert!(
            guard
                .check_url("https://acme-corp.com/", &blocklist)
                .is_ok()
        );
    }
}
