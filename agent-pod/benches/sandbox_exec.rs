//! Benchmark of the local sandbox: the round trip of `exec true` on a warm bubblewrap
//! sandbox against spawning `sh -c true` directly (the floor), and the cold start of a
//! sandbox (bubblewrap + runner until its socket answers) — each with an employee's
//! view of a company workspace (computed from the role before every command, as the
//! `exec` tool does) against the whole workspace mounted as before (every top-level
//! entry bound, runtime state included). Medians from one run.
//!
//! Needs `bwrap` and `saint-sandbox-runner` built next to this bench (`cargo build
//! --release -p saint-sandbox-runner`), or `SAINT_TEST_BIN_DIR` naming its directory.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use futures::StreamExt;
use saint_config::{FileAccessConfig, FileGlobs, RoleConfig, SandboxScope};
use saint_sandbox::{
    ExecEvent, ExecRequest, Sandbox, ScopeKey, View, Viewer,
    local::{LocalConfig, LocalSandbox},
    view::{EntryKind, ViewEntry},
};
use saint_tools::guard::{
    caller_view::{self, ViewCache},
    role_paths::RolePaths,
};

const WARM_RUNS: usize = 300;
const COLD_RUNS: usize = 30;

fn runner_binary() -> PathBuf {
    let directory = match std::env::var_os("SAINT_TEST_BIN_DIR") {
        Some(directory) => PathBuf::from(directory),
        None => std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf(),
    };
    let path = directory.join("saint-sandbox-runner");
    assert!(
        path.is_file(),
        "{} is missing: cargo build --release -p saint-sandbox-runner",
        path.display()
    );
    path
}

struct Summary {
    median: Duration,
    p90: Duration,
}

fn summarise(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    Summary {
        median: samples[samples.len() / 2],
        p90: samples[samples.len() * 9 / 10],
    }
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn scope(session: &str, role: &str) -> ScopeKey {
    ScopeKey::for_caller(
        SandboxScope::Session,
        session,
        &Viewer {
            role,
            person: Some("acme-ivo"),
        },
    )
}

/// A company workspace: bootstrap files, shared and per-person memory, data, and the
/// runtime state a view leaves out.
fn company_workspace(workspace: &std::path::Path) {
    let mut files = vec![
        "SOUL.md".to_string(),
        "IDENTITY.md".to_string(),
        "COMPANY.md".to_string(),
        "sessions/transcripts.sqlite3".to_string(),
        "logs/usage.jsonl".to_string(),
        ".saint/memory/index.sqlite".to_string(),
    ];
    for index in 0..100 {
        files.push(format!("memory/shared/topic-{index}.md"));
        files.push(format!("memory/private/finance-{index}.md"));
        files.push(format!("data/report-{index}.csv"));
    }
    for person in ["acme-ana", "acme-ivo", "acme-marko"] {
        for index in 0..20 {
            files.push(format!("memory/users/{person}/note-{index}.md"));
        }
    }
    for file in files {
        let path = workspace.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "bench\n").unwrap();
    }
}

fn employee_rules() -> RolePaths {
    let mut role: RoleConfig = serde_json::from_value(serde_json::json!({})).unwrap();
    role.files = FileGlobs {
        read: [
            "memory/shared/**",
            "memory/users/<self>/**",
            "data/**",
            "SOUL.md",
            "IDENTITY.md",
        ]
        .map(String::from)
        .to_vec(),
        write: ["memory/users/<self>/**", "data/**"]
            .map(String::from)
            .to_vec(),
        deny_write: Vec::new(),
    };
    RolePaths::new(&role, &FileAccessConfig::default(), "acme-ivo").unwrap()
}

/// The old mount: all of the workspace, as one bind per top-level entry.
fn whole_workspace(workspace: &std::path::Path) -> View {
    use std::os::unix::fs::MetadataExt;
    let entries = std::fs::read_dir(workspace)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let metadata = entry.metadata().unwrap();
            ViewEntry {
                path: entry.file_name().to_string_lossy().into_owned(),
                kind: if entry.file_type().unwrap().is_dir() {
                    EntryKind::Directory
                } else {
                    EntryKind::File
                },
                device: metadata.dev(),
                inode: metadata.ino(),
            }
        })
        .collect();
    View::from_entries(entries)
}

async fn exec_true(sandbox: &LocalSandbox, scope: &ScopeKey, view: &View) {
    let request = ExecRequest {
        command: "true".to_string(),
        cwd: "/workspace".to_string(),
        timeout: Duration::from_secs(10),
        ..ExecRequest::default()
    };
    let mut events = sandbox
        .exec(scope, view, request)
        .await
        .expect("sandbox exec");
    while let Some(event) = events.next().await {
        match event.expect("sandbox event") {
            ExecEvent::Exit(0) => return,
            ExecEvent::Exit(code) => panic!("`true` exited {code}"),
            ExecEvent::TimedOut => panic!("`true` timed out"),
            _ => {}
        }
    }
    panic!("stream ended without an exit");
}

/// Medians of warm `exec true` (view computed before each command when `rules` is
/// given) and of cold starts, for one kind of mount.
async fn measure(
    sandbox: &LocalSandbox,
    workspace: &std::path::Path,
    label: &str,
    rules: Option<&RolePaths>,
    fixed: &View,
) -> (Summary, Summary) {
    // As the exec tool does: the cache answers while no listed directory changed.
    let cache = ViewCache::default();
    let view_now = || match rules {
        Some(rules) => cache
            .view(label, workspace, || Ok::<_, ()>(rules.clone()))
            .unwrap_or_else(|_| panic!("view")),
        None => fixed.clone(),
    };
    let warm_scope = scope("bench-warm", label);
    exec_true(sandbox, &warm_scope, &view_now()).await;
    let mut warm = Vec::with_capacity(WARM_RUNS);
    for _ in 0..WARM_RUNS {
        let started = Instant::now();
        let view = view_now();
        exec_true(sandbox, &warm_scope, &view).await;
        warm.push(started.elapsed());
    }
    let mut cold = Vec::with_capacity(COLD_RUNS);
    for run in 0..COLD_RUNS {
        let scope = scope(&format!("bench-cold-{run}"), label);
        let started = Instant::now();
        let view = view_now();
        drop(sandbox.ensure(&scope, &view).await.expect("cold start"));
        cold.push(started.elapsed());
        sandbox.discard(&scope).await.unwrap();
    }
    (summarise(warm), summarise(cold))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    company_workspace(&workspace);
    let config = LocalConfig::new(
        workspace.clone(),
        base.path().join("state"),
        runner_binary(),
    );
    let sandbox = LocalSandbox::new(config).unwrap();
    let rules = employee_rules();
    let employee_view = caller_view::compute(&workspace, &rules).unwrap();
    let whole = whole_workspace(&workspace);

    // Direct spawn: the cost of starting `sh -c true` at all, without any sandbox.
    let mut direct = Vec::with_capacity(WARM_RUNS);
    for _ in 0..WARM_RUNS {
        let started = Instant::now();
        let status = tokio::process::Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        direct.push(started.elapsed());
    }
    let direct = summarise(direct);

    let (whole_warm, whole_cold) = measure(&sandbox, &workspace, "whole", None, &whole).await;
    let (view_warm, view_cold) = measure(
        &sandbox,
        &workspace,
        "employee",
        Some(&rules),
        &employee_view,
    )
    .await;

    println!(
        "sandbox exec benchmark ({WARM_RUNS} warm runs, {COLD_RUNS} cold starts each; \
         employee view = {} mounts {employee_view}, whole workspace = {} mounts)",
        employee_view.entries().len(),
        whole.entries().len()
    );
    println!(
        "  direct `sh -c true` spawn (baseline)          median {:7.3} ms   p90 {:7.3} ms",
        milliseconds(direct.median),
        milliseconds(direct.p90)
    );
    let line = |what: &str, summary: &Summary| {
        println!(
            "  {what:<44} median {:7.3} ms   p90 {:7.3} ms   ({:.1}x spawn)",
            milliseconds(summary.median),
            milliseconds(summary.p90),
            summary.median.as_secs_f64() / direct.median.as_secs_f64()
        )
    };
    line("exec `true`, warm, whole workspace (before)", &whole_warm);
    line("exec `true`, warm, employee view (+ compute)", &view_warm);
    line("cold start, whole workspace (before)", &whole_cold);
    line("cold start, employee view", &view_cold);
    println!(
        "  ratios view/whole: warm exec {:.3} (target within 1.10), cold start {:.3}; \
         cold start with the view {:.1} ms (target < 30 ms)",
        view_warm.median.as_secs_f64() / whole_warm.median.as_secs_f64(),
        view_cold.median.as_secs_f64() / whole_cold.median.as_secs_f64(),
        milliseconds(view_cold.median)
    );
}
