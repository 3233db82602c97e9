//! The one-machine bot as the README runs it: the real `saint-agent run` starts its own
//! Porter (from a registry file) and bubblewrap sandboxes; Debian's `gh` in the sandbox
//! reaches Porter's HTTPS stand-in for GitHub through the relay and Porter, which puts
//! the credential on the wire while neither the sandbox, the model nor the transcript
//! ever sees it; one Ctrl-C stops the agent, Porter and every sandbox. MCP servers:
//! an HTTP one reached through Porter (which alone holds its credential) and a stdio
//! one run in the caller's sandbox, each offered only to the roles that may use it.
//!
//! Needs `bwrap` (Debian `bubblewrap`) and the `porter` and `saint-sandbox-runner`
//! binaries built into this target directory (`cargo build -p porter -p
//! saint-sandbox-runner`); a missing piece fails the test with the reason.

mod common;
#[path = "../../porter-sidecar/tests/standin/mod.rs"]
mod standin;

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader},
    os::unix::{fs::PermissionsExt, process::CommandExt},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use saint_sandbox::local_porter::{LocalPorter, LocalPorterSettings, PorterPaths};
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};

const CLI: &str = "gh";
/// The credential Porter injects; it must never leave Porter but for the stand-in.
const CANARY: &str = "ghp_canaryCredential5e1d9b7c04";

/// A binary built beside `saint-agent` in this target directory.
fn sibling_binary(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_saint-agent")).with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build -p porter -p saint-sandbox-runner` first",
        path.display()
    );
    path
}

/// A registry with `gh`'s credential for the stand-in's hosts.
fn write_registry(directory: &Path) -> PathBuf {
    let registry = json!({
        "version": 2,
        "clis": {CLI: {"hosts": standin::HOSTS, "secret": {"value": CANARY}, "placeholderEnv": ["GH_TOKEN"]}}
    });
    let path = directory.join("porter.json");
    fs::write(&path, registry.to_string()).unwrap();
    path
}

/// What points the agent's Porter at `standin` (Porter reads these from the
/// environment the agent passes on).
fn porter_upstream(standin: &standin::StandIn) -> Vec<(String, String)> {
    let overrides: Vec<String> = standin::ALL_HOSTS
        .iter()
        .map(|host| format!("{host}={}", standin.address))
        .collect();
    vec![
        ("PORTER_UPSTREAM_OVERRIDES".to_owned(), overrides.join(",")),
        (
            "PORTER_UPSTREAM_CA_FILE".to_owned(),
            standin.ca_file.to_string_lossy().into_owned(),
        ),
    ]
}

/// One process as /proc shows it; `start` (clock ticks since boot) tells a reused
/// pid from the original.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ProcessEntry {
    pid: i32,
    parent: i32,
    start: u64,
    state: char,
    command_line: String,
}

fn processes() -> Vec<ProcessEntry> {
    let mut entries = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: split after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let command_line = fs::read(entry.path().join("cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        entries.push(ProcessEntry {
            pid,
            state: fields[0].chars().next().unwrap_or('?'),
            parent: fields[1].parse().unwrap_or(0),
            start: fields[19].parse().unwrap_or(0),
            command_line,
        });
    }
    entries
}

/// `root` and everything below it, plus any process whose command line names `marker`.
fn process_tree(root: i32, marker: &str) -> Vec<ProcessEntry> {
    let all = processes();
    let mut children: HashMap<i32, Vec<&ProcessEntry>> = HashMap::new();
    for process in &all {
        children.entry(process.parent).or_default().push(process);
    }
    let mut found: Vec<ProcessEntry> = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        if let Some(process) = all.iter().find(|process| process.pid == pid) {
            found.push(process.clone());
        }
        for child in children.get(&pid).into_iter().flatten() {
            queue.push(child.pid);
        }
    }
    for process in &all {
        if process.command_line.contains(marker)
            && !found.iter().any(|seen| seen.pid == process.pid)
        {
            found.push(process.clone());
        }
    }
    found
}

/// Those of `snapshot` still running (same pid and start time, not a zombie), and any
/// process now naming `marker`.
fn survivors(snapshot: &[ProcessEntry], marker: &str) -> Vec<ProcessEntry> {
    processes()
        .into_iter()
        .filter(|process| process.state != 'Z')
        .filter(|process| {
            snapshot
                .iter()
                .any(|old| old.pid == process.pid && old.start == process.start)
                || process.command_line.contains(marker)
        })
        .collect()
}

/// The agent as a terminal runs it: its own process group, so Ctrl-C (SIGINT to the
/// foreground group) reaches it the way a user's would.
struct Bot {
    child: Child,
    http: String,
    /// Every process seen in the bot's tree, killed if the test fails midway.
    seen: Vec<ProcessEntry>,
}

impl Drop for Bot {
    fn drop(&mut self) {
        for process in &self.seen {
            if let Some(pid) = Pid::from_raw(process.pid) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_bot(
    directory: &Path,
    config_path: &Path,
    workspace: &Path,
    registry: &Path,
    extra_environment: &[(String, String)],
) -> Bot {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saint-agent"));
    command
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(config_path)
        .arg("--workspace")
        .arg(workspace)
        .arg("--porter-registry")
        .arg(registry)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", directory)
        .env("RUST_LOG", "warn")
        .env("SAINT_SANDBOX_STATE", directory.join("state"))
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (name, value) in environment() {
        command.env(name, value);
    }
    command.envs(extra_environment.iter().cloned());
    let mut child = command.spawn().expect("failed to start saint-agent");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let http = line
        .split_whitespace()
        .find_map(|part| part.strip_prefix("http="))
        .map(|address| format!("http://{address}"));
    let Some(http) = http else {
        let _ = child.kill();
        panic!("saint-agent did not report its addresses: {line:?}");
    };
    Bot {
        child,
        http,
        seen: Vec::new(),
    }
}

fn files_containing(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut queue = vec![root.to_path_buf()];
    while let Some(path) = queue.pop() {
        let Ok(metadata) = fs::symlink_metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            for entry in fs::read_dir(&path).unwrap().flatten() {
                queue.push(entry.path());
            }
        } else if metadata.is_file()
            && let Ok(bytes) = fs::read(&path)
            && bytes.windows(needle.len()).any(|window| window == needle)
        {
            found.push(path);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn one_command_runs_agent_porter_and_sandbox_and_one_ctrl_c_stops_them_all() {
    sibling_binary("porter");
    sibling_binary("saint-sandbox-runner");
    assert!(
        Path::new("/usr/bin/bwrap").is_file(),
        "bubblewrap is not installed (apt-get install bubblewrap)"
    );
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let directory_path = directory.path().canonicalize().unwrap();
    let workspace = directory_path.join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let registry = write_registry(&directory_path);
    let standin = standin::StandIn::start(&directory_path, CANARY);
    let config_path = directory_path.join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    // The bot file lists the CLI (as a SaintBot's Porter CLIs do); the registry holds
    // its hosts and credential. The config's Kubernetes socket paths are not in use
    // here, so the agent starts its own Porter.
    config["porter"]["clis"] = json!([CLI]);
    write_config(&config_path, &config);
    let mut bot = spawn_bot(
        &directory_path,
        &config_path,
        &workspace,
        &registry,
        &porter_upstream(&standin),
    );

    llm.push(Reply::tool_call(
        "exec",
        json!({"command": format!("{CLI} api user --jq '\"login=\" + .login'")}),
    ));
    llm.push(Reply::text("The CLI answered."));
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", bot.http))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "whatsapp", "peer": ANA_WHATSAPP, "text": "which version?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reply"], "The CLI answered.", "{body}");

    let requests = llm.requests();
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    let (output, is_error) = &results[0];
    assert!(!is_error, "exec failed: {output}");
    assert!(
        output.contains("login=o"),
        "the CLI's output reaches the model: {output}"
    );
    let requests_upstream = standin.requests();
    assert_eq!(requests_upstream.len(), 1, "{requests_upstream:?}");
    assert_eq!(
        requests_upstream[0].credential().as_deref(),
        Some(CANARY),
        "Porter put the credential on the wire"
    );

    let audit_path = directory_path.join("state/porter-control/audit.jsonl");
    let audit = fs::read_to_string(&audit_path).expect("porter's audit log in its state");
    let decisions: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|line: &Value| line["kind"] == "request" && line["cli"] == CLI)
        .collect();
    assert_eq!(decisions.len(), 1, "{audit}");
    assert_eq!(decisions[0]["decision"], "allowed", "{audit}");
    assert_eq!(decisions[0]["path"], "/user", "{audit}");
    assert_eq!(decisions[0]["role"], "owner", "{audit}");

    // The credential is nowhere the model, the transcript or the sandbox can see.
    for request in &requests {
        assert!(
            !request.body.to_string().contains(CANARY),
            "sent to the model"
        );
    }
    assert!(!body.to_string().contains(CANARY));
    let leaked = files_containing(&workspace, CANARY.as_bytes());
    assert!(leaked.is_empty(), "the credential is in {leaked:?}");
    assert!(
        workspace.join("sessions/transcripts.sqlite3").is_file(),
        "the transcript is where the leak check looked"
    );

    // Ctrl-C: the terminal sends SIGINT to the foreground process group.
    let marker = directory_path.to_string_lossy().into_owned();
    let agent_pid = i32::try_from(bot.child.id()).unwrap();
    bot.seen = process_tree(agent_pid, &marker);
    let names: Vec<&str> = bot
        .seen
        .iter()
        .map(|process| process.command_line.as_str())
        .collect();
    assert!(
        names
            .iter()
            .any(|line| line.contains("porter") && line.contains("--control-socket")),
        "the agent started porter: {names:#?}"
    );
    assert!(
        names.iter().any(|line| line.contains("bwrap")),
        "the agent started a bubblewrap sandbox: {names:#?}"
    );
    assert!(
        names
            .iter()
            .any(|line| line.contains("saint-sandbox-runner")),
        "the sandbox runs the runner: {names:#?}"
    );
    let interrupted = Instant::now();
    kill_process_group(Pid::from_raw(agent_pid).unwrap(), Signal::INT).unwrap();

    let deadline = Duration::from_secs(8);
    let status = loop {
        if let Some(status) = bot.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            interrupted.elapsed() < deadline,
            "saint-agent still runs {deadline:?} after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "Ctrl-C is a clean stop: {status:?}");
    loop {
        let left = survivors(&bot.seen, &marker);
        if left.is_empty() {
            break;
        }
        assert!(
            interrupted.elapsed() < deadline,
            "still running {deadline:?} after Ctrl-C: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !workspace.join(".saint/run/porter/porter.sock").exists(),
        "porter removed its socket on a clean stop"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_porter_is_restarted_and_stop_ends_it_and_its_group() {
    let directory = tempfile::tempdir().unwrap();
    let base = directory.path().canonicalize().unwrap();
    let workspace = base.join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    let registry = write_registry(&base);
    let paths = PorterPaths::new(&workspace, &base.join("state"), Some(&registry));
    let porter = LocalPorter::start(LocalPorterSettings::new(
        sibling_binary("porter"),
        paths.clone(),
    ))
    .await
    .unwrap();
    let first = porter.pid();
    assert!(first > 0);
    assert!(paths.socket.exists() && paths.control_socket.exists());
    let control_mode = fs::metadata(&paths.control_directory)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        control_mode & 0o777,
        0o700,
        "the control directory is private"
    );

    kill_process(
        Pid::from_raw(i32::try_from(first).unwrap()).unwrap(),
        Signal::KILL,
    )
    .unwrap();
    let started = Instant::now();
    let second = loop {
        let pid = porter.pid();
        if pid != 0 && pid != first {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "porter was not restarted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        std::os::unix::net::UnixStream::connect(&paths.control_socket).is_ok(),
        "the restarted porter listens"
    );
    let log = fs::read_to_string(&paths.log).unwrap();
    assert!(log.contains("porter listening"), "porter's log: {log}");

    porter.stop().await;
    let gone = !Path::new(&format!("/proc/{second}")).exists()
        || fs::read_to_string(format!("/proc/{second}/stat"))
            .map(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            })
            .unwrap_or(true);
    assert!(gone, "porter {second} still runs after stop");
    assert!(!paths.socket.exists(), "porter removed its socket");
    assert!(!paths.pid_file.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_porter_that_cannot_start_is_a_clear_error_naming_its_log() {
    let directory = tempfile::tempdir().unwrap();
    let base = directory.path().canonicalize().unwrap();
    let workspace = base.join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    let registry = base.join("porter.json");
    // Valid JSON Porter refuses: a credential without hosts.
    fs::write(
        &registry,
        r#"{"version":2,"clis":{"gh":{"hosts":[],"secret":{"value":"x"}}}}"#,
    )
    .unwrap();
    let paths = PorterPaths::new(&workspace, &base.join("state"), Some(&registry));
    let error = LocalPorter::start(LocalPorterSettings::new(
        sibling_binary("porter"),
        paths.clone(),
    ))
    .await
    .err()
    .expect("porter must refuse the registry")
    .to_string();
    assert!(
        error.contains("exited") && error.contains(&paths.log.display().to_string()),
        "{error}"
    );
    assert!(
        error.contains("clis.gh.hosts"),
        "porter's own reason is shown: {error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_agent_takes_its_porter_with_it() {
    sibling_binary("porter");
    assert!(
        Path::new("/usr/bin/setpriv").is_file(),
        "setpriv (util-linux) is missing: a killed agent would leave porter running"
    );
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let directory_path = directory.path().canonicalize().unwrap();
    let workspace = directory_path.join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let registry = write_registry(&directory_path);
    let config_path = directory_path.join("bot-config.json");
    write_config(&config_path, &test_config(&llm.base_url()));
    let mut bot = spawn_bot(&directory_path, &config_path, &workspace, &registry, &[]);
    let marker = directory_path.to_string_lossy().into_owned();
    let agent_pid = i32::try_from(bot.child.id()).unwrap();
    bot.seen = process_tree(agent_pid, &marker);
    let porter = bot
        .seen
        .iter()
        .find(|process| process.command_line.contains("--control-socket"))
        .cloned()
        .unwrap_or_else(|| panic!("the agent started porter: {:#?}", bot.seen));

    // SIGKILL: the agent gets no chance to stop porter itself.
    kill_process(Pid::from_raw(agent_pid).unwrap(), Signal::KILL).unwrap();
    bot.child.wait().unwrap();
    let killed = Instant::now();
    while !survivors(std::slice::from_ref(&porter), &marker).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(8),
            "porter {} still runs after its agent was killed",
            porter.pid
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A stdio MCP server: answers `initialize`, lists one tool `where`, and tells where it
/// runs (the sandbox has `/workspace` as its directory and the caller's view at
/// `/agent`, and no agent environment).
const STDIO_SERVER: &str = r#"
import json, os, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "local", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "where", "description": "Says where it runs.",
                             "inputSchema": {"type": "object"}}]}
    else:
        facts = {"cwd": os.getcwd(), "view": os.path.isdir("/agent"),
                 "model_key": "SAINT_MODEL_API_KEY" in os.environ}
        result = {"content": [{"type": "text", "text": json.dumps(facts, sort_keys=True)}]}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"#;

/// The agent's environment and writable memory, read as root would.
fn process_environment_and_memory(pid: u32) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut found = fs::read(format!("/proc/{pid}/environ")).unwrap();
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut regions = 0;
    for region in maps.lines().filter(|line| line.contains(" rw")) {
        let range = region.split_whitespace().next().unwrap();
        let (start, end) = range.split_once('-').unwrap();
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        if end - start > 256 << 20 {
            continue;
        }
        let mut bytes = vec![0_u8; (end - start) as usize];
        if mem.seek(SeekFrom::Start(start)).is_ok() && mem.read_exact(&mut bytes).is_ok() {
            found.extend_from_slice(&bytes);
            regions += 1;
        }
    }
    assert!(regions > 0, "no memory of process {pid} could be read");
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_tools_follow_the_role_and_the_server_credential_stays_in_porter() {
    sibling_binary("porter");
    sibling_binary("saint-sandbox-runner");
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let directory_path = directory.path().canonicalize().unwrap();
    let workspace = directory_path.join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let standin = standin::StandIn::start(&directory_path, CANARY);
    // The credential lives in a file only Porter reads (as a mounted Secret in a pod);
    // the registry the agent reads for CLI names holds its path, not its value.
    let secret_file = directory_path.join("mcp-docs.secret");
    fs::write(&secret_file, CANARY).unwrap();
    fs::set_permissions(&secret_file, fs::Permissions::from_mode(0o600)).unwrap();
    let registry = directory_path.join("porter.json");
    fs::write(
        &registry,
        json!({"version": 2, "clis": {"mcp-docs": {
            "hosts": ["mcp.example"],
            "secret": {"file": secret_file},
            "placeholderEnv": ["SAINT_MCP_DOCS_TOKEN"],
        }}})
        .to_string(),
    )
    .unwrap();
    let config_path = directory_path.join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    config["mcp"] = json!({"servers": [
        {
            "name": "docs",
            "transport": {"http": {"url": "https://mcp.example/mcp"}},
            "credential": {"porterEntry": "mcp-docs", "placeholderEnv": "SAINT_MCP_DOCS_TOKEN"},
        },
        {
            "name": "local",
            "transport": {"stdio": {"command": ["python3", "-c", STDIO_SERVER]}},
        },
    ]});
    // The owner may use every server's tools; the employee none of them.
    config["roles"]["owner"]["tools"]["allow"]
        .as_array_mut()
        .unwrap()
        .extend([json!("docs.*"), json!("local.*")]);
    write_config(&config_path, &config);
    let mut bot = spawn_bot(
        &directory_path,
        &config_path,
        &workspace,
        &registry,
        &porter_upstream(&standin),
    );
    let send = |peer_channel: &'static str, peer: &'static str, text: &'static str| {
        let http = bot.http.clone();
        async move {
            let response = reqwest::Client::new()
                .post(format!("{http}/v1/messages"))
                .bearer_auth(TOKEN)
                .json(&json!({"channel": peer_channel, "peer": peer, "text": text}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };

    // The owner: both servers' tools are offered, under the names model APIs accept.
    llm.push(Reply::tool_calls(vec![
        ("docs__search".to_string(), json!({"query": "anvil care"})),
        ("local__where".to_string(), json!({})),
    ]));
    llm.push(Reply::text("Found it."));
    let body = send("whatsapp", ANA_WHATSAPP, "find the anvil manual").await;
    assert_eq!(body["reply"], "Found it.", "{body}");
    let requests = llm.requests();
    let offered = requests[0].tool_names();
    for name in ["docs__admin_reset", "docs__search", "local__where"] {
        assert!(
            offered.contains(&name.to_string()),
            "{name} offered to the owner: {offered:?}"
        );
    }
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 2, "{results:?}");
    let (search, is_error) = &results[0];
    assert!(!is_error, "{search}");
    assert!(
        search.contains(
            &standin::mcp::search_answer("anvil care")
                .replace(saint_tools::untrusted::END_MARKER, "[marker removed]")
        ),
        "{search}"
    );
    // Marked as untrusted, and the server's text cannot close the wrapper.
    assert!(
        search.contains(saint_tools::untrusted::BEGIN_MARKER),
        "{search}"
    );
    assert_eq!(
        search.matches(saint_tools::untrusted::END_MARKER).count(),
        1,
        "{search}"
    );
    let (place, is_error) = &results[1];
    assert!(!is_error, "{place}");
    assert!(
        place.contains(r#"{\"cwd\": \"/workspace\", \"model_key\": false, \"view\": true}"#)
            || place.contains(r#"{"cwd": "/workspace", "model_key": false, "view": true}"#),
        "the stdio server runs in the sandbox, without the agent's environment: {place}"
    );

    // The employee: no server tool is offered, and a forged call is refused unrun,
    // whatever the owner's result said about roles.
    llm.push(Reply::tool_call("docs__admin_reset", json!({})));
    llm.push(Reply::text("I cannot do that."));
    let body = send("telegram", IVAN_TELEGRAM, "reset the index").await;
    assert_eq!(body["reply"], "I cannot do that.", "{body}");
    let requests = llm.requests();
    let employee_turn = &requests[requests.len() - 2];
    assert!(
        employee_turn
            .tool_names()
            .iter()
            .all(|name| !name.contains("__")),
        "no server tool offered to the employee: {:?}",
        employee_turn.tool_names()
    );
    let refused = requests[requests.len() - 1].tool_results();
    assert_eq!(refused.len(), 1);
    assert!(refused[0].1, "the forged call is an error: {refused:?}");
    assert!(refused[0].0.contains("not available"), "{refused:?}");

    // Metered like every tool: a usage line under the tool's real name, per person.
    let usage = fs::read_to_string(workspace.join("logs/usage.jsonl")).unwrap();
    let search_line: Value = usage
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|line| line["tool"] == "docs.search")
        .unwrap_or_else(|| panic!("no usage line for docs.search: {usage}"));
    assert_eq!(search_line["user"], "ana", "{search_line}");
    assert_eq!(search_line["mcpServer"], "docs", "{search_line}");

    // What the server saw: the real token on every request, put there by Porter; a
    // listing, the owner's search, and never the employee's reset.
    let seen: Vec<standin::Recorded> = standin
        .requests()
        .into_iter()
        .filter(|request| request.host == "mcp.example")
        .collect();
    assert!(!seen.is_empty());
    for request in &seen {
        assert_eq!(request.credential().as_deref(), Some(CANARY), "{request:?}");
    }
    let calls: Vec<&str> = seen
        .iter()
        .filter(|request| request.body.contains("tools/call"))
        .map(|request| request.body.as_str())
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].contains("\"search\""), "{calls:?}");
    assert!(
        seen.iter()
            .any(|request| request.body.contains("tools/list"))
    );
    let audit = fs::read_to_string(directory_path.join("state/porter-control/audit.jsonl"))
        .expect("porter's audit log");
    assert!(
        audit
            .lines()
            .any(|line| line.contains("mcp-docs") && line.contains("\"owner\"")),
        "Porter audited the owner's MCP requests: {audit}"
    );

    // The ledger shows the owner's requests to the server as Porter decided them.
    let ledger = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(["ledger", "--contact", "ana", "--workspace"])
        .arg(&workspace)
        .arg("--porter-audit")
        .arg(directory_path.join("state/porter-control/audit.jsonl"))
        .output()
        .unwrap();
    assert!(ledger.status.success());
    let entries: Vec<Value> = String::from_utf8(ledger.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(
        entries.iter().any(|entry| entry["kind"] == "porter"
            && entry["what"] == "POST mcp.example/mcp"
            && entry["outcome"] == "allowed"),
        "{entries:#?}"
    );
    assert!(
        entries
            .iter()
            .any(|entry| entry["kind"] == "tool" && entry["what"] == "docs.search")
    );

    // The agent never held the credential: not in its environment, its memory, the
    // workspace or anything sent to the model.
    let agent_memory = process_environment_and_memory(bot.child.id());
    assert!(
        !agent_memory
            .windows(CANARY.len())
            .any(|window| window == CANARY.as_bytes()),
        "the credential is in the agent's environment or memory"
    );
    let leaked = files_containing(&workspace, CANARY.as_bytes());
    assert!(leaked.is_empty(), "the credential is in {leaked:?}");
    for request in &llm.requests() {
        assert!(
            !request.body.to_string().contains(CANARY),
            "sent to the model"
        );
    }
    let marker = directory_path.to_string_lossy().into_owned();
    bot.seen = process_tree(i32::try_from(bot.child.id()).unwrap(), &marker);
}
