//! Skills through the real binary and the scripted model: the example company's roles
//! (owner and manager: every skill; employee: only `google-workspace` and
//! `scheduling`; unknown senders: none) against skills in the workspace and in a
//! declared directory laid out as the kubelet lays out a ConfigMap volume. What the
//! model receives is checked: which skills each person's system prompt lists, that no
//! body is in any prompt, and that a body arrives only as the result of the `skill`
//! tool, for a skill the role may use.

mod common;

use std::{fs, os::unix::fs::symlink, path::Path};

use common::*;
use saint_scripted::llm::{RecordedRequest, Reply, ScriptedLlm};
use serde_json::{Value, json};

const IVAN: (&str, &str) = ("telegram", IVAN_TELEGRAM);
const ANA: (&str, &str) = ("whatsapp", ANA_WHATSAPP);
const STRANGER: (&str, &str) = ("whatsapp", "+385910000099");

fn skill_file(name: &str, description: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: {description}\nlicense: MIT\n---\n\n# {name}\nBODY-OF-{name}-FROM-{description}\n"
    )
}

fn write_skill(root: &Path, name: &str, description: &str) {
    fs::create_dir_all(root.join(name)).unwrap();
    fs::write(
        root.join(name).join("SKILL.md"),
        skill_file(name, description),
    )
    .unwrap();
}

/// The workspace's skills: three good ones, and every kind that must be left out.
fn workspace_skills(workspace: &Path, outside: &Path) {
    let skills = workspace.join("skills");
    write_skill(&skills, "google-workspace", "workspace");
    write_skill(&skills, "scheduling", "workspace");
    write_skill(&skills, "pdf", "workspace");
    fs::create_dir_all(skills.join("broken")).unwrap();
    fs::write(skills.join("broken/SKILL.md"), "no front matter at all").unwrap();
    fs::create_dir_all(skills.join("mismatch")).unwrap();
    fs::write(
        skills.join("mismatch/SKILL.md"),
        skill_file("../pdf", "mismatch"),
    )
    .unwrap();
    fs::create_dir_all(skills.join("huge")).unwrap();
    fs::write(
        skills.join("huge/SKILL.md"),
        skill_file("huge", "huge") + &"x".repeat(70 * 1024),
    )
    .unwrap();
    write_skill(outside, "stolen", "OUTSIDE");
    symlink(outside.join("stolen"), skills.join("stolen")).unwrap();
    fs::create_dir_all(skills.join("filelink")).unwrap();
    symlink(
        outside.join("stolen/SKILL.md"),
        skills.join("filelink/SKILL.md"),
    )
    .unwrap();
}

/// A declared skills directory as a ConfigMap volume with `<name>/SKILL.md` items:
/// the files in a timestamped directory, `..data` pointing at it, one symlink per key.
fn declared_volume(mount: &Path) {
    let version = "..2026_11_25_12_00_00.123456789";
    for (name, description) in [("pdf", "declared"), ("contracts", "declared")] {
        write_skill(&mount.join(version), name, description);
        symlink(format!("..data/{name}"), mount.join(name)).unwrap();
    }
    symlink(version, mount.join("..data")).unwrap();
}

async fn post(
    client: &reqwest::Client,
    agent: &AgentProcess,
    (channel, peer): (&str, &str),
    text: &str,
) -> Value {
    let response = client
        .post(format!("{}/v1/messages", agent.http))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": channel, "peer": peer, "text": text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// The `- name: description` lines of the prompt's Skills section.
fn listed(request: &RecordedRequest) -> Vec<String> {
    let system = request.system();
    let Some(section) = system.split("## Skills\n\n").nth(1) else {
        return Vec::new();
    };
    section
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .filter(|line| line.starts_with("- "))
        .map(str::to_string)
        .collect()
}

fn assert_no_body(request: &RecordedRequest) {
    let system = request.system();
    assert!(
        !system.contains("BODY-OF-"),
        "a body is in the prompt: {system}"
    );
    assert!(!system.contains("OUTSIDE"), "{system}");
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_are_listed_for_allowed_roles_and_their_bodies_arrive_only_through_the_skill_tool() {
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let outside = directory.path().join("outside");
    workspace_skills(&workspace, &outside);
    let mount = directory.path().join("saint-skills");
    fs::create_dir_all(&mount).unwrap();
    declared_volume(&mount);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    config["skills"] = json!({"directories": [mount.to_str().unwrap()]});
    write_config(&config_path, &config);
    let agent = spawn_agent(&config_path, &workspace, &[]);
    let client = reqwest::Client::new();

    // The owner (every skill) asks; the model loads `pdf`, then answers.
    llm.push(Reply::tool_call("skill", json!({"name": "pdf"})));
    llm.push(Reply::text("Filled."));
    let reply = post(&client, &agent, ANA, "fill the form").await;
    assert_eq!(reply["reply"], "Filled.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].tool_names().contains(&"skill".to_string()));
    assert_eq!(
        listed(&requests[0]),
        [
            "- contracts: declared",
            "- google-workspace: workspace",
            "- pdf: declared",
            "- scheduling: workspace",
        ],
        "the declared pdf wins; broken, mismatched, oversized and symlinked skills are left out"
    );
    assert!(
        requests[0]
            .system()
            .contains("load its instructions with the `skill` tool"),
        "{}",
        requests[0].system()
    );
    assert_no_body(&requests[0]);
    assert!(requests[0].tool_results().is_empty());
    // The body arrives as the tool's result, the declared one.
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].1, "{results:?}");
    assert!(
        results[0].0.contains("BODY-OF-pdf-FROM-declared"),
        "{results:?}"
    );
    assert!(
        !results[0].0.contains("license: MIT"),
        "front matter is stripped"
    );
    assert_no_body(&requests[1]);

    // The employee: only their two skills are listed. An installed skill their role may
    // not use is answered exactly like a missing one (its name cannot be probed), and
    // both list only what they may use.
    llm.push(Reply::tool_call("skill", json!({"name": "pdf"})));
    llm.push(Reply::tool_call("skill", json!({"name": "no-such-skill"})));
    llm.push(Reply::tool_call("skill", json!({"name": "../pdf"})));
    llm.push(Reply::tool_call("skill", json!({"name": "scheduling"})));
    llm.push(Reply::text("Scheduled."));
    post(&client, &agent, IVAN, "book a meeting").await;
    let requests = &llm.requests()[2..];
    assert_eq!(requests.len(), 5);
    assert!(requests[0].tool_names().contains(&"skill".to_string()));
    assert_eq!(
        listed(&requests[0]),
        ["- google-workspace: workspace", "- scheduling: workspace"]
    );
    for request in requests {
        assert_no_body(request);
    }
    let results = requests[4].tool_results();
    assert_eq!(results.len(), 4, "{results:?}");
    let (denied, missing, path_like, allowed) =
        (&results[0], &results[1], &results[2], &results[3]);
    assert!(missing.1 && missing.0.contains("not found"), "{missing:?}");
    assert!(
        missing.0.contains("google-workspace, scheduling")
            && !missing.0.contains("pdf")
            && !missing.0.contains("contracts"),
        "only the skills the role may see are named: {missing:?}"
    );
    assert!(denied.1, "{denied:?}");
    assert_eq!(
        denied.0.replace("\"pdf\"", "NAME"),
        missing.0.replace("\"no-such-skill\"", "NAME"),
        "a skill the role may not use is told apart from a missing one"
    );
    assert!(!denied.0.contains("BODY-OF"), "{denied:?}");
    assert!(
        path_like.1 && path_like.0.contains("invalid input"),
        "{path_like:?}"
    );
    assert!(
        !allowed.1 && allowed.0.contains("BODY-OF-scheduling-FROM-workspace"),
        "{allowed:?}"
    );

    // An unknown sender (no skills): no section, no tool.
    llm.push(Reply::text("Hello."));
    post(&client, &agent, STRANGER, "hi").await;
    let request = llm.requests().last().unwrap().clone();
    assert!(
        !request.system().contains("## Skills"),
        "{}",
        request.system()
    );
    assert!(!request.tool_names().contains(&"skill".to_string()));
    assert_no_body(&request);
}

/// A role that denies `skill` gets neither the tool nor the listing, and a role whose
/// `only` list names no installed skill gets no section.
#[tokio::test(flavor = "multi_thread")]
async fn a_denied_skill_tool_and_an_only_list_of_absent_skills_leave_no_section() {
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    write_skill(&workspace.join("skills"), "pdf", "workspace");
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    config["roles"]["owner"]["tools"]["deny"] = json!(["group:skills"]);
    config["roles"]["employee"]["skills"] = json!({"only": ["not-installed"]});
    write_config(&config_path, &config);
    let agent = spawn_agent(&config_path, &workspace, &[]);
    let client = reqwest::Client::new();

    llm.set_fallback(Reply::text("ok"));
    post(&client, &agent, ANA, "hi").await;
    post(&client, &agent, IVAN, "hi").await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(!requests[0].tool_names().contains(&"skill".to_string()));
    // Ivan's role allows only a skill that is not installed: no tool to load nothing.
    assert!(
        !requests[1].tool_names().contains(&"skill".to_string()),
        "{:?}",
        requests[1].tool_names()
    );
    for request in &requests {
        assert!(
            !request.system().contains("## Skills"),
            "{}",
            request.system()
        );
    }
}

/// Skills are seeded into the sandbox's `/workspace` per role: the employee's sandbox
/// holds only the folders of the skills their role allows (and shows only those at
/// `/agent`), the owner's every skill folder.
#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_is_seeded_with_the_roles_skills_only() {
    let runner =
        Path::new(env!("CARGO_BIN_EXE_saint-agent")).with_file_name("saint-sandbox-runner");
    assert!(
        runner.is_file() && Path::new("/usr/bin/bwrap").is_file(),
        "this test needs bubblewrap (/usr/bin/bwrap) and the saint-sandbox-runner binary ({}); \
         build it with `cargo build -p saint-sandbox-runner`",
        runner.display()
    );
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    for name in ["google-workspace", "scheduling", "pdf"] {
        write_skill(&workspace.join("skills"), name, "workspace");
        fs::write(
            workspace.join("skills").join(name).join("run.sh"),
            "echo helper\n",
        )
        .unwrap();
    }
    let config_path = directory.path().join("bot-config.json");
    write_config(&config_path, &test_config(&llm.base_url()));
    let agent = spawn_agent(&config_path, &workspace, &[]);
    let client = reqwest::Client::new();
    const LIST: &str = "cd /workspace/skills && find . -type f | sort; echo AGENT; \
                        cd /agent/skills && find . -type f | sort";

    let mut listings = Vec::new();
    for person in [IVAN, ANA] {
        let before = llm.requests().len();
        llm.push(Reply::tool_call("exec", json!({"command": LIST})));
        llm.push(Reply::text("done"));
        post(&client, &agent, person, "list the skills").await;
        let requests = llm.requests();
        assert_eq!(requests.len(), before + 2);
        let (output, is_error) = requests[before + 1].tool_results().pop().unwrap();
        assert!(!is_error, "{person:?}: {output}");
        listings.push(output);
    }
    let files = |names: &[&str]| -> String {
        let mut lines: Vec<String> = names
            .iter()
            .flat_map(|name| [format!("./{name}/SKILL.md"), format!("./{name}/run.sh")])
            .collect();
        lines.sort();
        lines.join("\n")
    };
    let employee = files(&["google-workspace", "scheduling"]);
    assert_eq!(
        listings[0].trim(),
        format!("{employee}\nAGENT\n{employee}\n[exit code 0]"),
        "the employee's sandbox holds only their skills"
    );
    let owner = files(&["google-workspace", "pdf", "scheduling"]);
    assert_eq!(
        listings[1].trim(),
        format!("{owner}\nAGENT\n{owner}\n[exit code 0]")
    );
}
