//! Table-driven escape vectors against the file tools on a real temporary workspace.
//! Test-only.

use std::{
    fs,
    os::unix::{fs::symlink, net::UnixListener},
    path::{Path, PathBuf},
};

use rustix::fs::{FileType, Mode};

use crate::{
    Tool, ToolContext, ToolError, apply_patch::ApplyPatchTool, edit::EditTool, policy,
    read::ReadTool, test_fixtures, write::WriteTool,
};

const OUTSIDE_SECRET: &str = "OUTSIDE-SECRET-CONTENT";
const SOUL: &str = "SOUL-CONTENT";

struct Layout {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    outside: PathBuf,
}

/// base/ws is the workspace; base/outside holds a secret the tools must never reach.
fn layout() -> Layout {
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("ws");
    let outside = base.path().join("outside");
    fs::create_dir_all(workspace.join("data")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), OUTSIDE_SECRET).unwrap();
    fs::write(workspace.join("SOUL.md"), SOUL).unwrap();
    fs::write(workspace.join("data/ok.txt"), "hello from the workspace\n").unwrap();
    let data = workspace.join("data");
    symlink(outside.join("secret.txt"), data.join("abs_link")).unwrap();
    symlink("../../outside/secret.txt", data.join("rel_link")).unwrap();
    symlink(&outside, workspace.join("dir_link")).unwrap();
    symlink("loop_b", workspace.join("loop_a")).unwrap();
    symlink("loop_a", workspace.join("loop_b")).unwrap();
    symlink("self_loop", workspace.join("self_loop")).unwrap();
    symlink("/proc/self/root", workspace.join("proc_link")).unwrap();
    symlink("SOUL.md", workspace.join("inner_link")).unwrap();
    fs::hard_link(outside.join("secret.txt"), data.join("hard_link"))
        .expect("hard link to the outside file (needs one file system for base/)");
    fs::hard_link(workspace.join("SOUL.md"), data.join("inner_hard")).unwrap();
    let data_directory = rustix::fs::open(
        &data,
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
        Mode::empty(),
    )
    .unwrap();
    rustix::fs::mknodat(
        &data_directory,
        "fifo",
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    rustix::fs::mknodat(
        &data_directory,
        "null_device",
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .expect("creating a device node needs root (CAP_MKNOD); this test must run as root");
    let listener = UnixListener::bind(data.join("socket")).unwrap();
    std::mem::forget(listener);
    Layout {
        _base: base,
        workspace,
        outside,
    }
}

fn owner(layout: &Layout) -> ToolContext {
    test_fixtures::context(&layout.workspace, "acme-ana")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn call(
    tool: &dyn Tool,
    context: &ToolContext,
    input: serde_json::Value,
) -> Result<String, ToolError> {
    // The owner's role allows every file tool; the vectors test the tool's own rules.
    let permit = policy::permit(&context.caller, tool, false)?;
    runtime()
        .block_on(tool.call(&permit, context, input))
        .map(|output| output.content)
}

fn assert_no_leak(message: &str, layout: &Layout) {
    let base = layout
        .workspace
        .parent()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert!(
        !message.contains(&base),
        "error leaks a host path: {message}"
    );
    assert!(
        !message.contains(OUTSIDE_SECRET),
        "error leaks outside content: {message}"
    );
}

#[test]
fn read_escape_vectors_are_all_refused() {
    let layout = layout();
    let context = owner(&layout);
    let outside_absolute = layout
        .outside
        .join("secret.txt")
        .to_string_lossy()
        .to_string();
    let via_parent = format!("{}/../outside/secret.txt", layout.workspace.display());
    let vectors: Vec<(&str, String)> = vec![
        ("parent", "../outside/secret.txt".into()),
        (
            "parent after descent",
            "data/../../outside/secret.txt".into(),
        ),
        ("deep parent", "../../../../../../../etc/passwd".into()),
        ("absolute system file", "/etc/passwd".into()),
        ("absolute outside file", outside_absolute),
        ("absolute workspace path with parent", via_parent),
        (
            "sandbox alias with parent",
            "/workspace/../outside/secret.txt".into(),
        ),
        ("agent alias with parent", "/agent/../../etc/passwd".into()),
        ("symlink with absolute target", "data/abs_link".into()),
        ("symlink with relative target", "data/rel_link".into()),
        ("symlinked directory", "dir_link/secret.txt".into()),
        ("symlink loop", "loop_a".into()),
        ("self-referencing symlink", "self_loop".into()),
        ("symlink inside the workspace", "inner_link".into()),
        ("hard link to an outside file", "data/hard_link".into()),
        ("hard link to a protected file", "data/inner_hard".into()),
        ("NUL byte", "data/ok.txt\0../../outside/secret.txt".into()),
        ("FIFO", "data/fifo".into()),
        ("unix socket", "data/socket".into()),
        ("character device", "data/null_device".into()),
        ("proc root", "/proc/self/root/etc/passwd".into()),
        ("symlink to proc root", "proc_link/etc/passwd".into()),
        ("percent-encoded dots", "%2e%2e/outside/secret.txt".into()),
        ("percent-encoded slash", "..%2foutside%2fsecret.txt".into()),
        ("double-encoded", "%252e%252e/outside/secret.txt".into()),
        ("backslashes", "data\\..\\..\\outside\\secret.txt".into()),
        ("newline", "data/\nSOUL.md".into()),
        ("directory", "data".into()),
        ("empty", String::new()),
        ("workspace itself", ".".into()),
    ];
    assert!(vectors.len() >= 20);
    for (name, path) in &vectors {
        let result = call(&ReadTool, &context, serde_json::json!({ "path": path }));
        match result {
            Err(ToolError::Denied(message)) => assert_no_leak(&message, &layout),
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
    // Positive controls: plain, aliased and absolute spellings of a workspace file work.
    for path in [
        "data/ok.txt".to_string(),
        "./data/ok.txt".to_string(),
        "/workspace/data/ok.txt".to_string(),
        layout
            .workspace
            .join("data/ok.txt")
            .to_string_lossy()
            .to_string(),
    ] {
        assert_eq!(
            call(&ReadTool, &context, serde_json::json!({ "path": path })).unwrap(),
            "hello from the workspace\n",
            "{path}"
        );
    }
    assert!(matches!(
        call(
            &ReadTool,
            &context,
            serde_json::json!({"path": "data/missing.txt"})
        ),
        Err(ToolError::NotFound(_))
    ));
}

#[test]
fn write_escape_vectors_are_all_refused_and_touch_nothing_outside() {
    let layout = layout();
    let context = owner(&layout);
    let vectors = [
        "../outside/new.txt",
        "dir_link/new.txt",
        "dir_link/secret.txt",
        "data/abs_link",
        "data/rel_link",
        "data/hard_link",
        "data/inner_hard",
        "data/fifo",
        "data/null_device",
        "data/socket",
        "proc_link/tmp/new.txt",
        "/proc/self/root/tmp/saint-escape.txt",
        "loop_a",
        "inner_link",
        "data/x\0y",
        "%2e%2e/outside/new.txt",
    ];
    for path in vectors {
        let result = call(
            &WriteTool,
            &context,
            serde_json::json!({"path": path, "content": "PWNED"}),
        );
        assert!(
            matches!(result, Err(ToolError::Denied(_))),
            "{path:?}: expected a refusal, got {result:?}"
        );
    }
    let absolute = layout.outside.join("new.txt").to_string_lossy().to_string();
    assert!(matches!(
        call(
            &WriteTool,
            &context,
            serde_json::json!({"path": absolute, "content": "PWNED"})
        ),
        Err(ToolError::Denied(_))
    ));
    assert_eq!(
        fs::read_to_string(layout.outside.join("secret.txt")).unwrap(),
        OUTSIDE_SECRET
    );
    assert_eq!(
        fs::read_to_string(layout.workspace.join("SOUL.md")).unwrap(),
        SOUL
    );
    assert!(!layout.outside.join("new.txt").exists());
    assert!(!Path::new("/tmp/saint-escape.txt").exists());
    let edit = call(
        &EditTool,
        &context,
        serde_json::json!({"path": "data/hard_link", "old_string": "OUTSIDE", "new_string": "PWNED"}),
    );
    assert!(matches!(edit, Err(ToolError::Denied(_))), "{edit:?}");
    let patch = "--- a/dir_link/secret.txt\n+++ b/dir_link/secret.txt\n@@ -1 +1 @@\n-OUTSIDE-SECRET-CONTENT\n\\ No newline at end of file\n+PWNED\n";
    let patched = call(
        &ApplyPatchTool,
        &context,
        serde_json::json!({ "patch": patch }),
    );
    assert!(matches!(patched, Err(ToolError::Denied(_))), "{patched:?}");
    assert_eq!(
        fs::read_to_string(layout.outside.join("secret.txt")).unwrap(),
        OUTSIDE_SECRET
    );

    // Positive controls: writes inside the workspace work, directories are created.
    call(
        &WriteTool,
        &context,
        serde_json::json!({"path": "data/new/deep.txt", "content": "one\ntwo\n"}),
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(layout.workspace.join("data/new/deep.txt")).unwrap(),
        "one\ntwo\n"
    );
    call(&EditTool, &context, serde_json::json!({"path": "data/new/deep.txt", "old_string": "two", "new_string": "three"}))
        .unwrap();
    assert_eq!(
        fs::read_to_string(layout.workspace.join("data/new/deep.txt")).unwrap(),
        "one\nthree\n"
    );
    let patch = "--- a/data/new/deep.txt\n+++ b/data/new/deep.txt\n@@ -1,2 +1,2 @@\n one\n-three\n+four\n--- /dev/null\n+++ b/data/created.txt\n@@ -0,0 +1 @@\n+made by a patch\n";
    call(
        &ApplyPatchTool,
        &context,
        serde_json::json!({ "patch": patch }),
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(layout.workspace.join("data/new/deep.txt")).unwrap(),
        "one\nfour\n"
    );
    assert_eq!(
        fs::read_to_string(layout.workspace.join("data/created.txt")).unwrap(),
        "made by a patch\n"
    );

    // The `*** Begin Patch` format goes through the same checks.
    for escape in [
        "*** Begin Patch\n*** Add File: ../outside/new.txt\n+PWNED\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: dir_link/secret.txt\n@@\n-OUTSIDE-SECRET-CONTENT\n+PWNED\n*** End Patch\n",
        "*** Begin Patch\n*** Delete File: data/hard_link\n*** End Patch\n",
    ] {
        let refused = call(
            &ApplyPatchTool,
            &context,
            serde_json::json!({ "patch": escape }),
        );
        assert!(
            matches!(refused, Err(ToolError::Denied(_))),
            "{escape:?}: {refused:?}"
        );
    }
    assert_eq!(
        fs::read_to_string(layout.outside.join("secret.txt")).unwrap(),
        OUTSIDE_SECRET
    );
    assert!(!layout.outside.join("new.txt").exists());
    let patch = "*** Begin Patch\n*** Update File: data/new/deep.txt\n@@\n one\n-four\n+five\n*** Delete File: data/created.txt\n*** End Patch\n";
    call(
        &ApplyPatchTool,
        &context,
        serde_json::json!({ "patch": patch }),
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(layout.workspace.join("data/new/deep.txt")).unwrap(),
        "one\nfive\n"
    );
    assert!(!layout.workspace.join("data/created.txt").exists());
}

#[test]
fn file_tools_enforce_the_three_write_tiers_and_self_directories() {
    let layout = layout();
    fs::write(layout.workspace.join("COMPANY.md"), "hours: 9-17\n").unwrap();
    fs::create_dir_all(layout.workspace.join("memory/users/acme-ana")).unwrap();
    fs::write(
        layout.workspace.join("memory/users/acme-ana/notes.md"),
        "ana private\n",
    )
    .unwrap();
    let owner = owner(&layout);
    let employee = test_fixtures::context(&layout.workspace, "acme-ivo");
    let external = test_fixtures::context(&layout.workspace, "acme-client");
    let write = |context: &ToolContext, path: &str| {
        call(
            &WriteTool,
            context,
            serde_json::json!({"path": path, "content": "changed\n"}),
        )
    };

    // Tier 1: platform-protected, for everyone including the owner.
    for context in [&owner, &employee] {
        let refused = write(context, "SOUL.md");
        assert!(
            matches!(&refused, Err(ToolError::Denied(message)) if message.contains("platform")),
            "{refused:?}"
        );
    }
    let patched = call(
        &ApplyPatchTool,
        &owner,
        serde_json::json!({"patch": "--- a/SOUL.md\n+++ b/SOUL.md\n@@ -1 +1 @@\n-SOUL-CONTENT\n\\ No newline at end of file\n+evil\n"}),
    );
    assert!(matches!(patched, Err(ToolError::Denied(_))), "{patched:?}");
    assert_eq!(
        fs::read_to_string(layout.workspace.join("SOUL.md")).unwrap(),
        SOUL
    );

    // Tier 2: owner files only for roles whose write globs name them.
    assert!(write(&owner, "COMPANY.md").is_ok());
    assert!(matches!(
        write(&employee, "COMPANY.md"),
        Err(ToolError::Denied(_))
    ));

    // Tier 3: one's own memory directory, never someone else's.
    assert!(write(&employee, "memory/users/acme-ivo/preferences.md").is_ok());
    assert!(matches!(
        write(&employee, "memory/users/acme-ana/notes.md"),
        Err(ToolError::Denied(_))
    ));
    assert!(matches!(
        call(
            &ReadTool,
            &employee,
            serde_json::json!({"path": "memory/users/acme-ana/notes.md"})
        ),
        Err(ToolError::Denied(_))
    ));
    assert_eq!(
        fs::read_to_string(layout.workspace.join("memory/users/acme-ana/notes.md")).unwrap(),
        "ana private\n"
    );

    // A role without the file tools is refused by the tool itself.
    assert!(matches!(
        call(&ReadTool, &external, serde_json::json!({"path": "data/ok.txt"})),
        Err(ToolError::Denied(message)) if message.contains("read tool")
    ));
}
