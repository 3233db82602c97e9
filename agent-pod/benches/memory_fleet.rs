//! Memory of a fleet of bots on one machine: idle RSS and PSS of one bot (agent + its
//! Porter) and of ten bots at once, with memory off (the baseline) and on. With memory
//! on, every agent maps the same model file, so the weights' pages are shared through
//! the page cache and PSS charges each bot its share of them.
//!
//! Each bot is a real `saint-agent up` (release build, scripted instant model) with a
//! memory note in its workspace. It is measured after its first memory reindex has
//! finished and one message has been answered with a `memory_search` that found the
//! note, so the model has run (indexing and the query) before the idle samples.
//!
//! Needs a release build of Porter and the runner next to the agent
//! (`cargo build --release -p porter -p saint-sandbox-runner`) and the embedding model
//! (`agent-pod/memory/fetch-model.sh`).
//!
//! cargo bench -p saint-agent --bench memory_fleet
//!
//! `SAINT_FLEET_BOTS=N` changes the fleet size; `SAINT_FLEET_SMAPS=<dir>` writes each
//! measured agent's `/proc/<pid>/smaps` there, to see where its memory goes.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use saint_scripted::llm::{Reply, ScriptedLlm};

/// Bots started at once in the fleet measurement (`SAINT_FLEET_BOTS` overrides).
const FLEET: usize = 10;
/// Idle samples per bot (one every 500 ms); the median is kept.
const SAMPLES: usize = 5;
/// A phrase only the memory note holds; the search must find it.
const NOTE_PHRASE: &str = "staging deploy key rotates every ninety days";

struct Bot {
    child: Child,
    model: ScriptedLlm,
}

impl Drop for Bot {
    fn drop(&mut self) {
        // SIGTERM, so the agent stops its Porter and sandboxes as a user's Ctrl-C would.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn agent_binary() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_saint-agent"));
    for companion in ["porter", "saint-sandbox-runner"] {
        let sibling = path.parent().unwrap().join(companion);
        assert!(
            sibling.is_file(),
            "{} is missing: cargo build --release -p porter -p saint-sandbox-runner",
            sibling.display()
        );
    }
    path
}

fn note() -> String {
    let mut text = String::from("# Team notes\n\n");
    text.push_str(&format!(
        "## Access\n\nThe {NOTE_PHRASE}; Ivana Horvat holds the current one.\n\n"
    ));
    for index in 0..30 {
        text.push_str(&format!(
            "## Meeting {index}\n\nWe reviewed the quarterly numbers for region {index}, agreed on \
             the hiring plan and moved the launch review to the next sprint.\n\n"
        ));
    }
    text
}

/// A started bot, its page's base URL and token, and (memory on) its first reindex's
/// log line.
type Started = (Bot, String, String, Option<String>);

/// Starts a bot in `data` and returns it once its page is up and, with memory on, its
/// first reindex has finished; the stderr reader keeps draining afterwards.
fn start(program: &Path, data: &Path, memory: bool, model: ScriptedLlm) -> Started {
    let mut command = Command::new(program);
    command.args(["up", "--listen", "127.0.0.1:0", "--no-build"]);
    if !memory {
        command.arg("--no-memory");
    }
    command
        .arg("--data-dir")
        .arg(data)
        .env("SAINT_MODEL_BASE_URL", model.base_url())
        .env("SAINT_MODEL_PROVIDER", "anthropic")
        .env("SAINT_MODEL_API_KEY", "bench")
        .env("RUST_LOG", "warn,saint_memory=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("failed to start up");
    let (reindexed_tx, reindexed) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("memory reindex finished") {
                let _ = reindexed_tx.send(line);
            }
        }
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("up exited before printing the page's address")
            .unwrap();
        if let Some((_, url)) = line
            .split_once(" at ")
            .filter(|_| line.starts_with("Chat with"))
        {
            break url.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let reindexed = memory.then(|| {
        reindexed
            .recv_timeout(Duration::from_secs(120))
            .expect("no \"memory reindex finished\" within 120 s")
    });
    let (base_url, token) = url.split_once("/chat#token=").unwrap();
    let (base_url, token) = (base_url.to_string(), token.to_string());
    (Bot { child, model }, base_url, token, reindexed)
}

/// Asks one message; with memory on the model first calls `memory_search`, whose
/// result must hold the note.
fn ask(tokio: &tokio::runtime::Runtime, bot: &Bot, base_url: &str, token: &str, memory: bool) {
    let answer: serde_json::Value = tokio.block_on(async {
        reqwest::Client::new()
            .post(format!("{base_url}/v1/messages"))
            .bearer_auth(token)
            // As Ana, the example's owner (the role with memory tools), the way the
            // chat page sends for her.
            .json(&serde_json::json!({"channel": "whatsapp", "peer": "+385991234567", "text": "who has the deploy key?"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(answer["reply"], "Ivana.", "{answer}");
    if memory {
        let results: Vec<(String, bool)> = bot
            .model
            .requests()
            .iter()
            .flat_map(|request| request.tool_results())
            .collect();
        assert!(
            results
                .iter()
                .any(|(content, error)| !error && content.contains(NOTE_PHRASE)),
            "memory_search did not find the note: {results:?}"
        );
    }
}

/// `(rss_kib, pss_kib)` of `pid` from `/proc/<pid>/smaps_rollup`.
fn rollup(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("Rss:"), field("Pss:"))
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1.to_string();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// One idle sample of each bot: agent + Porter, `(rss_kib, pss_kib)`.
fn sample(bots: &[Bot]) -> Vec<(u64, u64)> {
    bots.iter()
        .map(|bot| {
            let pid = bot.child.id();
            let mut total = rollup(pid);
            let porters = children(pid);
            assert!(!porters.is_empty(), "the agent has no Porter child");
            for child in porters {
                let (rss, pss) = rollup(child);
                total.0 += rss;
                total.1 += pss;
            }
            total
        })
        .collect()
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// Starts `count` bots at once (memory on or off), answers one message each, and returns
/// the median over bots of each bot's median idle `(rss, pss)` in KiB.
fn measure(
    program: &Path,
    scratch: &Path,
    tokio: &tokio::runtime::Runtime,
    count: usize,
    memory: bool,
) -> (u64, u64) {
    let mut prepared = Vec::new();
    for index in 0..count {
        let data = scratch.join(format!(
            "{}-{count}-{index}",
            if memory { "on" } else { "off" }
        ));
        // A first start writes the bot's files (memory on or off, as the bot file
        // records it); the note then goes into its workspace.
        let model = tokio.block_on(ScriptedLlm::start()).unwrap();
        let (bot, _, _, _) = start(program, &data, memory, model);
        drop(bot);
        let workspace = std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .map(|entry| entry.path().join("workspace"))
            .find(|path| path.is_dir())
            .expect("the bot's workspace");
        std::fs::create_dir_all(workspace.join("memory/shared")).unwrap();
        std::fs::write(workspace.join("memory/shared/notes.md"), note()).unwrap();
        prepared.push(data);
    }
    let mut bots = Vec::new();
    for data in &prepared {
        let model = tokio.block_on(ScriptedLlm::start()).unwrap();
        if memory {
            model.push(Reply::tool_call(
                "memory_search",
                serde_json::json!({"query": "who holds the deploy key"}),
            ));
        }
        model.set_fallback(Reply::text("Ivana."));
        let (bot, base_url, token, reindexed) = start(program, data, memory, model);
        if let Some(line) = reindexed {
            assert!(line.contains("files=1"), "the note was not indexed: {line}");
        }
        ask(tokio, &bot, &base_url, &token, memory);
        bots.push(bot);
    }
    let mut samples: Vec<Vec<(u64, u64)>> = vec![Vec::new(); count];
    for _ in 0..SAMPLES {
        std::thread::sleep(Duration::from_millis(500));
        for (bot, value) in sample(&bots).into_iter().enumerate() {
            samples[bot].push(value);
        }
    }
    let per_bot: Vec<(u64, u64)> = samples
        .into_iter()
        .map(|values| {
            (
                median(values.iter().map(|value| value.0).collect()),
                median(values.iter().map(|value| value.1).collect()),
            )
        })
        .collect();
    if let Ok(directory) = std::env::var("SAINT_FLEET_SMAPS") {
        // For working out where a bot's memory goes: each agent's full smaps.
        std::fs::create_dir_all(&directory).expect("create SAINT_FLEET_SMAPS");
        for (index, bot) in bots.iter().enumerate() {
            let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", bot.child.id()))
                .expect("the agent's smaps");
            let name = format!(
                "{}-{count}-{index}.smaps",
                if memory { "on" } else { "off" }
            );
            std::fs::write(Path::new(&directory).join(name), smaps).expect("write smaps");
        }
    }
    drop(bots);
    (
        median(per_bot.iter().map(|value| value.0).collect()),
        median(per_bot.iter().map(|value| value.1).collect()),
    )
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    if std::env::args().any(|argument| argument == "--list") {
        return;
    }
    let program = agent_binary();
    let model_file = saint_memory::default_model_dir().join("model.safetensors");
    assert!(
        model_file.is_file(),
        "{} is missing: run agent-pod/memory/fetch-model.sh",
        model_file.display()
    );
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let fleet: usize = std::env::var("SAINT_FLEET_BOTS")
        .ok()
        .map(|value| value.parse().expect("SAINT_FLEET_BOTS is a number"))
        .unwrap_or(FLEET);
    let mut rows = Vec::new();
    for (count, memory) in [(1, false), (1, true), (fleet, false), (fleet, true)] {
        let (rss, pss) = measure(&program, scratch.path(), &tokio, count, memory);
        rows.push((count, memory, rss, pss));
    }
    let baseline_pss = |count: usize| {
        rows.iter()
            .find(|row| row.0 == count && !row.1)
            .map(|row| row.3)
            .unwrap()
    };
    println!(
        "memory_fleet: idle memory per bot (agent + Porter, release build), median over bots of {SAMPLES} samples each"
    );
    println!(
        "| bots at once | memory | RSS per bot (MiB) | PSS per bot (MiB) | PSS vs memory off |"
    );
    println!("|---|---|---|---|---|");
    for (count, memory, rss, pss) in &rows {
        println!(
            "| {count} | {} | {:.1} | {:.1} | {:.2}x |",
            if *memory { "on" } else { "off" },
            mib(*rss),
            mib(*pss),
            *pss as f64 / baseline_pss(*count) as f64
        );
    }
    let fleet_on = rows.iter().find(|row| row.0 == fleet && row.1).unwrap().3;
    println!(
        "target: <= 24 MiB PSS per bot with memory on, {fleet} bots: {:.1} MiB ({})",
        mib(fleet_on),
        if mib(fleet_on) <= 24.0 {
            "met"
        } else {
            "NOT met"
        }
    );
}
