//! The `process` tool on the `exec` harness (real bubblewrap, runner, Porter and its
//! HTTPS stand-in): a background command takes exactly `exec`'s path — the role's
//! blocklist refuses it before anything runs, a CLI in it reaches its host through
//! Porter with a key of its own, and that key is revoked once a poll sees it end.
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
    exec::{ExecLimits, ExecTool},
    policy,
    process::ProcessTool,
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
    tool: ProcessTool,
}

impl Processes {
    fn new(harness: &Harness) -> Self {
        let exec = ExecTool::new(
            harness.sandbox.clone(),
            Some(PorterControl::new(harness.porter.control_socket.clone())),
            ExecLimits::default(),
        );
        Self {
            tool: ProcessTool::new(Arc::new(exec)),
        }
    }

    /// Calls `process` as the runtime does: through the policy, with a sandbox.
    async fn call(&self, context: &ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let permit = policy::permit(&context.caller, &self.tool, true)?;
        self.tool.call(&permit, context, input).await
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let ended = loop {
        let polled = processes
            .call(&ana, json!({"action": "poll", "id": id}))
            .await
            .unwrap();
        if polled.metering["state"] != "running" {
            break polled;
        }
        assert!(
            Instant::now() < deadline,
            "the background `{CLI} api user` still ran after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
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
