//! Sub-agents end to end: the real `saint-agent` binary, its HTTP API, and a model
//! server that answers each conversation from its own script — the person's turn, and
//! each sub-agent by its task — so turns running at the same time get their own replies
//! whatever order their requests arrive in. Ivan (telegram:333333333) is an employee of
//! the example company: `read`, `web_*`, `message`, `memory_search`, never `write`.

mod common;

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, body::Body, extract::State, response::Response, routing::post};
use common::*;
use serde_json::{Value, json};

/// Said in every sub-agent's system prompt (the note its starter wrote).
const CHILD_NOTE: &str = "You are a sub-agent started by";

// ---------------------------------------------------------------------------------
// The model: one script per conversation.

/// Holds until it is true (or a while has passed, so a wrong guess fails an
/// assertion instead of hanging the test).
type Gate = Arc<dyn Fn() -> bool + Send + Sync>;

/// One scripted answer.
enum Step {
    Text(String),
    Calls(Vec<(&'static str, Value)>),
    /// Never answers (a slow model call); the agent must give up on it.
    Hang,
    /// `then`, once `gate` holds (at most 10 s).
    After(Gate, Box<Step>),
    /// `then`, once `gate` holds or the time is up.
    AfterAtMost(Duration, Gate, Box<Step>),
}

fn text(text: &str) -> Step {
    Step::Text(text.to_string())
}

fn call(name: &'static str, input: Value) -> Step {
    Step::Calls(vec![(name, input)])
}

/// A request the model received, with the conversation it was routed to.
#[derive(Clone, Debug)]
struct Seen {
    lane: String,
    body: Value,
}

impl Seen {
    fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    fn system(&self) -> String {
        system_text(&self.body)
    }

    /// Tool results sent back: (content, is_error).
    fn tool_results(&self) -> Vec<(String, bool)> {
        self.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
            .filter(|block| block["type"] == "tool_result")
            .map(|block| {
                let content = match &block["content"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                (content, block["is_error"] == true)
            })
            .collect()
    }

    /// The conversation as sent, as one string (for "does it contain").
    fn messages(&self) -> String {
        self.body["messages"].to_string()
    }
}

fn system_text(body: &Value) -> String {
    match &body["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

fn first_user_text(body: &Value) -> String {
    let first = &body["messages"][0]["content"];
    match first {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

#[derive(Default)]
struct Shared {
    lanes: Mutex<HashMap<String, VecDeque<Step>>>,
    seen: Mutex<Vec<Seen>>,
}

/// The model server. A sub-agent's requests go to the lane named by its task (the
/// first message of its session); everything else to the lane `PERSON`.
struct Model {
    address: SocketAddr,
    shared: Arc<Shared>,
}

const PERSON: &str = "person";

impl Model {
    async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new()
            .route("/v1/messages", post(answer))
            .with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { address, shared }
    }

    fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn script(&self, lane: &str, steps: Vec<Step>) {
        self.shared
            .lanes
            .lock()
            .unwrap()
            .entry(lane.to_string())
            .or_default()
            .extend(steps);
    }

    fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    fn seen_in(&self, lane: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.lane == lane)
            .collect()
    }
}

async fn answer(State(shared): State<Arc<Shared>>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let lane = if system_text(&body).contains(CHILD_NOTE) {
        first_user_text(&body)
    } else {
        PERSON.to_string()
    };
    shared.seen.lock().unwrap().push(Seen {
        lane: lane.clone(),
        body: body.clone(),
    });
    let step = shared
        .lanes
        .lock()
        .unwrap()
        .get_mut(&lane)
        .and_then(VecDeque::pop_front)
        .unwrap_or_else(|| Step::Text(format!("(nothing scripted for {lane:?})")));
    let mut step = step;
    loop {
        match step {
            Step::After(gate, then) => {
                step = Step::AfterAtMost(Duration::from_secs(10), gate, then);
            }
            Step::AfterAtMost(limit, gate, then) => {
                let deadline = Instant::now() + limit;
                while !gate() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                step = *then;
            }
            Step::Hang => {
                tokio::time::sleep(Duration::from_secs(600)).await;
                step = Step::Text("too late".to_string());
            }
            Step::Text(text) => return stream(&body, &text, &[]),
            Step::Calls(calls) => return stream(&body, "", &calls),
        }
    }
}

fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// An Anthropic Messages stream answering `text` and `calls`.
fn stream(request: &Value, text: &str, calls: &[(&'static str, Value)]) -> Response {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let number = NEXT.fetch_add(1, Ordering::Relaxed);
    let model = request["model"].as_str().unwrap_or_default();
    let mut events = vec![sse(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_{number}"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 1},
        }}),
    )];
    let mut index = 0;
    if !text.is_empty() {
        events.push(sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        events.push(sse(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
        ));
        events.push(sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (position, (name, input)) in calls.iter().enumerate() {
        events.push(sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": format!("toolu_{number}_{position}"), "name": name, "input": {},
            }}),
        ));
        events.push(sse(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        ));
        events.push(sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push(sse(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 20}}),
    ));
    events.push(sse("message_stop", json!({"type": "message_stop"})));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(events.concat()))
        .unwrap()
}

// ---------------------------------------------------------------------------------
// The bot.

struct Bot {
    model: Model,
    directory: tempfile::TempDir,
    workspace: PathBuf,
    agent: AgentProcess,
    client: reqwest::Client,
}

/// The example company with the employee role allowed to spawn and to read its
/// sessions, under `spawn` limits; `adjust` changes the rest.
async fn start(spawn: Value, adjust: impl FnOnce(&mut Value)) -> Bot {
    let model = Model::start().await;
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&model.base_url());
    let employee = &mut config["roles"]["employee"];
    for tool in ["sessions_spawn", "sessions_list", "sessions_history"] {
        employee["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!(tool));
    }
    employee["spawn"] = spawn;
    adjust(&mut config);
    write_config(&config_path, &config);
    let agent = spawn_agent(&config_path, &workspace, &[("TG_BOT_TOKEN", BOT_TOKEN)]);
    Bot {
        model,
        directory,
        workspace,
        agent,
        client: reqwest::Client::new(),
    }
}

const BOT_TOKEN: &str = "7700000003:AAF-subagent-test-token";

impl Bot {
    /// Ivan writes over the HTTP API; returns the reply.
    async fn ivan_says(&self, text: &str) -> Value {
        let response = self
            .client
            .post(format!("{}/v1/messages", self.agent.http))
            .bearer_auth(TOKEN)
            .json(&json!({"channel": "telegram", "peer": IVAN_TELEGRAM, "text": text}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    fn database(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3")).unwrap()
    }

    /// Messages of `session` whose stored content contains `needle`.
    fn stored(&self, session: &str, needle: &str) -> Vec<String> {
        stored_in(&self.workspace, session, needle)
    }

    fn turn_lines(&self) -> Vec<Value> {
        turn_lines(&self.workspace)
    }

    fn gate_stored(&self, session: &'static str, needle: &'static str) -> Gate {
        let workspace = self.workspace.clone();
        Arc::new(move || !stored_in(&workspace, session, needle).is_empty())
    }
}

fn stored_in(workspace: &Path, session: &str, needle: &str) -> Vec<String> {
    let database = workspace.join("sessions/transcripts.sqlite3");
    let Ok(connection) = rusqlite::Connection::open(database) else {
        return Vec::new();
    };
    let Ok(mut statement) = connection.prepare(
        "SELECT content FROM messages WHERE session_key = ?1 AND instr(content, ?2) > 0 ORDER BY id",
    ) else {
        return Vec::new();
    };
    statement
        .query_map([session, needle], |row| row.get::<_, String>(0))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

fn turn_lines(workspace: &Path) -> Vec<Value> {
    std::fs::read_to_string(workspace.join("logs/usage.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("turn").is_some())
        .collect()
}

/// Polls `done` every 25 ms for up to 20 s.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The child session key in a spawn's result ("… (session <key>) …").
fn child_key(result: &str) -> String {
    let start = result
        .find("(session ")
        .unwrap_or_else(|| panic!("no session in {result:?}"))
        + "(session ".len();
    let end = start + result[start..].find(')').unwrap();
    result[start..end].to_string()
}

fn sigterm(agent: &AgentProcess) {
    let pid = agent.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
}

// ---------------------------------------------------------------------------------
// The tests.

/// Ivan asks for a sub-agent with `write`, which his role lacks: the child's model is
/// not offered it and its call is refused; a dearer model is refused at the spawn. The
/// child runs as Ivan (metered to him under the `subagent` trigger), and its result is
/// stored in Ivan's session, where his next turn sees it, and his session tools list
/// the child's session. No channel of Ivan's can push here, so nothing is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_never_gets_a_tool_its_starter_lacks_and_reports_into_the_starters_session() {
    let bot = start(json!({"maxDepth": 1, "maxConcurrent": 2}), |_| {}).await;
    let task = "TASK-A: write the supplier table to data/suppliers.md";
    let replied = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let parent_replied: Gate = {
        let replied = replied.clone();
        Arc::new(move || replied.load(Ordering::SeqCst))
    };
    bot.model.script(
        PERSON,
        vec![
            Step::Calls(vec![
                (
                    "sessions_spawn",
                    json!({"task": "dearer", "model": "claude-sonnet-4-5"}),
                ),
                (
                    "sessions_spawn",
                    json!({"task": task, "tools": ["write", "read"]}),
                ),
            ]),
            text("A helper is on it."),
        ],
    );
    bot.model.script(
        task,
        vec![
            call(
                "write",
                json!({"path": "data/suppliers.md", "content": "| a | b |"}),
            ),
            // Ends only after Ivan's turn has ended.
            Step::After(
                parent_replied,
                Box::new(text("RESULT-A: I could not write it.")),
            ),
        ],
    );
    let reply = bot
        .ivan_says("research the suppliers in the background")
        .await;
    replied.store(true, Ordering::SeqCst);
    assert_eq!(reply["reply"], "A helper is on it.");
    assert_eq!(reply["sessionKey"], "person:ivan");

    let parent = bot.model.seen_in(PERSON);
    let results = parent[1].tool_results();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].1, "the dearer model is refused: {results:?}");
    assert!(
        results[0]
            .0
            .contains("costs more than your role's model \"claude-haiku-4-5\""),
        "{results:?}"
    );
    let (started, refused) = &results[1];
    assert!(!refused, "{started}");
    assert!(started.contains("It may use: read."), "{started}");
    assert!(started.contains("Not given"), "{started}");
    assert!(started.contains("write"), "{started}");
    let key = child_key(started);
    assert!(
        key.starts_with("subagent:") && key.ends_with(":person:ivan"),
        "{key}"
    );

    eventually("the child's two model calls", || {
        bot.model.seen_in(task).len() == 2
    })
    .await;
    let child = bot.model.seen_in(task);
    assert_eq!(child[0].tool_names(), vec!["read"]);
    assert!(
        child[0].system().contains(CHILD_NOTE),
        "{}",
        child[0].system()
    );
    assert_eq!(child[0].body["model"], "claude-haiku-4-5");
    let write = &child[1].tool_results()[0];
    assert!(write.1, "the child's write is refused: {write:?}");
    assert!(write.0.contains("not available"), "{write:?}");
    assert!(!bot.workspace.join("data/suppliers.md").exists());
    assert!(
        bot.model.seen_in("dearer").is_empty(),
        "the refused spawn never ran"
    );

    eventually("the announcement in Ivan's session", || {
        !bot.stored("person:ivan", "RESULT-A").is_empty()
    })
    .await;
    let announced = bot.stored("person:ivan", "RESULT-A");
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert!(announced[0].contains("finished the task"), "{announced:?}");
    // The answer also stays in the child's own session.
    assert_eq!(bot.stored(&key, "RESULT-A").len(), 1);
    // Nobody to push to: nothing queued.
    let queued: i64 = bot
        .database()
        .query_row("SELECT count(*) FROM outbox", [], |row| row.get(0))
        .unwrap();
    assert_eq!(queued, 0);

    // His next turn sees the result, and his session tools show the child.
    bot.model.script(
        PERSON,
        vec![
            call("sessions_list", json!({})),
            call("sessions_history", json!({"sessionKey": key})),
            text("Here is what the helper found."),
        ],
    );
    bot.ivan_says("what did the helper find?").await;
    let parent = bot.model.seen_in(PERSON);
    assert_eq!(parent.len(), 5);
    assert!(
        parent[2].messages().contains("RESULT-A"),
        "{}",
        parent[2].messages()
    );
    let listed = &parent[3].tool_results()[2];
    assert!(!listed.1 && listed.0.contains(&key), "{listed:?}");
    let history = &parent[4].tool_results()[3];
    assert!(!history.1, "{history:?}");
    assert!(history.0.contains("RESULT-A"), "{history:?}");

    // Metered to Ivan under the sub-agent trigger.
    let child_turns: Vec<Value> = bot
        .turn_lines()
        .into_iter()
        .filter(|line| line["trigger"] == "subagent")
        .collect();
    assert_eq!(child_turns.len(), 1, "{child_turns:?}");
    assert_eq!(child_turns[0]["user"], "ivan");
    assert_eq!(child_turns[0]["role"], "employee");
    assert_eq!(child_turns[0]["turn"], "answered");
    assert_eq!(child_turns[0]["modelCalls"], 2);
}

/// With `maxDepth: 2` a child may spawn, its child (at the limit) may not: the tool is
/// not offered, and calling it anyway is refused. The grandchild's result goes where
/// the child's does — Ivan's session and his Telegram chat — naming the child that
/// started it (the child's own session runs no further turn that could read it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_depth_limit_holds() {
    let telegram = saint_scripted::telegram::ScriptedTelegram::start(BOT_TOKEN)
        .await
        .unwrap();
    let base = telegram.base_url();
    let bot = start(json!({"maxDepth": 2}), move |config| {
        config["channels"] = telegram_channels(&base);
    })
    .await;
    let (child_task, grandchild_task) = ("CHILD: look around", "GRANDCHILD: look deeper");
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": child_task})),
            text("Started."),
        ],
    );
    bot.model.script(
        child_task,
        vec![
            call("sessions_spawn", json!({"task": grandchild_task})),
            text("CHILD-RESULT"),
        ],
    );
    bot.model.script(
        grandchild_task,
        vec![
            call("sessions_spawn", json!({"task": "TOO DEEP"})),
            text("GRANDCHILD-RESULT"),
        ],
    );
    bot.ivan_says("dig").await;
    eventually("both announcements", || {
        !bot.stored("person:ivan", "CHILD-RESULT").is_empty()
            && bot.model.seen_in(grandchild_task).len() == 2
    })
    .await;
    let child = bot.model.seen_in(child_task);
    assert!(
        child[0]
            .tool_names()
            .contains(&"sessions_spawn".to_string()),
        "depth 1 of 2 may spawn: {:?}",
        child[0].tool_names()
    );
    let child_key = child_key(&bot.model.seen_in(PERSON)[1].tool_results()[0].0);
    let grandchild = bot.model.seen_in(grandchild_task);
    assert!(
        !grandchild[0]
            .tool_names()
            .contains(&"sessions_spawn".to_string()),
        "{:?}",
        grandchild[0].tool_names()
    );
    let refused = &grandchild[1].tool_results()[0];
    assert!(
        refused.1 && refused.0.contains("not available"),
        "{refused:?}"
    );
    assert!(bot.model.seen_in("TOO DEEP").is_empty());
    eventually("the grandchild's announcement in Ivan's session", || {
        !bot.stored("person:ivan", "GRANDCHILD-RESULT").is_empty()
    })
    .await;
    let child_id = child_key
        .strip_prefix("subagent:")
        .and_then(|rest| rest.split_once(':'))
        .unwrap()
        .0;
    let announced = bot.stored("person:ivan", "GRANDCHILD-RESULT");
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert!(
        announced[0].contains(&format!(
            "(started by sub-agent {child_id}) finished the task"
        )),
        "{announced:?}"
    );
    assert!(bot.stored(&child_key, "GRANDCHILD-RESULT").is_empty());
    // Both results are pushed to Ivan's chat.
    eventually("both results on Telegram", || {
        ["CHILD-RESULT", "GRANDCHILD-RESULT"].iter().all(|result| {
            telegram.sent().iter().any(|body| {
                body["chat_id"] == IVAN_TELEGRAM
                    && body["text"]
                        .as_str()
                        .unwrap_or_default()
                        .contains(&format!("\n\n{result}"))
            })
        })
    })
    .await;
}

/// The bot's channels with a scripted Telegram at `base`: the HTTP API, and Telegram
/// called `tg`.
fn telegram_channels(base: &str) -> Value {
    json!([
        {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
        {"name": "tg", "kind": "telegram", "settings": {"apiBaseUrl": base},
         "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
    ])
}

/// A turn cannot start more children than `maxConcurrent` by letting quick ones end:
/// an ended child keeps its place until its result is stored, which waits for the turn.
/// Ivan's turn starts two quick children, waits until both have answered, and its
/// third spawn is refused; after the turn both results are stored and the places are
/// free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_that_ended_keep_their_places_until_their_results_are_stored() {
    let bot = start(json!({"maxConcurrent": 2}), |_| {}).await;
    let both_answered: Gate = {
        let workspace = bot.workspace.clone();
        Arc::new(move || {
            turn_lines(&workspace)
                .iter()
                .filter(|line| line["trigger"] == "subagent")
                .count()
                == 2
        })
    };
    bot.model.script(
        PERSON,
        vec![
            Step::Calls(vec![
                ("sessions_spawn", json!({"task": "Q1", "timeoutSeconds": 1})),
                ("sessions_spawn", json!({"task": "Q2", "timeoutSeconds": 1})),
            ]),
            Step::After(
                both_answered,
                Box::new(call(
                    "sessions_spawn",
                    json!({"task": "Q3", "timeoutSeconds": 1}),
                )),
            ),
            text("Done spawning."),
        ],
    );
    bot.model.script("Q1", vec![text("RESULT-Q1")]);
    bot.model.script("Q2", vec![text("RESULT-Q2")]);
    bot.model.script("Q3", vec![text("RESULT-Q3")]);
    let reply = bot.ivan_says("spawn away").await;
    assert_eq!(reply["reply"], "Done spawning.");
    let parent = bot.model.seen_in(PERSON);
    let third = parent[2].tool_results().pop().unwrap();
    assert!(
        third.1 && third.0.contains("spawn.maxConcurrent 2"),
        "{third:?}"
    );
    assert!(bot.model.seen_in("Q3").is_empty());
    eventually("both results stored", || {
        !bot.stored("person:ivan", "RESULT-Q1").is_empty()
            && !bot.stored("person:ivan", "RESULT-Q2").is_empty()
    })
    .await;
    // The places came back with the results.
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": "Q4"})),
            text("Once more."),
        ],
    );
    bot.model.script("Q4", vec![text("RESULT-Q4")]);
    bot.ivan_says("one more").await;
    let started = bot.model.seen_in(PERSON)[4].tool_results().pop().unwrap();
    assert!(
        !started.1 && started.0.starts_with("Started"),
        "{started:?}"
    );
}

/// In a Telegram group every turn runs in the group's session, so Marko's sub-agent
/// descends from the session Ivan's turns run in too; still only Marko may list or
/// read it (Ivan's role sees only his own sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_only_the_member_who_started_a_sub_agent_sees_it() {
    use saint_scripted::telegram::{self as scripted, BOT_USERNAME, Group, Person};
    let telegram = scripted::ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
    let base = telegram.base_url();
    let bot = start(json!({}), move |config| {
        config["channels"] = telegram_channels(&base);
        config["roles"]["manager"]["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("sessions_spawn"));
    })
    .await;
    let group = Group::new(-1001000000042, "Acme Leads");
    let marko = Person::new(222222222, "Marko");
    let ivan = Person::new(IVAN_TELEGRAM.parse().unwrap(), "Ivan");
    let task = "MARKO-TASK: read the soul";
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": task})),
            text("Started."),
        ],
    );
    bot.model.script(
        task,
        vec![
            call("read", json!({"path": "SOUL.md"})),
            text("MARKO-RESULT"),
        ],
    );
    telegram.push_message(scripted::group_text(
        &group,
        &marko,
        &format!("@{BOT_USERNAME} start a helper"),
    ));
    eventually("Marko's spawn", || bot.model.seen_in(PERSON).len() == 2).await;
    let started = &bot.model.seen_in(PERSON)[1].tool_results()[0];
    assert!(!started.1, "{started:?}");
    let key = child_key(&started.0);
    let group_key = key.splitn(3, ':').nth(2).unwrap().to_string();
    assert!(group_key.starts_with("group:"), "{key}");
    eventually("the child's result in the group's session", || {
        !bot.stored(&group_key, "MARKO-RESULT").is_empty()
    })
    .await;
    assert!(
        !bot.stored(&key, "helpful colleague").is_empty(),
        "the child's session holds its tool output"
    );

    // Ivan, in the same group, looks for it.
    bot.model.script(
        PERSON,
        vec![
            call("sessions_list", json!({})),
            call("sessions_history", json!({"sessionKey": key})),
            text("Nothing for you."),
        ],
    );
    telegram.push_message(scripted::group_text(
        &group,
        &ivan,
        &format!("@{BOT_USERNAME} what did the helper read?"),
    ));
    eventually("Ivan's turn", || bot.model.seen_in(PERSON).len() == 5).await;
    let ivans = bot.model.seen_in(PERSON);
    let listed = ivans[3].tool_results().pop().unwrap();
    assert!(!listed.1, "{listed:?}");
    assert!(!listed.0.contains(&key), "{listed:?}");
    let history = ivans[4].tool_results().pop().unwrap();
    assert!(history.1, "{history:?}");
    assert!(history.0.contains("no session"), "{history:?}");
    assert!(!history.0.contains("helpful colleague"), "{history:?}");

    // Marko, who started it, reads it.
    bot.model.script(
        PERSON,
        vec![
            call("sessions_history", json!({"sessionKey": key})),
            text("Here."),
        ],
    );
    telegram.push_message(scripted::group_text(
        &group,
        &marko,
        &format!("@{BOT_USERNAME} and for me?"),
    ));
    eventually("Marko's second turn", || {
        bot.model.seen_in(PERSON).len() == 7
    })
    .await;
    let history = bot.model.seen_in(PERSON)[6].tool_results().pop().unwrap();
    assert!(
        !history.1 && history.0.contains("helpful colleague"),
        "{history:?}"
    );
}

/// `maxConcurrent: 4`: Ivan's turn starts three children, and the three, all running,
/// each try to start three more at the same time: exactly one of those nine gets the
/// last place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_person_concurrency_limit_holds_under_parallel_spawns() {
    let bot = start(json!({"maxDepth": 2, "maxConcurrent": 4}), |_| {}).await;
    let children = ["C1", "C2", "C3"];
    bot.model.script(
        PERSON,
        vec![
            Step::Calls(
                children
                    .iter()
                    .map(|task| ("sessions_spawn", json!({"task": task})))
                    .collect(),
            ),
            text("Three helpers started."),
        ],
    );
    // Each child waits until all three run, so their spawns overlap.
    let all_started: Gate = {
        let shared = bot.model.shared.clone();
        Arc::new(move || {
            let seen = shared.seen.lock().unwrap();
            children
                .iter()
                .all(|task| seen.iter().any(|seen| seen.lane == *task))
        })
    };
    // And stays running until every child's spawns were answered, so no place frees
    // up in between.
    let all_spawned: Gate = {
        let shared = bot.model.shared.clone();
        Arc::new(move || {
            let seen = shared.seen.lock().unwrap();
            children
                .iter()
                .all(|task| seen.iter().filter(|seen| seen.lane == *task).count() >= 2)
        })
    };
    for task in children {
        let grandchildren: Vec<(&'static str, Value)> = (1..=3)
            .map(|number| {
                (
                    "sessions_spawn",
                    json!({"task": format!("{task}-G{number}")}),
                )
            })
            .collect();
        bot.model.script(
            task,
            vec![
                Step::After(all_started.clone(), Box::new(Step::Calls(grandchildren))),
                Step::After(all_spawned.clone(), Box::new(text(&format!("{task} done")))),
            ],
        );
        for number in 1..=3 {
            bot.model
                .script(&format!("{task}-G{number}"), vec![Step::Hang]);
        }
    }
    let reply = bot.ivan_says("three at once").await;
    assert_eq!(reply["reply"], "Three helpers started.");
    eventually("every child's spawns answered", || {
        children
            .iter()
            .all(|task| bot.model.seen_in(task).len() == 2)
    })
    .await;
    let results: Vec<(String, bool)> = children
        .iter()
        .flat_map(|task| bot.model.seen_in(task)[1].tool_results())
        .collect();
    assert_eq!(results.len(), 9);
    let started: Vec<&(String, bool)> = results
        .iter()
        .filter(|(text, _)| text.starts_with("Started"))
        .collect();
    let refused: Vec<&(String, bool)> = results
        .iter()
        .filter(|(text, error)| *error && text.contains("spawn.maxConcurrent 4"))
        .collect();
    assert_eq!(started.len(), 1, "{results:?}");
    assert_eq!(refused.len(), 8, "{results:?}");
    let grandchild_lanes: std::collections::BTreeSet<String> = bot
        .model
        .seen()
        .into_iter()
        .map(|seen| seen.lane)
        .filter(|lane| lane.contains("-G"))
        .collect();
    assert_eq!(grandchild_lanes.len(), 1, "{grandchild_lanes:?}");
}

/// A child whose model hangs is cancelled at its time limit; the person's session is
/// told it timed out, the child's turn is logged as ended in error, and no further
/// model call is made for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_past_its_time_limit_is_cancelled_and_its_starter_told() {
    let bot = start(json!({"timeoutSeconds": 30}), |_| {}).await;
    let task = "SLOW: take forever";
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": task, "timeoutSeconds": 1})),
            text("Started a slow one."),
        ],
    );
    bot.model.script(task, vec![Step::Hang]);
    bot.ivan_says("go slow").await;
    let started = &bot.model.seen_in(PERSON)[1].tool_results()[0].0;
    assert!(started.contains("for at most 1 s"), "{started}");
    eventually("the timeout announcement", || {
        !bot.stored("person:ivan", "timed out after 1 s").is_empty()
    })
    .await;
    eventually("the child's turn line", || {
        bot.turn_lines()
            .iter()
            .any(|line| line["trigger"] == "subagent")
    })
    .await;
    let line = bot
        .turn_lines()
        .into_iter()
        .find(|line| line["trigger"] == "subagent")
        .unwrap();
    assert_eq!(line["turn"], "error", "{line}");
    assert_eq!(line["user"], "ivan");
    assert_eq!(bot.model.seen_in(task).len(), 1);
}

/// SIGTERM while a child waits on a slow model call: the child is cancelled, the agent
/// exits well within its drain time, no model call follows, and Ivan's session records
/// that the child was stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_child_running() {
    let mut bot = start(json!({"timeoutSeconds": 600}), |_| {}).await;
    let task = "BLOCKED: wait on the model";
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": task})),
            text("Started."),
        ],
    );
    bot.model.script(task, vec![Step::Hang]);
    bot.ivan_says("start it").await;
    eventually("the child's model call", || {
        bot.model.seen_in(task).len() == 1
    })
    .await;
    let requests_before = bot.model.seen().len();
    let stopping = Instant::now();
    sigterm(&bot.agent);
    let status = tokio::task::spawn_blocking(move || {
        let status = bot.agent.child.wait().unwrap();
        (status, bot)
    })
    .await
    .unwrap();
    let (status, bot) = status;
    assert!(status.success(), "{status:?}");
    assert!(
        stopping.elapsed() < Duration::from_secs(20),
        "took {:?}",
        stopping.elapsed()
    );
    assert_eq!(bot.model.seen().len(), requests_before);
    let stopped = bot.stored("person:ivan", "the assistant was shutting down");
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    let line = bot
        .turn_lines()
        .into_iter()
        .find(|line| line["trigger"] == "subagent")
        .expect("the cancelled child's turn is logged");
    assert_eq!(line["turn"], "error");
}

/// Ivan's identity is on a Telegram channel the bot has: the result is also sent to
/// him there, after his turn's reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_result_is_sent_to_the_person_on_a_channel_that_can_push() {
    let telegram = saint_scripted::telegram::ScriptedTelegram::start(BOT_TOKEN)
        .await
        .unwrap();
    let base = telegram.base_url();
    let bot = start(json!({}), move |config| {
        config["channels"] = telegram_channels(&base);
    })
    .await;
    let task = "PUSH: summarise";
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": task})),
            text("On it."),
        ],
    );
    bot.model.script(task, vec![text("RESULT-PUSHED")]);
    bot.ivan_says("summarise for me").await;
    let started = &bot.model.seen_in(PERSON)[1].tool_results()[0].0;
    assert!(started.contains("and sent to Ivan"), "{started}");
    eventually("the result on Telegram", || {
        telegram.sent().iter().any(|body| {
            body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("RESULT-PUSHED")
        })
    })
    .await;
    let sent = telegram.sent();
    let pushed: Vec<&Value> = sent
        .iter()
        .filter(|body| {
            body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("RESULT-PUSHED")
        })
        .collect();
    assert_eq!(pushed.len(), 1, "{sent:?}");
    assert_eq!(pushed[0]["chat_id"], IVAN_TELEGRAM);
    assert_eq!(bot.stored("person:ivan", "RESULT-PUSHED").len(), 1);
}

/// The child ends while Ivan's turn is still running (its model waits up to 3 s for the
/// announcement to appear): the announcement is stored after that turn's answer, never
/// inside it (between a tool call and its result, or behind what the turn keeps of the
/// session), and Ivan's next turn sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_comes_while_the_starters_turn_runs_is_stored_after_it() {
    let bot = start(json!({}), |_| {}).await;
    let task = "QUICK: answer at once";
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": task})),
            Step::AfterAtMost(
                Duration::from_secs(3),
                bot.gate_stored("person:ivan", "RESULT-QUICK"),
                Box::new(text("Started; still talking.")),
            ),
        ],
    );
    bot.model.script(task, vec![text("RESULT-QUICK")]);
    bot.ivan_says("quick one").await;
    eventually("the announcement", || {
        !bot.stored("person:ivan", "RESULT-QUICK").is_empty()
    })
    .await;
    let order: Vec<String> = {
        let connection = bot.database();
        let mut statement = connection
            .prepare("SELECT content FROM messages WHERE session_key = 'person:ivan' ORDER BY id")
            .unwrap();
        statement
            .query_map([], |row| row.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let answer = order
        .iter()
        .position(|content| content.contains("Started; still talking."))
        .unwrap();
    let announcement = order
        .iter()
        .position(|content| content.contains("RESULT-QUICK"))
        .unwrap();
    assert!(announcement > answer, "{order:#?}");
    bot.model.script(PERSON, vec![text("Noted.")]);
    bot.ivan_says("and?").await;
    let last = bot.model.seen_in(PERSON).pop().unwrap();
    assert!(
        last.messages().contains("RESULT-QUICK"),
        "{}",
        last.messages()
    );
}

/// Authority at the moment of use: Ivan is made an external contact while his
/// sub-agent waits for the model. The read the child's model then asks for is not run,
/// the child makes no further model call, and Ivan's session is told why it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_persons_running_sub_agent_stops_before_its_next_tool_call() {
    const CANARY: &str = "canary-report-5520";
    let bot = start(json!({"maxDepth": 1, "maxConcurrent": 2}), |_| {}).await;
    std::fs::create_dir_all(bot.workspace.join("data")).unwrap();
    std::fs::write(bot.workspace.join("data/report.md"), CANARY).unwrap();
    let task = "TASK-D: read data/report.md";
    let demoted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let after_demotion: Gate = {
        let demoted = demoted.clone();
        Arc::new(move || demoted.load(Ordering::SeqCst))
    };
    bot.model.script(
        PERSON,
        vec![
            call("sessions_spawn", json!({"task": task, "tools": ["read"]})),
            text("A helper is reading it."),
        ],
    );
    bot.model.script(
        task,
        vec![
            Step::After(
                after_demotion,
                Box::new(call("read", json!({"path": "data/report.md"}))),
            ),
            text("RESULT-D: the report says something."),
        ],
    );
    let reply = bot.ivan_says("read the report in the background").await;
    assert_eq!(reply["reply"], "A helper is reading it.");
    eventually("the child's first model call", || {
        bot.model.seen_in(task).len() == 1
    })
    .await;
    // The bot file now makes Ivan external (the agent reloads it on its next read).
    let config_path = bot.directory.path().join("bot-config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    for contact in config["contacts"].as_array_mut().unwrap() {
        if contact["slug"] == "ivan" {
            contact["role"] = json!("external");
        }
    }
    write_config(&config_path, &config);
    demoted.store(true, Ordering::SeqCst);
    eventually("the announcement in Ivan's session", || {
        !bot.stored("person:ivan", "was stopped before finishing")
            .is_empty()
    })
    .await;
    let announced = bot
        .stored("person:ivan", "was stopped before finishing")
        .join("\n");
    assert!(
        announced.contains("Ivan's role changed from employee to external"),
        "{announced}"
    );
    assert_eq!(
        bot.model.seen_in(task).len(),
        1,
        "the child called the model again"
    );
    let everything = bot.stored("person:ivan", "");
    assert!(!everything.iter().any(|message| message.contains(CANARY)));
    let database = bot.database();
    let leaked: i64 = database
        .query_row(
            "SELECT count(*) FROM messages WHERE instr(content, ?1) > 0",
            [CANARY],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(leaked, 0, "the report was read after the demotion");
}
