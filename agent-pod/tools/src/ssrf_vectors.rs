//! Table-driven SSRF vectors against real loopback servers. Test-only.
//!
//! Two axum servers run on 127.0.0.1: `target` stands for anything internal (every hit
//! on it is an SSRF success and fails the test); `allowed` stands for a public site and
//! is reached only through a checked public address (93.184.215.14) that the guard's
//! test route sends to it. `allowed` serves a page and redirects wherever asked, so
//! redirect hops towards internal addresses can be exercised.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    http::{StatusCode, Uri, header},
    response::{Html, IntoResponse, Response},
};
use futures::future::BoxFuture;

use crate::guard::ssrf::{FetchLimits, Resolver, SsrfError, SsrfGuard};
use crate::{
    ToolError,
    test_fixtures::{self, CallPermitted},
    web_fetch::WebFetchTool,
};

const PUBLIC_ADDRESS: &str = "93.184.215.14";

/// Name → addresses; names starting with `flip` answer public once, loopback afterwards.
struct MapResolver {
    names: HashMap<&'static str, Vec<IpAddr>>,
    flips: AtomicUsize,
}

impl Resolver for MapResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            if host.starts_with("flip") {
                let first = self.flips.fetch_add(1, Ordering::SeqCst) == 0;
                let address = if first { PUBLIC_ADDRESS } else { "127.0.0.1" };
                return Ok(vec![address.parse().unwrap()]);
            }
            self.names
                .get(host)
                .cloned()
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

fn resolver() -> Arc<MapResolver> {
    let entries: &[(&str, &[&str])] = &[
        ("allowed.acme-test.com", &[PUBLIC_ADDRESS]),
        ("rebind.acme-test.com", &["127.0.0.1"]),
        ("mixed.acme-test.com", &[PUBLIC_ADDRESS, "10.0.0.1"]),
        ("metadata-alias.acme-test.com", &["169.254.169.254"]),
        ("v6-loopback.acme-test.com", &["::1"]),
        ("mapped.acme-test.com", &["::ffff:127.0.0.1"]),
        ("nat64.acme-test.com", &["64:ff9b::7f00:1"]),
        ("sixtofour.acme-test.com", &["2002:7f00:1::1"]),
        ("cgnat.acme-test.com", &["100.64.0.1"]),
        ("ula.acme-test.com", &["fd00:ec2::254"]),
        ("empty.acme-test.com", &[]),
    ];
    let names = entries
        .iter()
        .map(|(name, addresses)| {
            (
                *name,
                addresses
                    .iter()
                    .map(|address| address.parse().unwrap())
                    .collect(),
            )
        })
        .collect();
    Arc::new(MapResolver {
        names,
        flips: AtomicUsize::new(0),
    })
}

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

/// The internal target: counts every request.
async fn target_server(hits: Arc<AtomicUsize>) -> SocketAddr {
    let router = Router::new().fallback(move || {
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            "INTERNAL-SECRET"
        }
    });
    serve(router).await
}

/// The "public" site: `/page` is HTML, `/redirect?to=<url>` redirects, `/hop/<n>?to=`
/// redirects through `n` more hops first.
async fn allowed_server(hits: Arc<AtomicUsize>) -> SocketAddr {
    let router = Router::new().fallback(move |uri: Uri| {
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            let query: HashMap<String, String> =
                url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
                    .into_owned()
                    .collect();
            let path = uri.path();
            if path == "/page" {
                return Html(
                    "<html><body><h1>Acme News</h1><p>Public <b>content</b>.</p></body></html>",
                )
                .into_response();
            }
            let redirect = |location: String| -> Response {
                (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
            };
            if path == "/redirect" {
                return redirect(query.get("to").cloned().unwrap_or_default());
            }
            if let Some(count) = path
                .strip_prefix("/hop/")
                .and_then(|count| count.parse::<u32>().ok())
            {
                let to = query.get("to").cloned().unwrap_or_default();
                let encoded: String = url::form_urlencoded::byte_serialize(to.as_bytes()).collect();
                return if count == 0 {
                    redirect(to)
                } else {
                    redirect(format!("/hop/{}?to={encoded}", count - 1))
                };
            }
            StatusCode::NOT_FOUND.into_response()
        }
    });
    serve(router).await
}

struct Harness {
    guard: SsrfGuard,
    target_hits: Arc<AtomicUsize>,
    allowed_hits: Arc<AtomicUsize>,
    target: SocketAddr,
    allowed: SocketAddr,
}

async fn harness() -> Harness {
    let target_hits = Arc::new(AtomicUsize::new(0));
    let allowed_hits = Arc::new(AtomicUsize::new(0));
    let target = target_server(target_hits.clone()).await;
    let allowed = allowed_server(allowed_hits.clone()).await;
    let guard =
        SsrfGuard::new(resolver()).with_test_route(PUBLIC_ADDRESS.parse().unwrap(), allowed);
    Harness {
        guard,
        target_hits,
        allowed_hits,
        target,
        allowed,
    }
}

fn limits() -> FetchLimits {
    FetchLimits {
        max_bytes: 64 * 1024,
        timeout: Duration::from_secs(5),
        max_redirects: 5,
    }
}

fn encode(url: &str) -> String {
    url::form_urlencoded::byte_serialize(url.as_bytes()).collect()
}

#[tokio::test]
async fn ssrf_vectors_are_all_refused_and_never_reach_the_internal_server() {
    let harness = harness().await;
    let port = harness.target.port();
    let allowed = format!("http://allowed.acme-test.com:{}", harness.allowed.port());
    let via_redirect = |to: String| format!("{allowed}/redirect?to={}", encode(&to));
    let vectors: Vec<(&str, String)> = vec![
        ("loopback literal", format!("http://127.0.0.1:{port}/")),
        ("localhost", format!("http://localhost:{port}/")),
        (
            "localhost upper case with trailing dot",
            format!("http://LOCALHOST.:{port}/"),
        ),
        (
            "subdomain of localhost",
            format!("http://api.localhost:{port}/"),
        ),
        ("short IPv4 127.1", format!("http://127.1:{port}/")),
        ("integer IPv4", format!("http://2130706433:{port}/")),
        ("hex integer IPv4", format!("http://0x7f000001:{port}/")),
        ("octal IPv4", format!("http://0177.0.0.1:{port}/")),
        ("hex dotted IPv4", format!("http://0x7f.0.0.1:{port}/")),
        ("IPv6 loopback", format!("http://[::1]:{port}/")),
        (
            "IPv4-mapped IPv6 loopback",
            format!("http://[::ffff:127.0.0.1]:{port}/"),
        ),
        (
            "IPv4-mapped hex form",
            format!("http://[::ffff:7f00:1]:{port}/"),
        ),
        ("unspecified IPv4", format!("http://0.0.0.0:{port}/")),
        ("unspecified IPv6", format!("http://[::]:{port}/")),
        (
            "cloud metadata IPv4",
            "http://169.254.169.254/latest/meta-data/".to_string(),
        ),
        (
            "cloud metadata name",
            "http://metadata.google.internal/computeMetadata/v1/".to_string(),
        ),
        (
            "cloud metadata IPv6",
            "http://[fd00:ec2::254]/latest/meta-data/".to_string(),
        ),
        ("private 10/8", "http://10.0.0.1/".to_string()),
        ("private 192.168/16", "http://192.168.1.1/".to_string()),
        ("private 172.16/12", "http://172.16.0.1/".to_string()),
        ("CGNAT", "http://100.64.0.1/".to_string()),
        ("benchmarking", "http://198.18.0.1/".to_string()),
        ("multicast", "http://224.0.0.1/".to_string()),
        ("broadcast", "http://255.255.255.255/".to_string()),
        ("documentation", "http://203.0.113.5/".to_string()),
        ("NAT64", format!("http://[64:ff9b::7f00:1]:{port}/")),
        ("6to4", "http://[2002:7f00:1::1]/".to_string()),
        (
            "Teredo",
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/".to_string(),
        ),
        ("IPv6 link-local", "http://[fe80::1]/".to_string()),
        ("IPv6 site-local", "http://[fec0::1]/".to_string()),
        ("IPv6 unique-local", "http://[fc00::1]/".to_string()),
        ("IPv6 multicast", "http://[ff02::1]/".to_string()),
        (
            "single-label cluster name",
            format!("http://kubernetes:{port}/"),
        ),
        (
            "cluster service name",
            format!("http://my-service.default.svc:{port}/"),
        ),
        ("mDNS name", format!("http://printer.local:{port}/")),
        (
            "internal suffix",
            format!("http://vault.corp.internal:{port}/"),
        ),
        (
            "public name resolving to loopback",
            format!("http://rebind.acme-test.com:{port}/"),
        ),
        (
            "one private address among public ones",
            format!("http://mixed.acme-test.com:{port}/"),
        ),
        (
            "name resolving to metadata",
            "http://metadata-alias.acme-test.com/".to_string(),
        ),
        (
            "name resolving to IPv6 loopback",
            format!("http://v6-loopback.acme-test.com:{port}/"),
        ),
        (
            "name resolving to mapped loopback",
            format!("http://mapped.acme-test.com:{port}/"),
        ),
        (
            "name resolving to NAT64 loopback",
            format!("http://nat64.acme-test.com:{port}/"),
        ),
        (
            "name resolving to 6to4 loopback",
            format!("http://sixtofour.acme-test.com:{port}/"),
        ),
        (
            "name resolving to CGNAT",
            format!("http://cgnat.acme-test.com:{port}/"),
        ),
        (
            "name resolving to unique-local",
            format!("http://ula.acme-test.com:{port}/"),
        ),
        (
            "name resolving to nothing",
            format!("http://empty.acme-test.com:{port}/"),
        ),
        (
            "redirect to loopback",
            via_redirect(format!("http://127.0.0.1:{port}/")),
        ),
        (
            "redirect to localhost",
            via_redirect(format!("http://localhost:{port}/")),
        ),
        (
            "redirect to name resolving to loopback",
            via_redirect(format!("http://rebind.acme-test.com:{port}/")),
        ),
        (
            "redirect to protocol-relative integer IPv4",
            via_redirect(format!("//2130706433:{port}/")),
        ),
        (
            "redirect to IPv6 loopback",
            via_redirect(format!("http://[::1]:{port}/")),
        ),
        (
            "redirect to metadata",
            via_redirect("http://169.254.169.254/latest/meta-data/".to_string()),
        ),
        (
            "redirect to file scheme",
            via_redirect("file:///etc/passwd".to_string()),
        ),
        (
            "redirect chain ending at loopback",
            format!(
                "{allowed}/hop/3?to={}",
                encode(&format!("http://127.0.0.1:{port}/"))
            ),
        ),
        (
            "too many redirects",
            format!("{allowed}/hop/9?to={}", encode(&format!("{allowed}/page"))),
        ),
        (
            "DNS rebinding between hops",
            format!(
                "http://flip.acme-test.com:{}/redirect?to={}",
                harness.allowed.port(),
                encode(&format!("http://flip.acme-test.com:{port}/"))
            ),
        ),
        ("file scheme", "file:///etc/passwd".to_string()),
        ("gopher scheme", format!("gopher://127.0.0.1:{port}/")),
        ("ftp scheme", "ftp://ftp.acme-test.com/".to_string()),
        ("data scheme", "data:text/html,<h1>hi</h1>".to_string()),
        (
            "credentials in URL",
            format!("{allowed}/page").replace("http://", "http://user:secret@"),
        ),
        ("not a URL", "127.0.0.1".to_string()),
    ];
    assert!(vectors.len() >= 30);
    for (name, url) in &vectors {
        let result = harness.guard.fetch(url, &[], limits()).await;
        assert!(
            result.is_err(),
            "{name}: {url} was fetched: {:?}",
            result.map(|fetched| fetched.final_url)
        );
    }
    assert_eq!(
        harness.target_hits.load(Ordering::SeqCst),
        0,
        "an SSRF vector reached the internal server"
    );

    // The per-bot blocklist (host names) applies on top.
    let blocklist = vec!["allowed.acme-test.com".to_string()];
    let blocked = harness
        .guard
        .fetch(&format!("{allowed}/page"), &blocklist, limits())
        .await;
    assert!(
        matches!(blocked, Err(SsrfError::Blocklisted(_))),
        "{blocked:?}"
    );
    let blocklist = vec!["*/private/*".to_string()];
    let blocked = harness
        .guard
        .fetch(
            &via_redirect(format!("{allowed}/private/x")),
            &blocklist,
            limits(),
        )
        .await;
    assert!(
        matches!(blocked, Err(SsrfError::Blocklisted(_))),
        "blocklist re-checked on redirect: {blocked:?}"
    );
}

#[tokio::test]
async fn allowed_urls_are_fetched_through_the_checked_address() {
    let harness = harness().await;
    let allowed = format!("http://allowed.acme-test.com:{}", harness.allowed.port());
    let fetched = harness
        .guard
        .fetch(&format!("{allowed}/page"), &[], limits())
        .await
        .unwrap();
    assert_eq!(fetched.status, 200);
    assert!(String::from_utf8_lossy(&fetched.body).contains("Acme News"));
    let redirected = harness
        .guard
        .fetch(
            &format!("{allowed}/hop/2?to={}", encode("/page")),
            &[],
            limits(),
        )
        .await
        .unwrap();
    assert_eq!(redirected.final_url.path(), "/page");
    let small = FetchLimits {
        max_bytes: 10,
        ..limits()
    };
    let truncated = harness
        .guard
        .fetch(&format!("{allowed}/page"), &[], small)
        .await
        .unwrap();
    assert!(truncated.truncated && truncated.body.len() == 10);
    assert!(harness.allowed_hits.load(Ordering::SeqCst) >= 5);
    assert_eq!(harness.target_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn web_fetch_tool_marks_pages_untrusted_and_reports_refusals_as_denied() {
    let harness = harness().await;
    let tool = WebFetchTool::new(Arc::new(harness.guard.clone()), limits());
    let workspace = tempfile::tempdir().unwrap();
    let stranger = test_fixtures::context(workspace.path(), "stranger");
    let page = tool
        .call_permitted(&stranger, serde_json::json!({"url": format!("http://allowed.acme-test.com:{}/page", harness.allowed.port())}))
        .await
        .unwrap();
    assert!(page.untrusted);
    assert!(
        page.content.contains("# Acme News") && page.content.contains("Public content."),
        "{}",
        page.content
    );
    assert!(!page.content.contains("<h1>"), "HTML is converted");
    assert!(page.content.contains(crate::untrusted::BEGIN_MARKER));
    let refused = tool
        .call_permitted(
            &stranger,
            serde_json::json!({"url": format!("http://127.0.0.1:{}/", harness.target.port())}),
        )
        .await;
    assert!(matches!(refused, Err(ToolError::Denied(_))), "{refused:?}");
    let employee_with_denied_tool = {
        let mut context = test_fixtures::context(workspace.path(), "acme-ivo");
        let mut role = (*context.caller.role).clone();
        role.tools.deny.push("web_fetch".to_string());
        context.caller.role = Arc::new(role);
        context
    };
    let refused = tool
        .call_permitted(&employee_with_denied_tool, serde_json::json!({"url": format!("http://allowed.acme-test.com:{}/page", harness.allowed.port())}))
        .await;
    assert!(matches!(refused, Err(ToolError::Denied(_))), "{refused:?}");
    assert_eq!(harness.target_hits.load(Ordering::SeqCst), 0);
}
