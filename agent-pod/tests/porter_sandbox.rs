//! Porter III, attacked from where a bot's commands run: Debian's real `gh` and `git`
//! inside the real sandbox (bubblewrap, the real runner and its relay), the exec tool
//! called as the runtime calls it for an owner and an employee, the real Porter holding
//! the credential, and Porter's HTTPS stand-in for GitHub recording every request.
//!
//! Proves for both roles: `gh pr list`, `gh api`, `git clone`, `git push` work and the
//! stand-in receives the real token; an employee's merge is refused at the proxy however
//! it is reached; git commands that write files change only the caller's own scratch;
//! and after every case the secret is in no file, environment, process memory, command
//! output or log a sandbox can reach, in any encoding.

mod sandbox_harness;

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use sandbox_harness::{
    Harness, PORTER_SECRET,
    standin::{self, assert_no_secret},
};

/// Every regular file under `root` (following no symlink), with its bytes.
fn files_under(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                files.insert(entry.path(), fs::read(entry.path()).unwrap_or_default());
            }
        }
    }
    files
}

/// The writable memory of every process running in a sandbox (bubblewrap and every
/// runner, whose relay carries each tunnel's bytes), read from the host as root would.
fn sandbox_process_memory(harness: &Harness) -> Vec<u8> {
    let mut memory = Vec::new();
    let mut processes = harness.sandbox_processes();
    processes.extend(sandbox_harness::processes_with(
        "saint-sandbox-runner --socket",
    ));
    for line in processes {
        let pid = line.split(':').next().unwrap();
        let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        let Ok(mut mem) = fs::File::open(format!("/proc/{pid}/mem")) else {
            continue;
        };
        for region in maps.lines().filter(|line| line.contains(" rw")) {
            let range = region.split_whitespace().next().unwrap();
            let (start, end) = range.split_once('-').unwrap();
            let (start, end) = (
                u64::from_str_radix(start, 16).unwrap(),
                u64::from_str_radix(end, 16).unwrap(),
            );
            if end - start > 64 << 20 {
                continue;
            }
            use std::io::{Read, Seek, SeekFrom};
            let mut bytes = vec![0_u8; (end - start) as usize];
            if mem.seek(SeekFrom::Start(start)).is_ok() && mem.read_exact(&mut bytes).is_ok() {
                memory.extend_from_slice(&bytes);
            }
        }
    }
    memory
}

/// Searches everything a sandbox can reach for the secret, after a case: the scratch
/// copies, runner directories and Porter's socket directory (host side of every bind),
/// every sandbox process's environment, command line and `/tmp` (from inside, as
/// `role`), the memory of the sandbox's processes, the case's output and Porter's
/// audit log.
async fn assert_secret_unreachable(harness: &Harness, role: &str, session: &str, output: &str) {
    let mut reachable = output.to_owned();
    for root in [
        harness.base.path().join("state"),
        harness.porter.socket_directory.clone(),
        harness.workspace.clone(),
    ] {
        for (path, bytes) in files_under(&root) {
            reachable.push_str(&format!("\n{}:\n", path.display()));
            reachable.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    let inside = harness
        .run_as(
            role,
            session,
            "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; \
             tar -cf - /tmp /workspace /run/saint 2>/dev/null | base64 -w0",
        )
        .await;
    reachable.push_str(&inside);
    if let Some(encoded) = inside
        .lines()
        .find(|line| line.len() > 64 && !line.contains(' '))
        && let Ok(decoded) = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            encoded.trim_end_matches("[exit code 0]"),
        )
    {
        reachable.push_str(&String::from_utf8_lossy(&decoded));
    }
    reachable.push_str(
        &fs::read_to_string(harness.base.path().join("porter-control/audit.jsonl"))
            .unwrap_or_default(),
    );
    assert_no_secret(
        &format!("{role} after {output:.80}"),
        &reachable,
        PORTER_SECRET,
    );
    let memory = sandbox_process_memory(harness);
    assert!(memory.len() > 1 << 20, "the sandbox's processes were read");
    assert!(
        !memory
            .windows(PORTER_SECRET.len())
            .any(|window| window == PORTER_SECRET.as_bytes()),
        "the secret is in a sandbox process's memory"
    );
}

/// Runs `command` as `role` and checks the secret stayed out of reach afterwards.
async fn case(harness: &Harness, role: &str, command: &str) -> String {
    let session = format!("http:{role}");
    let output = harness.run_as(role, &session, command).await;
    assert_secret_unreachable(harness, role, &session, &output).await;
    output
}

fn succeeded(output: &str) -> bool {
    output.ends_with("[exit code 0]")
}

const GIT_IDENTITY: &str = "export GIT_AUTHOR_NAME=Ana GIT_AUTHOR_EMAIL=ana@example.com GIT_COMMITTER_NAME=Ana GIT_COMMITTER_EMAIL=ana@example.com;";

#[tokio::test]
async fn gh_and_git_work_in_the_sandbox_for_owner_and_employee_with_the_real_token_on_the_wire() {
    let harness = Harness::start();
    harness.porter.standin.create_repository("o", "r");
    for role in ["owner", "employee"] {
        let listed = case(&harness, role, "gh pr list -R o/r").await;
        assert!(
            succeeded(&listed) && listed.contains("Fix the thing"),
            "{role}: {listed}"
        );
        let api = case(&harness, role, "gh api repos/o/r/pulls --jq '.[0].title'").await;
        assert!(api.starts_with("Fix the thing\n"), "{role}: {api}");
        let cloned = case(
            &harness,
            role,
            &format!("git clone -q https://github.com/o/r.git r-{role} && cat r-{role}/README.md"),
        )
        .await;
        assert!(
            cloned.starts_with("hello from the stand-in\n"),
            "{role}: {cloned}"
        );
        let pushed = case(
            &harness,
            role,
            &format!(
                "{GIT_IDENTITY} cd r-{role} && git pull -q --rebase origin main && echo {role} > {role}.md && git add . && git commit -qm 'by {role}' && git push -q origin main"
            ),
        )
        .await;
        if role == "owner" {
            assert!(succeeded(&pushed), "owner push: {pushed}");
        } else {
            assert!(!succeeded(&pushed), "employee push went through: {pushed}");
        }
    }
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s", "main"])
        .current_dir(harness.porter.standin.git_root.join("o/r.git"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout), "by owner\nfirst\n");
    let requests = harness.porter.standin.requests();
    assert!(
        requests
            .iter()
            .any(|request| request.path == "/o/r.git/git-receive-pack")
    );
    for request in &requests {
        let anonymous_git = request.host == "github.com" && request.authorization.is_none();
        assert!(
            anonymous_git || request.credential().as_deref() == Some(PORTER_SECRET),
            "{request:?}"
        );
    }
}

#[tokio::test]
async fn an_employees_merge_is_refused_at_the_proxy_however_it_is_reached() {
    let harness = Harness::start();
    let attempts = [
        "gh pr merge 1 --merge -R o/r",
        "gh api -X PUT repos/o/r/pulls/1/merge",
        "gh api --method=put repos/o/r/pulls/1/merge",
        "gh alias set mm 'pr merge 1 --merge -R o/r' >/dev/null && gh mm",
        "gh api -H 'X-HTTP-Method-Override: PUT' repos/o/r/pulls/1/merge",
        "gh api -H 'X-Original-Method: PUT' repos/o/r/pulls",
        "gh api graphql -f query='mutation { a: mergePullRequest(input:{pullRequestId:\"PR_1\"}) { clientMutationId } }'",
        "gh api graphql -f query='query Q { viewer { login } } mutation M { mergePullRequest(input:{pullRequestId:\"PR_1\"}) { clientMutationId } }' -f operationName=Q",
        "gh api repos/o/r/pulls/1/../1/merge -X PUT",
        "gh api 'repos/o/r/pulls/1/%6Derge' -X PUT",
        "python3 -c \"import urllib.request as u; r=u.Request('https://api.github.com/repos/o/r/pulls/1/merge', method='PUT', headers={'Authorization': 'token ' + __import__('os').environ['GH_TOKEN']}); print(u.urlopen(r).status)\"",
    ];
    for attempt in attempts {
        let output = case(&harness, "employee", attempt).await;
        assert!(
            !succeeded(&output),
            "employee merge went through with {attempt}: {output}"
        );
    }
    let merges = harness
        .porter
        .standin
        .requests()
        .into_iter()
        .filter(|request| {
            request.body.contains("mergePullRequest")
                || (request.method == "PUT" && request.path.contains("merge"))
        })
        .count();
    assert_eq!(merges, 0, "a merge reached the stand-in");
    // Refused at the proxy, by the employee's role, not lost on the way.
    let audit = fs::read_to_string(harness.base.path().join("porter-control/audit.jsonl")).unwrap();
    let refusals: Vec<serde_json::Value> = audit
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|line: &serde_json::Value| {
            line["decision"] == "refused" && line["role"] == "employee"
        })
        .collect();
    assert!(
        refusals
            .iter()
            .any(|line| line["method"] == "PUT" && line["path"] == "/repos/o/r/pulls/1/merge"),
        "{audit}"
    );
    assert!(
        refusals.iter().any(|line| line["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("mergePullRequest")),
        "{audit}"
    );
    assert!(
        refusals.iter().any(|line| line["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("method override")),
        "{audit}"
    );
    // The owner's, the same way, passes.
    let owner = case(
        &harness,
        "owner",
        "gh api -X PUT repos/o/r/pulls/1/merge --jq .merged",
    )
    .await;
    assert_eq!(owner, "true\n[exit code 0]");
}

#[tokio::test]
async fn git_commands_that_write_files_change_only_the_callers_own_scratch() {
    let harness = Harness::start();
    harness.porter.standin.create_repository("o", "r");
    let before = files_under(&harness.workspace);
    let outside = harness.base.path().join("outside.txt");
    let attempts = [
        // The scratch root as one repository: only scratch is in it.
        format!(
            "{GIT_IDENTITY} git init -q /workspace && cd /workspace && git add -A && git commit -qm all && git log --stat | head -20"
        ),
        // Writing through git options to the view, the runner directory, Porter's.
        "git -C /workspace log --output=/agent/SOUL.md; echo status=$?".to_owned(),
        "git -C /workspace log --output=/run/saint/porter/ca.pem; echo status=$?".to_owned(),
        format!(
            "git -C /workspace log --output={}; echo status=$?",
            outside.display()
        ),
        "git -C /workspace stash show --output=/agent/skills/github/SKILL.md; echo status=$?"
            .to_owned(),
        // Reading through git options from outside the caller's view.
        "git -C /workspace add --pathspec-from-file=/agent/memory/private/notes.md; echo status=$?"
            .to_owned(),
        "git clone -q --reference /agent https://github.com/o/r.git ref-clone; echo status=$?"
            .to_owned(),
        "git -c core.hooksPath=/agent -C /workspace commit --allow-empty -qm x; echo status=$?"
            .to_owned(),
        "git init -q /agent/evil; echo status=$?".to_owned(),
    ];
    for attempt in &attempts {
        let output = case(&harness, "employee", attempt).await;
        assert!(
            !output.contains("private\n"),
            "{attempt} read the private note: {output}"
        );
    }
    assert_eq!(
        files_under(&harness.workspace),
        before,
        "the real workspace changed"
    );
    assert!(!outside.exists(), "a file outside the sandbox was written");
    assert!(
        fs::read_to_string(harness.porter.socket_directory.join("ca.pem"))
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    // The employee's view never held the private note to begin with.
    let listing = harness
        .run_as("employee", "http:employee", "ls -R /agent")
        .await;
    assert!(!listing.contains("notes.md"), "{listing}");
}

#[tokio::test]
async fn the_secret_is_out_of_reach_of_escapes_that_would_print_a_clis_credential() {
    let harness = Harness::start();
    let script = r#"
        exec 2>&1
        gh alias set x '!printf %s "$GH_TOKEN" | base64' >/dev/null; gh x
        gh auth token
        gh auth status -t -h github.com
        env
        printf 'protocol=https\nhost=github.com\n\n' | git credential fill
        printf 'protocol=https\nhost=api.github.com\n\n' | git credential fill
        cat /run/saint/porter/* 2>&1 | head -c 4000
        ls -la /proc/*/root 2>&1 | head -20
        cat /proc/1/environ | tr '\0' '\n'
    "#;
    let output = case(&harness, "owner", script).await;
    // The escapes ran and found only placeholders.
    assert!(output.contains("GH_TOKEN=porter_ph_"), "{output}");
    assert!(output.contains("password=porter_ph_"), "{output}");
    // Porter is not in the sandbox's PID namespace: nothing of it to read.
    let programs = harness
        .run_as(
            "owner",
            "http:owner",
            "for p in /proc/[0-9]*; do basename \"$(readlink $p/exe)\"; done | sort -u",
        )
        .await;
    assert!(programs.contains("saint-sandbox-runner\n"), "{programs}");
    assert!(
        !programs.lines().any(|program| program == "porter"),
        "{programs}"
    );
    assert!(standin::ALL_HOSTS.contains(&"api.github.com"));
}
