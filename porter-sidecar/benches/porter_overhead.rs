//! Benchmark (one run, medians): the latency `cliport-proxy` adds over spawning a CLI
//! directly, what the per-call home and supervisor add over a plain spawn (what Porter
//! did before them), and streaming throughput through Porter against a plain pipe.
//!
//! Runs the real release `porter` and `cliport-proxy` on a temp socket.
//! `cargo bench -p porter --bench porter_overhead`

#[path = "../tests/support.rs"]
mod support;

use std::{
    collections::BTreeMap,
    io::Read,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use support::{CANARY, Daemon, TOKEN, cli, script};

const SPAWN_RUNS: usize = 300;
const STREAM_RUNS: usize = 7;
const STREAM_BYTES: u64 = 256 << 20;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn percentile(samples: &[Duration], fraction: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}

fn time_status(command: &mut Command) -> Duration {
    let started = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(status.success(), "{command:?} failed: {status}");
    elapsed
}

fn time_stream(command: &mut Command) -> Duration {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buffer = vec![0_u8; 1 << 20];
    let mut total = 0_u64;
    loop {
        let count = stdout.read(&mut buffer).unwrap();
        if count == 0 {
            break;
        }
        total += count as u64;
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(total, STREAM_BYTES);
    started.elapsed()
}

fn mebibytes_per_second(duration: Duration) -> f64 {
    STREAM_BYTES as f64 / (1 << 20) as f64 / duration.as_secs_f64()
}

fn main() {
    // `cargo bench` passes `--bench`; any other flag (e.g. from `cargo test --benches`)
    // still runs the whole benchmark, it is bounded.
    let daemon = Daemon::start(|bin, registry| {
        registry.clis.insert("true-cli".into(), cli("/bin/true"));
        let stream_body = format!("exec head -c {STREAM_BYTES} /dev/zero");
        registry
            .clis
            .insert("stream".into(), cli(&script(bin, "stream", &stream_body)));
        let mut redacted = cli(&script(bin, "stream-redacted", &stream_body));
        redacted.env = BTreeMap::from([
            ("SECRET_A".into(), CANARY.into()),
            (
                "SECRET_B".into(),
                "another-credential-value-1234567890".into(),
            ),
            (
                "SECRET_C".into(),
                "ghp_0123456789abcdefghijklmnopqrstuvwxyz".into(),
            ),
        ]);
        registry.clis.insert("stream-redacted".into(), redacted);
    });

    // Warm both paths (page cache, first connection).
    for _ in 0..20 {
        time_status(&mut Command::new("/bin/true"));
        time_status(&mut daemon.proxy("true-cli", &[], TOKEN));
    }
    let mut direct = Vec::with_capacity(SPAWN_RUNS);
    let mut proxied = Vec::with_capacity(SPAWN_RUNS);
    // Interleaved so drift in machine load hits both alike.
    for _ in 0..SPAWN_RUNS {
        direct.push(time_status(&mut Command::new("/bin/true")));
        proxied.push(time_status(&mut daemon.proxy("true-cli", &[], TOKEN)));
    }
    let direct_p50 = median(direct.clone());
    let proxied_p50 = median(proxied.clone());
    println!(
        "spawn /bin/true directly            p50 {:>8.3} ms  p90 {:>8.3} ms  ({SPAWN_RUNS} runs)",
        ms(direct_p50),
        ms(percentile(&direct, 0.9))
    );
    println!(
        "cliport-proxy true-cli via porter   p50 {:>8.3} ms  p90 {:>8.3} ms  ({SPAWN_RUNS} runs)",
        ms(proxied_p50),
        ms(percentile(&proxied, 0.9))
    );
    let added = proxied_p50.saturating_sub(direct_p50);
    println!(
        "added by porter at p50              {:>8.3} ms  (target < 2 ms: {})",
        ms(added),
        verdict(added < Duration::from_millis(2))
    );

    supervisor_overhead(&daemon);

    let mut pipe = Vec::new();
    let mut through = Vec::new();
    let mut through_redacted = Vec::new();
    for _ in 0..STREAM_RUNS {
        pipe.push(time_stream(Command::new("head").args([
            "-c",
            &STREAM_BYTES.to_string(),
            "/dev/zero",
        ])));
        through.push(time_stream(&mut daemon.proxy("stream", &[], TOKEN)));
        through_redacted.push(time_stream(&mut daemon.proxy(
            "stream-redacted",
            &[],
            TOKEN,
        )));
    }
    let pipe_rate = mebibytes_per_second(median(pipe));
    let through_rate = mebibytes_per_second(median(through));
    let redacted_rate = mebibytes_per_second(median(through_redacted));
    println!(
        "plain pipe (head -c 256MiB)         median {pipe_rate:>8.0} MiB/s  ({STREAM_RUNS} runs)"
    );
    println!(
        "through porter, no secrets          median {through_rate:>8.0} MiB/s  ratio {:.2}",
        through_rate / pipe_rate
    );
    println!(
        "through porter, 3 secrets redacted  median {redacted_rate:>8.0} MiB/s  ratio {:.2}",
        redacted_rate / pipe_rate
    );
    println!(
        "throughput target (>= 0.50 of pipe): {}",
        verdict(through_rate / pipe_rate >= 0.5 && redacted_rate / pipe_rate >= 0.5)
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// The per-call home and supervisor against the plain spawn Porter used before them,
/// both from a tokio runtime as in the daemon: `/bin/true` spawned and waited for,
/// versus a fresh home made, `/bin/true` launched on a supervisor from the pool and
/// waited for, and the home removed.
fn supervisor_overhead(daemon: &Daemon) {
    use porter::supervisor::{Launch, Pool};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let root = daemon.workspace.canonicalize().unwrap();
        let homes =
            porter::home::HomesRoot::prepare(&daemon.directory.path().join("bench-homes"))
                .unwrap();
        let pool = Pool::new(env!("CARGO_BIN_EXE_porter-supervise").into(), 4);
        let plain = || async {
            let started = Instant::now();
            let status = tokio::process::Command::new("/bin/true")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .status()
                .await
                .unwrap();
            assert!(status.success());
            started.elapsed()
        };
        let supervised = || async {
            let started = Instant::now();
            let home = homes.create().unwrap();
            let mut ready = pool.take().unwrap();
            ready
                .launch(&Launch {
                    root: root.clone(),
                    cwd: "repo".into(),
                    bin: "/bin/true".into(),
                    arguments: Vec::new(),
                    environment: BTreeMap::from([(
                        "HOME".to_owned(),
                        home.path().to_string_lossy().into_owned(),
                    )]),
                })
                .await
                .unwrap();
            drop(ready.control);
            let status = ready.child.wait().await.unwrap();
            assert!(status.success(), "{status}");
            tokio::task::spawn_blocking(move || home.remove())
                .await
                .unwrap();
            started.elapsed()
        };
        for _ in 0..20 {
            plain().await;
            supervised().await;
        }
        let mut before = Vec::with_capacity(SPAWN_RUNS);
        let mut after = Vec::with_capacity(SPAWN_RUNS);
        for _ in 0..SPAWN_RUNS {
            before.push(plain().await);
            after.push(supervised().await);
        }
        let before_p50 = median(before.clone());
        let after_p50 = median(after.clone());
        println!(
            "plain spawn of /bin/true (before)   p50 {:>8.3} ms  p90 {:>8.3} ms  ({SPAWN_RUNS} runs)",
            ms(before_p50),
            ms(percentile(&before, 0.9))
        );
        println!(
            "home + supervisor + /bin/true       p50 {:>8.3} ms  p90 {:>8.3} ms  ({SPAWN_RUNS} runs)",
            ms(after_p50),
            ms(percentile(&after, 0.9))
        );
        // Signed: with the supervisor started ahead, the call can come out faster.
        let added = ms(after_p50) - ms(before_p50);
        println!(
            "added by home + supervisor at p50   {added:>8.3} ms  (target < 2 ms: {})",
            verdict(added < 2.0)
        );
    });
}
