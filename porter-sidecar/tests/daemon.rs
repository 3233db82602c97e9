//! Integration tests: the real `porter` daemon on a temp socket, the real
//! `cliport-proxy`, and real child processes (shell-script test CLIs, `cat`, `env`).

mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader, Read, Write},
    process::Stdio,
    time::Duration,
};

use porter_protocol::{
    ErrorCode, ExecRequest, Frame, Request,
    registry::{ArgPolicy, RateLimit},
    sync_io::{read_frame, write_frame},
};
use support::*;

#[test]
fn output_streams_before_the_child_exits() {
    let daemon = Daemon::start(|bin, registry| {
        registry.clis.insert(
            "early".into(),
            cli(&script(
                bin,
                "early-cli-7781",
                "echo first; sleep 3; echo second",
            )),
        );
    });
    let mut proxy = daemon
        .proxy("early", &[], TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(proxy.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "first");
    // The first line arrived while the child is still sleeping: it was streamed.
    assert!(
        !processes_with("early-cli-7781").is_empty(),
        "the child had already exited"
    );
    assert_eq!(lines.next().unwrap().unwrap(), "second");
    assert!(proxy.wait().unwrap().success());
}

#[test]
fn stdout_and_stderr_stay_separate_and_ordered() {
    let daemon = Daemon::start(|bin, registry| {
        let body = "i=0; while [ $i -lt 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done";
        registry
            .clis
            .insert("mixed".into(), cli(&script(bin, "mixed", body)));
    });
    let output = daemon.proxy("mixed", &[], TOKEN).output().unwrap();
    let expected = |prefix: &str| {
        (0..200)
            .map(|index| format!("{prefix}{index}\n"))
            .collect::<String>()
    };
    assert_eq!(String::from_utf8(output.stdout).unwrap(), expected("out"));
    assert_eq!(String::from_utf8(output.stderr).unwrap(), expected("err"));
}

#[test]
fn exit_codes_pass_through() {
    let daemon = Daemon::start(|bin, registry| {
        registry
            .clis
            .insert("fail".into(), cli(&script(bin, "fail", "exit 42")));
        registry
            .clis
            .insert("killed".into(), cli(&script(bin, "killed", "kill -9 $$")));
    });
    assert_eq!(
        daemon.proxy("fail", &[], TOKEN).status().unwrap().code(),
        Some(42)
    );
    assert_eq!(
        daemon.proxy("killed", &[], TOKEN).status().unwrap().code(),
        Some(137)
    );
    let line = daemon.wait_audit(2);
    assert_eq!(line["exit"], 137);
    assert_eq!(line["outcome"], "exit_nonzero");
}

#[test]
fn stdin_is_forwarded() {
    let daemon = Daemon::start(|_, registry| {
        registry.clis.insert("cat".into(), cli("/bin/cat"));
    });
    let input: Vec<u8> = (0..3_000_000_u32)
        .map(|index| (index % 251) as u8)
        .collect();
    let mut proxy = daemon
        .proxy("cat", &[], TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = proxy.stdin.take().unwrap();
    let writer_input = input.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&writer_input).unwrap());
    let mut output = Vec::new();
    proxy
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut output)
        .unwrap();
    writer.join().unwrap();
    assert!(proxy.wait().unwrap().success());
    assert_eq!(output.len(), input.len());
    assert!(output == input, "stdin came back altered");
    assert_eq!(daemon.wait_audit(1)["bytesStdin"], 3_000_000);
}

#[test]
fn a_gigabyte_streams_with_bounded_daemon_memory() {
    const GIB: u64 = 1 << 30;
    let daemon = Daemon::start(|bin, registry| {
        registry.clis.insert(
            "big".into(),
            cli(&script(bin, "big", &format!("head -c {GIB} /dev/zero"))),
        );
    });
    let before = peak_rss_kib(daemon.pid());
    let mut proxy = daemon
        .proxy("big", &[], TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = proxy.stdout.take().unwrap();
    let mut buffer = vec![0_u8; 1 << 20];
    let mut total = 0_u64;
    loop {
        let count = stdout.read(&mut buffer).unwrap();
        if count == 0 {
            break;
        }
        assert!(buffer[..count].iter().all(|byte| *byte == 0));
        total += count as u64;
    }
    assert!(proxy.wait().unwrap().success());
    assert_eq!(total, GIB);
    let after = peak_rss_kib(daemon.pid());
    // The daemon holds a few frame buffers, never the stream: its peak grows by far less
    // than the gigabyte it moved.
    assert!(
        after - before < 32 * 1024,
        "daemon peak RSS grew from {before} KiB to {after} KiB"
    );
    assert_eq!(daemon.wait_audit(1)["bytesStdout"], GIB);
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let daemon = Daemon::start(|bin, registry| {
        // The leader and a background child both ignore SIGTERM: only SIGKILL to the
        // whole group ends them.
        let body = format!(
            "trap '' TERM; sh -c \"trap '' TERM; sleep 3017.{id}\" & sleep 3018.{id}",
            id = std::process::id()
        );
        let mut entry = cli(&script(bin, "stubborn", &body));
        entry.timeout_seconds = 1;
        registry.clis.insert("stubborn".into(), entry);
    });
    let proxy = daemon
        .proxy("stubborn", &[], TOKEN)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let id = std::process::id();
    while processes_with(&format!("sleep 3017.{id}")).is_empty()
        || processes_with(&format!("sleep 3018.{id}")).is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "children never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = proxy.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&output.stderr).contains("timed out"));
    assert_eq!(
        wait_gone(&format!(".{id}"), Duration::from_secs(5)),
        Vec::<u32>::new(),
        "orphans left behind"
    );
    assert_eq!(daemon.wait_audit(1)["outcome"], "timed_out");
}

#[test]
fn disconnecting_the_proxy_kills_the_child() {
    let daemon = Daemon::start(|bin, registry| {
        registry.clis.insert(
            "sleepy".into(),
            cli(&script(
                bin,
                "sleepy",
                &format!("sleep 3023.{id} & sleep 3024.{id}", id = std::process::id()),
            )),
        );
    });
    let mut proxy = daemon.proxy("sleepy", &[], TOKEN).spawn().unwrap();
    let started = std::time::Instant::now();
    let id = std::process::id();
    while processes_with(&format!("sleep 3024.{id}")).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "child never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.kill().unwrap();
    proxy.wait().unwrap();
    assert_eq!(
        wait_gone(&format!(".{id}"), Duration::from_secs(5)),
        Vec::<u32>::new()
    );
    assert_eq!(daemon.wait_audit(1)["outcome"], "disconnected");
}

#[test]
fn sigint_to_the_proxy_ends_the_remote_child() {
    let daemon = Daemon::start(|bin, registry| {
        registry.clis.insert(
            "waiter".into(),
            cli(&script(
                bin,
                "waiter",
                &format!("exec sleep 3031.{}", std::process::id()),
            )),
        );
    });
    let mut proxy = daemon.proxy("waiter", &[], TOKEN).spawn().unwrap();
    let started = std::time::Instant::now();
    let marker = format!("sleep 3031.{}", std::process::id());
    while processes_with(&marker).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "child never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // The remote sleep died of SIGINT and the proxy reports it as a shell would.
    assert_eq!(proxy.wait().unwrap().code(), Some(130));
    assert_eq!(
        wait_gone(&marker, Duration::from_secs(5)),
        Vec::<u32>::new()
    );
}

#[test]
fn refusals_give_the_right_error_frame_and_audit_line() {
    let daemon = Daemon::start(|bin, registry| {
        registry
            .clis
            .insert("ok".into(), cli(&script(bin, "ok", "echo ran")));
        let mut limited = cli(&script(bin, "limited", "true"));
        limited.rate_limit = Some(RateLimit {
            per_minute: 1,
            burst: 1,
        });
        registry.clis.insert("limited".into(), limited);
    });
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), daemon.workspace.join("escape")).unwrap();

    let mut cases: Vec<(porter_protocol::CliRequest, ErrorCode, &str)> = vec![
        (
            request("nope", &[], TOKEN),
            ErrorCode::UnknownCli,
            "unknown_cli",
        ),
        (
            request("ok", &[], "wrong-token-0000000000"),
            ErrorCode::BadToken,
            "bad_token",
        ),
        (request("ok", &[], ""), ErrorCode::BadToken, "bad_token"),
        (
            request("../ok", &[], TOKEN),
            ErrorCode::UnknownCli,
            "unknown_cli",
        ),
    ];
    for cwd in [
        "/workspace/../etc",
        "/etc",
        "/workspace/escape",
        "relative/path",
        "/workspace/missing",
    ] {
        let mut refused = request("ok", &[], TOKEN);
        refused.cwd = cwd.into();
        cases.push((refused, ErrorCode::BadCwd, "bad_cwd"));
    }
    cases.push((request("limited", &[], TOKEN), ErrorCode::Internal, "ok"));
    cases.push((
        request("limited", &[], TOKEN),
        ErrorCode::RateLimited,
        "rate_limited",
    ));

    for (index, (call, code, outcome)) in cases.into_iter().enumerate() {
        let frames = daemon.call(call.clone());
        if outcome == "ok" {
            assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{call:?}");
        } else {
            assert_eq!(error_of(&frames), Some(code), "{call:?} gave {frames:?}");
            assert!(stdout_of(&frames).is_empty());
        }
        let line = daemon.wait_audit(index + 1);
        assert_eq!(line["outcome"], outcome, "{call:?}");
        assert_eq!(line["cli"], call.cli);
    }
    // The proxy maps refusals to exit statuses with a one-line reason.
    let output = daemon.proxy("nope", &[], TOKEN).output().unwrap();
    assert_eq!(output.status.code(), Some(127));
    assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1);
    assert_eq!(
        daemon
            .proxy("ok", &[], "bad-token-000000000000")
            .status()
            .unwrap()
            .code(),
        Some(126)
    );
}

#[test]
fn protocol_misuse_is_refused() {
    let daemon = Daemon::start(|_, registry| {
        registry.clis.insert("cat".into(), cli("/bin/cat"));
    });
    let mut stream = daemon.connect();
    write_frame(&mut stream, &Frame::Hello { version: 999 }).unwrap();
    assert!(matches!(
        read_frame(&mut stream).unwrap(),
        Some(Frame::Error {
            code: ErrorCode::UnsupportedVersion,
            ..
        })
    ));

    let mut stream = daemon.connect();
    write_frame(&mut stream, &Frame::Hello { version: 1 }).unwrap();
    let exec = ExecRequest {
        command: "id".into(),
        cwd: "/workspace".into(),
        token: TOKEN.into(),
        ..ExecRequest::default()
    };
    write_frame(&mut stream, &Frame::Request(Request::Exec(exec))).unwrap();
    let frames = collect(&mut stream);
    assert_eq!(error_of(&frames), Some(ErrorCode::Unsupported));

    let mut stream = daemon.connect();
    stream.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert!(matches!(
        read_frame(&mut stream).unwrap(),
        Some(Frame::Error {
            code: ErrorCode::BadRequest,
            ..
        })
    ));
}

#[test]
fn the_child_sees_only_the_variables_it_was_given() {
    let daemon = Daemon::start(|_, registry| {
        let mut entry = cli("/usr/bin/env");
        entry.env = BTreeMap::from([("GIVEN".into(), "given-value".into())]);
        registry.clis.insert("env".into(), entry);
    });
    let output = daemon
        .proxy("env", &[], TOKEN)
        .env("LEAKED_FROM_SANDBOX", "x")
        .env("GIVEN", "overridden-by-caller")
        .env("TERM", "xterm-test")
        .env("LD_PRELOAD", "/tmp/evil.so")
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let names: BTreeSet<&str> = text
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["GIVEN", "HOME", "LANG", "PATH", "TERM"]),
        "{text}"
    );
    assert!(
        text.contains("GIVEN=[redacted]"),
        "the declared value is a credential: {text}"
    );
    assert!(text.contains("TERM=xterm-test"));
}

#[test]
fn shell_metacharacters_in_arguments_are_passed_literally() {
    let daemon = Daemon::start(|bin, registry| {
        registry.clis.insert(
            "args".into(),
            cli(&script(
                bin,
                "args",
                r#"for a in "$@"; do printf '%s\n' "$a"; done"#,
            )),
        );
    });
    let marker = daemon.directory.path().join("pwned");
    let injection = format!("$(touch {})", marker.display());
    let arguments = [
        injection.as_str(),
        "; rm -rf /",
        "a | b",
        "`id`",
        "*",
        "$HOME",
        "'quoted'",
        "two words",
    ];
    let output = daemon.proxy("args", &arguments, TOKEN).output().unwrap();
    let expected: String = arguments
        .iter()
        .map(|argument| format!("{argument}\n"))
        .collect();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), expected);
    assert!(!marker.exists(), "an argument was run by a shell");
}

#[test]
fn a_canary_credential_never_appears_in_any_frame_or_log_line() {
    let secret_file_value = format!("{CANARY}-from-file");
    let daemon = Daemon::start(|bin, registry| {
        let secret_file = bin.join("secret");
        std::fs::write(&secret_file, format!("{secret_file_value}\n")).unwrap();
        // Prints each credential whole, split across two writes with a pause between,
        // byte by byte, and on stderr.
        let body = r#"
printf '%s\n' "$LITERAL"
printf '%.9s' "$FROMFILE"; sleep 0.2; printf '%s\n' "${FROMFILE#?????????}"
v="$PORTER_SECRET_PASSTHROUGH"; while [ -n "$v" ]; do rest="${v#?}"; printf '%s' "${v%"$rest"}"; v="$rest"; done; echo
printf 'err %s\n' "$LITERAL" >&2
"#;
        let mut entry = cli(&script(bin, "leaky", body));
        entry.env = BTreeMap::from([("LITERAL".into(), CANARY.into())]);
        entry.env_from_files = BTreeMap::from([(
            "FROMFILE".into(),
            secret_file.to_string_lossy().into_owned(),
        )]);
        entry.env_passthrough = vec!["PORTER_SECRET_PASSTHROUGH".into()];
        registry.clis.insert("leaky".into(), entry);
    });
    let mut call = request("leaky", &["--flag", CANARY], TOKEN);
    call.stdin = false;
    let frames = daemon.call(call);
    assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{frames:?}");
    let secrets = [
        CANARY.to_owned(),
        secret_file_value.clone(),
        format!("{CANARY}-passthrough"),
    ];
    let mut stdout = Vec::new();
    for frame in &frames {
        let bytes = frame.to_bytes().unwrap();
        for secret in &secrets {
            assert!(
                !contains(&bytes, secret.as_bytes()),
                "{secret} leaked in frame {frame:?}"
            );
        }
        if let Frame::Stdout(data) = frame {
            stdout.extend_from_slice(data);
        }
    }
    let text = String::from_utf8_lossy(&stdout);
    assert!(text.starts_with("[redacted]\n[redacted]\n"), "{text}");
    daemon.wait_audit(1);
    let log = daemon.raw_log_text();
    for secret in &secrets {
        assert!(
            !log.contains(secret.as_str()),
            "{secret} leaked in the audit log: {log}"
        );
        assert!(
            !log.contains("CANARY"),
            "a canary fragment reached the audit log: {log}"
        );
    }
}

#[test]
fn a_passthrough_credential_split_into_single_bytes_is_redacted() {
    let daemon = Daemon::start(|bin, registry| {
        let body = r#"v="$PORTER_SECRET_PASSTHROUGH"; while [ -n "$v" ]; do rest="${v#?}"; printf '%s' "${v%"$rest"}"; v="$rest"; done; echo"#;
        let mut entry = cli(&script(bin, "bytes", body));
        entry.env_passthrough = vec!["PORTER_SECRET_PASSTHROUGH".into()];
        registry.clis.insert("bytes".into(), entry);
    });
    let output = daemon.proxy("bytes", &[], TOKEN).output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text, "[redacted]\n");
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

#[test]
fn denied_subcommands_are_refused_before_anything_runs() {
    let daemon = Daemon::start(|bin, registry| {
        let mut gh = cli(&script(bin, "gh", "touch ran-marker; echo ran"));
        gh.args = ArgPolicy {
            allow: vec!["pr list **".into(), "pr merge **".into(), "auth **".into()],
            deny: vec![],
        };
        gh.role_args = BTreeMap::from([(
            "employee".into(),
            ArgPolicy {
                allow: vec![],
                deny: vec!["pr merge **".into()],
            },
        )]);
        registry.clis.insert("gh".into(), gh);
    });
    let marker = daemon.workspace.join("ran-marker");
    for (arguments, token) in [
        (vec!["auth", "token"], TOKEN),
        (vec!["auth", "status", "--show-token"], TOKEN),
        (vec!["pr", "merge", "7"], EMPLOYEE_TOKEN),
        (vec!["issue", "list"], TOKEN),
    ] {
        let frames = daemon.call(request("gh", &arguments, token));
        assert_eq!(
            error_of(&frames),
            Some(ErrorCode::DeniedArgs),
            "{arguments:?}"
        );
        assert!(!marker.exists(), "{arguments:?} ran the CLI");
    }
    daemon.wait_audit(4);
    assert!(
        daemon
            .audit()
            .iter()
            .all(|line| line["outcome"] == "denied_args")
    );
    // The owner may merge; the employee may list.
    assert_eq!(
        daemon
            .call(request("gh", &["pr", "merge", "7"], TOKEN))
            .last(),
        Some(&Frame::Exit { code: 0 })
    );
    assert_eq!(
        daemon
            .call(request("gh", &["pr", "list"], EMPLOYEE_TOKEN))
            .last(),
        Some(&Frame::Exit { code: 0 })
    );
    assert!(marker.exists());
    assert_eq!(daemon.wait_audit(6)["role"], "employee");
}

#[test]
fn control_socket_tokens_work_for_one_command_and_are_refused_after_revoke() {
    let daemon = Daemon::start(|bin, registry| {
        let mut gh = cli(&script(bin, "gh", "echo ok"));
        gh.role_args = BTreeMap::from([(
            "employee".into(),
            ArgPolicy {
                allow: vec![],
                deny: vec!["pr merge **".into()],
            },
        )]);
        registry.clis.insert("gh".into(), gh);
    });
    let response = daemon.control(
        r#"{"op":"register","session":"sess-9","contact":"ana","role":"employee","ttlSeconds":60}"#,
    );
    assert_eq!(response["ok"], true, "{response}");
    let token = response["token"].as_str().unwrap().to_owned();
    assert_eq!(
        daemon.call(request("gh", &["pr", "list"], &token)).last(),
        Some(&Frame::Exit { code: 0 })
    );
    assert_eq!(
        error_of(&daemon.call(request("gh", &["pr", "merge", "1"], &token))),
        Some(ErrorCode::DeniedArgs)
    );
    let line = daemon.wait_audit(1);
    assert_eq!(
        (
            line["session"].as_str(),
            line["contact"].as_str(),
            line["role"].as_str()
        ),
        (Some("sess-9"), Some("ana"), Some("employee"))
    );
    assert_eq!(
        daemon.control(&format!(r#"{{"op":"revoke","token":"{token}"}}"#))["revoked"],
        true
    );
    assert_eq!(
        error_of(&daemon.call(request("gh", &["pr", "list"], &token))),
        Some(ErrorCode::BadToken)
    );
    assert_eq!(daemon.control(r#"{"op":"register"}"#)["ok"], false);
}

#[test]
fn the_registry_is_reloaded_when_the_file_changes() {
    let (daemon, address) = Daemon::start_with_metrics(
        |_, registry| {
            registry.clis.insert("cat".into(), cli("/bin/cat"));
        },
        &[],
    );
    assert_eq!(
        error_of(&daemon.call(request("hello", &[], TOKEN))),
        Some(ErrorCode::UnknownCli)
    );
    let mut registry = porter_protocol::registry::Registry::from_json(
        &std::fs::read_to_string(&daemon.registry_path).unwrap(),
    )
    .unwrap();
    registry.clis.insert(
        "hello".into(),
        cli(&script(&daemon.bin_dir, "hello", "echo hello")),
    );
    write_atomically(&daemon.registry_path, &registry.to_json());
    let started = std::time::Instant::now();
    loop {
        let frames = daemon.call(request("hello", &[], TOKEN));
        if frames.last() == Some(&Frame::Exit { code: 0 }) {
            assert_eq!(stdout_of(&frames), "hello\n");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "reload never happened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The change was one reload, counted as such.
    assert_eq!(
        metric_value(
            &address,
            r#"porter_reloads_total{file="registry",result="ok"}"#
        ),
        Some(1)
    );
    // A broken file is refused and the last good registry keeps serving.
    write_atomically(&daemon.registry_path, "{ not json");
    // Wait for the reload to have been refused, as the metrics count it.
    wait_for_metric(
        &address,
        r#"porter_reloads_total{file="registry",result="error"}"#,
        1,
        "the broken registry was never looked at",
    );
    assert_eq!(
        daemon.call(request("hello", &[], TOKEN)).last(),
        Some(&Frame::Exit { code: 0 })
    );
}

#[test]
fn the_tokens_file_is_reloaded_when_it_changes() {
    const REPLACEMENT: &str = "replacement-token-0123456789";
    let (daemon, address) = Daemon::start_with_metrics(
        |_, registry| {
            registry.clis.insert("true".into(), cli("/bin/true"));
        },
        &[],
    );
    assert_eq!(
        daemon.call(request("true", &[], TOKEN)).last(),
        Some(&Frame::Exit { code: 0 })
    );
    assert_eq!(
        error_of(&daemon.call(request("true", &[], REPLACEMENT))),
        Some(ErrorCode::BadToken)
    );
    write_atomically(
        &daemon.tokens_path,
        &format!(
            r#"{{"tokens":[{{"token":"{REPLACEMENT}","session":"s-new","contact":"owner","role":"owner"}}]}}"#
        ),
    );
    wait_for_metric(
        &address,
        r#"porter_reloads_total{file="tokens",result="ok"}"#,
        1,
        "the new tokens file was never loaded",
    );
    // The file replaces the local tokens: the new one works, the old one is gone.
    assert_eq!(
        daemon.call(request("true", &[], REPLACEMENT)).last(),
        Some(&Frame::Exit { code: 0 })
    );
    assert_eq!(
        error_of(&daemon.call(request("true", &[], TOKEN))),
        Some(ErrorCode::BadToken)
    );
    // A file with a short token is refused whole; the last good tokens keep working.
    write_atomically(
        &daemon.tokens_path,
        r#"{"tokens":[{"token":"short","session":"s","contact":"c","role":"owner"}]}"#,
    );
    wait_for_metric(
        &address,
        r#"porter_reloads_total{file="tokens",result="error"}"#,
        1,
        "the refused tokens file was never looked at",
    );
    assert_eq!(
        daemon.call(request("true", &[], REPLACEMENT)).last(),
        Some(&Frame::Exit { code: 0 })
    );
}

#[test]
fn a_disallowed_peer_uid_is_refused() {
    let daemon = Daemon::start_with(
        |_, registry| {
            registry.clis.insert("cat".into(), cli("/bin/cat"));
        },
        &["--allowed-uid", "4242"],
    );
    let frames = daemon.call(request("cat", &[], TOKEN));
    assert_eq!(error_of(&frames), Some(ErrorCode::PeerDenied));
    let line = daemon.wait_audit(1);
    assert_eq!(line["outcome"], "peer_denied");
    assert_eq!(line["peer"]["uid"], nix::unistd::getuid().as_raw());
}

#[test]
fn sigterm_lets_running_calls_finish_and_refuses_new_ones() {
    let mut daemon = Daemon::start(|bin, registry| {
        registry.clis.insert(
            "slow".into(),
            cli(&script(bin, "slow-3041", "sleep 1; echo finished")),
        );
    });
    let mut proxy = daemon
        .proxy("slow", &[], TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while processes_with("slow-3041").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "child never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut out = String::new();
    proxy
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "finished\n");
    assert!(proxy.wait().unwrap().success());
    let status = daemon.process.wait().unwrap();
    assert!(status.success(), "porter exited with {status}");
    assert!(!daemon.socket.exists(), "the socket was left behind");
}

#[test]
fn a_symlink_named_after_the_cli_picks_it_and_cliport_manages_the_registry() {
    let daemon = Daemon::start(|_, registry| {
        registry.clis.insert("cat".into(), cli("/bin/cat"));
    });
    let cliport = |arguments: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_cliport"))
            .arg("--registry")
            .arg(&daemon.registry_path)
            .arg("--audit-log")
            .arg(&daemon.audit_log)
            .args(arguments)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "cliport {arguments:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let greeter = script(
        &daemon.bin_dir,
        "greeter",
        r#"printf '%s %s\n' "$GREETING" "$1""#,
    );
    cliport(&[
        "install",
        "greet",
        "--bin",
        &greeter,
        "--env",
        "GREETING=hello-credential",
    ]);
    assert!(cliport(&["list"]).contains("greet\t"));
    assert!(
        !cliport(&["list"]).contains("hello-credential"),
        "list printed a value"
    );

    // Call it the way the sandbox does: a symlink named after the CLI.
    let link = daemon.directory.path().join("greet");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cliport-proxy"), &link).unwrap();
    let call = |argument: &str| {
        std::process::Command::new(&link)
            .arg(argument)
            .env_clear()
            .env("CLIPORT_SOCKET", &daemon.socket)
            .env("CLIPORT_TOKEN", TOKEN)
            .env("CLIPORT_CWD", "/workspace/repo")
            .output()
            .unwrap()
    };
    let started = std::time::Instant::now();
    let mut output = call("world");
    while !output.status.success() {
        // The daemon polls the registry file; wait for it to pick up `install`.
        assert!(started.elapsed() < Duration::from_secs(10), "{output:?}");
        std::thread::sleep(Duration::from_millis(100));
        output = call("world");
    }
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "[redacted] world\n"
    );

    cliport(&["env", "greet", "GREETING=hi"]);
    cliport(&["remove", "greet"]);
    let started = std::time::Instant::now();
    while call("x").status.code() != Some(127) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "remove never took effect"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = cliport(&["log", "--last", "1"]);
    assert!(log.contains(r#""outcome":"unknown_cli""#), "{log}");
}

#[test]
fn metrics_are_served_over_http() {
    // A free loopback port: bind, note it, release it for the daemon.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let daemon = Daemon::start_with(
        |_, registry| {
            registry.clis.insert("cat".into(), cli("/bin/cat"));
        },
        &["--metrics-listen", &address],
    );
    assert_eq!(
        daemon.call(request("cat", &[], TOKEN)).last(),
        Some(&Frame::Exit { code: 0 })
    );
    assert_eq!(
        error_of(&daemon.call(request("made-up-name", &[], TOKEN))),
        Some(ErrorCode::UnknownCli)
    );
    daemon.wait_audit(2);
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(
        response.contains(r#"porter_calls_total{cli="cat",outcome="ok"} 1"#),
        "{response}"
    );
    // Caller-chosen names never become label values.
    assert!(
        response.contains(r#"porter_calls_total{cli="-",outcome="unknown_cli"} 1"#),
        "{response}"
    );
    assert!(!response.contains("made-up-name"));
}
