use saint_config::{ApprovalRule, Approvers, ContactSlug};
use serde_json::json;

use super::*;

fn rule(tools: &[&str], when: &[(&str, &str)]) -> ApprovalRule {
    ApprovalRule {
        tools: tools.iter().map(|tool| tool.to_string()).collect(),
        porter: None,
        when: when
            .iter()
            .map(|(argument, glob)| (argument.to_string(), glob.to_string()))
            .collect(),
        approvers: Approvers {
            roles: vec!["owner".to_string()],
            contacts: vec![ContactSlug::parse("marko").unwrap()],
        },
        timeout_seconds: 60,
    }
}

#[test]
fn rules_match_tools_and_argument_globs() {
    let mut role = saint_tools::test_fixtures::company_config().roles["employee"].clone();
    role.approvals = vec![
        rule(&["exec"], &[("command", "git push*")]),
        rule(&["docs.*"], &[]),
    ];
    assert!(rule_for(&role, "exec", &json!({"command": "git push origin main"})).is_some());
    assert!(rule_for(&role, "exec", &json!({"command": "git status"})).is_none());
    assert!(rule_for(&role, "exec", &json!({})).is_none());
    assert!(rule_for(&role, "docs.search", &json!({"query": "x"})).is_some());
    assert!(rule_for(&role, "read", &json!({"path": "a"})).is_none());
    // Starting the same command in the background falls under the exec rule; polling
    // or killing a process runs no command.
    let start = json!({"action": "start", "command": "git push origin main"});
    assert!(rule_for(&role, "process", &start).is_some());
    let other = json!({"action": "start", "command": "git status"});
    assert!(rule_for(&role, "process", &other).is_none());
    assert!(rule_for(&role, "process", &json!({"action": "kill", "id": "p1"})).is_none());
}

#[test]
fn decisions_are_parsed_strictly() {
    assert_eq!(
        parse_decision("approve k7qx2p"),
        Some((true, "K7QX2P".into()))
    );
    assert_eq!(
        parse_decision("  Reject   K7QX2P \n"),
        Some((false, "K7QX2P".into()))
    );
    for text in [
        "approve",
        "approve K7QX2P please",
        "approve K7QX2",
        "ok K7QX2P",
        "approve K7QX20",
    ] {
        assert_eq!(parse_decision(text), None, "{text:?}");
    }
}

#[test]
fn one_decision_per_request_by_an_approver_who_is_not_the_requester() {
    let directory = tempfile::tempdir().unwrap();
    let store = ApprovalStore::open(directory.path()).unwrap();
    let input = json!({"to": "marko", "text": "hi"});
    let request = store
        .request(
            "ivan",
            "employee",
            "s",
            "telegram:1",
            "message",
            &input,
            &[],
            &rule(&["message"], &[]),
            1_000,
        )
        .unwrap();
    let code = request.code.clone();
    let anyone = |_: &Approvers| true;
    let nobody = |_: &Approvers| false;
    assert_eq!(
        store.decide(&code, "ivan", anyone, true, 2_000).unwrap(),
        Err(Refusal::OwnRequest(code.clone()))
    );
    assert_eq!(
        store.decide(&code, "ana", nobody, true, 2_000).unwrap(),
        Err(Refusal::NotAnApprover(code.clone()))
    );
    assert_eq!(
        store.decide("ZZZZZZ", "ana", anyone, true, 2_000).unwrap(),
        Err(Refusal::Unknown("ZZZZZZ".into()))
    );
    let approved = store
        .decide(&code, "ana", anyone, true, 2_000)
        .unwrap()
        .unwrap();
    assert_eq!(approved.input, input);
    // A replay, or a late reject, changes nothing.
    assert_eq!(
        store.decide(&code, "ana", anyone, true, 3_000).unwrap(),
        Err(Refusal::AlreadyDecided(code.clone()))
    );
    assert_eq!(
        store.decide(&code, "marko", anyone, false, 3_000).unwrap(),
        Err(Refusal::AlreadyDecided(code.clone()))
    );
    let audit = std::fs::read_to_string(directory.path().join("logs/approvals.jsonl")).unwrap();
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
            "refused",
            "refused"
        ]
    );
}

#[test]
fn altered_arguments_and_expired_requests_are_refused() {
    let directory = tempfile::tempdir().unwrap();
    let store = ApprovalStore::open(directory.path()).unwrap();
    let anyone = |_: &Approvers| true;
    let rule = rule(&["message"], &[]);
    let altered = store
        .request(
            "ivan",
            "employee",
            "s",
            "t",
            "message",
            &json!({"to": "marko"}),
            &[],
            &rule,
            0,
        )
        .unwrap();
    // Someone with the database changes what would run.
    store
        .connection()
        .execute(
            "UPDATE approvals SET input = ?1 WHERE code = ?2",
            params![json!({"to": "ana"}).to_string(), altered.code],
        )
        .unwrap();
    assert_eq!(
        store.decide(&altered.code, "ana", anyone, true, 1).unwrap(),
        Err(Refusal::Altered(altered.code.clone()))
    );
    let late = store
        .request(
            "ivan",
            "employee",
            "s",
            "t",
            "message",
            &json!({"to": "marko"}),
            &[],
            &rule,
            0,
        )
        .unwrap();
    assert_eq!(store.expire(59_999).unwrap(), Vec::new());
    let expired = store.expire(60_000).unwrap();
    assert_eq!(expired.len(), 2, "both were pending at their deadline");
    assert_eq!(
        store
            .decide(&late.code, "ana", anyone, true, 60_001)
            .unwrap(),
        Err(Refusal::AlreadyDecided(late.code.clone()))
    );
}

#[test]
fn a_person_has_at_most_a_handful_of_requests_waiting() {
    let directory = tempfile::tempdir().unwrap();
    let store = ApprovalStore::open(directory.path()).unwrap();
    let rule = rule(&["message"], &[]);
    let ask = |who: &str, n: u64, now_ms: i64| {
        store.request(
            who,
            "employee",
            "s",
            "t",
            "message",
            &json!({"to": "marko", "n": n}),
            &[],
            &rule,
            now_ms,
        )
    };
    let mut codes = Vec::new();
    for n in 0..MOST_WAITING_PER_PERSON as u64 {
        codes.push(ask("ivan", n, 0).unwrap().code);
    }
    let refused = ask("ivan", 99, 0).unwrap_err();
    assert!(
        matches!(refused, ApprovalError::TooManyWaiting { waiting } if waiting == MOST_WAITING_PER_PERSON),
        "{refused}"
    );
    // Someone else is not held back by Ivan's requests.
    assert!(ask("marko", 0, 0).is_ok());
    // One decided: Ivan may ask again; and so once his requests expire.
    store
        .decide(&codes[0], "ana", |_| true, false, 1)
        .unwrap()
        .unwrap();
    assert!(ask("ivan", 100, 1).is_ok());
    assert!(ask("ivan", 101, 1).is_err());
    assert!(ask("ivan", 102, 60_000).is_ok(), "the old ones expired");
}

#[test]
fn porter_requests_are_bound_into_the_digest_and_a_changed_one_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let store = ApprovalStore::open(directory.path()).unwrap();
    let anyone = |_: &Approvers| true;
    let merge = saint_tools::exec::PorterRequest {
        cli: "gh".into(),
        host: "api.github.com".into(),
        method: "PUT".into(),
        path: "/repos/o/r/pulls/1/merge".into(),
    };
    let input = json!({"command": "gh pr merge 1"});
    assert_ne!(
        digest("exec", &input, &[]),
        digest("exec", &input, std::slice::from_ref(&merge)),
        "the held request is part of what is approved"
    );
    let request = store
        .request(
            "ivan",
            "employee",
            "s",
            "t",
            "exec",
            &input,
            std::slice::from_ref(&merge),
            &rule(&["exec"], &[]),
            0,
        )
        .unwrap();
    let (stored, _) = store.get(&request.code).unwrap().unwrap();
    assert_eq!(stored.porter, std::slice::from_ref(&merge));
    // Someone with the database widens the grant to another pull request.
    let other = saint_tools::exec::PorterRequest {
        path: "/repos/o/r/pulls/2/merge".into(),
        ..merge
    };
    store
        .connection()
        .execute(
            "UPDATE approvals SET porter = ?1 WHERE code = ?2",
            params![serde_json::to_string(&[other]).unwrap(), request.code],
        )
        .unwrap();
    assert_eq!(
        store.decide(&request.code, "ana", anyone, true, 1).unwrap(),
        Err(Refusal::Altered(request.code.clone()))
    );
}

#[test]
fn a_store_from_before_porter_requests_keeps_its_pending_requests() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(directory.path().join("sessions")).unwrap();
    let input = json!({"to": "marko", "text": "hi"});
    {
        // The table as it was, with one pending request in it.
        let old = Connection::open(directory.path().join("sessions/approvals.sqlite3")).unwrap();
        old.execute_batch(
            "CREATE TABLE approvals (
                code TEXT PRIMARY KEY, requester TEXT NOT NULL, requester_role TEXT NOT NULL,
                session_key TEXT NOT NULL, identity TEXT NOT NULL, tool TEXT NOT NULL,
                input TEXT NOT NULL, digest TEXT NOT NULL, approvers TEXT NOT NULL,
                created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending', decided_by TEXT, decided_ms INTEGER);",
        )
        .unwrap();
        old.execute(
            "INSERT INTO approvals (code, requester, requester_role, session_key, identity, tool,
                input, digest, approvers, created_ms, expires_ms)
             VALUES ('K7QX2P', 'ivan', 'employee', 's', 't', 'message', ?1, ?2,
                '{\"roles\":[\"owner\"]}', 0, 60000)",
            params![input.to_string(), digest("message", &input, &[])],
        )
        .unwrap();
    }
    let store = ApprovalStore::open(directory.path()).unwrap();
    let decided = store
        .decide("K7QX2P", "ana", |_: &Approvers| true, true, 1)
        .unwrap()
        .unwrap();
    assert!(decided.porter.is_empty());
    assert_eq!(decided.input, input);
}
