//! The failover chain with scripted model servers: a primary (Anthropic wire) and a
//! fallback (OpenAI wire) on two servers, the runtime in process with a clock the tests
//! move for cool-downs and key rests. Every attempt is read back from `usage.jsonl`,
//! `/metrics` and `/readyz`; the chain's health reports (Events on the SaintBot in a
//! cluster) from a recording publisher.

mod common;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use common::*;
use pretty_assertions::assert_eq;
use saint_agent::{
    channel::http::{AppState, app, metrics_app},
    config_watch::ConfigStore,
    metering::Metering,
    runtime::{
        ChainHealth, ChainHealthTiming, ChainReport, EnvLookup, Inbound, MODEL_CHAIN_FAILING,
        MODEL_CHAIN_RECOVERED, ModelAccess, Now, RecordingPublisher, Runtime, RuntimeOptions,
        TurnEvent, TurnOutcome,
    },
    session::SessionStore,
};
use saint_config::{ChannelIdentity, ChannelKind};
use saint_llm::{CancellationToken, ClientOptions};
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_tools::toolset::ToolSet;
use serde_json::{Value, json};
use tower::ServiceExt;

const FALLBACK_KEY_ENV: &str = "SAINT_MODEL_FALLBACK_1_API_KEY";
const SECOND_KEY_ENV: &str = "SAINT_MODEL_API_KEY_1";

struct Chain {
    _directory: tempfile::TempDir,
    workspace: PathBuf,
    primary: ScriptedLlm,
    fallback: ScriptedLlm,
    runtime: Arc<Runtime>,
    router: Router,
    metrics: Router,
    /// Milliseconds the chain's clock is ahead of the real one.
    clock: Arc<AtomicU64>,
    /// The chain's health reports.
    reports: Arc<RecordingPublisher>,
}

/// How fast the tests' chain health reports: a recovery after 300 ms without a
/// whole-chain failure, no repeat of a failing report within a test.
const REPORT_TIMING: ChainHealthTiming = ChainHealthTiming {
    settle: Duration::from_millis(300),
    repeat: Duration::from_secs(3600),
    retry: Duration::from_millis(20),
};

impl Chain {
    /// The example company with a two-entry chain (the primary with two keys, an
    /// OpenAI fallback), adjusted by `adjust`.
    async fn start(adjust: impl FnOnce(&mut Value)) -> Self {
        let primary = ScriptedLlm::start().await.unwrap();
        let fallback = ScriptedLlm::start().await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let workspace = workspace.canonicalize().unwrap();
        seed_workspace(&workspace);
        let mut config = test_config(&primary.base_url());
        config["model"]["fallbacks"] = json!([{
            "provider": "openai", "name": "gpt-4.1", "baseUrl": fallback.base_url(),
            "apiKeyEnv": FALLBACK_KEY_ENV,
        }]);
        config["model"]["prices"]["gpt-4.1"] = json!({"inputPerMtok": 2.0, "outputPerMtok": 8.0});
        config["model"]["failover"] = json!({"deadlineSeconds": 10, "coolDownSeconds": 300});
        adjust(&mut config);
        let config_path = directory.path().join("bot-config.json");
        write_config(&config_path, &config);

        let mut variables: HashMap<String, String> = environment();
        variables.insert(FALLBACK_KEY_ENV.into(), "sk-fallback-key".into());
        variables.insert(SECOND_KEY_ENV.into(), "sk-model-key-2".into());
        let env: EnvLookup = Arc::new(move |name| variables.get(name).cloned());
        let clock = Arc::new(AtomicU64::new(0));
        let now: Now = {
            let (base, clock) = (Instant::now(), clock.clone());
            Arc::new(move || base + Duration::from_millis(clock.load(Ordering::SeqCst)))
        };
        let options = RuntimeOptions {
            client: ClientOptions {
                min_backoff: Duration::from_millis(5),
                max_backoff: Duration::from_millis(20),
                ..ClientOptions::default()
            },
            ..RuntimeOptions::default()
        };
        let store =
            Arc::new(SessionStore::open(workspace.join("sessions/transcripts.sqlite3")).unwrap());
        let reports = Arc::new(RecordingPublisher::default());
        let runtime = Arc::new(
            Runtime::new(
                Arc::new(ConfigStore::load(&config_path).unwrap()),
                store.clone(),
                ModelAccess::new(None, env.clone(), options.client.clone()).with_clock(now),
                ToolSet::builtin(&workspace, store, env.clone()),
                Arc::new(Metering::open(&workspace).unwrap()),
                workspace.clone(),
                options,
            )
            .with_chain_health(ChainHealth::new(reports.clone(), REPORT_TIMING)),
        );
        Self {
            _directory: directory,
            workspace,
            primary,
            fallback,
            router: app(AppState::new(runtime.clone(), env.clone())),
            metrics: metrics_app(AppState::new(runtime.clone(), env)),
            runtime,
            clock,
            reports,
        }
    }

    fn advance(&self, duration: Duration) {
        self.clock
            .fetch_add(duration.as_millis() as u64, Ordering::SeqCst);
    }

    async fn get(router: &Router, request: Request<Body>) -> (StatusCode, String) {
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 24).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// Ana's message over the HTTP API: the status and the reply (or error) body.
    async fn ask(&self, text: &str) -> (StatusCode, Value) {
        let request = message_request("whatsapp", ANA_WHATSAPP, text, false, Some(TOKEN));
        let (status, body) = Self::get(&self.router, request).await;
        (status, serde_json::from_str(&body).unwrap())
    }

    async fn reply(&self, text: &str) -> String {
        let (status, body) = self.ask(text).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["reply"].as_str().unwrap().to_string()
    }

    async fn metrics_text(&self) -> String {
        Self::get(
            &self.metrics,
            Request::get("/metrics").body(Body::empty()).unwrap(),
        )
        .await
        .1
    }

    async fn readyz(&self) -> String {
        Self::get(
            &self.metrics,
            Request::get("/readyz").body(Body::empty()).unwrap(),
        )
        .await
        .1
    }

    /// The usage log's model attempt lines: (entry, model, outcome).
    fn attempts(&self) -> Vec<(String, String, String)> {
        std::fs::read_to_string(self.workspace.join("logs/usage.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|line| line.get("attempt").is_some())
            .map(|line| {
                let field = |name: &str| line[name].as_str().unwrap().to_string();
                (field("entry"), field("model"), field("outcome"))
            })
            .collect()
    }
}

fn attempt(entry: &str, model: &str, outcome: &str) -> (String, String, String) {
    (entry.into(), model.into(), outcome.into())
}

fn api_keys(llm: &ScriptedLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(|request| {
            let header = request
                .headers
                .get("x-api-key")
                .or_else(|| request.headers.get("authorization"))
                .map(|value| value.to_str().unwrap().to_string());
            header.unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn the_primary_overloaded_three_times_then_answering_is_retried_and_metered() {
    let chain = Chain::start(|_| {}).await;
    for _ in 0..3 {
        chain.primary.push(Reply::overloaded());
    }
    chain.primary.push(Reply::text("Here you are."));
    assert_eq!(chain.reply("hi").await, "Here you are.");
    assert_eq!(chain.primary.request_count(), 4);
    assert_eq!(chain.fallback.request_count(), 0, "no failover was needed");
    let sonnet = "claude-sonnet-4-5";
    assert_eq!(
        chain.attempts(),
        vec![
            attempt("primary", sonnet, "overloaded"),
            attempt("primary", sonnet, "overloaded"),
            attempt("primary", sonnet, "overloaded"),
            attempt("primary", sonnet, "ok"),
        ]
    );
    let metrics = chain.metrics_text().await;
    for expected in [
        "saint_llm_attempts_total{outcome=\"overloaded\",model=\"claude-sonnet-4-5\"} 3",
        "saint_llm_attempts_total{outcome=\"ok\",model=\"claude-sonnet-4-5\"} 1",
        "saint_llm_entry_healthy{entry=\"primary\",model=\"claude-sonnet-4-5\"} 1",
        "saint_llm_entry_healthy{entry=\"fallback-1\",model=\"gpt-4.1\"} 1",
    ] {
        assert!(metrics.contains(expected), "{expected} in {metrics}");
    }
}

#[tokio::test]
async fn a_failing_primary_hands_the_call_to_the_fallback_within_the_deadline() {
    let chain = Chain::start(|_| {}).await;
    // Rate-limited for 30 s: longer than the 10 s deadline, so no waiting for it.
    chain.primary.set_fallback(Reply::rate_limited(30));
    chain.fallback.push(Reply::text("From the fallback."));
    let started = Instant::now();
    assert_eq!(chain.reply("hi").await, "From the fallback.");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered within the deadline, took {:?}",
        started.elapsed()
    );
    let requests = chain.fallback.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].model(), "gpt-4.1");
    assert_eq!(api_keys(&chain.fallback), vec!["Bearer sk-fallback-key"]);
    assert_eq!(
        chain.attempts(),
        vec![
            attempt("primary", "claude-sonnet-4-5", "rate_limited"),
            attempt("fallback-1", "gpt-4.1", "ok"),
        ]
    );

    // Once its key has rested, an overloaded primary is retried with backoff (five
    // attempts), then failed over.
    chain.advance(Duration::from_secs(31));
    chain.primary.set_fallback(Reply::overloaded());
    chain.fallback.push(Reply::text("Fallback again."));
    assert_eq!(chain.reply("again").await, "Fallback again.");
    let outcomes: Vec<String> = chain.attempts()[2..]
        .iter()
        .map(|(entry, _, outcome)| format!("{entry}:{outcome}"))
        .collect();
    assert_eq!(
        outcomes,
        [vec!["primary:overloaded"; 5], vec!["fallback-1:ok"]].concat()
    );
}

#[tokio::test]
async fn every_entry_failing_tells_the_person_once_without_internals() {
    let chain = Chain::start(|_| {}).await;
    chain.primary.set_fallback(Reply::failure(
        400,
        None,
        "invalid_request_error",
        "model claude-x does not exist",
    ));
    chain.fallback.set_fallback(Reply::failure(
        403,
        None,
        "permission_error",
        "key sk-fallback-key revoked",
    ));
    let (status, body) = chain.ask("hi").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        body,
        json!({"error": "failed to answer: the assistant is unavailable right now"})
    );
    assert_eq!(
        chain.attempts(),
        vec![
            attempt("primary", "claude-sonnet-4-5", "invalid_request"),
            attempt("fallback-1", "gpt-4.1", "unauthorized"),
        ]
    );
    let readyz = chain.readyz().await;
    assert!(
        readyz.contains("warning: model primary") && readyz.contains("warning: model fallback-1"),
        "{readyz}"
    );
}

#[tokio::test]
async fn a_chain_failing_on_every_entry_is_reported_once_and_its_recovery_once_it_settles() {
    let chain = Chain::start(|_| {}).await;
    let wait = Duration::from_secs(10);
    // A healthy call reports nothing.
    chain.primary.push(Reply::text("Fine."));
    assert_eq!(chain.reply("one").await, "Fine.");
    chain.primary.set_fallback(Reply::failure(
        400,
        None,
        "invalid_request_error",
        "model claude-x does not exist",
    ));
    chain.fallback.set_fallback(Reply::failure(
        403,
        None,
        "permission_error",
        "key sk-fallback-key revoked",
    ));
    assert_eq!(chain.ask("two").await.0, StatusCode::BAD_GATEWAY);
    let reports = chain.reports.wait_for(1, wait).await;
    assert_eq!(
        reports,
        vec![ChainReport::Failing(
            "every model of the failover chain failed a call: \
             primary claude-sonnet-4-5 (invalid_request), fallback-1 gpt-4.1 (unauthorized)"
                .into()
        )],
        "entries, models and outcome labels only: no error body, key or address"
    );
    assert_eq!(reports[0].reason(), MODEL_CHAIN_FAILING);

    // Failing again (both entries cooling down are tried all the same): no new report.
    assert_eq!(chain.ask("three").await.0, StatusCode::BAD_GATEWAY);
    assert_eq!(chain.ask("four").await.0, StatusCode::BAD_GATEWAY);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        chain.reports.reports().len(),
        1,
        "{:?}",
        chain.reports.reports()
    );

    // The fallback answers again: one recovery, once no call failed for the settle time.
    chain.fallback.push(Reply::text("Back."));
    chain.fallback.push(Reply::text("Still here."));
    assert_eq!(chain.reply("five").await, "Back.");
    assert_eq!(chain.reply("six").await, "Still here.");
    let reports = chain.reports.wait_for(2, wait).await;
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert_eq!(reports[1].reason(), MODEL_CHAIN_RECOVERED);
    assert!(
        reports[1]
            .note()
            .starts_with("fallback-1 gpt-4.1 answers again"),
        "{reports:?}"
    );
    tokio::time::sleep(REPORT_TIMING.settle * 2).await;
    assert_eq!(chain.reports.reports().len(), 2, "one recovery");

    // And failing on every entry once more is reported again.
    assert_eq!(chain.ask("seven").await.0, StatusCode::BAD_GATEWAY);
    let reports = chain.reports.wait_for(3, wait).await;
    assert_eq!(reports.len(), 3, "{reports:?}");
    assert_eq!(reports[2].reason(), MODEL_CHAIN_FAILING);
}

#[test]
fn the_operator_reads_the_reasons_the_agent_publishes() {
    assert_eq!(
        MODEL_CHAIN_FAILING,
        saint_operator::cache::chain_reports::MODEL_CHAIN_FAILING
    );
    assert_eq!(
        MODEL_CHAIN_RECOVERED,
        saint_operator::cache::chain_reports::MODEL_CHAIN_RECOVERED
    );
    assert_eq!(
        "saint-agent",
        saint_operator::cache::chain_reports::AGENT_REPORTER,
        "the reporting controller of the agent's Events (agent-pod/src/channel/events.rs)"
    );
}

#[tokio::test]
async fn a_refused_key_cools_the_entry_down_until_the_cool_down_ends() {
    let chain = Chain::start(|_| {}).await;
    chain.primary.push(Reply::failure(
        401,
        None,
        "authentication_error",
        "invalid x-api-key",
    ));
    chain
        .fallback
        .set_fallback(Reply::text("The fallback answers."));
    assert_eq!(chain.reply("one").await, "The fallback answers.");
    assert_eq!(chain.primary.request_count(), 1);
    let readyz = chain.readyz().await;
    assert!(
        readyz
            .lines()
            .any(|line| line.starts_with("warning: model primary")
                && line.contains("skipped for 300s more")
                && line.contains("unauthorized")),
        "{readyz}"
    );
    assert!(
        chain
            .metrics_text()
            .await
            .contains("saint_llm_entry_healthy{entry=\"primary\",model=\"claude-sonnet-4-5\"} 0")
    );

    // Cooling down: skipped at once, the fallback answers.
    chain.primary.push(Reply::text("The primary is back."));
    assert_eq!(chain.reply("two").await, "The fallback answers.");
    assert_eq!(
        chain.primary.request_count(),
        1,
        "skipped while cooling down"
    );

    chain.advance(Duration::from_secs(299));
    assert_eq!(chain.reply("three").await, "The fallback answers.");
    assert_eq!(chain.primary.request_count(), 1, "still cooling down");

    chain.advance(Duration::from_secs(2));
    assert_eq!(chain.reply("four").await, "The primary is back.");
    assert_eq!(chain.primary.request_count(), 2);
    assert!(!chain.readyz().await.contains("warning: model primary"));
    assert!(
        chain
            .metrics_text()
            .await
            .contains("saint_llm_entry_healthy{entry=\"primary\",model=\"claude-sonnet-4-5\"} 1")
    );
}

/// Runs Ana's message through the runtime as a streaming channel does; returns what the
/// channel received as it streamed and the final reply.
async fn streamed(chain: &Chain, text: &str) -> (String, String) {
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let reply = chain
        .runtime
        .handle(
            Inbound::direct(
                ChannelIdentity::parse(ChannelKind::Whatsapp, ANA_WHATSAPP).unwrap(),
                text,
            ),
            Some(sender),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(reply.outcome, TurnOutcome::Answered);
    let mut received = String::new();
    while let Ok(event) = receiver.try_recv() {
        if let TurnEvent::TextDelta(delta) = event {
            received.push_str(&delta);
        }
    }
    (received, reply.text)
}

#[tokio::test]
async fn a_stream_cut_mid_answer_is_resumed_without_a_sentence_sent_twice() {
    let chain = Chain::start(|_| {}).await;
    let whole = "First sentence. Second sentence.";
    // The connection drops after "First sentence. "; the next request continues it.
    chain.primary.push(Reply::text(whole).cut_after(16));
    chain.primary.push(Reply::text(" Second sentence."));
    assert_eq!(
        streamed(&chain, "tell me").await,
        (whole.to_string(), whole.to_string())
    );
    let resumed = &chain.primary.requests()[1];
    let last = resumed.body["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "assistant", "{last}");
    assert!(
        last["content"].to_string().contains("First sentence."),
        "{last}"
    );

    // A model that starts over instead: only what goes beyond reaches the person.
    chain.primary.push(Reply::text(whole).cut_after(16));
    chain.primary.push(Reply::text(whole));
    assert_eq!(
        streamed(&chain, "again").await,
        (whole.to_string(), whole.to_string())
    );
    let outcomes: Vec<String> = chain
        .attempts()
        .into_iter()
        .map(|(_, _, outcome)| outcome)
        .collect();
    assert_eq!(outcomes, ["cut", "ok", "cut", "ok"]);
    // The stored answer is the whole text once.
    let stored = chain.runtime.store().all_messages("person:ana").unwrap();
    let answers: Vec<String> = stored
        .iter()
        .filter(|message| message.message.role == saint_llm::ChatRole::Assistant)
        .map(|message| message.message.text())
        .collect();
    assert_eq!(answers, vec![whole.to_string(), whole.to_string()]);
}

#[tokio::test]
async fn two_keys_rotate_under_rate_limits() {
    let chain = Chain::start(|config| {
        config["model"]["additionalApiKeyEnvs"] = json!([SECOND_KEY_ENV]);
    })
    .await;
    // The first key is limited for 30 s: the second carries on at once.
    chain.primary.push(Reply::rate_limited(30));
    chain.primary.push(Reply::text("After rotation."));
    let started = Instant::now();
    assert_eq!(chain.reply("one").await, "After rotation.");
    assert!(started.elapsed() < Duration::from_secs(10));
    // While the first key rests, the second serves.
    chain.primary.push(Reply::text("Second key again."));
    assert_eq!(chain.reply("two").await, "Second key again.");
    // Later the second key is limited in turn: back to the first, rested by now.
    chain.advance(Duration::from_secs(31));
    chain.primary.push(Reply::rate_limited(30));
    chain.primary.push(Reply::text("First key again."));
    assert_eq!(chain.reply("three").await, "First key again.");
    assert_eq!(
        api_keys(&chain.primary),
        vec![
            "sk-model-key",
            "sk-model-key-2",
            "sk-model-key-2",
            "sk-model-key-2",
            "sk-model-key",
        ]
    );
    assert_eq!(chain.fallback.request_count(), 0);
    let outcomes: Vec<String> = chain
        .attempts()
        .into_iter()
        .map(|(_, _, outcome)| outcome)
        .collect();
    assert_eq!(outcomes, ["rate_limited", "ok", "ok", "rate_limited", "ok"]);
}

#[tokio::test]
async fn each_attempt_is_charged_at_its_own_model_s_price_and_a_failed_one_costs_nothing() {
    let chain = Chain::start(|_| {}).await;
    // Ivan is an employee (a 2 USD monthly budget) on claude-haiku-4-5.
    chain.primary.push(Reply::overloaded());
    chain
        .primary
        .push(Reply::failure(403, None, "permission_error", "key revoked"));
    chain
        .fallback
        .push(Reply::text("Done.").with_usage(1_000, 100));
    let request = message_request("telegram", IVAN_TELEGRAM, "hi", false, Some(TOKEN));
    let (status, body) = Chain::get(&chain.router, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        chain.attempts(),
        vec![
            attempt("primary", "claude-haiku-4-5", "overloaded"),
            attempt("primary", "claude-haiku-4-5", "unauthorized"),
            attempt("fallback-1", "gpt-4.1", "ok"),
        ]
    );
    // 1,000 input tokens at 2 USD and 100 output tokens at 8 USD per million (gpt-4.1).
    let day = saint_agent::metering::spend_day(jiff::Timestamp::now());
    let spent = chain
        .runtime
        .store()
        .spent_between("ivan", &day, &day)
        .unwrap();
    assert!((spent - 0.002_8).abs() < 1e-12, "spent {spent}");
}
