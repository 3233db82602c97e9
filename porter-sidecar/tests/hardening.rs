//! Limits that need no credential to hold, and what Porter refuses at start: keyless
//! connections are closed after a short deadline; one uid cannot hold every connection;
//! a FIFO in place of the registry or a secret file neither hangs Porter at start nor on
//! reload, and SIGTERM always ends it; a version 1 or env-mode registry is refused with
//! a message naming the entry; a sealed Porter cannot start a program.

mod support;

use std::{
    io::Read,
    os::unix::net::UnixStream,
    time::{Duration, Instant},
};

use porter_protocol::registry::{CliEntry, Registry, SecretSource};
use support::Daemon;

fn registry() -> Registry {
    let mut registry = Registry::default();
    registry.clis.insert(
        "gh".into(),
        CliEntry {
            hosts: vec!["api.github.com".into()],
            secret: SecretSource::Value("ghp_hardening_secret_value".into()),
            ..CliEntry::default()
        },
    );
    registry
}

/// Blocks until Porter closes `stream` (the event the test waits for), and says when.
fn wait_closed(mut stream: UnixStream, within: Duration) -> Duration {
    let started = Instant::now();
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buffer = [0_u8; 64];
    match stream.read(&mut buffer) {
        Ok(0) => started.elapsed(),
        Ok(count) => panic!(
            "porter answered instead of closing: {:?}",
            String::from_utf8_lossy(&buffer[..count])
        ),
        Err(error) => panic!("porter did not close the connection within {within:?}: {error}"),
    }
}

#[test]
fn keyless_connections_are_closed_and_one_uid_cannot_hold_every_slot() {
    let daemon = Daemon::start(&registry(), &["--max-connections-per-uid", "4"]);
    let idle: Vec<UnixStream> = (0..4)
        .map(|_| UnixStream::connect(&daemon.proxy_socket).unwrap())
        .collect();
    // The fifth connection of this uid is closed at once, while four idle ones wait.
    let fifth = UnixStream::connect(&daemon.proxy_socket).unwrap();
    let refused_after = wait_closed(fifth, Duration::from_secs(2));
    // The idle ones are closed by the keyless deadline (3 s), not left to hold slots.
    for stream in idle {
        wait_closed(stream, Duration::from_secs(10));
    }
    assert!(refused_after < Duration::from_secs(2));
    // And a command with a key gets its tunnel again.
    let command = daemon.register("ana", "owner");
    let mut stream = UnixStream::connect(&daemon.proxy_socket).unwrap();
    use base64::{Engine, engine::general_purpose::STANDARD};
    use std::io::{BufRead, BufReader, Write};
    write!(
        stream,
        "CONNECT api.github.com:443 HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
        STANDARD.encode(format!("porter:{}", command.key))
    )
    .unwrap();
    let mut status = String::new();
    BufReader::new(stream).read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
}

#[test]
fn a_fifo_registry_or_secret_is_refused_at_start_without_hanging() {
    let directory = tempfile::tempdir().unwrap();
    let fifo = directory.path().join("registry.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let error = Daemon::start_with_registry_path(directory, fifo.clone(), &[])
        .err()
        .expect("porter started on a FIFO registry");
    assert!(error.contains("not a regular file"), "{error}");

    let directory = tempfile::tempdir().unwrap();
    let secret = directory.path().join("secret");
    nix::unistd::mkfifo(&secret, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut with_fifo_secret = registry();
    with_fifo_secret.clis.get_mut("gh").unwrap().secret =
        SecretSource::File(secret.to_string_lossy().into_owned());
    let error = Daemon::try_start(&with_fifo_secret.to_json(), &[])
        .err()
        .expect("porter started on a FIFO secret");
    assert!(
        error.contains("clis.gh.secret: failed to read") && error.contains("not a regular file"),
        "{error}"
    );
}

#[test]
fn a_fifo_swapped_in_on_reload_keeps_the_last_registry_and_sigterm_still_ends_porter() {
    let mut daemon = Daemon::start(&registry(), &[]);
    let staged = daemon.directory.path().join("staged-fifo");
    nix::unistd::mkfifo(&staged, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::rename(&staged, &daemon.registry_path).unwrap();
    // The reload loop meets the FIFO (counted as unreadable); keys still work.
    let command = daemon.register("ana", "owner");
    assert!(command.env.contains_key("HTTPS_PROXY"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = daemon.process.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "porter ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !daemon.proxy_socket.exists(),
        "the socket is removed on exit"
    );
}

#[test]
fn version_1_and_env_mode_registries_are_refused_naming_the_entry() {
    let old = Daemon::try_start(
        r#"{"version":1,"clis":{"gh":{"bin":"/usr/bin/gh","envFromFiles":{"GH_TOKEN":"/s"}}}}"#,
        &[],
    )
    .err()
    .expect("porter served a version 1 registry");
    assert!(old.contains("version 1 ran CLIs inside Porter"), "{old}");
    let env_mode = Daemon::try_start(
        r#"{"version":2,"clis":{"signer":{"hosts":["sign.example"],"secret":{"value":"k3y-value"},"mode":"env"}}}"#,
        &[],
    )
    .err()
    .expect("porter served an env-mode entry");
    assert!(
        env_mode.contains("clis.signer.mode: \"env\" is not served"),
        "{env_mode}"
    );
    let no_hosts = Daemon::try_start(
        r#"{"version":2,"clis":{"gh":{"hosts":[],"secret":{"value":"k3y-value"}}}}"#,
        &[],
    )
    .err()
    .expect("porter served an entry without hosts");
    assert!(no_hosts.contains("clis.gh.hosts"), "{no_hosts}");
}

#[test]
fn a_sealed_porter_cannot_start_a_program_and_the_daemon_runs_sealed() {
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_porter"))
        .arg("__check-seal")
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(check.status.success(), "{printed}");
    assert!(
        printed.contains("spawn refused: Operation not permitted"),
        "{printed}"
    );
    let daemon = Daemon::start(&registry(), &[]);
    assert_eq!(support::status_field(daemon.pid(), "Seccomp:"), "2");
    assert_eq!(support::status_field(daemon.pid(), "NoNewPrivs:"), "1");
}
