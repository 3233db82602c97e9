//! Budgets with the real `saint-agent` binary and the scripted model: 200 sub-agents of
//! one person running at once at the edge of their budget pass it by at most one
//! reservation, and a model without a price in `model.prices` is refused, naming that
//! field, unless the bot says `budget.unpricedModels: allow` — which `/readyz` then shows.
//! Ivan (telegram:333333333) is an employee of the example company, on claude-haiku-4-5
//! at 1 USD per million input tokens and 5 USD per million output tokens.

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};

/// Sub-agents Ivan starts at once.
const CHILDREN: usize = 200;
/// Ivan's budget here, USD a month.
const BUDGET_USD: f64 = 1.0;
/// What one call may cost at most: haiku's output price on the config's 4,096 output
/// tokens; the prompt's share is added from what the model received.
const OUTPUT_WORST_CASE_USD: f64 = 4_096.0 * 5.0 / 1e6;

struct Bot {
    _directory: tempfile::TempDir,
    workspace: std::path::PathBuf,
    config_path: std::path::PathBuf,
    llm: ScriptedLlm,
    agent: AgentProcess,
    client: reqwest::Client,
}

async fn start(adjust: impl FnOnce(&mut Value)) -> Bot {
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    adjust(&mut config);
    write_config(&config_path, &config);
    let agent = spawn_agent(&config_path, &workspace, &[]);
    Bot {
        _directory: directory,
        workspace,
        config_path,
        llm,
        agent,
        client: reqwest::Client::new(),
    }
}

impl Bot {
    /// Ivan writes over the HTTP API; returns the status and the JSON body.
    async fn ivan_says(&self, text: &str) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}/v1/messages", self.agent.http))
            .bearer_auth(TOKEN)
            .json(&json!({"channel": "telegram", "peer": IVAN_TELEGRAM, "text": text}))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    /// The `/readyz` that says why (on the metrics listener).
    async fn readyz(&self) -> String {
        self.client
            .get(format!("{}/readyz", self.agent.metrics))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

fn turn_lines(workspace: &Path) -> Vec<Value> {
    std::fs::read_to_string(workspace.join("logs/usage.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("turn").is_some())
        .collect()
}

fn stored_spend(workspace: &Path, contact: &str) -> f64 {
    rusqlite::Connection::open(workspace.join("sessions/transcripts.sqlite3"))
        .unwrap()
        .query_row(
            "SELECT COALESCE(SUM(usd), 0.0) FROM spend WHERE contact = ?1",
            [contact],
            |row| row.get(0),
        )
        .unwrap()
}

async fn eventually(what: &str, within: Duration, done: impl AsyncFn() -> bool) {
    let deadline = Instant::now() + within;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ivan's one message starts 200 sub-agents; each makes one slow model call costing
/// about 0.02 USD, so together they would spend about 4 USD of his 1 USD. Every call
/// reserves its worst case in his one account first, so what they spend stays within
/// the budget plus one reservation — within the budget itself, as no call here costs
/// more than it reserved — and the budget stops the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sub_agents_of_one_person_at_the_budget_edge_overshoot_by_at_most_one_reservation()
 {
    let bot = start(|config| {
        let employee = &mut config["roles"]["employee"];
        employee["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("sessions_spawn"));
        employee["spawn"] =
            json!({"maxDepth": 1, "maxConcurrent": CHILDREN, "timeoutSeconds": 120});
        employee["budget"] = json!({"usd": BUDGET_USD, "period": "month"});
    })
    .await;
    let spawns: Vec<(String, Value)> = (0..CHILDREN)
        .map(|index| {
            (
                "sessions_spawn".to_string(),
                json!({"task": format!("check supplier {index}")}),
            )
        })
        .collect();
    bot.llm.push(Reply::tool_calls(spawns));
    // Every other call — each child's, and Ivan's own after the spawns — is slow, so
    // the children's calls overlap; 100 input and 4,000 output tokens: 0.0201 USD.
    bot.llm.set_fallback(
        Reply::text("Checked.")
            .with_usage(100, 4_000)
            .with_delay(Duration::from_millis(300)),
    );
    let (status, body) = bot.ivan_says("check all our suppliers").await;
    assert_eq!(status, 200, "{body}");

    let children_ended = || {
        turn_lines(&bot.workspace)
            .into_iter()
            .filter(|line| line["trigger"] == "subagent")
            .collect::<Vec<_>>()
    };
    eventually(
        "every sub-agent to end",
        Duration::from_secs(120),
        async || children_ended().len() == CHILDREN,
    )
    .await;
    let children = children_ended();
    let outcome_count = |outcome: &str| {
        children
            .iter()
            .filter(|line| line["turn"] == outcome)
            .count()
    };
    let (answered, refused) = (outcome_count("answered"), outcome_count("over_budget"));
    assert_eq!(answered + refused, CHILDREN, "{children:?}");

    let logged: f64 = turn_lines(&bot.workspace)
        .iter()
        .filter(|line| line["user"] == "ivan")
        .map(|line| line["costUsd"].as_f64().unwrap())
        .sum();
    let stored = stored_spend(&bot.workspace, "ivan");
    assert!(
        (logged - stored).abs() < 1e-9,
        "logged {logged}, stored {stored}"
    );
    // The largest reservation a call made: its prompt (fewer tokens than a quarter of
    // the request's bytes, the agent's estimate) at the input price, plus all output.
    let largest_request_bytes = bot
        .llm
        .requests()
        .iter()
        .map(|request| request.body.to_string().len())
        .max()
        .unwrap();
    let one_reservation = largest_request_bytes as f64 / 4.0 * 1.0 / 1e6 + OUTPUT_WORST_CASE_USD;
    assert!(
        stored <= BUDGET_USD + one_reservation,
        "spent {stored} USD of {BUDGET_USD} (one reservation is at most {one_reservation}); \
         {answered} children answered, {refused} refused"
    );
    assert!(
        refused > 0 && answered > 0,
        "{answered} answered, {refused} refused"
    );
    // The budget was used, not refused early. Calls under way hold their worst case,
    // a little more than they cost, so some room may be left when the last is refused
    // (here about 0.1 USD: 45 children answered, 155 refused).
    assert!(
        stored > 0.75 * BUDGET_USD,
        "spent only {stored} USD of {BUDGET_USD}"
    );
    // Only the children the budget let through reached the model (and Ivan's own calls).
    assert!(
        bot.llm.request_count() <= answered + 2,
        "{} model calls for {answered} answered children",
        bot.llm.request_count()
    );
}

/// A model `model.prices` does not price is refused before any call, the error naming
/// the model, `model.prices` and `budget.unpricedModels`, and `/readyz` says so; with
/// `budget.unpricedModels: allow` the call is made, counted as free, and `/readyz`
/// warns that no budget stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpriced_model_is_refused_naming_model_prices_and_allowed_only_when_the_bot_says_so() {
    let unpriced = |config: &mut Value| {
        config["roles"]["employee"]["model"] = json!("acme-local-llm");
    };
    let bot = start(unpriced).await;
    bot.llm
        .set_fallback(Reply::text("answered by a model without a price"));

    let (status, body) = bot.ivan_says("hello").await;
    assert_eq!(status, 503, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("\"acme-local-llm\"")
            && error.contains("model.prices")
            && error.contains("budget.unpricedModels: allow"),
        "{error}"
    );
    assert_eq!(bot.llm.request_count(), 0, "no call to an unpriced model");
    let readyz = bot.readyz().await;
    assert!(
        readyz.lines().any(|line| line.starts_with(
            "warning: model.prices has no price for \"acme-local-llm\": calls to it are refused"
        )),
        "{readyz}"
    );

    let mut config = test_config(&bot.llm.base_url());
    unpriced(&mut config);
    config["budget"] = json!({"unpricedModels": "allow"});
    write_config(&bot.config_path, &config);
    eventually(
        "the allowance to show in /readyz",
        Duration::from_secs(20),
        async || {
            bot.readyz().await.lines().any(|line| {
                line.starts_with("warning: budget.unpricedModels is allow")
                    && line.contains("\"acme-local-llm\"")
                    && line.contains("no budget stops them")
            })
        },
    )
    .await;
    let (status, body) = bot.ivan_says("hello again").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "answered by a model without a price");
    assert_eq!(bot.llm.request_count(), 1);
    assert_eq!(stored_spend(&bot.workspace, "ivan"), 0.0, "counted as free");
}

/// A priced tool draws on the same budget: `read` priced at 0.50 USD a call, Ivan's
/// five reads in one answer run until his 2 USD month cannot take another; the rest are
/// answered as not run, and what ran is stored as spent. A failed call costs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priced_tool_reserves_its_price_and_is_charged_only_when_it_succeeds() {
    let bot = InProcess::start_with(
        |config| config["budget"] = json!({"toolPrices": {"read": 0.5}}),
        Default::default(),
    )
    .await;
    // A read that fails first: had it been charged, only two of the rest would fit.
    let reads: Vec<(String, Value)> =
        std::iter::once(("read".to_string(), json!({"path": "no/such/file.md"})))
            .chain((0..5).map(|_| ("read".to_string(), json!({"path": "SOUL.md"}))))
            .collect();
    bot.llm.push(Reply::tool_calls(reads));
    bot.llm.push(Reply::text("Read it."));
    let reply = bot
        .reply("telegram", IVAN_TELEGRAM, "read the soul five times")
        .await;
    assert_eq!(reply, "Read it.");
    let results = bot.llm.requests()[1].tool_results();
    let ran = results.iter().filter(|(_, refused)| !refused).count();
    let refused: Vec<&String> = results
        .iter()
        .filter(|(content, refused)| *refused && content.starts_with("not run: read costs 0.5 USD"))
        .map(|(content, _)| content)
        .collect();
    assert_eq!(ran, 3, "{results:?}");
    assert!(
        results[0].1 && !results[0].0.starts_with("not run"),
        "{results:?}"
    );
    assert_eq!(refused.len(), 2, "the fourth and fifth read: {results:?}");
    let spent = stored_spend(&bot.workspace, "ivan");
    assert!(
        (1.5..1.5 + 2.0 * OUTPUT_WORST_CASE_USD).contains(&spent),
        "three reads and two model calls: {spent}"
    );
}
