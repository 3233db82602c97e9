//! Benchmark (one run, medians): what the path sandbox → relay → Porter → upstream adds,
//! against the stand-in called directly, three ways:
//!
//! - a GET on a kept-alive tunnel (the per-request cost: relay, TLS termination with
//!   Porter's CA, request policy, placeholder swap, upstream TLS);
//! - a fresh tunnel per request (what one CLI invocation pays: TCP to the relay,
//!   `CONNECT` with its key, both TLS handshakes), against a fresh TLS connection;
//! - `gh api user` end to end (Debian's real gh, one process per call), through the
//!   relay and Porter, against gh through a blind CONNECT tunnel to the stand-in;
//!
//! and Porter's idle resident memory after start (and of `PORTER_BEFORE_BIN`, an older
//! porter binary, when set: the figure before Porter III).
//!
//! The real `porter` binary, the sandbox runner's real relay, a loopback HTTPS
//! stand-in for GitHub. `cargo bench -p porter --bench inject_proxy`

#[path = "../tests/standin/mod.rs"]
mod standin;

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::STANDARD};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const WARMUP: usize = 200;
const SAMPLES: usize = 2000;
const FRESH_SAMPLES: usize = 300;
const GH_SAMPLES: usize = 40;
const SECRET: &str = "ghp_benchmarkSecretValue0123456789abcd";

fn client_config(ca_pem: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// An HTTP/1 client over TLS on `stream`, verifying `api.github.com` against `tls`.
async fn handshake(
    stream: tokio::net::TcpStream,
    tls: &Arc<rustls::ClientConfig>,
) -> SendRequest<Empty<Bytes>> {
    let tls = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(ServerName::try_from("api.github.com").unwrap(), stream)
        .await
        .unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// A tunnel through the relay to Porter with `key`.
async fn tunnel(relay: &str, key: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(relay).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .write_all(
            format!(
                "CONNECT api.github.com:443 HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
                STANDARD.encode(format!("porter:{key}"))
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "CONNECT refused: {line}");
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
    }
    reader.into_inner()
}

async fn get(sender: &mut SendRequest<Empty<Bytes>>, token: &str) {
    let request = Request::get("/repos/o/r/pulls")
        .header("host", "api.github.com")
        .header("authorization", format!("token {token}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200, "the stand-in refused the request");
    response.into_body().collect().await.unwrap();
}

fn percentile(samples: &[Duration], fraction: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn report(title: &str, direct_label: &str, direct: &[Duration], proxied: &[Duration]) {
    println!("{title}:");
    for (label, samples) in [(direct_label, direct), ("through relay + porter", proxied)] {
        println!(
            "  {label:<26} p50 {:>8.3} ms   p90 {:>8.3} ms   p99 {:>8.3} ms",
            millis(percentile(samples, 0.5)),
            millis(percentile(samples, 0.9)),
            millis(percentile(samples, 0.99)),
        );
    }
    let added = millis(percentile(proxied, 0.5)) - millis(percentile(direct, 0.5));
    println!(
        "  added at p50: {added:.3} ms ({:.2}× direct)",
        percentile(proxied, 0.5).as_secs_f64() / percentile(direct, 0.5).as_secs_f64()
    );
}

/// Starts a porter binary with `registry` and the stand-in's overrides; waits for its
/// proxy socket.
fn start_porter(binary: &Path, directory: &Path, arguments: &[String]) -> Child {
    let ready = directory.join("ready.sock");
    let child = Command::new(binary)
        .args(arguments)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PORTER_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let socket = arguments
        .iter()
        .position(|argument| argument == "--proxy-socket" || argument == "--socket")
        .map(|index| std::path::PathBuf::from(&arguments[index + 1]))
        .unwrap_or(ready);
    while !socket.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "porter did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The idle RSS of an older porter (`PORTER_BEFORE_BIN`), started the way it was: a
/// call socket, a workspace, one CLI in injection mode.
fn idle_rss_before(directory: &Path) -> Option<u64> {
    let binary = std::env::var_os("PORTER_BEFORE_BIN")?;
    let before = directory.join("before");
    std::fs::create_dir_all(before.join("workspace")).unwrap();
    std::fs::write(
        before.join("registry.json"),
        r#"{"version":1,"clis":{"gh":{"bin":"/usr/bin/gh","env":{"GH_TOKEN":"ghp_x0123456789"},"hosts":["api.github.com"]}}}"#,
    )
    .unwrap();
    let path = |name: &str| before.join(name).to_string_lossy().into_owned();
    let arguments: Vec<String> = [
        "--socket",
        &path("porter.sock"),
        "--registry",
        &path("registry.json"),
        "--workspace",
        &path("workspace"),
        "--call-homes",
        &path("homes"),
    ]
    .iter()
    .map(|argument| (*argument).to_owned())
    .collect();
    let mut child = start_porter(Path::new(&binary), &before, &arguments);
    std::thread::sleep(Duration::from_secs(1)); // idle: nothing to wait on but time
    let rss = rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    Some(rss)
}

fn main() {
    let directory = tempfile::tempdir().unwrap();
    let standin = standin::StandIn::start(directory.path(), SECRET);
    let secret_file = directory.path().join("secret");
    std::fs::write(&secret_file, SECRET).unwrap();
    std::fs::write(
        directory.path().join("registry.json"),
        serde_json::json!({"version": 2, "clis": {"gh": {
            "hosts": standin::HOSTS, "secret": {"file": secret_file}, "placeholderEnv": ["GH_TOKEN"],
            // A role policy on the path, so the measurement includes the policy check.
            "requests": {"employee": [{"methods": ["GET"], "paths": ["/repos/*/*/pulls", "/user"]}]}
        }}})
        .to_string(),
    )
    .unwrap();
    let path = |name: &str| directory.path().join(name).to_string_lossy().into_owned();
    let mut arguments: Vec<String> = [
        "--proxy-socket",
        &path("run/proxy.sock"),
        "--ca-certificate",
        &path("run/ca.pem"),
        "--control-socket",
        &path("control.sock"),
        "--registry",
        &path("registry.json"),
        "--audit-log",
        &path("audit.jsonl"),
        "--upstream-ca-file",
        &standin.ca_file.to_string_lossy(),
    ]
    .iter()
    .map(|argument| (*argument).to_owned())
    .collect();
    for host in standin::HOSTS {
        arguments.push("--upstream-override".into());
        arguments.push(format!("{host}={}", standin.address));
    }
    let mut porter = start_porter(
        Path::new(env!("CARGO_BIN_EXE_porter")),
        directory.path(),
        &arguments,
    );
    std::thread::sleep(Duration::from_secs(1)); // idle: nothing to wait on but time
    let idle_rss = rss_kib(porter.id());

    // The key an agent registers for one command, and that command's environment.
    let mut control = std::os::unix::net::UnixStream::connect(path("control.sock")).unwrap();
    control
        .write_all(br#"{"op":"register","session":"bench","contact":"ana","role":"employee","ttlSeconds":3600}
"#)
        .unwrap();
    let mut answer = String::new();
    BufReader::new(control).read_line(&mut answer).unwrap();
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let key = answer["token"].as_str().unwrap().to_owned();
    let placeholder = answer["env"]["GH_TOKEN"].as_str().unwrap().to_owned();

    let relay_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = relay_runtime
        .block_on(porter_protocol::relay::bind("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let relay = listener.local_addr().unwrap().to_string();
    relay_runtime.spawn(porter_protocol::relay::serve(
        listener,
        directory.path().join("run/proxy.sock"),
    ));
    // A blind CONNECT tunnel to the stand-in: the baseline for gh, which needs a proxy
    // to reach `api.github.com` on loopback at all.
    let blind = relay_runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let blind_address = blind.local_addr().unwrap().to_string();
    let standin_address = standin.address;
    relay_runtime.spawn(async move {
        loop {
            let Ok((mut client, _)) = blind.accept().await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0_u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tokio::io::AsyncReadExt::read_exact(&mut client, &mut byte)
                        .await
                        .is_err()
                    {
                        return;
                    }
                    head.push(byte[0]);
                }
                let mut upstream = tokio::net::TcpStream::connect(standin_address)
                    .await
                    .unwrap();
                client.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });

    let porter_tls = client_config(&std::fs::read(path("run/ca.pem")).unwrap());
    let standin_tls = client_config(&std::fs::read(&standin.ca_file).unwrap());
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ((kept_direct, kept_proxied), (fresh_direct, fresh_proxied)) = client.block_on(async {
        let stream = tokio::net::TcpStream::connect(standin.address)
            .await
            .unwrap();
        stream.set_nodelay(true).unwrap();
        let mut direct = handshake(stream, &standin_tls).await;
        let mut proxied = handshake(tunnel(&relay, &key).await, &porter_tls).await;
        for _ in 0..WARMUP {
            get(&mut direct, SECRET).await;
            get(&mut proxied, &placeholder).await;
        }
        // Interleaved, so drift on a shared machine hits both alike.
        let (mut kept_direct, mut kept_proxied) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            let started = Instant::now();
            get(&mut direct, SECRET).await;
            kept_direct.push(started.elapsed());
            let started = Instant::now();
            get(&mut proxied, &placeholder).await;
            kept_proxied.push(started.elapsed());
        }
        let (mut fresh_direct, mut fresh_proxied) = (Vec::new(), Vec::new());
        for _ in 0..FRESH_SAMPLES {
            let started = Instant::now();
            let stream = tokio::net::TcpStream::connect(standin.address)
                .await
                .unwrap();
            stream.set_nodelay(true).unwrap();
            get(&mut handshake(stream, &standin_tls).await, SECRET).await;
            fresh_direct.push(started.elapsed());
            let started = Instant::now();
            get(
                &mut handshake(tunnel(&relay, &key).await, &porter_tls).await,
                &placeholder,
            )
            .await;
            fresh_proxied.push(started.elapsed());
        }
        ((kept_direct, kept_proxied), (fresh_direct, fresh_proxied))
    });

    let gh = |proxy: &str, token: &str, ca: &Path| {
        let started = Instant::now();
        let output = Command::new("gh")
            .args(["api", "user", "--jq", ".login"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", directory.path())
            .env("GH_TOKEN", token)
            .env("GH_NO_UPDATE_NOTIFIER", "1")
            .env("HTTPS_PROXY", proxy)
            .env("SSL_CERT_FILE", ca)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "gh: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        started.elapsed()
    };
    let proxy_url = format!("http://porter:{key}@{relay}");
    let blind_url = format!("http://{blind_address}");
    let porter_ca = directory.path().join("run/ca.pem");
    let (mut gh_direct, mut gh_proxied) = (Vec::new(), Vec::new());
    gh(&blind_url, SECRET, &standin.ca_file);
    gh(&proxy_url, &placeholder, &porter_ca);
    for _ in 0..GH_SAMPLES {
        gh_direct.push(gh(&blind_url, SECRET, &standin.ca_file));
        gh_proxied.push(gh(&proxy_url, &placeholder, &porter_ca));
    }
    let upstream_saw_secret = standin
        .requests()
        .iter()
        .all(|request| request.credential().as_deref() == Some(SECRET));
    assert!(
        upstream_saw_secret,
        "a proxied request did not carry the secret"
    );

    report(
        &format!("GET /repos/o/r/pulls on a kept-alive tunnel ({SAMPLES} each)"),
        "direct to stand-in",
        &kept_direct,
        &kept_proxied,
    );
    report(
        &format!("fresh connection per request: TCP, CONNECT, TLS, GET ({FRESH_SAMPLES} each)"),
        "direct to stand-in",
        &fresh_direct,
        &fresh_proxied,
    );
    report(
        &format!("`gh api user`, one process per call ({GH_SAMPLES} each); target < 2 ms added"),
        "blind tunnel to stand-in",
        &gh_direct,
        &gh_proxied,
    );
    let active_rss = rss_kib(porter.id());
    println!(
        "porter resident memory: idle {idle_rss} KiB after start, {active_rss} KiB after the runs"
    );
    if let Some(before) = idle_rss_before(directory.path()) {
        println!(
            "  before Porter III (PORTER_BEFORE_BIN): idle {before} KiB; now {:.2}× that",
            idle_rss as f64 / before as f64
        );
    }
    let _ = porter.kill();
    let _ = porter.wait();
}
