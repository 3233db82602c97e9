//! Which `Host` names the agent's listeners answer. A browser sends the name it was
//! pointed at, so a page on another site that points its own name at this machine (DNS
//! rebinding) is refused with 421 before any route runs. Pure policy plus one
//! middleware; the listeners' addresses and the known names come from `main`.

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use axum::{
    Router,
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};

/// The names every listener answers to: the machine's own, which no other site can claim.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The `Host` names a listener answers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHosts {
    /// Lower-case, without port, brackets or trailing dot.
    names: BTreeSet<String>,
    /// Any IP address literal. Only a name can be rebound: a browser pointed at an
    /// address sends that address, and its pages are this server's own origin.
    any_address: bool,
    /// The channels' webhook paths take any name: a pod whose webhook Ingress host was
    /// not passed in. Platforms sign what they send there, and the answers hold nothing
    /// private.
    webhooks_from_any_host: bool,
}

impl AllowedHosts {
    /// The names for a listener bound to `address`: loopback names only when it is a
    /// loopback address; past loopback, any IP address literal too. `public` adds the
    /// names the listener is reached by (`--public-host`).
    pub fn for_listener(address: SocketAddr, public: &[String]) -> Self {
        let mut names: BTreeSet<String> = LOOPBACK_NAMES.iter().map(ToString::to_string).collect();
        names.extend(public.iter().filter_map(|name| normalise(name)));
        Self {
            names,
            any_address: !address.ip().is_loopback(),
            webhooks_from_any_host: false,
        }
    }

    /// Adds the names of the bot's Service in the cluster (`<bot>`, `<bot>.<namespace>`,
    /// `….svc`, `….svc.cluster.local`), which other pods call it by.
    pub fn with_service(mut self, bot: &str, namespace: &str) -> Self {
        if bot.is_empty() || namespace.is_empty() {
            return self;
        }
        let service = format!("{bot}.{namespace}");
        for name in [
            bot.to_string(),
            format!("{service}.svc.cluster.local"),
            format!("{service}.svc"),
            service,
        ] {
            self.names.extend(normalise(&name));
        }
        self
    }

    /// Lets the webhook paths answer any name (see the field).
    pub fn with_webhooks_from_any_host(mut self) -> Self {
        self.webhooks_from_any_host = true;
        self
    }

    /// Whether a request for `path` naming `host` (a `Host` header or a URI authority)
    /// is answered.
    pub fn allows(&self, host: &str, path: &str) -> bool {
        if self.webhooks_from_any_host && is_webhook_path(path) {
            return true;
        }
        let Some(name) = host_name(host) else {
            return false;
        };
        if self.names.contains(&name) {
            return true;
        }
        match name.parse::<IpAddr>() {
            Ok(address) => self.any_address || address.is_loopback(),
            Err(_) => false,
        }
    }

    /// The names, for the refusal and the log.
    pub fn describe(&self) -> String {
        let mut described: Vec<String> = self
            .names
            .iter()
            .map(|name| {
                if name.contains(':') {
                    format!("[{name}]")
                } else {
                    name.clone()
                }
            })
            .collect();
        if self.any_address {
            described.push("any IP address".to_string());
        }
        described.join(", ")
    }

    /// `router`, answering only the names allowed here.
    pub fn guard(self, router: Router) -> Router {
        router.layer(middleware::from_fn_with_state(
            Arc::new(self),
            refuse_other_hosts,
        ))
    }
}

/// `/channels/<name>/webhook`, the one route a platform calls.
fn is_webhook_path(path: &str) -> bool {
    path.strip_prefix("/channels/")
        .and_then(|rest| rest.strip_suffix("/webhook"))
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// A name as compared: lower case, no trailing dot, no brackets around an IPv6 address.
fn normalise(name: &str) -> Option<String> {
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    let name = name
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(&name);
    (!name.is_empty()).then(|| name.to_string())
}

/// The name of a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`); `None` when it
/// is none of these, so `127.0.0.1.evil.example` stays a name and never an address.
fn host_name(host: &str) -> Option<String> {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let (inner, after) = rest.split_once(']')?;
            inner.parse::<std::net::Ipv6Addr>().ok()?;
            (inner, after.strip_prefix(':'))
        }
        None => match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    if port.is_some_and(|port| port.parse::<u16>().is_err()) {
        return None;
    }
    let valid = |character: char| character.is_ascii_alphanumeric() || "-._:".contains(character);
    if !name.chars().all(valid) {
        return None;
    }
    normalise(name)
}

async fn refuse_other_hosts(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    // An absolute request target names the host too, and takes precedence over `Host`.
    let named: Vec<&str> = request
        .uri()
        .authority()
        .map(|authority| authority.as_str())
        .into_iter()
        .chain(
            request
                .headers()
                .get(header::HOST)
                .and_then(|value| value.to_str().ok()),
        )
        .collect();
    if named.is_empty() && !(allowed.webhooks_from_any_host && is_webhook_path(path)) {
        return (StatusCode::BAD_REQUEST, "a Host header is required\n").into_response();
    }
    if let Some(refused) = named.iter().find(|host| !allowed.allows(host, path)) {
        tracing::debug!(host = %refused, %path, "refused a request for another host");
        return (
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this server answers only to {} (add a name with --public-host or \
                 SAINT_PUBLIC_HOSTS)\n",
                allowed.describe()
            ),
        )
            .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> AllowedHosts {
        AllowedHosts::for_listener("127.0.0.1:8080".parse().unwrap(), &[])
    }

    #[test]
    fn a_loopback_listener_answers_loopback_names_with_or_without_a_port() {
        let allowed = loopback();
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.:8080",
            "127.0.0.1:8080",
            "127.0.0.2",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(allowed.allows(host, "/chat"), "{host}");
        }
    }

    #[test]
    fn a_loopback_listener_refuses_other_names_and_addresses_on_every_path() {
        let allowed = loopback();
        for host in [
            "evil.example",
            "evil.example:8080",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "10.0.0.5:8080",
            "[2001:db8::1]:8080",
            "",
            "localhost:80:80",
            "localhost:port",
            "[::1",
            "local host",
        ] {
            for path in [
                "/chat",
                "/v1/messages",
                "/channels/whatsapp/webhook",
                "/readyz",
            ] {
                assert!(!allowed.allows(host, path), "{host} {path}");
            }
        }
    }

    #[test]
    fn past_loopback_addresses_pass_and_names_only_when_known() {
        let allowed = AllowedHosts::for_listener(
            "0.0.0.0:8080".parse().unwrap(),
            &["Chat.Acme.Example.".to_string()],
        )
        .with_service("my-bot", "acme");
        for host in [
            "10.0.0.5:8080",
            "[2001:db8::1]:8080",
            "localhost:8080",
            "chat.acme.example",
            "my-bot:8080",
            "my-bot.acme",
            "my-bot.acme.svc",
            "my-bot.acme.svc.cluster.local:8080",
        ] {
            assert!(allowed.allows(host, "/v1/messages"), "{host}");
        }
        for host in [
            "evil.example",
            "127.0.0.1.evil.example",
            "my-bot.other",
            "my-bot.acme.svc.evil.example",
            "10.0.0.5.nip.io",
        ] {
            assert!(!allowed.allows(host, "/v1/messages"), "{host}");
        }
    }

    #[test]
    fn only_webhook_paths_take_any_host_when_asked() {
        let allowed = AllowedHosts::for_listener("0.0.0.0:8080".parse().unwrap(), &[])
            .with_webhooks_from_any_host();
        assert!(allowed.allows("hooks.acme.example", "/channels/whatsapp/webhook"));
        for path in [
            "/channels/whatsapp/webhook/extra",
            "/channels//webhook",
            "/v1/messages",
            "/chat",
            "/readyz",
        ] {
            assert!(!allowed.allows("hooks.acme.example", path), "{path}");
        }
    }

    async fn status_of(request: axum::http::Request<axum::body::Body>) -> StatusCode {
        use tower::ServiceExt;
        let router =
            loopback().guard(Router::new().route("/", axum::routing::get(|| async { "ok" })));
        router.oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn the_guard_runs_before_any_route_and_reads_every_name_a_request_carries() {
        let request = |uri: &str, host: Option<&str>| {
            let mut builder = axum::http::Request::get(uri);
            if let Some(host) = host {
                builder = builder.header(header::HOST, host);
            }
            builder.body(axum::body::Body::empty()).unwrap()
        };
        assert_eq!(
            status_of(request("/", Some("localhost:8080"))).await,
            StatusCode::OK
        );
        assert_eq!(
            status_of(request("/missing", Some("localhost"))).await,
            StatusCode::NOT_FOUND
        );
        for refused in [
            request("/", Some("evil.example")),
            request("/missing", Some("evil.example")),
            // An absolute target names the host the request is for, whatever `Host` says.
            request("http://evil.example/", Some("localhost")),
        ] {
            assert_eq!(status_of(refused).await, StatusCode::MISDIRECTED_REQUEST);
        }
        assert_eq!(status_of(request("/", None)).await, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn the_refusal_names_what_is_answered() {
        let allowed = AllowedHosts::for_listener("0.0.0.0:8080".parse().unwrap(), &[]);
        assert_eq!(
            allowed.describe(),
            "127.0.0.1, [::1], localhost, any IP address"
        );
    }
}
