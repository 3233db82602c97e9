//! The `browser` tool on the sandbox harness: real bubblewrap, the real runner and a
//! real headless Chromium, whose only way out is the agent's guarded egress proxy.
//!
//! The site is a loopback server reached only through the SSRF guard's test route (a
//! public test address the guard checks, then connects to loopback instead); the probe
//! listens on 127.0.0.1 and [::1] and stands for everything internal: any connection it
//! sees is an SSRF success and fails the test.
//!
//! Needs `bwrap`, `chromium` and the runner (`cargo build -p saint-sandbox-runner -p porter`).

mod sandbox_harness;

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    response::{Html, IntoResponse, Redirect},
    routing::get,
};
use base64::Engine;
use futures::future::BoxFuture;
use saint_config::{BotConfig, SandboxScope};
use saint_tools::{
    Tool, ToolContext, ToolError, ToolOutput,
    browser::{BrowserLimits, BrowserTool},
    exec::{ExecLimits, ExecTool},
    guard::ssrf::{Resolver, SsrfGuard},
    policy,
};
use serde_json::{Value, json};

use sandbox_harness::*;

const PUBLIC_ADDRESS: &str = "93.184.215.14";
const SITE: &str = "http://site.acme-test.com";

/// Every name the test's pages use: the site is public (routed to loopback by the test
/// route), the others resolve to internal addresses.
struct Names(HashMap<&'static str, Vec<IpAddr>>);

impl Resolver for Names {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            self.0
                .get(host)
                .cloned()
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

/// Counts every connection on 127.0.0.1 and [::1] (it never answers).
struct Probe {
    v4: SocketAddr,
    v6: SocketAddr,
    connections: Arc<AtomicUsize>,
}

async fn probe() -> Probe {
    let connections = Arc::new(AtomicUsize::new(0));
    let mut addresses = Vec::new();
    for bind in ["127.0.0.1:0", "[::1]:0"] {
        let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
        addresses.push(listener.local_addr().unwrap());
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                eprintln!("probe: connection from {peer}");
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
    }
    Probe {
        v4: addresses[0],
        v6: addresses[1],
        connections,
    }
}

const MAIN_PAGE: &str = r#"<!doctype html>
<html><head><title>Browser test page</title></head><body>
<p id="status">Waiting</p>
<button onclick="document.getElementById('status').textContent = 'Shown by JavaScript'">Show</button>
<input id="name">
<button id="greet" onclick="document.getElementById('status').textContent = 'Hello, ' + document.getElementById('name').value">Greet</button>
<button onclick="document.cookie = 'who=ana; path=/; max-age=3600'; localStorage.setItem('who', 'ana')">Remember me</button>
<p id="cookie"></p>
<script>
document.getElementById('cookie').textContent =
  'cookie: ' + (document.cookie || '(none)') + ', storage: ' + (localStorage.getItem('who') || '(none)');
</script>
</body></html>"#;

/// The site: the JavaScript page, a redirect to the probe, and a page that reaches for
/// internal addresses every way a page can.
async fn site(probe: &Probe) -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let (v4, v6) = (probe.v4, probe.v6);
    let fetches = format!(
        r#"<!doctype html><html><head><title>Fetches</title></head><body>
<p id="state">pending</p>
<img src="http://[::1]:{v6_port}/pixel.png">
<img src="http://127.0.0.1:{v4_port}/pixel.png">
<iframe src="http://169.254.169.254/latest/meta-data/"></iframe>
<script>
const targets = [
  'http://169.254.169.254/latest/meta-data/iam/security-credentials/',
  'http://10.0.0.1/',
  'https://10.0.0.2/',
  'http://127.0.0.1:{v4_port}/',
  'http://internal.acme-test.com/',
  '/redirect',
];
Promise.allSettled(targets.map(target => fetch(target, {{mode: 'no-cors'}})))
  .then(results => {{
    document.getElementById('state').textContent =
      'settled ' + results.length + ': ' + results.map(result => result.status).join(' ');
  }});
</script></body></html>"#,
        v6_port = v6.port(),
        v4_port = v4.port(),
    );
    let counted = hits.clone();
    let router =
        Router::new()
            .route("/", get(|| async { Html(MAIN_PAGE) }))
            .route(
                "/redirect",
                get(move || async move {
                    Redirect::temporary(&format!("http://127.0.0.1:{}/", v4.port()))
                }),
            )
            .route(
                "/fetches",
                get(move || async move { Html(fetches).into_response() }),
            )
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let counted = counted.clone();
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        next.run(request).await
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (address, hits)
}

struct Browsing {
    harness: Harness,
    tool: BrowserTool,
    exec: Arc<ExecTool>,
    config: Arc<BotConfig>,
    probe: Probe,
    site_hits: Arc<AtomicUsize>,
}

impl Browsing {
    async fn start() -> Self {
        let harness = Harness::start();
        let probe = probe().await;
        let (site, site_hits) = site(&probe).await;
        let names = Names(HashMap::from([
            ("site.acme-test.com", vec![PUBLIC_ADDRESS.parse().unwrap()]),
            ("internal.acme-test.com", vec!["10.0.0.9".parse().unwrap()]),
        ]));
        let guard =
            SsrfGuard::new(Arc::new(names)).with_test_route(PUBLIC_ADDRESS.parse().unwrap(), site);
        let exec = Arc::new(ExecTool::new(
            harness.sandbox.clone(),
            None,
            ExecLimits::default(),
        ));
        // Screenshots are prepared by the agent's own extraction child, as in the binary.
        let extractor = saint_media::Extractor::new(
            env!("CARGO_BIN_EXE_saint-agent"),
            [saint_media::CHILD_SUBCOMMAND],
        );
        let tool = BrowserTool::new(exec.clone(), Arc::new(guard), BrowserLimits::default())
            .with_image_preparer(saint_agent::image_tool::screenshot_preparer(extractor));
        // Employees may browse; one sandbox for the whole bot, so two people share a
        // runner and only the owner tag keeps their browsers apart.
        let mut config = (*harness.config).clone();
        config.sandbox.scope = SandboxScope::Agent;
        config
            .roles
            .get_mut("employee")
            .unwrap()
            .tools
            .allow
            .push("browser".to_string());
        Self {
            harness,
            tool,
            exec,
            config: Arc::new(config),
            probe,
            site_hits,
        }
    }

    fn person(&self, slug: &str) -> ToolContext {
        let mut context = self.harness.context(&format!("http:{slug}"), "employee");
        context.caller.slug = slug.to_string();
        context.caller.role = Arc::new(self.config.roles["employee"].clone());
        context.config = self.config.clone();
        context
    }

    /// Calls `browser` as the runtime does: through the policy, with a sandbox.
    async fn call(&self, context: &ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let permit = policy::permit(&context.caller, &self.tool, true)?;
        self.tool.call(&permit, context, input).await
    }

    async fn ok(&self, context: &ToolContext, input: Value) -> ToolOutput {
        match self.call(context, input.clone()).await {
            Ok(output) => output,
            Err(error) => panic!("{input}: {error}"),
        }
    }

    async fn read(&self, context: &ToolContext) -> String {
        self.ok(context, json!({"action": "read"})).await.content
    }

    /// Reads the page until `wanted` shows (the page's own completion signal).
    async fn read_until(&self, context: &ToolContext, wanted: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = self.read(context).await;
            if text.contains(wanted) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {wanted:?} within 20 s: {text}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn probe_connections(&self) -> usize {
        self.probe.connections.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_page_is_opened_clicked_typed_into_read_and_shown() {
    let browsing = Browsing::start().await;
    let ana = browsing.person("acme-ana");

    let opened = browsing
        .ok(&ana, json!({"action": "open", "url": format!("{SITE}/")}))
        .await;
    assert!(opened.content.contains("loaded"), "{}", opened.content);
    assert!(
        opened.content.contains("\"Browser test page\""),
        "{}",
        opened.content
    );
    assert!(opened.untrusted, "a page is untrusted content");
    assert_eq!(opened.metering["action"], json!("open"));
    assert_eq!(opened.metering["browserStarted"], json!(true));
    assert!(opened.metering["egressAllowed"].as_u64().unwrap() >= 1);
    assert!(browsing.read(&ana).await.contains("Waiting"));

    let clicked = browsing
        .ok(&ana, json!({"action": "click", "text": "Show"}))
        .await;
    assert!(
        clicked.content.contains("clicked \"Show\""),
        "{}",
        clicked.content
    );
    assert!(browsing.read(&ana).await.contains("Shown by JavaScript"));

    browsing
        .ok(
            &ana,
            json!({"action": "type", "selector": "#name", "text": "Ana"}),
        )
        .await;
    browsing
        .ok(&ana, json!({"action": "click", "selector": "#greet"}))
        .await;
    assert!(browsing.read(&ana).await.contains("Hello, Ana"));
    // The same page as its accessibility tree: what can be clicked or typed into, by
    // role and name, with the value typed above.
    let tree = browsing
        .ok(&ana, json!({"action": "read", "format": "tree"}))
        .await
        .content;
    for line in [
        "RootWebArea \"Browser test page\"",
        "button \"Show\"",
        "button \"Greet\"",
        "value=\"Ana\"",
        "text \"Hello, Ana\"",
    ] {
        assert!(tree.contains(line), "{line} is not in the tree:\n{tree}");
    }
    assert!(tree.contains("the page's accessibility tree"), "{tree}");
    // An option that does not apply is refused, not ignored.
    let misplaced = browsing
        .call(
            &ana,
            json!({"action": "click", "text": "Show", "format": "tree"}),
        )
        .await
        .unwrap_err();
    assert!(
        misplaced
            .to_string()
            .contains("format applies to read only"),
        "{misplaced}"
    );

    let missing = browsing
        .call(&ana, json!({"action": "click", "text": "No such button"}))
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("nothing to click"),
        "{missing}"
    );

    // The screenshot reaches the model as an image block, re-encoded by the child.
    let shot = browsing.ok(&ana, json!({"action": "screenshot"})).await;
    let image = shot.image.expect("the screenshot is an image block");
    assert!(
        ["image/png", "image/jpeg"].contains(&image.media_type.as_str()),
        "{}",
        image.media_type
    );
    let png = base64::engine::general_purpose::STANDARD
        .decode(&image.base64)
        .unwrap();
    let decoded = image::load_from_memory(&png).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (1280, 800));

    // A plain command in the same sandbox finds the egress socket but has no key.
    let exec_permit = policy::permit(&ana.caller, browsing.exec.as_ref(), true).unwrap();
    let plain = browsing
        .exec
        .call(
            &exec_permit,
            &ana,
            json!({"command": format!(
                "for socket in /run/saint/browser/*.sock; do \
                 curl -s -o /dev/null -w '%{{http_code}}\\n' --unix-socket \"$socket\" \
                 --proxy http://proxy {SITE}/; done"
            )}),
        )
        .await
        .unwrap();
    assert!(plain.content.starts_with("407"), "{}", plain.content);
    // Nor can it take the socket's place to collect the browser's key.
    let replace = browsing
        .exec
        .call(
            &exec_permit,
            &ana,
            json!({"command": "rm -f /run/saint/browser/*.sock; \
                               touch /run/saint/browser/planted; \
                               mv /run/saint/browser /run/saint/sandbox/taken \
                                 || echo 'not moved'; \
                               ls /run/saint/browser"}),
        )
        .await
        .unwrap();
    assert!(
        replace.content.contains("Read-only file system"),
        "{}",
        replace.content
    );
    // Nor move the directory aside and put a listener where the browser connects.
    assert!(replace.content.contains("not moved"), "{}", replace.content);
    assert!(replace.content.contains(".sock"), "{}", replace.content);
    assert!(
        !replace.content.contains("\nplanted"),
        "{}",
        replace.content
    );
    assert!(browsing.read(&ana).await.contains("Hello, Ana"));
    assert_eq!(browsing.probe_connections(), 0);
}

#[tokio::test]
async fn a_page_that_reaches_for_internal_addresses_gets_nothing() {
    let browsing = Browsing::start().await;
    let ana = browsing.person("acme-ana");

    // A redirect to loopback: the redirect hop is refused, the probe never reached.
    let redirected = browsing
        .ok(
            &ana,
            json!({"action": "open", "url": format!("{SITE}/redirect")}),
        )
        .await;
    assert_eq!(
        redirected.metering["egressRefused"],
        json!(1),
        "{}",
        redirected.content
    );
    assert!(
        redirected
            .content
            .contains("1 request(s) of the page were refused"),
        "{}",
        redirected.content
    );
    assert_eq!(
        browsing.probe_connections(),
        0,
        "the redirect reached the probe"
    );

    // Fetches, images and a frame aimed at metadata, private and loopback addresses,
    // directly, by an internal name and through a redirect.
    let opened = browsing
        .ok(
            &ana,
            json!({"action": "open", "url": format!("{SITE}/fetches")}),
        )
        .await;
    // The page's own signal that every fetch ended (each refused by the proxy: a 403
    // naming the rule for http, a failed tunnel for https); the images and the frame
    // were part of the load event `open` waited for.
    let settled = browsing.read_until(&ana, "settled 6").await;
    assert!(settled.contains("settled 6: "), "{settled}");
    // Two images and a frame at least were refused while the page loaded.
    assert!(
        opened.metering["egressRefused"].as_u64().unwrap() >= 3,
        "{:?}",
        opened.metering
    );
    assert_eq!(
        browsing.probe_connections(),
        0,
        "the probe saw a connection"
    );
    // The site itself saw the two pages and the redirect hop (fetched twice), nothing
    // else.
    assert!(browsing.site_hits.load(Ordering::SeqCst) >= 3);
}

#[tokio::test]
async fn people_never_share_a_browser_or_its_cookies() {
    let browsing = Browsing::start().await;
    let ana = browsing.person("acme-ana");
    let bo = browsing.person("acme-bo");

    browsing
        .ok(&ana, json!({"action": "open", "url": format!("{SITE}/")}))
        .await;
    browsing
        .ok(&ana, json!({"action": "click", "text": "Remember me"}))
        .await;
    browsing
        .ok(&ana, json!({"action": "open", "url": format!("{SITE}/")}))
        .await;
    assert!(
        browsing
            .read(&ana)
            .await
            .contains("cookie: who=ana, storage: ana")
    );

    // Bo shares the sandbox but not Ana's browser: he has none until he opens one.
    let refused = browsing
        .call(&bo, json!({"action": "read"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ToolError::NotFound(message) if message.contains("no browser is open for you")),
        "{refused}"
    );
    let shot = browsing.call(&bo, json!({"action": "screenshot"})).await;
    assert!(shot.is_err(), "Bo saw Ana's page");
    browsing
        .ok(&bo, json!({"action": "open", "url": format!("{SITE}/")}))
        .await;
    assert!(
        browsing
            .read(&bo)
            .await
            .contains("cookie: (none), storage: (none)")
    );
    // Ana's page is still hers.
    assert!(browsing.read(&ana).await.contains("cookie: who=ana"));

    // Closing ends the profile: a new browser starts empty.
    let closed = browsing.ok(&ana, json!({"action": "close"})).await;
    assert!(
        closed.content.contains("cookies and storage are gone"),
        "{}",
        closed.content
    );
    let reopened = browsing
        .ok(&ana, json!({"action": "open", "url": format!("{SITE}/")}))
        .await;
    assert_eq!(reopened.metering["browserStarted"], json!(true));
    assert!(
        browsing
            .read(&ana)
            .await
            .contains("cookie: (none), storage: (none)")
    );
}

#[tokio::test]
async fn a_role_without_browser_never_sees_it() {
    let browsing = Browsing::start().await;
    let tool: Arc<dyn Tool> = Arc::new(BrowserTool::new(
        browsing.exec.clone(),
        Arc::new(SsrfGuard::default()),
        BrowserLimits::default(),
    ));
    let ana = browsing.person("acme-ana");
    let mut external = browsing.harness.context("http:eve", "external");
    external.config = browsing.config.clone();
    let names = |context: &ToolContext, sandbox: bool| {
        policy::permitted_tools(&context.caller, std::slice::from_ref(&tool), sandbox)
            .iter()
            .map(|permitted| permitted.name())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&ana, true), vec!["browser"]);
    assert!(names(&external, true).is_empty());
    // No sandbox, no browser, whatever the role says.
    assert!(names(&ana, false).is_empty());
    let refused = browsing
        .tool
        .call(
            &policy::permit(&ana.caller, &browsing.tool, true).unwrap(),
            &external,
            json!({"action": "open", "url": "http://site.acme-test.com/"}),
        )
        .await
        .unwrap_err();
    assert!(matches!(refused, ToolError::Denied(_)), "{refused}");
}
