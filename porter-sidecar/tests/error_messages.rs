//! The real binaries given bad files: one line on stderr that names the file and
//! prints each cause once, and a failing exit status.

mod support;

use std::{
    path::Path,
    process::{Command, Output},
};

use support::cli;

/// What serde_json says about `{ not json`.
const CAUSE: &str = "key must be a string at line 1 column 3";

fn porter(directory: &Path, registry: &Path, tokens: Option<&Path>) -> Output {
    let workspace = directory.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_porter"));
    command
        .arg("--socket")
        .arg(directory.join("porter.sock"))
        .arg("--registry")
        .arg(registry)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--call-homes")
        .arg(directory.join("homes"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PORTER_LOG", "warn");
    if let Some(tokens) = tokens {
        command.arg("--tokens-file").arg(tokens);
    }
    command.output().unwrap()
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[test]
fn porter_names_a_malformed_registry_and_prints_the_cause_once() {
    let directory = tempfile::tempdir().unwrap();
    let registry = directory.path().join("registry.json");
    std::fs::write(&registry, "{ not json").unwrap();
    let output = porter(directory.path(), &registry, None);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        stderr_of(&output),
        format!(
            "porter: invalid porter registry {}: failed to parse porter registry: {CAUSE}\n",
            registry.display()
        )
    );
}

#[test]
fn porter_names_a_malformed_tokens_file_and_prints_the_cause_once() {
    let directory = tempfile::tempdir().unwrap();
    let registry = directory.path().join("registry.json");
    let mut contents = porter_protocol::registry::Registry::default();
    contents.clis.insert("true".into(), cli("/bin/true"));
    std::fs::write(&registry, contents.to_json()).unwrap();
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, "{ not json").unwrap();
    let output = porter(directory.path(), &registry, Some(&tokens));
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        stderr_of(&output),
        format!(
            "porter: invalid tokens file {}: failed to parse tokens file: {CAUSE}\n",
            tokens.display()
        )
    );
}

#[test]
fn porter_names_an_unreadable_registry_and_prints_the_cause_once() {
    let directory = tempfile::tempdir().unwrap();
    let output = porter(directory.path(), Path::new("/dev/zero"), None);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        stderr_of(&output),
        "porter: failed to read porter registry /dev/zero: not a regular file\n"
    );
}

#[test]
fn cliport_names_a_malformed_registry_and_prints_the_cause_once() {
    let directory = tempfile::tempdir().unwrap();
    let registry = directory.path().join("registry.json");
    std::fs::write(&registry, "{ not json").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_cliport"))
        .arg("--registry")
        .arg(&registry)
        .arg("list")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        // A backtrace would be more than the one line promised.
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        stderr_of(&output),
        format!(
            "cliport: invalid porter registry {}: failed to parse porter registry: {CAUSE}\n",
            registry.display()
        )
    );
}

fn cliport(registry: &std::path::Path, arguments: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cliport"))
        .arg("--registry")
        .arg(registry)
        .args(arguments)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

#[test]
fn cliport_refuses_to_install_a_missing_or_non_executable_binary() {
    let directory = tempfile::tempdir().unwrap();
    let registry = directory.path().join("registry.json");
    let missing = directory.path().join("no-such-gh");
    let output = cliport(
        &registry,
        &["install", "gh", "--bin", missing.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        stderr_of(&output),
        format!(
            "cliport: {} does not exist: install the CLI in the Porter container first (`command -v NAME` prints its path)\n",
            missing.display()
        )
    );
    let text_file = directory.path().join("gh");
    std::fs::write(&text_file, "not a program").unwrap();
    let output = cliport(
        &registry,
        &["install", "gh", "--bin", text_file.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr_of(&output).contains("is not an executable file"),
        "{output:?}"
    );
    assert!(!registry.exists(), "nothing was registered");
}

#[test]
fn cliport_warns_about_a_placeholder_credential_without_printing_it() {
    let directory = tempfile::tempdir().unwrap();
    let registry = directory.path().join("registry.json");
    for (value, warned) in [
        ("ghp_…", true),
        ("<your token>", true),
        ("YOUR_GITHUB_TOKEN", true),
        ("ghp_16C7e42F292c6912E7710c838347Ae178B4a", false),
    ] {
        let output = cliport(
            &registry,
            &[
                "install",
                "gh",
                "--bin",
                "/bin/sh",
                "--env",
                &format!("GH_TOKEN={value}"),
            ],
        );
        assert!(output.status.success(), "{output:?}");
        let stderr = stderr_of(&output);
        assert_eq!(
            stderr.contains("GH_TOKEN looks like a placeholder"),
            warned,
            "{value}: {stderr}"
        );
        assert!(
            !stderr.contains(value),
            "the value is never printed: {stderr}"
        );
    }
    let output = cliport(&registry, &["env", "gh", "GH_TOKEN=changeme"]);
    assert!(output.status.success(), "{output:?}");
    assert!(stderr_of(&output).contains("GH_TOKEN looks like a placeholder"));
    let output = cliport(&registry, &["env", "gh", "GH_TOKEN="]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stderr_of(&output),
        "",
        "removing a variable warns about nothing"
    );
}

/// A registered CLI whose binary is missing is named at start (one line with the CLI
/// and the path), not discovered on the first call. The malformed tokens file after it
/// stops Porter right after the registry is loaded.
#[test]
fn porter_names_a_registered_cli_whose_binary_is_missing_at_start() {
    let directory = tempfile::tempdir().unwrap();
    let registry = directory.path().join("registry.json");
    let mut contents = porter_protocol::registry::Registry::default();
    contents.clis.insert("true".into(), cli("/bin/true"));
    contents
        .clis
        .insert("gh".into(), cli("/nonexistent/bin/gh"));
    std::fs::write(&registry, contents.to_json()).unwrap();
    let tokens = directory.path().join("tokens.json");
    std::fs::write(&tokens, "{ not json").unwrap();
    let output = porter(directory.path(), &registry, Some(&tokens));
    let stderr = stderr_of(&output);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("registered CLI cannot run"))
        .collect();
    assert_eq!(warnings.len(), 1, "only gh is missing: {stderr}");
    assert!(
        warnings[0].contains("gh") && warnings[0].contains("/nonexistent/bin/gh does not exist"),
        "{stderr}"
    );
}
