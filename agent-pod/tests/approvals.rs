//! Approvals end to end, with the real agent binary on a scripted Telegram Bot API and
//! the scripted model: an employee's `message` waits for the owner's yes, asked in the
//! owner's own chat; approving runs exactly the stored call once; replays, strangers to
//! the request, the requester and a manager deciding their own request are refused; a
//! rejected and an expired request each tell the requester, and nothing is sent.
//! Ivan (telegram:333333333) is an employee, Marko (telegram:222222222) a manager, Ana
//! (given telegram:111111111 here) the owner.

mod common;

use std::{path::PathBuf, time::Duration};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::telegram::{self as scripted, Person, ScriptedTelegram};
use serde_json::{Value, json};

const BOT_TOKEN: &str = "7700000002:AAF-approvals-test";
const ANA_TELEGRAM: &str = "111111111";
const MARKO_TELEGRAM: &str = "222222222";

fn person(id: &str, name: &str) -> Person {
    Person::new(id.parse().unwrap(), name)
}

struct Bot {
    llm: ScriptedLlm,
    telegram: ScriptedTelegram,
    _directory: tempfile::TempDir,
    workspace: PathBuf,
    _agent: AgentProcess,
}

impl Bot {
    async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// [`Bot::start`] with the config changed by `adjust` before the agent reads it.
    async fn start_with(adjust: impl FnOnce(&mut Value)) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
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
        // An employee's messages need the owner's yes (urgent ones expire at once); a
        // manager's need a manager's or the owner's.
        config["roles"]["employee"]["approvals"] = json!([
            {"tools": ["message"], "when": {"text": "*urgent*"},
             "approvers": {"roles": ["owner"]}, "timeoutSeconds": 1},
            {"tools": ["message"], "approvers": {"roles": ["owner"]}, "timeoutSeconds": 600},
        ]);
        config["roles"]["manager"]["approvals"] = json!([
            {"tools": ["message"], "approvers": {"roles": ["manager", "owner"]}},
        ]);
        adjust(&mut config);
        write_config(&config_path, &config);
        let agent = spawn_agent(&config_path, &workspace, &[("TG_BOT_TOKEN", BOT_TOKEN)]);
        Self {
            llm,
            telegram,
            _directory: directory,
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

    /// Waits (polling the recorder, bounded) until `chat` got `count` messages.
    async fn wait_for_sent_to(&self, chat: &str, count: usize) -> Vec<String> {
        for _ in 0..600 {
            let sent = self.sent_to(chat);
            if sent.len() >= count {
                return sent;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{chat} got {:?}, expected {count} messages; all sends: {:#?}",
            self.sent_to(chat),
            self.telegram.sent()
        );
    }

    fn say(&self, from: &Person, text: &str) {
        self.telegram
            .push_message(scripted::private_text(from, text));
    }

    /// Ivan's turn calling `message` with `arguments`; returns the code Ana was sent.
    async fn ivan_asks(&self, arguments: Value, ana_before: usize, ivan_before: usize) -> String {
        self.llm.push(Reply::tool_call("message", arguments));
        self.llm.push(Reply::text("I asked for approval."));
        self.say(&person(IVAN_TELEGRAM, "Ivan"), "please tell Marko");
        let ivan = self.wait_for_sent_to(IVAN_TELEGRAM, ivan_before + 1).await;
        assert_eq!(ivan[ivan_before], "I asked for approval.");
        let ana = self.wait_for_sent_to(ANA_TELEGRAM, ana_before + 1).await;
        let ask = &ana[ana_before];
        assert!(ask.contains("Ivan (employee) asks to use message"), "{ask}");
        ask.split("approve ")
            .nth(1)
            .and_then(|rest| rest.get(..6))
            .unwrap_or_else(|| panic!("no code in {ask}"))
            .to_string()
    }

    fn usage(&self) -> String {
        std::fs::read_to_string(self.workspace.join("logs/usage.jsonl")).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_employees_message_waits_for_the_owner_and_runs_once_exactly_as_asked() {
    let bot = Bot::start().await;
    let (ana, ivan, marko) = (
        person(ANA_TELEGRAM, "Ana"),
        person(IVAN_TELEGRAM, "Ivan"),
        person(MARKO_TELEGRAM, "Marko"),
    );
    let code = bot
        .ivan_asks(json!({"to": "marko", "text": "The build is green."}), 0, 0)
        .await;
    // The model was told it waits; nothing reached Marko.
    let results = bot.llm.requests()[1].tool_results();
    assert!(!results[0].1, "{results:?}");
    assert!(
        results[0].0.contains(&format!("request {code}")),
        "{results:?}"
    );
    assert!(bot.sent_to(MARKO_TELEGRAM).is_empty());
    let ask = &bot.sent_to(ANA_TELEGRAM)[0];
    assert!(
        ask.contains("The build is green."),
        "the approver sees the arguments: {ask}"
    );

    // Neither the requester nor a manager the rule does not name may decide.
    bot.say(&ivan, &format!("approve {code}"));
    let said = bot.wait_for_sent_to(IVAN_TELEGRAM, 2).await;
    assert_eq!(
        said[1],
        format!("Not done: request {code} was made by you: someone else must decide it.")
    );
    bot.say(&marko, &format!("approve {code}"));
    let said = bot.wait_for_sent_to(MARKO_TELEGRAM, 1).await;
    assert_eq!(
        said[0],
        format!("Not done: you may not decide request {code}.")
    );

    // Ana approves (any case): exactly the stored message goes to Marko, once.
    bot.say(&ana, &format!("Approve {}", code.to_lowercase()));
    let said = bot.wait_for_sent_to(ANA_TELEGRAM, 2).await;
    assert_eq!(said[1], "Approved: message ran for Ivan.");
    let to_marko = bot.wait_for_sent_to(MARKO_TELEGRAM, 2).await;
    assert_eq!(to_marko[1], "The build is green.");
    let told = bot.wait_for_sent_to(IVAN_TELEGRAM, 3).await;
    assert!(
        told[2].starts_with(&format!(
            "Ana approved your request to use message (request {code}). It ran"
        )),
        "{told:?}"
    );

    // A replay changes nothing and sends nothing.
    bot.say(&ana, &format!("approve {code}"));
    let said = bot.wait_for_sent_to(ANA_TELEGRAM, 3).await;
    assert_eq!(
        said[2],
        format!("Not done: request {code} was already decided.")
    );
    assert_eq!(bot.sent_to(MARKO_TELEGRAM).len(), 2);
    // The decisions never reached the model: only Ivan's turn called it.
    assert_eq!(bot.llm.requests().len(), 2);

    // Metered to Ivan, marked with the approval.
    let usage = bot.usage();
    let line: Value = usage
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|line| line["tool"] == "message" && line["approval"] == code.as_str())
        .unwrap_or_else(|| panic!("{usage}"));
    assert_eq!(line["user"], "ivan");
    assert_eq!(line["approvedBy"], "ana");
    assert_eq!(line["outcome"], "ok");

    // Every decision is audited.
    let audit = std::fs::read_to_string(bot.workspace.join("logs/approvals.jsonl")).unwrap();
    let events: Vec<String> = audit
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        events,
        [
            "requested",
            "refused",
            "refused",
            "approved",
            "ran",
            "refused"
        ]
    );
    // And in Ivan's ledger.
    let ledger = std::process::Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(["ledger", "--contact", "ivan", "--workspace"])
        .arg(&bot.workspace)
        .output()
        .unwrap();
    let ledger = String::from_utf8(ledger.stdout).unwrap();
    assert!(
        ledger.contains(&format!(
            r#""kind":"approval","contact":"ivan","role":"employee","trigger":"","what":"message (request {code})","outcome":"approved by ana""#
        )),
        "{ledger}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_and_an_expired_request_tell_the_employee_and_send_nothing() {
    let bot = Bot::start().await;
    let ana = person(ANA_TELEGRAM, "Ana");
    let code = bot
        .ivan_asks(json!({"to": "marko", "text": "Ship it."}), 0, 0)
        .await;
    bot.say(&ana, &format!("reject {code}"));
    let said = bot.wait_for_sent_to(ANA_TELEGRAM, 2).await;
    assert_eq!(said[1], "Declined: Ivan's message will not run.");
    let told = bot.wait_for_sent_to(IVAN_TELEGRAM, 2).await;
    assert_eq!(
        told[1],
        format!("Ana declined your request to use message (request {code}); it was not run.")
    );

    // An urgent message waits one second; nobody answers; the sweeper refuses it.
    let late = bot
        .ivan_asks(json!({"to": "marko", "text": "urgent: ship it"}), 2, 2)
        .await;
    let told = bot.wait_for_sent_to(IVAN_TELEGRAM, 4).await;
    assert_eq!(
        told[3],
        format!(
            "Nobody approved your request to use message (request {late}) in time; it was not run."
        )
    );
    bot.say(&ana, &format!("approve {late}"));
    let said = bot.wait_for_sent_to(ANA_TELEGRAM, 4).await;
    assert_eq!(
        said[3],
        format!("Not done: request {late} was already decided.")
    );
    assert!(
        bot.sent_to(MARKO_TELEGRAM).is_empty(),
        "nothing was sent to Marko"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_cannot_approve_their_own_request() {
    let bot = Bot::start().await;
    let marko = person(MARKO_TELEGRAM, "Marko");
    bot.llm.push(Reply::tool_call(
        "message",
        json!({"to": "ivan", "text": "Standup moved."}),
    ));
    bot.llm.push(Reply::text("Asked."));
    bot.say(&marko, "tell Ivan the standup moved");
    bot.wait_for_sent_to(MARKO_TELEGRAM, 1).await;
    // Ana (owner) is asked; Marko himself is not.
    let ask = bot.wait_for_sent_to(ANA_TELEGRAM, 1).await;
    let code = ask[0].split("approve ").nth(1).unwrap()[..6].to_string();
    bot.say(&marko, &format!("approve {code}"));
    let said = bot.wait_for_sent_to(MARKO_TELEGRAM, 2).await;
    assert_eq!(
        said[1],
        format!("Not done: request {code} was made by you: someone else must decide it.")
    );
    assert!(bot.sent_to(IVAN_TELEGRAM).is_empty());
}

/// A sub-agent on a dearer model than the role's is refused unless the role's approvals
/// let the person ask: then it waits for the owner, and runs on that model once she says
/// yes (the approved call's permit carries the approval; nothing else lifts the limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_on_a_dearer_model_runs_only_once_the_owner_approves() {
    let bot = Bot::start_with(|config| {
        config["roles"]["employee"]["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("sessions_spawn"));
        config["roles"]["employee"]["approvals"] = json!([
            {"tools": ["sessions_spawn"], "when": {"model": "claude-sonnet*"},
             "approvers": {"roles": ["owner"]}},
        ]);
    })
    .await;
    let (ana, ivan) = (person(ANA_TELEGRAM, "Ana"), person(IVAN_TELEGRAM, "Ivan"));
    bot.llm.push(Reply::tool_call(
        "sessions_spawn",
        json!({"task": "Summarise the Q3 anvil sales.", "model": "claude-sonnet-4-5"}),
    ));
    bot.llm.push(Reply::text("I asked for approval."));
    bot.say(&ivan, "get a sub-agent on the big model for Q3");
    bot.wait_for_sent_to(IVAN_TELEGRAM, 1).await;
    let ana_said = bot.wait_for_sent_to(ANA_TELEGRAM, 1).await;
    assert!(
        ana_said[0].contains("Ivan (employee) asks to use sessions_spawn")
            && ana_said[0].contains("claude-sonnet-4-5"),
        "{ana_said:?}"
    );
    let code = ana_said[0]
        .split("approve ")
        .nth(1)
        .and_then(|rest| rest.get(..6))
        .unwrap_or_else(|| panic!("no code in {ana_said:?}"))
        .to_string();
    // Until then every call ran on Ivan's own model.
    let models: Vec<String> = bot.llm.requests().iter().map(|r| r.model()).collect();
    assert_eq!(models, ["claude-haiku-4-5", "claude-haiku-4-5"]);

    // Ana approves: the sub-agent starts, on the dearer model.
    bot.llm.set_fallback(Reply::text("Q3: 1,200 anvils."));
    bot.say(&ana, &format!("approve {code}"));
    let said = bot.wait_for_sent_to(ANA_TELEGRAM, 2).await;
    assert_eq!(said[1], "Approved: sessions_spawn ran for Ivan.");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !bot
        .llm
        .requests()
        .iter()
        .any(|request| request.model() == "claude-sonnet-4-5")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no model call on claude-sonnet-4-5 after the approval; usage: {}",
            bot.usage()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let usage = bot.usage();
    let line: Value = usage
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|line| line["tool"] == "sessions_spawn" && line["approval"] == code.as_str())
        .unwrap_or_else(|| panic!("{usage}"));
    assert_eq!(line["outcome"], "ok", "{line}");
}

/// A person near the end of their budget asks for more: `budget_top_up` waits for the
/// owner, and once she approves, the credit raises what the person may spend this
/// period at once (the runtime's live account, not only the store). Ivan's budget is
/// 2 USD a month; he has spent 1.95 of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_top_up_runs_only_once_the_owner_approves_and_raises_the_budget_at_once() {
    let bot = Bot::start_with(|config| {
        config["roles"]["employee"]["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("budget_top_up"));
        config["roles"]["employee"]["approvals"] = json!([
            {"tools": ["budget_top_up"], "approvers": {"roles": ["owner"]}},
        ]);
    })
    .await;
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let database =
        rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3")).unwrap();
    database
        .execute(
            "INSERT INTO spend (contact, day, usd) VALUES ('ivan', ?1, 1.95)",
            [&today],
        )
        .unwrap();
    let (ana, ivan) = (person(ANA_TELEGRAM, "Ana"), person(IVAN_TELEGRAM, "Ivan"));
    bot.llm.push(Reply::tool_call(
        "budget_top_up",
        json!({"amountUsd": 1.5, "reason": "The Q3 report needs a few long drafts."}),
    ));
    bot.llm.push(Reply::text("I asked Ana for more budget."));
    bot.say(&ivan, "I need more budget for the Q3 report");
    bot.wait_for_sent_to(IVAN_TELEGRAM, 1).await;
    let ana_said = bot.wait_for_sent_to(ANA_TELEGRAM, 1).await;
    assert!(
        ana_said[0].contains("Ivan (employee) asks to use budget_top_up")
            && ana_said[0].contains("1.5"),
        "{ana_said:?}"
    );
    let code = ana_said[0]
        .split("approve ")
        .nth(1)
        .and_then(|rest| rest.get(..6))
        .unwrap_or_else(|| panic!("no code in {ana_said:?}"))
        .to_string();
    // Asked, not granted: the store holds no credit yet.
    let credits = |database: &rusqlite::Connection| -> f64 {
        database
            .query_row(
                "SELECT COALESCE(SUM(usd), 0.0) FROM spend WHERE contact = 'ivan'",
                [],
                |row| row.get(0),
            )
            .unwrap()
    };
    assert!(credits(&database) > 1.95, "{}", credits(&database));

    bot.say(&ana, &format!("approve {code}"));
    let said = bot.wait_for_sent_to(ANA_TELEGRAM, 2).await;
    assert_eq!(said[1], "Approved: budget_top_up ran for Ivan.");
    let told = bot.wait_for_sent_to(IVAN_TELEGRAM, 2).await;
    assert!(told[1].contains("Added 1.5 USD"), "{told:?}");
    let charged = credits(&database);
    assert!(
        (0.45..0.5).contains(&charged),
        "1.95 spent + Ivan's turn − 1.5 credited: {charged}"
    );

    // Ivan's next turn costs 1.0 USD (a million prompt tokens of claude-haiku-4-5):
    // 1.45 + 1.0 is within 2 only because of the top-up, so the turn after it runs too.
    bot.llm
        .push(Reply::text("Here is the long draft.").with_usage(1_000_000, 10));
    bot.say(&ivan, "draft the Q3 report");
    let told = bot.wait_for_sent_to(IVAN_TELEGRAM, 3).await;
    assert_eq!(told[2], "Here is the long draft.");
    bot.llm.push(Reply::text("And the summary."));
    bot.say(&ivan, "and a summary");
    let told = bot.wait_for_sent_to(IVAN_TELEGRAM, 4).await;
    assert_eq!(
        told[3],
        "And the summary.",
        "without the credit Ivan would be over his 2 USD (spent {})",
        credits(&database)
    );
}
