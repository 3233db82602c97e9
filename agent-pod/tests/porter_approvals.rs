//! Approvals for requests a command makes through Porter, end to end: the real
//! `saint-agent run` with its own Porter and bubblewrap sandboxes, Debian's `gh` in the
//! sandbox, Porter's HTTPS stand-in for GitHub recording every request, a scripted
//! Telegram for the people and the scripted model. Ivan (employee) may list pull
//! requests and merge one, but his role's approval rule holds a merge for the owner's
//! yes: the merge is refused at Porter (the stand-in sees nothing), Ana (owner) is asked
//! in her own chat, and on her yes the same command runs again with a one-time grant:
//! exactly one merge reaches the stand-in; a second merge in that rerun, or a merge of
//! another pull request, is held again; a replayed yes does nothing; a rejection tells
//! Ivan; a listing passes as before.
//!
//! Needs `bwrap` (Debian `bubblewrap`), `gh` (Debian `gh`) and the `porter` and
//! `saint-sandbox-runner` binaries built into this target directory (`cargo build -p
//! porter -p saint-sandbox-runner`); a missing piece fails the test with the reason.

mod common;
#[path = "../../porter-sidecar/tests/standin/mod.rs"]
mod standin;

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::telegram::{self as scripted, Person, ScriptedTelegram};
use serde_json::{Value, json};

const BOT_TOKEN: &str = "7700000003:AAF-porter-approvals";
const ANA_TELEGRAM: &str = "111111111";
/// The credential Porter injects.
const CANARY: &str = "ghp_porterApprovalCanary7c41e0";
const MERGE: &str = "PUT https://api.github.com/repos/o/r/pulls/1/merge";

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

struct Bot {
    llm: ScriptedLlm,
    telegram: ScriptedTelegram,
    standin: standin::StandIn,
    directory: tempfile::TempDir,
    workspace: PathBuf,
    _agent: AgentProcess,
}

impl Bot {
    async fn start() -> Self {
        sibling_binary("porter");
        sibling_binary("saint-sandbox-runner");
        for program in ["/usr/bin/bwrap", "/usr/bin/gh"] {
            assert!(
                Path::new(program).is_file(),
                "{program} is missing (apt-get install bubblewrap gh)"
            );
        }
        let llm = ScriptedLlm::start().await.unwrap();
        let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let base = directory.path().canonicalize().unwrap();
        let workspace = base.join("workspace");
        fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let standin = standin::StandIn::start(&base, CANARY);
        // Ivan's role may list pull requests and merge them; the owner may do anything.
        let registry = json!({
            "version": 2,
            "clis": {"gh": {
                "hosts": standin::HOSTS, "secret": {"value": CANARY}, "placeholderEnv": ["GH_TOKEN"],
                "requests": {
                    "employee": [
                        {"methods": ["GET"], "paths": ["/repos/*/*/pulls", "/repos/*/*/pulls/**"]},
                        {"methods": ["PUT"], "paths": ["/repos/*/*/pulls/*/merge"]}
                    ],
                    "owner": [{"methods": ["*"], "paths": ["/**"]}]
                }
            }}
        });
        let registry_path = base.join("porter.json");
        fs::write(&registry_path, registry.to_string()).unwrap();

        let mut config = test_config(&llm.base_url());
        config["porter"]["clis"] = json!(["gh"]);
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "telegram", "kind": "telegram",
             "settings": {"apiBaseUrl": telegram.base_url()},
             "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
        ]);
        for contact in config["contacts"].as_array_mut().unwrap() {
            if contact["slug"] == "ana" {
                contact["identities"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!(format!("telegram:{ANA_TELEGRAM}")));
            }
        }
        // A merge (in any spelling Porter reads the same) waits for the owner's yes.
        config["roles"]["employee"]["approvals"] = json!([
            {"porter": {"hosts": ["api.github.com"], "methods": ["PUT", "POST"],
                        "paths": ["/repos/*/*/pulls/*/merge"]},
             "approvers": {"roles": ["owner"]}, "timeoutSeconds": 600},
        ]);
        let config_path = base.join("bot-config.json");
        write_config(&config_path, &config);
        let overrides: Vec<String> = standin::ALL_HOSTS
            .iter()
            .map(|host| format!("{host}={}", standin.address))
            .collect();
        let agent = spawn_agent(
            &config_path,
            &workspace,
            &[
                ("PATH", "/usr/bin:/bin"),
                ("HOME", base.to_str().unwrap()),
                ("TG_BOT_TOKEN", BOT_TOKEN),
                ("SAINT_PORTER_REGISTRY", registry_path.to_str().unwrap()),
                ("PORTER_UPSTREAM_OVERRIDES", &overrides.join(",")),
                ("PORTER_UPSTREAM_CA_FILE", standin.ca_file.to_str().unwrap()),
            ],
        );
        Self {
            llm,
            telegram,
            standin,
            directory,
            workspace,
            _agent: agent,
        }
    }

    fn sent_to(&self, chat: &str) -> Vec<String> {
        self.telegram
            .sent()
            .into_iter()
            .filter(|body| body["chat_id"] == chat)
            .map(|body| body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The `count`-th message (from 1) sent to `chat`, waited for with a deadline.
    async fn message_to(&self, chat: &str, count: usize, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sent = self.sent_to(chat);
            if sent.len() >= count {
                return sent[count - 1].clone();
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {chat} got {sent:?}, expected message {count}; all sends: {:#?}",
                self.telegram.sent()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn say(&self, from: &Person, text: &str) {
        self.telegram
            .push_message(scripted::private_text(from, text));
    }

    /// Ivan's turn running `command` with `exec`; returns what the tool answered the
    /// model. His turn's reply is his message number `ivan_count`.
    async fn ivan_runs(&self, command: &str, ivan_count: usize) -> String {
        self.llm
            .push(Reply::tool_call("exec", json!({"command": command})));
        self.llm.push(Reply::text("Done what I could."));
        self.say(&person(IVAN_TELEGRAM, "Ivan"), "please do it");
        let reply = self
            .message_to(IVAN_TELEGRAM, ivan_count, "Ivan's turn reply")
            .await;
        assert_eq!(reply, "Done what I could.");
        let requests = self.llm.requests();
        // The last request carries the whole conversation: this turn's result is last.
        let results = requests.last().unwrap().tool_results();
        let (output, is_error) = results.last().expect("a tool result").clone();
        assert!(!is_error, "exec failed: {output}");
        output
    }

    /// The requests the stand-in got as `METHOD path`.
    fn upstream(&self) -> Vec<String> {
        self.standin
            .requests()
            .iter()
            .map(|request| format!("{} {}", request.method, request.path))
            .collect()
    }

    fn merges(&self) -> usize {
        self.standin
            .requests()
            .iter()
            .filter(|request| request.method == "PUT")
            .count()
    }

    /// Porter's audit lines about `gh` requests.
    fn porter_audit(&self) -> Vec<Value> {
        let path = self
            .directory
            .path()
            .join("sandbox-state/porter-control/audit.jsonl");
        fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("porter's audit log {}: {error}", path.display()))
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .filter(|line: &Value| line["kind"] == "request" && line["cli"] == "gh")
            .collect()
    }

    fn approvals_audit(&self) -> Vec<Value> {
        fs::read_to_string(self.workspace.join("logs/approvals.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

fn person(id: &str, name: &str) -> Person {
    Person::new(id.parse().unwrap(), name)
}

/// The code in an approval request sent to an approver.
fn code_in(ask: &str) -> String {
    ask.split("approve ")
        .nth(1)
        .and_then(|rest| rest.get(..6))
        .unwrap_or_else(|| panic!("no code in {ask}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_through_porter_waits_for_the_owner_and_runs_once_as_approved() {
    let bot = Bot::start().await;
    let ana = person(ANA_TELEGRAM, "Ana");

    // A listing is no merge: it passes as before, and nobody is asked.
    let listed = bot
        .ivan_runs("gh api repos/o/r/pulls --jq '.[0].title'", 1)
        .await;
    assert!(listed.contains("Fix the thing"), "{listed}");
    assert!(!listed.contains("held"), "{listed}");
    assert_eq!(bot.upstream(), ["GET /repos/o/r/pulls"]);
    assert!(bot.sent_to(ANA_TELEGRAM).is_empty());

    // Ivan's command merges twice: Porter holds the merge, the stand-in sees nothing.
    let twice = "gh api -X PUT repos/o/r/pulls/1/merge; gh api -X PUT repos/o/r/pulls/1/merge";
    let held = bot.ivan_runs(twice, 2).await;
    assert_eq!(bot.merges(), 0, "a held merge never reaches GitHub");
    assert!(
        held.contains(&format!("[porter held for approval: {MERGE}]")),
        "the exec result names the held request: {held}"
    );
    assert!(
        held.contains("needs an approval"),
        "gh printed Porter's answer: {held}"
    );
    let ask = bot.message_to(ANA_TELEGRAM, 1, "Ana asked").await;
    assert!(ask.contains("Ivan (employee) asks to use exec"), "{ask}");
    assert!(ask.contains(twice), "the approver sees the command: {ask}");
    assert!(ask.contains(MERGE), "the approver sees the request: {ask}");
    let code = code_in(&ask);
    assert!(held.contains(&format!("request {code}")), "{held}");
    let audit = bot.porter_audit();
    let held_lines: Vec<&Value> = audit
        .iter()
        .filter(|line| line["decision"] == "held")
        .collect();
    assert_eq!(
        held_lines.len(),
        2,
        "each held merge is audited: {audit:#?}"
    );
    assert_eq!(held_lines[0]["path"], "/repos/o/r/pulls/1/merge");
    assert_eq!(held_lines[0]["role"], "employee");

    // Ana approves: the command runs again; exactly one merge passes, the second is
    // held again (the grant was used).
    bot.say(&ana, &format!("approve {code}"));
    let answer = bot.message_to(ANA_TELEGRAM, 2, "Ana's answer").await;
    assert_eq!(answer, "Approved: exec ran for Ivan.");
    let told = bot.message_to(IVAN_TELEGRAM, 3, "Ivan told").await;
    assert!(
        told.starts_with(&format!(
            "Ana approved your request to use exec (request {code}). It ran"
        )),
        "{told}"
    );
    assert!(told.contains("Pull Request successfully merged"), "{told}");
    assert!(
        told.contains(&format!("[porter held for approval: {MERGE}]")),
        "the second merge of the rerun was held: {told}"
    );
    let merges: Vec<_> = bot
        .standin
        .requests()
        .into_iter()
        .filter(|request| request.method == "PUT")
        .collect();
    assert_eq!(merges.len(), 1, "{:?}", bot.upstream());
    assert_eq!(merges[0].path, "/repos/o/r/pulls/1/merge");
    assert_eq!(merges[0].credential().as_deref(), Some(CANARY));
    let audit = bot.porter_audit();
    let granted: Vec<&Value> = audit
        .iter()
        .filter(|line| line["approval"] == code.as_str())
        .collect();
    assert_eq!(granted.len(), 1, "{audit:#?}");
    assert_eq!(granted[0]["decision"], "allowed");
    assert_eq!(granted[0]["status"], 200);
    assert_eq!(
        audit
            .iter()
            .filter(|line| line["decision"] == "held")
            .count(),
        3,
        "{audit:#?}"
    );

    // A replayed yes is refused and merges nothing.
    bot.say(&ana, &format!("approve {code}"));
    let replay = bot.message_to(ANA_TELEGRAM, 3, "Ana's replay answer").await;
    assert_eq!(
        replay,
        format!("Not done: request {code} was already decided.")
    );
    assert_eq!(bot.merges(), 1);

    // A command whose rerun merges another pull request: the grant does not cover it.
    let shifting = "n=$(cat /workspace/pr 2>/dev/null || echo 1); echo 2 > /workspace/pr; \
                    gh api -X PUT repos/o/r/pulls/$n/merge";
    let held = bot.ivan_runs(shifting, 4).await;
    assert!(held.contains(MERGE), "{held}");
    let ask = bot.message_to(ANA_TELEGRAM, 4, "Ana asked again").await;
    let second = code_in(&ask);
    bot.say(&ana, &format!("approve {second}"));
    bot.message_to(ANA_TELEGRAM, 5, "Ana's second answer").await;
    let told = bot.message_to(IVAN_TELEGRAM, 5, "Ivan told again").await;
    assert!(
        told.contains(
            "[porter held for approval: PUT https://api.github.com/repos/o/r/pulls/2/merge]"
        ),
        "{told}"
    );
    assert_eq!(bot.merges(), 1, "another pull request is not approved");

    // A rejection tells Ivan and merges nothing.
    bot.ivan_runs("gh api -X PUT repos/o/r/pulls/1/merge", 6)
        .await;
    let ask = bot
        .message_to(ANA_TELEGRAM, 6, "Ana asked a third time")
        .await;
    let third = code_in(&ask);
    bot.say(&ana, &format!("reject {third}"));
    let told = bot
        .message_to(IVAN_TELEGRAM, 7, "Ivan told of the rejection")
        .await;
    assert_eq!(
        told,
        format!("Ana declined your request to use exec (request {third}); it was not run.")
    );
    assert_eq!(bot.merges(), 1);

    // Every decision is audited, the held requests with it.
    let events: Vec<(String, String)> = bot
        .approvals_audit()
        .iter()
        .map(|line| {
            (
                line["event"].as_str().unwrap().to_string(),
                line["code"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (event, request) in [
        ("requested", &code),
        ("approved", &code),
        ("ran", &code),
        ("refused", &code),
        ("approved", &second),
        ("rejected", &third),
    ] {
        assert!(
            events.contains(&(event.to_string(), request.clone())),
            "{event} {request}: {events:?}"
        );
    }
    let requested = bot
        .approvals_audit()
        .into_iter()
        .find(|line| line["event"] == "requested" && line["code"] == code.as_str())
        .unwrap();
    assert_eq!(
        requested["porter"],
        json!([{"cli": "gh", "host": "api.github.com", "method": "PUT",
                "path": "/repos/o/r/pulls/1/merge"}])
    );
}
