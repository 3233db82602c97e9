//! The `process` tool on the `exec` harness (real bubblewrap, runner, Porter and its
//! HTTPS stand-in): a background command takes exactly `exec`'s path — the role's
//! blocklist refuses it before anything runs, a CLI in it reaches its host through
//! Porter with a key of its own, and that key is revoked once a poll sees it end.
//!
//! A request Porter holds for an approval in a background command is named by the poll
//! that sees it end, with the start call an approval reruns; the approved rerun merges
//! once.
//!
//! Needs what `sandbox_local.rs` needs (`bwrap`, `saint-sandbox-runner`, `porter`).

mod sandbox_harness;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use saint_sandbox::porter_control::PorterControl;
use saint_tools::{
    Tool, ToolContext, ToolError, ToolOutput,
    exec::{ExecLimits, ExecTool, PORTER_HELD, PorterRequest},
    policy,
    process::{PORTER_HELD_START, ProcessTool},
};
use serde_json::{Value, json};

use sandbox_harness::*;

/// Ana (employee: blocklist `touch *blocked*`, `rm -rf *`) with `process` allowed too.
fn employee(harness: &Harness, session: &str) -> ToolContext {
    let mut context = harness.context(session, "employee");
    let mut role = (*context.caller.role).clone();
    role.tools.allow.push("process".to_string());
    context.caller.role = Arc::new(role);
    context
}

struct Processes {
    tool: Arc<ProcessTool>,
}

impl Processes {
    fn new(harness: &Harness) -> Self {
        let exec = ExecTool::new(
            harness.sandbox.clone(),
            Some(PorterControl::new(harness.porter.control_socket.clone())),
            ExecLimits::default(),
        );
        Self {
            tool: Arc::new(ProcessTool::new(Arc::new(exec))),
        }
    }

    /// Calls `process` as the runtime does: through the policy, with a sandbox.
    async fn call(&self, context: &ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let permit = policy::permit(&context.caller, self.tool.as_ref(), true)?;
        self.tool.call(&permit, context, input).await
    }

    /// Polls process `id` until it no longer runs (within a deadline naming `what`): the
    /// poll that saw it end, its content preceded by the output of the polls before it
    /// (a poll returns only what is new since the last one, and under load an earlier
    /// poll may already have taken the first command's output).
    async fn until_ended(&self, context: &ToolContext, id: &str, what: &str) -> ToolOutput {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut earlier = String::new();
        loop {
            let mut polled = self
                .call(context, json!({"action": "poll", "id": id}))
                .await
                .unwrap();
            if polled.metering["state"] != "running" {
                polled.content.insert_str(0, &earlier);
                return polled;
            }
            // A running poll's content is its new output, then its status line.
            let (output, _status) = polled.content.rsplit_once("[process ").unwrap_or_default();
            earlier.push_str(output);
            assert!(Instant::now() < deadline, "{what} still ran after 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn a_background_command_takes_execs_path_through_blocklist_and_porter() {
    let harness = Harness::start();
    let processes = Processes::new(&harness);
    let ana = employee(&harness, "http:ana");

    // The blocklist `exec` applies, before any sandbox or key exists.
    let refused = processes
        .call(
            &ana,
            json!({"action": "start", "command": "touch /workspace/was-blocked"}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ToolError::Denied(message) if message.contains("touch *blocked*")),
        "{refused}"
    );
    assert!(harness.sandbox_processes().is_empty(), "no sandbox started");

    // A CLI in the background reaches its host through Porter with its own key.
    let started = processes
        .call(
            &ana,
            json!({"action": "start", "command": format!(
                "printenv HTTPS_PROXY > /workspace/background-proxy; \
                 printenv GH_TOKEN > /workspace/background-token; {CLI} api user --jq .login"
            )}),
        )
        .await
        .unwrap();
    assert_eq!(started.metering["porter"], json!(true));
    let id = started.metering["processId"].as_str().unwrap().to_string();
    let ended = processes
        .until_ended(&ana, &id, &format!("the background `{CLI} api user`"))
        .await;
    assert_eq!(
        ended.content,
        format!("o\n[process {id} exited with code 0]")
    );
    let requests = harness.porter.standin.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].credential().as_deref(), Some(PORTER_SECRET));

    // The poll that saw it end revoked its key: replaying it (with its own
    // placeholder) gets nothing.
    let replay = harness
        .run(
            "http:ana",
            &format!(
                "HTTPS_PROXY=$(cat /workspace/background-proxy) \
                 GH_TOKEN=$(cat /workspace/background-token) {CLI} api user"
            ),
        )
        .await;
    assert!(!replay.ends_with("[exit code 0]"), "{replay}");
    assert_eq!(harness.porter.standin.requests().len(), 1);
}

#[tokio::test]
async fn a_background_merge_is_held_for_approval_and_the_approved_start_merges_once() {
    let harness = Harness::start();
    let processes = Processes::new(&harness);
    // The owner may merge (Porter's policy), but this role's rule holds a merge.
    let mut olga = harness.context("http:olga", "owner");
    let mut role = (*olga.caller.role).clone();
    role.tools.allow.push("process".to_string());
    role.approvals = vec![
        serde_json::from_value(json!({
            "porter": {"hosts": ["api.github.com"], "methods": ["PUT"],
                       "paths": ["/repos/*/*/pulls/*/merge"]},
            "approvers": {"roles": ["employee"]}
        }))
        .unwrap(),
    ];
    olga.caller.role = Arc::new(role);
    let merges = || {
        harness
            .porter
            .standin
            .requests()
            .iter()
            .filter(|request| request.method == "PUT")
            .count()
    };
    let start = json!({"action": "start", "command": format!(
        "{CLI} api -X PUT repos/o/r/pulls/1/merge; {CLI} api -X PUT repos/o/r/pulls/1/merge"
    )});
    let started = processes.call(&olga, start.clone()).await.unwrap();
    let id = started.metering["processId"].as_str().unwrap().to_string();
    let ended = processes
        .until_ended(&olga, &id, "the held background merge")
        .await;
    assert_eq!(merges(), 0, "a held merge never reaches GitHub");
    assert!(
        ended.content.contains(
            "[porter held for approval: PUT https://api.github.com/repos/o/r/pulls/1/merge]"
        ),
        "{}",
        ended.content
    );
    assert_eq!(
        ended.metering[PORTER_HELD],
        json!([{"rule": 0, "cli": CLI, "host": "api.github.com", "method": "PUT",
                "path": "/repos/o/r/pulls/1/merge"}])
    );
    assert_eq!(
        ended.metering[PORTER_HELD_START], start,
        "the poll names the start call an approval reruns"
    );

    // The approved start (what the runtime's approval runs) merges once; the second
    // merge of the same command is held again.
    let tool: Arc<dyn Tool> = processes.tool.clone();
    let permitted = policy::permitted_tools(&olga.caller, &[tool], true);
    let process = permitted
        .iter()
        .find(|tool| tool.name() == "process")
        .unwrap();
    let grant = PorterRequest {
        cli: CLI.to_string(),
        host: "api.github.com".to_string(),
        method: "PUT".to_string(),
        path: "/repos/o/r/pulls/1/merge".to_string(),
    };
    let rerun = process
        .call_approved(&olga, start, "K7QX2P", &[grant])
        .await
        .unwrap();
    let id = rerun.metering["processId"].as_str().unwrap().to_string();
    let ended = processes
        .until_ended(&olga, &id, "the approved background merge")
        .await;
    assert!(
        ended.content.contains("Pull Request successfully merged"),
        "{}",
        ended.content
    );
    assert!(
        ended.content.contains("[porter held for approval"),
        "{}",
        ended.content
    );
    assert_eq!(merges(), 1);
}
