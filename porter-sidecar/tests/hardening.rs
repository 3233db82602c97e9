//! The defects found by driving Porter as an attacker would: a caller that stops
//! reading, thousands of idle connections, one session's flood of calls, a working
//! directory swapped for a symlink mid-call, a registry pointed at a device, running
//! out of file descriptors, and an endless control line. Real daemon, real sockets,
//! real child processes.

mod support;

use std::{
    io::{BufRead, BufReader, Read, Write},
    os::unix::net::UnixStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use porter_protocol::{
    ErrorCode, Frame, PROTOCOL_VERSION, Request,
    sync_io::{read_frame, write_frame},
};
use support::*;

/// Sends hello and request, and returns the stream without reading anything.
fn send_request(daemon: &Daemon, call: porter_protocol::CliRequest) -> UnixStream {
    let mut stream = daemon.connect();
    write_frame(
        &mut stream,
        &Frame::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .unwrap();
    write_frame(&mut stream, &Frame::Request(Request::Cli(call))).unwrap();
    stream
}

/// CPU time (user + system) of a process so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> u64 {
    let output = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(100)
}

#[test]
fn the_timeout_holds_when_the_caller_stops_reading() {
    let id = std::process::id();
    let daemon = Daemon::start(|bin, registry| {
        let mut flood = cli(&script(
            bin,
            "flood",
            &format!("exec yes flood-{id}-line-of-output"),
        ));
        flood.timeout_seconds = 2;
        registry.clis.insert("flood".into(), flood);
    });
    let started = Instant::now();
    // Never read: the socket and pipe buffers fill and Porter's writes block.
    let _stream = send_request(&daemon, request("flood", &[], TOKEN));
    let line = daemon.wait_audit(1);
    assert_eq!(line["outcome"], "timed_out", "{line}");
    // Timeout 2 s, kill grace 1 s, last-frame allowance 2 s: well under 10 s, while the
    // caller still holds its end open.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the call outlived its timeout: {:?}",
        started.elapsed()
    );
    assert_eq!(
        wait_gone(&format!("flood-{id}"), Duration::from_secs(5)),
        Vec::<u32>::new()
    );
}

#[test]
fn two_thousand_idle_connections_do_not_starve_real_calls() {
    let daemon = Daemon::start(|_, registry| {
        registry.clis.insert("true".into(), cli("/bin/true"));
    });
    // One process opens 2,000 connections and never says hello.
    let idle: Vec<UnixStream> = (0..2000).map(|_| daemon.connect()).collect();
    // Past this process's handshake cap every connection is refused at once, and each
    // refusal is audited.
    let started = Instant::now();
    while daemon
        .audit()
        .iter()
        .filter(|line| line["outcome"] == "rate_limited")
        .count()
        < 1900
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "refusals were not audited"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A real call from another process goes straight through.
    let started = Instant::now();
    let status = daemon.proxy("true", &[], TOKEN).status().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a real call waited {:?} behind idle connections",
        started.elapsed()
    );
    drop(idle);
}

#[test]
fn one_session_may_run_only_so_many_calls_at_once() {
    let id = std::process::id();
    let daemon = Daemon::start_with(
        |bin, registry| {
            registry.clis.insert(
                "wait".into(),
                cli(&script(bin, "wait", &format!("exec sleep 3201.{id}"))),
            );
            registry.clis.insert("quick".into(), cli("/bin/true"));
        },
        &["--max-calls-per-session", "2"],
    );
    let token = daemon.control(
        r#"{"op":"register","session":"s-flood","contact":"ana","role":"employee","ttlSeconds":60}"#,
    )["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let running: Vec<UnixStream> = (0..2)
        .map(|_| send_request(&daemon, request("wait", &[], &token)))
        .collect();
    let started = Instant::now();
    while processes_with(&format!("sleep 3201.{id}")).len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "calls never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let frames = daemon.call(request("wait", &[], &token));
    assert_eq!(
        error_of(&frames),
        Some(ErrorCode::RateLimited),
        "{frames:?}"
    );
    let line = daemon.wait_audit(1);
    assert_eq!(
        (line["outcome"].as_str(), line["session"].as_str()),
        (Some("rate_limited"), Some("s-flood"))
    );
    // Another session is not affected.
    assert_eq!(
        daemon.call(request("quick", &[], TOKEN)).last(),
        Some(&Frame::Exit { code: 0 })
    );
    drop(running);
    assert_eq!(
        wait_gone(&format!("sleep 3201.{id}"), Duration::from_secs(5)),
        Vec::<u32>::new()
    );
}

#[test]
fn a_directory_swapped_for_a_symlink_is_never_entered() {
    let daemon = Daemon::start(|bin, registry| {
        registry
            .clis
            .insert("where".into(), cli(&script(bin, "where", "pwd -P")));
    });
    let real = daemon.workspace.join("real");
    let moving = daemon.workspace.join("moving");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::create_dir_all(&moving).unwrap();
    let link = daemon.workspace.join("link-to-etc");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    // Swap `moving` between a real directory and a symlink to /etc, atomically, as
    // fast as possible while calls run in it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (workspace, moving) = (daemon.workspace.clone(), moving.clone());
        std::thread::spawn(move || {
            let parked = workspace.join("parked");
            let staged_link = workspace.join("staged-link");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::rename(&moving, &parked);
                let _ = std::os::unix::fs::symlink("/etc", &staged_link);
                let _ = std::fs::rename(&staged_link, &moving);
                let _ = std::fs::remove_file(&moving);
                let _ = std::fs::rename(&parked, &moving);
                // Mostly a real directory, so calls do run between swaps.
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    let (mut in_workspace, mut refused_early, mut refused_late) = (0, 0, 0);
    for _ in 0..300 {
        let mut call = request("where", &[], TOKEN);
        call.cwd = "/workspace/moving".into();
        let frames = daemon.call(call);
        let out = stdout_of(&frames);
        assert!(!out.starts_with("/etc"), "a call ran in /etc: {frames:?}");
        let stderr: String = frames
            .iter()
            .filter_map(|frame| match frame {
                Frame::Stderr(data) => Some(String::from_utf8_lossy(data).into_owned()),
                _ => None,
            })
            .collect();
        if out.trim_end() == moving.to_string_lossy() {
            in_workspace += 1;
        } else if error_of(&frames) == Some(ErrorCode::BadCwd) {
            refused_early += 1;
        } else if stderr.contains("porter: working directory") {
            // Checked while it was a directory, swapped before the CLI started: the
            // window a path-based chdir loses.
            refused_late += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    eprintln!(
        "ran {in_workspace}, refused at the check {refused_early}, refused at entry {refused_late}"
    );
    // The race was real: calls ran, and the swap was seen both at the check and after it.
    assert!(in_workspace > 0, "no call ran at all");
    assert!(
        refused_early + refused_late > 0,
        "the directory was never swapped"
    );
}

#[test]
fn a_registry_that_is_a_device_or_too_large_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let huge = directory.path().join("huge.json");
    std::fs::write(&huge, vec![b' '; 5 << 20]).unwrap();
    for registry in [std::path::Path::new("/dev/zero"), &huge] {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_porter"))
            .arg("--socket")
            .arg(directory.path().join("porter.sock"))
            .arg("--registry")
            .arg(registry)
            .arg("--workspace")
            .arg(&workspace)
            .arg("--call-homes")
            .arg(directory.path().join("homes"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("not a regular file") || stderr.contains("larger than"),
            "{stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // A running daemon keeps its last good registry when the file becomes a device.
    let (daemon, address) = Daemon::start_with_metrics(
        |_, registry| {
            registry.clis.insert("true".into(), cli("/bin/true"));
        },
        &[],
    );
    let before = peak_rss_kib(daemon.pid());
    // Swapped in by rename, so the reload loop never sees the file missing.
    let staged = daemon.directory.path().join("staged-link");
    std::os::unix::fs::symlink("/dev/zero", &staged).unwrap();
    std::fs::rename(&staged, &daemon.registry_path).unwrap();
    let unreadable = r#"porter_reloads_total{file="registry",result="unreadable"}"#;
    wait_for_metric(
        &address,
        unreadable,
        1,
        "the registry turned device was never looked at",
    );
    // Several more reload intervals (100 ms) pass; each must refuse the device at once.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(800) {
        assert_eq!(
            daemon.call(request("true", &[], TOKEN)).last(),
            Some(&Frame::Exit { code: 0 })
        );
    }
    // Reported once, not on every tick, and never parsed.
    assert_eq!(metric_value(&address, unreadable), Some(1));
    assert_eq!(
        metric_value(
            &address,
            r#"porter_reloads_total{file="registry",result="error"}"#
        ),
        None
    );
    let after = peak_rss_kib(daemon.pid());
    assert!(
        after < before + 16 * 1024,
        "porter grew from {before} KiB to {after} KiB reading /dev/zero"
    );
}

#[test]
fn running_out_of_descriptors_backs_off_instead_of_spinning() {
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let registry = directory.path().join("registry.json");
    let mut contents = porter_protocol::registry::Registry::default();
    contents.clis.insert("true".into(), cli("/bin/true"));
    std::fs::write(&registry, contents.to_json()).unwrap();
    let tokens = directory.path().join("tokens.json");
    std::fs::write(
        &tokens,
        format!(
            r#"{{"tokens":[{{"token":"{TOKEN}","session":"s","contact":"c","role":"owner"}}]}}"#
        ),
    )
    .unwrap();
    let socket = directory.path().join("porter.sock");
    // Porter's log, read for the sign that it did run out of descriptors.
    let log_path = directory.path().join("porter.log");
    let log = std::fs::File::create(&log_path).unwrap();
    // A hard limit of 64 descriptors: a few dozen connections exhaust it.
    let mut porter = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 64 && exec "$@""#)
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_porter"))
        .arg("--socket")
        .arg(&socket)
        .arg("--registry")
        .arg(&registry)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--tokens-file")
        .arg(&tokens)
        .arg("--call-homes")
        .arg(directory.path().join("homes"))
        .arg("--max-handshakes-per-peer")
        .arg("1000")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PORTER_LOG", "warn")
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !socket.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "porter did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = porter.id();
    // Idle connections until Porter can accept no more (the backlog still takes them).
    let idle: Vec<UnixStream> = (0..120)
        .filter_map(|_| UnixStream::connect(&socket).ok())
        .collect();
    // Measure only once accept has failed with EMFILE: the condition under test.
    let started = Instant::now();
    while !std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .lines()
        .any(|line| line.contains("failed to accept a connection") && line.contains("os error 24"))
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "porter never ran out of descriptors: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    // Spinning on EMFILE burns a whole core (200 ticks in 2 s at 100 Hz).
    assert!(
        used * 100 < ticks_per_second() * 2 * 20,
        "porter used {used} ticks in 2 s while out of descriptors"
    );
    // Once the idle connections go (after their handshake deadline), calls work again.
    drop(idle);
    let started = Instant::now();
    loop {
        let mut stream = UnixStream::connect(&socket).unwrap();
        let sent = write_frame(
            &mut stream,
            &Frame::Hello {
                version: PROTOCOL_VERSION,
            },
        )
        .and_then(|()| {
            write_frame(
                &mut stream,
                &Frame::Request(Request::Cli(request("true", &[], TOKEN))),
            )
        });
        if sent.is_ok() && collect(&mut stream).last() == Some(&Frame::Exit { code: 0 }) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "calls never worked again"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = porter.kill();
    let _ = porter.wait();
}

#[test]
fn an_endless_control_line_is_cut_off_while_reading() {
    let daemon = Daemon::start(|_, registry| {
        registry.clis.insert("true".into(), cli("/bin/true"));
    });
    let before = peak_rss_kib(daemon.pid());
    let stream = UnixStream::connect(&daemon.control_socket).unwrap();
    let mut writer = stream.try_clone().unwrap();
    // 64 MiB without a newline; Porter answers and hangs up long before the end.
    let sender = std::thread::spawn(move || {
        let chunk = vec![b'a'; 1 << 20];
        let mut sent = 0_usize;
        for _ in 0..64 {
            if writer.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
        sent
    });
    let mut response = String::new();
    BufReader::new(&stream).read_line(&mut response).unwrap();
    assert!(response.contains("request line too long"), "{response}");
    let sent = sender.join().unwrap();
    assert!(sent < 64 << 20, "porter read all 64 MiB");
    let after = peak_rss_kib(daemon.pid());
    assert!(
        after < before + 8 * 1024,
        "porter grew from {before} KiB to {after} KiB on one control line"
    );
    // The control socket still serves well-formed requests.
    assert_eq!(
        daemon.control(r#"{"op":"revoke","token":"none"}"#)["ok"],
        true
    );
    let mut rest = Vec::new();
    let _ = (&stream).read_to_end(&mut rest);
}

#[test]
fn idle_connections_past_the_handshake_deadline_are_dropped_and_audited() {
    let daemon = Daemon::start(|_, registry| {
        registry.clis.insert("true".into(), cli("/bin/true"));
    });
    let mut silent = daemon.connect();
    let started = Instant::now();
    let frame = read_frame(&mut silent).unwrap();
    assert!(
        matches!(
            frame,
            Some(Frame::Error {
                code: ErrorCode::BadRequest,
                ..
            })
        ),
        "{frame:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert_eq!(daemon.wait_audit(1)["outcome"], "bad_request");
}

#[test]
fn a_call_dies_with_porter_even_when_porter_is_killed() {
    let id = std::process::id();
    let mut daemon = Daemon::start(|bin, registry| {
        registry.clis.insert(
            "lingering".into(),
            cli(&script(
                bin,
                "lingering",
                &format!("setsid sh -c 'sleep 3301.{id}' </dev/null >/dev/null 2>&1 & exec sleep 3302.{id}"),
            )),
        );
    });
    let _stream = send_request(&daemon, request("lingering", &[], TOKEN));
    let started = Instant::now();
    while processes_with(&format!("sleep 3301.{id}")).is_empty()
        || processes_with(&format!("sleep 3302.{id}")).is_empty()
    {
        assert!(started.elapsed() < Duration::from_secs(10), "never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // No chance to clean up: the supervisor's parent-death signal does it.
    daemon.process.kill().unwrap();
    daemon.process.wait().unwrap();
    for marker in [format!("sleep 3301.{id}"), format!("sleep 3302.{id}")] {
        assert_eq!(
            wait_gone(&marker, Duration::from_secs(5)),
            Vec::<u32>::new(),
            "{marker} outlived porter"
        );
    }
}
