//! Porter on the wire, end to end: the real `porter` daemon, the sandbox runner's real
//! relay in front of its proxy socket, Debian's real `gh` (2.23), `git` and `curl`
//! running with only the environment Porter hands a command, and a local HTTPS
//! stand-in for GitHub (and for an API-key service and an OAuth 2.0 provider) that the
//! proxy is pointed at (`--upstream-override`). Proves each credential kind reaches
//! the upstream while the command only ever held placeholders; the request policy
//! refuses an employee's merge however it is asked; placeholders are swapped only where
//! declared; responses echoing the secret are scrubbed; other hosts, ended keys and
//! unverifiable upstreams get nothing. The same clients inside a real sandbox are
//! `agent-pod/tests/porter_sandbox.rs`.

mod standin;
mod support;

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    process::Output,
};

use base64::{Engine, engine::general_purpose::STANDARD};
use porter_protocol::registry::{
    CliEntry, GraphqlRule, InjectAt, OAuth2, Registry, RequestRule, SecretSource,
};
use standin::StandIn;
use standin::assert_no_secret;
use support::{Daemon, Registered, random_secret, text};

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
                rule(
                    &["GET"],
                    &["/repos/*/*/pulls", "/repos/*/*/pulls/**", "/echo"],
                    None,
                ),
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

struct World {
    secret: String,
    standin: StandIn,
    daemon: Daemon,
    work: tempfile::TempDir,
}

/// The registry of the example company, pointed at the stand-in: `gh` (Authorization,
/// git over HTTPS), `keys` (a query parameter and a named header) and `oauth` (OAuth 2.0
/// refresh held by Porter). Every secret is the stand-in's one token.
fn registry(secret_file: &std::path::Path) -> Registry {
    let secret = SecretSource::File(secret_file.to_string_lossy().into_owned());
    let mut registry = Registry::default();
    registry.clis.insert(
        "gh".into(),
        CliEntry {
            hosts: standin::HOSTS
                .iter()
                .map(|host| (*host).to_owned())
                .collect(),
            secret: secret.clone(),
            placeholder_env: vec!["GH_TOKEN".into()],
            git: true,
            requests: github_requests(),
            ..CliEntry::default()
        },
    );
    registry.clis.insert(
        "keys".into(),
        CliEntry {
            hosts: vec!["keys.example".into()],
            secret: secret.clone(),
            inject: vec![
                InjectAt::Query("key".into()),
                InjectAt::Header("X-Api-Key".into()),
            ],
            placeholder_env: vec!["KEYS_API_KEY".into()],
            ..CliEntry::default()
        },
    );
    registry.clis.insert(
        "oauth".into(),
        CliEntry {
            hosts: vec!["oauth.example".into()],
            secret,
            oauth2: Some(OAuth2 {
                token_url: "https://oauth.example/token".into(),
                client_id: "client-1".into(),
                ..OAuth2::default()
            }),
            placeholder_env: vec!["OAUTH_REFRESH_TOKEN".into()],
            ..CliEntry::default()
        },
    );
    registry
}

fn world() -> World {
    world_trusting(true)
}

/// As [`world`]; `trust_standin: false` leaves the stand-in's CA out of Porter's
/// upstream trust (as a man in the middle would be).
fn world_trusting(trust_standin: bool) -> World {
    let work = tempfile::tempdir().unwrap();
    let secret = random_secret();
    let secret_file = work.path().join("gh-token");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let standin = StandIn::start(work.path(), &secret);
    let overrides: Vec<String> = standin::ALL_HOSTS
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
    let daemon = Daemon::start(&registry(&secret_file), &arguments);
    World {
        secret,
        standin,
        daemon,
        work,
    }
}

impl World {
    fn run(&self, command: &Registered, program: &str, arguments: &[&str]) -> Output {
        self.daemon
            .run(command, self.work.path(), program, arguments)
    }

    fn curl(&self, command: &Registered, arguments: &[&str]) -> Output {
        let mut all = vec!["-sS", "--max-time", "20"];
        all.extend_from_slice(arguments);
        self.run(command, "curl", &all)
    }

    /// Everything a command could see: its environment and what it printed.
    fn assert_command_saw_no_secret(&self, label: &str, command: &Registered, outputs: &[&Output]) {
        let mut everything: String = command
            .env
            .iter()
            .map(|(name, value)| format!("{name}={value}\n"))
            .collect();
        for output in outputs {
            everything.push_str(&text(output));
        }
        assert_no_secret(label, &everything, &self.secret);
    }
}

#[test]
fn gh_and_git_reach_the_stand_in_with_the_real_token_while_the_command_holds_placeholders() {
    let world = world();
    let owner = world.daemon.register("olga", "owner");
    let employee = world.daemon.register("ana", "employee");
    assert!(owner.env["GH_TOKEN"].starts_with("porter_ph_"));
    assert_ne!(
        owner.env["GH_TOKEN"], employee.env["GH_TOKEN"],
        "placeholders are per command"
    );

    let listed = world.run(&owner, "gh", &["pr", "list", "-R", "o/r"]);
    assert!(listed.status.success(), "gh pr list: {}", text(&listed));
    assert!(text(&listed).contains("Fix the thing"), "{}", text(&listed));
    let api = world.run(&employee, "gh", &["api", "repos/o/r/pulls"]);
    assert!(api.status.success(), "gh api: {}", text(&api));
    assert!(text(&api).contains("Fix the thing"));

    world.standin.create_repository("o", "r");
    let cloned = world.run(
        &owner,
        "git",
        &["clone", "-q", "https://github.com/o/r.git", "r"],
    );
    assert!(cloned.status.success(), "git clone: {}", text(&cloned));
    let checkout = world.work.path().join("r");
    std::fs::write(checkout.join("CHANGE.md"), "pushed through porter\n").unwrap();
    standin::git(&checkout, &["add", "CHANGE.md"]);
    standin::git(&checkout, &["commit", "-q", "-m", "through porter"]);
    let directory = checkout.to_string_lossy().into_owned();
    let refused = world.run(
        &employee,
        "git",
        &["-C", &directory, "push", "origin", "main"],
    );
    assert!(
        !refused.status.success(),
        "employee push: {}",
        text(&refused)
    );
    let pushed = world.run(
        &owner,
        "git",
        &["-C", &directory, "push", "-q", "origin", "main"],
    );
    assert!(pushed.status.success(), "git push: {}", text(&pushed));
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s", "main"])
        .current_dir(world.standin.git_root.join("o/r.git"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "through porter\nfirst\n"
    );

    let requests = world.standin.requests();
    assert!(requests.iter().any(|request| request.path == "/graphql"));
    assert!(requests.iter().any(|request| {
        request.path == "/o/r.git/git-receive-pack"
            && request
                .authorization
                .as_deref()
                .unwrap()
                .starts_with("Basic ")
    }));
    for request in &requests {
        // git asks anonymously first and sends its credential after the 401; whatever
        // credential went upstream was the real token, never a placeholder.
        let anonymous_git = request.host == "github.com" && request.authorization.is_none();
        assert!(
            anonymous_git || request.credential().as_deref() == Some(world.secret.as_str()),
            "{request:?} did not carry the real token"
        );
        for (name, value) in &request.headers {
            assert!(
                !value.contains("porter_ph_"),
                "a placeholder went upstream in {name}"
            );
        }
    }
    world.assert_command_saw_no_secret("owner", &owner, &[&listed, &cloned, &pushed]);
    world.assert_command_saw_no_secret("employee", &employee, &[&api, &refused]);
    let decisions = world.daemon.decisions();
    assert!(decisions.iter().any(|line| line["decision"] == "allowed"
        && line["method"] == "GET"
        && line["path"] == "/repos/o/r/pulls"
        && line["contact"] == "ana"
        && line["role"] == "employee"
        && line["command"] == "sha256:test"
        && line["host"] == "api.github.com"
        && line["status"] == 200));
    assert!(decisions.iter().any(|line| line["decision"] == "refused"
        && line["path"] == "/o/r.git/git-receive-pack"
        && line["role"] == "employee"));
    let log = world.daemon.raw_log_text();
    assert_no_secret("audit log", &log, &world.secret);
    assert!(
        !log.contains("porter_ph_") && !log.contains("porter_key_"),
        "{log}"
    );
}

#[test]
fn an_employees_merge_is_refused_at_the_proxy_however_it_is_asked_and_the_owners_is_admitted() {
    let world = world();
    let employee = world.daemon.register("ana", "employee");
    let proxy = employee.env["HTTPS_PROXY"].clone();
    let graphql_merge = r#"{"query":"mutation Sneaky { a: mergePullRequest(input:{pullRequestId:\"PR_1\"}) { clientMutationId } }"}"#;
    let fragment_merge = r#"{"query":"query Q { viewer { login } } mutation M { ...F } fragment F on Mutation { mergePullRequest(input:{pullRequestId:\"PR_1\"}) { clientMutationId } }"}"#;
    let batched = r#"[{"query":"query { viewer { login } }"},{"query":"mutation { mergePullRequest(input:{pullRequestId:\"PR_1\"}) { clientMutationId } }"}]"#;
    let mut attempts = vec![
        world.run(
            &employee,
            "gh",
            &["pr", "merge", "1", "--merge", "-R", "o/r"],
        ),
        world.run(
            &employee,
            "gh",
            &["api", "-X", "PUT", "repos/o/r/pulls/1/merge"],
        ),
        world.run(
            &employee,
            "sh",
            &[
                "-c",
                "gh alias set mm 'pr merge 1 --merge -R o/r' >/dev/null && gh mm",
            ],
        ),
    ];
    for (index, body) in [graphql_merge, fragment_merge, batched].iter().enumerate() {
        let file = world.work.path().join(format!("body-{index}.json"));
        std::fs::write(&file, body).unwrap();
        let script = format!(
            "curl -sSf --max-time 20 -H \"Authorization: token $GH_TOKEN\" --data @{} https://api.github.com/graphql",
            file.display()
        );
        attempts.push(world.run(&employee, "sh", &["-c", &script]));
    }
    // Every header some server reads as the real method, on an allowed GET and POST.
    for header in [
        "X-HTTP-Method-Override",
        "X-HTTP-Method",
        "X-Method-Override",
        "X-Original-Method",
        "X-Forwarded-Method",
    ] {
        let script = format!(
            "curl -sSf --max-time 20 -H \"Authorization: token $GH_TOKEN\" -H '{header}: PUT' https://api.github.com/repos/o/r/pulls/1/merge"
        );
        attempts.push(world.run(&employee, "sh", &["-c", &script]));
    }
    // A request target in absolute form naming the merge on another authority, sent
    // through a tunnel opened for an allowed host.
    let script = format!(
        "curl -sSf --max-time 20 --proxy '{proxy}' -H \"Authorization: token $GH_TOKEN\" -X PUT --request-target https://api.github.com/repos/o/r/pulls/1/merge https://api.github.com/repos/o/r/pulls"
    );
    attempts.push(world.run(&employee, "sh", &["-c", &script]));
    for attempt in &attempts {
        assert!(
            !attempt.status.success(),
            "employee merge went through: {}",
            text(attempt)
        );
    }
    let merges = |requests: &[standin::Recorded]| {
        requests
            .iter()
            .filter(|request| {
                request.body.contains("mergePullRequest")
                    || (request.method == "PUT" && request.path.ends_with("/merge"))
            })
            .count()
    };
    assert_eq!(
        merges(&world.standin.requests()),
        0,
        "a merge reached the stand-in"
    );
    let refusals: Vec<String> = world
        .daemon
        .decisions()
        .into_iter()
        .filter(|line| line["decision"] == "refused")
        .map(|line| line["reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        refusals
            .iter()
            .any(|reason| reason.contains("mergePullRequest")),
        "{refusals:?}"
    );
    assert!(
        refusals
            .iter()
            .any(|reason| reason.contains("x-original-method")),
        "{refusals:?}"
    );

    let owner = world.daemon.register("olga", "owner");
    let merged = world.run(&owner, "gh", &["pr", "merge", "1", "--merge", "-R", "o/r"]);
    assert!(merged.status.success(), "owner merge: {}", text(&merged));
    let put = world.run(
        &owner,
        "gh",
        &["api", "-X", "PUT", "repos/o/r/pulls/1/merge"],
    );
    assert!(put.status.success(), "owner PUT: {}", text(&put));
    assert_eq!(merges(&world.standin.requests()), 2);
}

#[test]
fn a_query_parameter_a_named_header_and_an_oauth2_refresh_each_reach_their_upstream() {
    let world = world();
    let command = world.daemon.register("ana", "employee");
    let query = world.run(
        &command,
        "sh",
        &[
            "-c",
            "curl -sSf --max-time 20 \"https://keys.example/v1/query?q=weather&key=$KEYS_API_KEY\"",
        ],
    );
    assert!(query.status.success(), "query: {}", text(&query));
    let header = world.run(
        &command,
        "sh",
        &["-c", "curl -sSf --max-time 20 -H \"X-Api-Key: $KEYS_API_KEY\" https://keys.example/v1/header"],
    );
    assert!(header.status.success(), "header: {}", text(&header));
    // OAuth 2.0: the command's refresh token is a placeholder; Porter answers the token
    // endpoint itself with a placeholder access token, and puts a real access token
    // (refreshed with the real refresh token, which never leaves Porter) upstream.
    let token = world.run(
        &command,
        "sh",
        &["-c", "curl -sSf --max-time 20 -d grant_type=refresh_token -d client_id=client-1 --data-urlencode \"refresh_token=$OAUTH_REFRESH_TOKEN\" https://oauth.example/token"],
    );
    assert!(token.status.success(), "token: {}", text(&token));
    let answer: serde_json::Value = serde_json::from_slice(&token.stdout).unwrap();
    let access = answer["access_token"].as_str().unwrap().to_owned();
    assert!(access.starts_with("porter_ph_"), "{answer}");
    let me = world.curl(
        &command,
        &[
            "-f",
            "-H",
            &format!("Authorization: Bearer {access}"),
            "https://oauth.example/v1/me",
        ],
    );
    assert!(me.status.success(), "me: {}", text(&me));
    // A refresh with anything but this command's placeholder gets nothing.
    let forged = world.curl(
        &command,
        &[
            "-d",
            "grant_type=refresh_token",
            "-d",
            "refresh_token=porter_ph_0123",
            "https://oauth.example/token",
        ],
    );
    assert!(String::from_utf8_lossy(&forged.stdout).contains("invalid_grant"));

    let requests = world.standin.requests();
    let token_requests: Vec<_> = requests
        .iter()
        .filter(|request| request.path == "/token")
        .collect();
    assert_eq!(
        token_requests.len(),
        1,
        "one real refresh, by Porter: {token_requests:?}"
    );
    assert!(token_requests[0].body.contains("refresh_token="));
    assert!(
        requests
            .iter()
            .any(|request| request.path == "/v1/query" && request.query.contains("q=weather"))
    );
    world.assert_command_saw_no_secret(
        "other kinds",
        &command,
        &[&query, &header, &token, &me, &forged],
    );
    let access_token = standin::access_token_for(&world.secret);
    for output in [&token, &me] {
        assert!(
            !text(output).contains(&access_token),
            "the real access token reached the command"
        );
    }
}

#[test]
fn placeholders_are_swapped_only_where_declared_and_only_for_their_own_command() {
    let world = world();
    let command = world.daemon.register("ana", "owner");
    let other = world.daemon.register("olga", "owner");
    let cases = [
        // The placeholder in a header that is not the credential's.
        "curl -sSf --max-time 20 -H \"Cookie: session=$GH_TOKEN\" -H \"Authorization: token $GH_TOKEN\" https://api.github.com/user",
        "curl -sSf --max-time 20 -A \"$GH_TOKEN\" https://api.github.com/user",
        // In the query string where Authorization is declared.
        "curl -sSf --max-time 20 \"https://api.github.com/user?access_token=$GH_TOKEN\"",
        // The key credential in a header it is not declared for.
        "curl -sSf --max-time 20 -H \"X-Other: $KEYS_API_KEY\" \"https://keys.example/v1/query?key=$KEYS_API_KEY\"",
    ];
    for script in cases {
        let output = world.run(&command, "sh", &["-c", script]);
        assert!(!output.status.success(), "{script}: {}", text(&output));
    }
    // Another command's placeholder through this command's tunnel.
    let foreign = format!(
        "curl -sSf --max-time 20 -H 'Authorization: token {}' https://api.github.com/user",
        other.env["GH_TOKEN"]
    );
    let output = world.run(&command, "sh", &["-c", &foreign]);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(
        world.standin.requests().is_empty(),
        "{:?}",
        world.standin.requests()
    );
    assert!(world.daemon.decisions().iter().any(|line| {
        line["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("placeholder in cookie"))
    }));
}

#[test]
fn an_upstream_echoing_the_secret_gives_the_command_only_a_mask() {
    let world = world();
    let command = world.daemon.register("ana", "employee");
    let output = world.run(
        &command,
        "sh",
        &["-c", "curl -sS -D - --max-time 20 -H \"Authorization: token $GH_TOKEN\" https://api.github.com/echo"],
    );
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        text(&output).contains("x-echo"),
        "the echo ran: {}",
        text(&output)
    );
    assert_no_secret("echoed response", &text(&output), &world.secret);
}

#[test]
fn hosts_outside_every_credential_and_ended_keys_get_nothing() {
    let world = world();
    let command = world.daemon.register("ana", "owner");
    let output = world.run(
        &command,
        "sh",
        &["-c", "git ls-remote https://gitlab.com/o/r.git; curl -sSf --max-time 20 https://evil.example.com/"],
    );
    assert!(!output.status.success());
    let refused_hosts: Vec<String> = world
        .daemon
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

    // The command ends: its key and placeholders die with it.
    world.daemon.revoke(&command.key);
    let replay = world.run(&command, "gh", &["api", "user"]);
    assert!(!replay.status.success(), "{}", text(&replay));
    let mut stream = std::os::unix::net::UnixStream::connect(&world.daemon.proxy_socket).unwrap();
    write!(
        stream,
        "CONNECT api.github.com:443 HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
        STANDARD.encode(format!("porter:{}", command.key))
    )
    .unwrap();
    let mut status = String::new();
    BufReader::new(stream).read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 407"), "{status}");
    assert!(world.standin.requests().is_empty());
}

#[test]
fn an_upstream_whose_certificate_porter_cannot_verify_gets_no_request() {
    let world = world_trusting(false);
    let command = world.daemon.register("ana", "owner");
    let output = world.run(&command, "gh", &["api", "repos/o/r/pulls"]);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(
        world.standin.requests().is_empty(),
        "the token reached an unverified upstream"
    );
    assert!(world.daemon.decisions().iter().any(|line| {
        line["decision"] == "upstream_error"
            && line["reason"]
                .as_str()
                .unwrap()
                .contains("failed to verify TLS")
    }));
}
