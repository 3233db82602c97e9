//! Benchmark (one run, medians): the latency Porter's injecting proxy adds to an HTTPS
//! request on a kept-alive connection — CONNECT tunnel, TLS terminated with Porter's
//! CA, request policy, placeholder swap, upstream TLS — against the same request sent
//! straight to the stand-in.
//!
//! The real proxy (`porter::inject`) in-process, a loopback HTTPS stand-in for GitHub.
//! `cargo bench -p porter --bench inject_proxy`

#[path = "../tests/standin/mod.rs"]
mod standin;

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::STANDARD};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use porter::{
    audit::AuditLog,
    inject::{self, Caller, EntryInjection, InjectConfig, Injector},
};
use porter_protocol::registry::{CliEntry, RequestRule};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const WARMUP: usize = 300;
const SAMPLES: usize = 3000;
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

/// An HTTP/1 client over TLS on `stream`, verifying `api.github.com` against `ca_pem`.
async fn handshake(stream: tokio::net::TcpStream, ca_pem: &[u8]) -> SendRequest<Empty<Bytes>> {
    let tls = tokio_rustls::TlsConnector::from(client_config(ca_pem))
        .connect(ServerName::try_from("api.github.com").unwrap(), stream)
        .await
        .unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// Times `count` GET requests on one kept-alive connection.
async fn time_requests(
    sender: &mut SendRequest<Empty<Bytes>>,
    token: &str,
    count: usize,
) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let request = Request::get("/repos/o/r/pulls")
            .header("host", "api.github.com")
            .header("authorization", format!("token {token}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let started = Instant::now();
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200, "the stand-in refused the request");
        response.into_body().collect().await.unwrap();
        samples.push(started.elapsed());
    }
    samples
}

fn percentile(samples: &[Duration], fraction: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn main() {
    let directory = tempfile::tempdir().unwrap();
    let standin = standin::StandIn::start(directory.path(), SECRET);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let audit = Arc::new(AuditLog::open(&directory.path().join("audit.jsonl")).unwrap());
    let injector = Arc::new(
        Injector::new(
            &InjectConfig {
                listen: None,
                upstream_overrides: BTreeMap::from([(
                    "api.github.com".to_owned(),
                    standin.address,
                )]),
                upstream_ca_file: Some(standin.ca_file.clone()),
            },
            audit,
        )
        .unwrap(),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    runtime.spawn(inject::proxy::serve(injector.clone(), stop.clone()));
    // A role policy on the path, so the measurement includes the policy check.
    let entry = EntryInjection::compile(&CliEntry {
        bin: "/usr/bin/gh".into(),
        env_from_files: BTreeMap::from([("GH_TOKEN".into(), "/unused".into())]),
        hosts: vec!["api.github.com".into()],
        requests: BTreeMap::from([(
            "employee".into(),
            vec![RequestRule {
                methods: vec!["GET".into()],
                paths: vec!["/repos/*/*/pulls".into(), "/repos/*/*/pulls/**".into()],
                graphql: None,
            }],
        )]),
        ..CliEntry::default()
    })
    .unwrap();
    let mut environment = BTreeMap::from([("GH_TOKEN".to_owned(), SECRET.to_owned())]);
    let _call = injector.begin_call(
        &entry,
        Caller {
            session: "bench".into(),
            contact: "ana".into(),
            role: Some("employee".into()),
            cli: "gh".into(),
        },
        &mut environment,
    );
    let placeholder = environment["GH_TOKEN"].clone();
    let proxy_url = environment["HTTPS_PROXY"].clone();
    let (credential, address) = proxy_url
        .strip_prefix("http://")
        .unwrap()
        .rsplit_once('@')
        .unwrap();
    let (credential, address) = (credential.to_owned(), address.to_owned());
    let porter_ca = std::fs::read(injector.ca_file()).unwrap();
    let standin_ca = std::fs::read(&standin.ca_file).unwrap();

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (direct, proxied) = client.block_on(async {
        let stream = tokio::net::TcpStream::connect(standin.address).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut direct = handshake(stream, &standin_ca).await;

        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .write_all(
                format!(
                    "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\nProxy-Authorization: Basic {}\r\n\r\n",
                    STANDARD.encode(&credential)
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "CONNECT refused: {line}");
        while line != "\r\n" {
            line.clear();
            reader.read_line(&mut line).await.unwrap();
        }
        let mut proxied = handshake(reader.into_inner(), &porter_ca).await;

        time_requests(&mut direct, SECRET, WARMUP).await;
        time_requests(&mut proxied, &placeholder, WARMUP).await;
        // Interleaved rounds, so drift on a shared machine hits both alike.
        let (mut direct_samples, mut proxied_samples) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            direct_samples.extend(time_requests(&mut direct, SECRET, SAMPLES / 10).await);
            proxied_samples.extend(time_requests(&mut proxied, &placeholder, SAMPLES / 10).await);
        }
        (direct_samples, proxied_samples)
    });
    let upstream_saw_secret = standin
        .requests()
        .iter()
        .all(|request| request.credential().as_deref() == Some(SECRET));
    assert!(
        upstream_saw_secret,
        "the proxied requests did not carry the secret"
    );

    println!("injecting proxy, GET /repos/o/r/pulls on a kept-alive connection ({SAMPLES} each):");
    for (label, samples) in [
        ("direct to stand-in", &direct),
        ("through the proxy", &proxied),
    ] {
        println!(
            "  {label:<20} p50 {:>8.1} µs   p90 {:>8.1} µs   p99 {:>8.1} µs",
            micros(percentile(samples, 0.5)),
            micros(percentile(samples, 0.9)),
            micros(percentile(samples, 0.99)),
        );
    }
    let added = micros(percentile(&proxied, 0.5)) - micros(percentile(&direct, 0.5));
    println!(
        "  added at p50: {added:.1} µs ({:.2}× direct); target < 1000 µs",
        percentile(&proxied, 0.5).as_secs_f64() / percentile(&direct, 0.5).as_secs_f64()
    );
    stop.cancel();
}
