//! The README's `cargo run … -p saint-agent -- up` builds the agent, and `up` then
//! builds Porter and the sandbox runner with it (`cargo build -p saint-agent -p porter
//! -p saint-sandbox-runner`, see `saint_agent::up::BUILT_TOGETHER`). Cargo resolves
//! features per invocation: when the second selection adds a feature to a crate the
//! agent also uses, that crate and everything above it compile twice (the first `up`
//! used to spend most of a second build on tokio, serde, syn, futures-util, …). This
//! holds the two resolutions equal for every crate in the agent's graph, with cargo's
//! own resolver (`cargo tree`, offline).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
};

use saint_agent::up::BUILT_TOGETHER;

/// Each package of the resolved graph (name and version, with its path for workspace
/// crates) and the feature sets it is built with (two when build scripts and the
/// target use it with different features).
fn resolved_features(packages: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = Command::new(cargo);
    command.current_dir(&workspace).args([
        "tree",
        "--locked",
        "--offline",
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}|{f}",
    ]);
    for package in packages {
        command.args(["--package", package]);
    }
    let output = command.output().expect("failed to run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree {packages:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut resolved: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let line = line.trim_end_matches(" (*)").trim();
        if let Some((package, features)) = line.split_once('|') {
            resolved
                .entry(package.trim().to_string())
                .or_default()
                .insert(features.trim().to_string());
        }
    }
    resolved
}

#[test]
fn the_companions_build_resolves_the_agents_crates_with_the_agents_features() {
    let agent_alone = resolved_features(&["saint-agent"]);
    let together = resolved_features(&BUILT_TOGETHER);
    assert!(
        agent_alone.len() > 100,
        "cargo tree listed only {} packages for saint-agent",
        agent_alone.len()
    );
    let differing: Vec<String> = agent_alone
        .iter()
        .filter(|(package, features)| together.get(*package) != Some(*features))
        .map(|(package, features)| {
            format!(
                "{package}: {features:?} for `cargo run -p saint-agent`, {:?} for up's build",
                together.get(package)
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "these crates would compile twice on the first `up` (give the agent the same \
         features in agent-pod/Cargo.toml):\n{}",
        differing.join("\n")
    );
    // What the second build adds is only Porter's and the runner's own crates.
    for companion in ["porter", "saint-sandbox-runner"] {
        assert!(
            together
                .keys()
                .any(|package| package.starts_with(&format!("{companion} "))),
            "{companion} is not in up's build"
        );
    }
}
