use std::sync::Arc;

use pretty_assertions::assert_eq;
use saint_config::{BotConfig, SessionKey};

use super::*;

fn config() -> BotConfig {
    BotConfig::from_json(include_str!(
        "../../config/tests/fixtures/acme-bot-config.json"
    ))
    .unwrap()
}

fn caller(slug: &str, identity: &str, max_concurrent: u32) -> Caller {
    let config = config();
    let mut role = config.roles["employee"].clone();
    role.spawn.max_concurrent = max_concurrent;
    Caller {
        slug: slug.to_string(),
        display_name: slug.to_string(),
        role_name: "employee".to_string(),
        role: Arc::new(role),
        known: true,
        identity: identity.to_string(),
        session_key: format!("person:{slug}"),
        trigger: Trigger::Message,
        depth: 0,
        may_message: None,
    }
}

/// Many spawns at once from many threads: exactly the role's limit get a place, and
/// the places come back when the children end.
#[test]
fn parallel_reservations_never_exceed_the_persons_limit() {
    let subagents = Subagents::new();
    let ivan = caller("ivan", "telegram:1", 3);
    let granted: Vec<Option<(Slot, CancellationToken)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..64)
            .map(|index| {
                let (subagents, ivan) = (subagents.clone(), ivan.clone());
                scope.spawn(move || {
                    subagents
                        .reserve(&ivan, &format!("subagent:{index}:person:ivan"))
                        .ok()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    let held: Vec<_> = granted.into_iter().flatten().collect();
    assert_eq!(held.len(), 3);
    assert_eq!(subagents.running(), 3);
    // Another person has their own places.
    let marko = caller("marko", "telegram:2", 3);
    let other = subagents
        .reserve(&marko, "subagent:x:person:marko")
        .unwrap();
    let refused = subagents
        .reserve(&ivan, "subagent:y:person:ivan")
        .err()
        .unwrap();
    assert!(
        refused.to_string().contains("spawn.maxConcurrent 3"),
        "{refused}"
    );
    drop(held);
    drop(other);
    assert_eq!(subagents.running(), 0);
    assert!(subagents.reserve(&ivan, "subagent:z:person:ivan").is_ok());
}

/// A child's own spawns descend from its token: cancelling the child stops them.
#[test]
fn a_childs_children_are_cancelled_with_it() {
    let subagents = Subagents::new();
    let parent = caller("ivan", "telegram:1", 5);
    let (_slot, child_token) = subagents
        .reserve(&parent, "subagent:a:person:ivan")
        .unwrap();
    let child = Caller {
        session_key: "subagent:a:person:ivan".to_string(),
        depth: 1,
        ..parent.clone()
    };
    let (_grandchild_slot, grandchild_token) = subagents
        .reserve(&child, "subagent:b:subagent:a:person:ivan")
        .unwrap();
    child_token.cancel();
    assert!(grandchild_token.is_cancelled());
}

#[tokio::test]
async fn shutdown_refuses_new_children_and_cancels_running_ones() {
    let subagents = Subagents::new();
    let parent = caller("ivan", "telegram:1", 5);
    let (slot, token) = subagents
        .reserve(&parent, "subagent:a:person:ivan")
        .unwrap();
    let waiting = token.clone();
    subagents.tasks.spawn(async move {
        waiting.cancelled().await;
        drop(slot);
    });
    assert_eq!(subagents.shutdown().await, 1);
    assert!(token.is_cancelled());
    assert_eq!(subagents.running(), 0);
    let refused = subagents
        .reserve(&parent, "subagent:b:person:ivan")
        .err()
        .unwrap();
    assert!(refused.to_string().contains("shutting down"), "{refused}");
}

#[tokio::test]
async fn a_child_past_its_time_is_cancelled_and_reported_as_timed_out() {
    let (cancel, root) = (CancellationToken::new(), CancellationToken::new());
    let observed = cancel.clone();
    let turn = async move {
        observed.cancelled().await;
        Err(TurnError::Join)
    };
    let end = supervise(turn, Duration::from_millis(50), &cancel, &root).await;
    assert_eq!(end, ChildEnd::TimedOut(Duration::from_millis(50)));
    assert!(cancel.is_cancelled());

    // Cancelled from outside (shutdown): stopped, not timed out.
    let (cancel, root) = (root.child_token(), root);
    root.cancel();
    let turn = std::future::pending::<Result<AssignmentEnd, TurnError>>();
    let end = supervise(turn, Duration::from_secs(30), &cancel, &root).await;
    assert_eq!(end, ChildEnd::Stopped("the assistant was shutting down"));
}

#[test]
fn the_result_goes_to_the_persons_pushing_channel_never_to_the_http_api() {
    let mut config = config();
    config.channels = serde_json::from_value(serde_json::json!([
        {"name": "api", "kind": "http", "secretEnv": {"token": "T"}},
        {"name": "tg", "kind": "telegram", "secretEnv": {"botToken": "B"}},
    ]))
    .unwrap();
    // The HTTP API has no transport of its own; a Telegram channel whose transport did
    // not start cannot push either.
    let running = |name: &str| name == "tg";
    let ivan = caller("ivan", "telegram:333333333", 2);
    assert_eq!(
        announcement_recipients(&config, &ivan, running),
        vec![Recipient {
            channel: "tg".to_string(),
            identity: "telegram:333333333".to_string()
        }]
    );
    let on_http = caller("someone", "http:someone", 2);
    assert_eq!(announcement_recipients(&config, &on_http, running), vec![]);
    let on_whatsapp = caller("ana", "whatsapp:+385991234567", 2);
    assert_eq!(
        announcement_recipients(&config, &on_whatsapp, running),
        vec![],
        "no WhatsApp channel here"
    );
    assert_eq!(
        announcement_recipients(&config, &ivan, |_| false),
        vec![],
        "a Telegram channel that is not running"
    );
    // A sub-agent's own child is delivered to the person like a first-level one.
    let child = Caller {
        trigger: Trigger::Subagent,
        session_key: "subagent:a:person:ivan".to_string(),
        depth: 1,
        ..ivan.clone()
    };
    assert_eq!(
        announcement_recipients(&config, &child, running),
        announcement_recipients(&config, &ivan, running),
    );
}

/// A sub-agent's result goes to the nearest session up that is not a sub-agent's; a
/// grandchild's names the sub-agent that started it.
#[test]
fn results_go_to_the_session_the_tree_started_from() {
    let group = "group:tg:-100042";
    let child: String = SessionKey::for_subagent(group, "c1").into();
    let grandchild: String = SessionKey::for_subagent(&child, "c2").into();
    assert_eq!(home_session(group), group);
    assert_eq!(home_session(&child), group);
    assert_eq!(home_session(&grandchild), group);
    assert_eq!(home_session("person:ivan"), "person:ivan");
    assert_eq!(subagent_id(&child), Some("c1"));
    assert_eq!(subagent_id(&grandchild), Some("c2"));
    assert_eq!(subagent_id(group), None);
    let text = rules::announcement("c2", Some("c1"), "look deeper", &ChildEnd::OverBudget);
    assert!(
        text.starts_with("Sub-agent c2 (started by sub-agent c1) did not finish"),
        "{text}"
    );
}

/// A sub-agent's children report to a session that may be idle, so places coming back
/// would not bound them: one sub-agent may start 2 × maxConcurrent in all. A person's
/// session is not capped that way (its children's results wait for its turn).
#[test]
fn a_sub_agent_may_start_only_so_many_children_in_all() {
    let subagents = Subagents::new();
    let ivan = caller("ivan", "telegram:1", 2);
    let (child_slot, _) = subagents.reserve(&ivan, "subagent:a:person:ivan").unwrap();
    let child = Caller {
        session_key: "subagent:a:person:ivan".to_string(),
        trigger: Trigger::Subagent,
        depth: 1,
        ..ivan.clone()
    };
    for index in 0..4 {
        let granted =
            subagents.reserve(&child, &format!("subagent:g{index}:subagent:a:person:ivan"));
        drop(granted.unwrap());
    }
    let refused = subagents
        .reserve(&child, "subagent:g5:subagent:a:person:ivan")
        .err()
        .unwrap();
    assert!(
        refused.to_string().contains("2 × spawn.maxConcurrent 2"),
        "{refused}"
    );
    for index in 0..6 {
        drop(
            subagents
                .reserve(&ivan, &format!("subagent:p{index}:person:ivan"))
                .unwrap(),
        );
    }
    // The count goes when the sub-agent's place does.
    drop(child_slot);
    assert!(subagents.lock().started_by_subagent.is_empty());
}

/// The tool checks its input before anything starts, and says so when no runtime is
/// attached.
#[tokio::test]
async fn the_tool_refuses_bad_input_and_works_only_when_attached() {
    let subagents = Subagents::new();
    let tool = subagents.tool().unwrap();
    let mut ivan = caller("ivan", "telegram:1", 2);
    let mut role = (*ivan.role).clone();
    role.tools.allow.push("sessions_spawn".to_string());
    ivan.role = Arc::new(role);
    let permit = policy::permit(&ivan, tool.as_ref(), false).unwrap();
    let context = ToolContext {
        caller: ivan,
        workspace: std::env::temp_dir(),
        config: Arc::new(config()),
    };
    for (input, expected) in [
        (serde_json::json!({"task": "  "}), "task must not be empty"),
        (
            serde_json::json!({"task": "x", "tool": ["read"]}),
            "unknown field `tool`",
        ),
        (
            serde_json::json!({"task": "x", "timeoutSeconds": -1}),
            "timeoutSeconds",
        ),
        (
            serde_json::json!({"task": "x"}),
            "sub-agents are not available",
        ),
    ] {
        let error = tool
            .call(&permit, &context, input.clone())
            .await
            .unwrap_err();
        assert!(error.to_string().contains(expected), "{input}: {error}");
    }
    assert_eq!(subagents.running(), 0);
}
