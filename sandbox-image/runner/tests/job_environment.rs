//! The sandbox contract end to end: the environment the agent's real Job builder writes
//! into a sandbox Job is the environment the real runner binary starts from. Only the
//! image's fixed paths (what `entrypoint.sh` passes) and a socket this test can create
//! are given as flags; everything else comes from the Job.

use std::{
    fs,
    os::unix::net::UnixStream,
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use porter_protocol::{
    ExecRequest, Frame, PROTOCOL_VERSION, Request,
    sync_io::{read_frame, write_frame},
};
use saint_config::{
    SANDBOX_RUN_SUBPATH_PLACEHOLDER, SANDBOX_VIEW_SUBPATH_PLACEHOLDER, SandboxScope,
    sandbox_contract::RUNNER_SOCKET_ENV,
};
use saint_sandbox::{
    ScopeKey, View, Viewer,
    kubernetes::{JobParameters, build_job},
};
use serde_json::json;

/// The smallest template the builder accepts: the mounts it requires, nothing else.
fn template() -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "namespace": "acme",
            "ownerReferences": [{
                "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                "name": "acme-ana", "uid": "uid-1", "controller": true
            }]
        },
        "spec": {"template": {"spec": {
            "containers": [{
                "name": "runner",
                "image": "saint-sandbox:test",
                "volumeMounts": [
                    {"name": "workspace", "mountPath": "/agent", "subPath": SANDBOX_VIEW_SUBPATH_PLACEHOLDER, "readOnly": true},
                    {"name": "workspace", "mountPath": "/run/saint/sandbox", "subPath": SANDBOX_RUN_SUBPATH_PLACEHOLDER},
                    {"name": "scratch", "mountPath": "/workspace"}
                ]
            }],
            "volumes": [
                {"name": "workspace", "persistentVolumeClaim": {"claimName": "acme-ana-workspace"}},
                {"name": "scratch", "emptyDir": {}}
            ]
        }}}
    })
}

#[test]
fn the_runner_starts_from_the_environment_the_agent_puts_in_the_job() {
    let scope = ScopeKey::for_caller(
        SandboxScope::Session,
        "http:acme-ana",
        &Viewer {
            role: "employee",
            person: Some("acme-ana"),
        },
    );
    let seed = vec!["notes/a,b.md".to_string(), "SOUL.md".to_string()];
    let view = View::empty();
    let job = build_job(
        &template(),
        &JobParameters {
            bot: "acme-ana",
            scope: &scope,
            view: &view,
            suffix: "x1y2z3",
            runner_token: "job-runner-token",
            seed: &seed,
            runner_idle_timeout_seconds: 900,
            owner: None,
        },
    )
    .unwrap();
    let container = &job.spec.unwrap().template.spec.unwrap().containers[0];
    let environment: Vec<(String, String)> = container
        .env
        .iter()
        .flatten()
        .map(|variable| (variable.name.clone(), variable.value.clone().unwrap()))
        .collect();
    assert!(
        environment
            .iter()
            .any(|(name, value)| name == RUNNER_SOCKET_ENV
                && value == "/run/saint/sandbox/runner.sock"),
        "{environment:?}"
    );

    let base = tempfile::tempdir().unwrap();
    for directory in ["workspace", "agent/notes", "bin"] {
        fs::create_dir_all(base.path().join(directory)).unwrap();
    }
    fs::write(base.path().join("agent/notes/a,b.md"), "comma\n").unwrap();
    fs::write(base.path().join("agent/SOUL.md"), "soul\n").unwrap();
    let socket = base.path().join("run/runner.sock");
    let mut runner = Command::new(env!("CARGO_BIN_EXE_saint-sandbox-runner"))
        // The Job's socket path exists only inside a pod; everything else is the Job's.
        .arg("--socket")
        .arg(&socket)
        .arg("--workspace")
        .arg(base.path().join("workspace"))
        .arg("--agent")
        .arg(base.path().join("agent"))
        .arg("--relay-listen")
        .arg("127.0.0.1:0")
        .env_clear()
        .envs(environment.clone())
        // What the kubelet adds in every pod: the API server's Service, here a loopback
        // port nothing listens on (a pod whose network is cut).
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", closed_port().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            runner.try_wait().unwrap().is_none(),
            "the runner refused the Job's environment"
        );
        assert!(Instant::now() < deadline, "runner socket never appeared");
        thread::sleep(Duration::from_millis(10));
    }

    // The list arrived whole: one seeded copy per entry, a comma in a name kept.
    assert_eq!(
        fs::read_to_string(base.path().join("workspace/notes/a,b.md")).unwrap(),
        "comma\n"
    );
    assert!(base.path().join("workspace/SOUL.md").exists());

    // The Job's token is the one the runner requires.
    let exit = exec(&socket, "job-runner-token", "true");
    assert_eq!(exit, Frame::Exit { code: 0 });
    let refused = exec(&socket, "another-token", "true");
    assert!(matches!(refused, Frame::Error { .. }), "{refused:?}");

    let _ = runner.kill();
    let _ = runner.wait();
}

/// Runs `command` and returns the last frame (`Exit` or `Error`).
fn exec(socket: &Path, token: &str, command: &str) -> Frame {
    let mut stream = UnixStream::connect(socket).unwrap();
    write_frame(
        &mut stream,
        &Frame::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .unwrap();
    read_frame(&mut stream).unwrap();
    let request = ExecRequest {
        command: command.to_string(),
        cwd: String::new(),
        token: token.to_string(),
        ..ExecRequest::default()
    };
    write_frame(&mut stream, &Frame::Request(Request::Exec(request))).unwrap();
    let mut last = None;
    while let Some(frame) = read_frame(&mut stream).unwrap() {
        last = Some(frame);
    }
    last.expect("the runner answered")
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The runner with the environment of a Job the agent built (`require_network_cut`
/// set), plus `extra`, its stderr captured.
fn start_as_job(base: &std::path::Path, extra: &[(&str, String)]) -> std::process::Child {
    for directory in ["workspace", "agent", "bin"] {
        fs::create_dir_all(base.join(directory)).unwrap();
    }
    let settings = saint_config::sandbox_contract::RunnerSettings {
        token: "job-runner-token".to_string(),
        require_network_cut: true,
        ..Default::default()
    };
    Command::new(env!("CARGO_BIN_EXE_saint-sandbox-runner"))
        .arg("--socket")
        .arg(base.join("run/runner.sock"))
        .arg("--workspace")
        .arg(base.join("workspace"))
        .arg("--agent")
        .arg(base.join("agent"))
        .arg("--relay-listen")
        .arg("127.0.0.1:0")
        .env_clear()
        .envs(settings.to_env())
        .envs(extra.iter().map(|(name, value)| (*name, value.clone())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_job_runner_that_cannot_check_its_network_refuses_to_start_naming_the_variable() {
    let base = tempfile::tempdir().unwrap();
    let runner = start_as_job(base.path(), &[]);
    let output = runner.wait_with_output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("KUBERNETES_SERVICE_HOST"), "{stderr}");
    assert!(!base.path().join("run/runner.sock").exists());
}

#[test]
fn a_job_runner_whose_pod_still_reaches_the_api_server_publishes_no_socket() {
    // A server standing in for the API server, reachable: the NetworkPolicy is not in
    // effect (yet). The runner must keep its socket unpublished meanwhile.
    let api_server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = api_server.local_addr().unwrap().port();
    let accepting = thread::spawn(move || {
        for stream in api_server.incoming().take(8) {
            drop(stream);
        }
    });
    let base = tempfile::tempdir().unwrap();
    let mut runner = start_as_job(
        base.path(),
        &[
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()),
            ("KUBERNETES_SERVICE_PORT", port.to_string()),
        ],
    );
    // Eight connections accepted: the runner has probed for over a second and is still
    // waiting, not serving.
    accepting.join().unwrap();
    assert!(
        runner.try_wait().unwrap().is_none(),
        "the runner gave up early"
    );
    assert!(
        !base.path().join("run/runner.sock").exists(),
        "the runner published its socket while its pod reached the API server"
    );
    runner.kill().unwrap();
    runner.wait().unwrap();
}
