//! `cliport`: manage the Porter registry in local mode and read the audit log.

use std::{collections::BTreeMap, path::PathBuf, process::ExitCode};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use porter::manage;

/// Manage the CLIs Porter runs (local mode) and inspect its audit log. Edits the same
/// registry file the operator renders; a running porter picks changes up by itself.
#[derive(Debug, Parser)]
#[command(version)]
struct Arguments {
    /// The registry file.
    #[arg(
        long,
        env = "PORTER_REGISTRY",
        default_value = "/etc/saint/porter-registry.json"
    )]
    registry: PathBuf,
    /// The audit log (for `log`).
    #[arg(
        long,
        env = "PORTER_AUDIT_LOG",
        default_value = "/var/lib/saint/workspace/logs/porter.jsonl"
    )]
    audit_log: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Register (or replace) a CLI: `cliport install gh --bin /usr/bin/gh --env GH_TOKEN=...`.
    Install {
        name: String,
        /// Absolute path of the real binary.
        #[arg(long)]
        bin: String,
        /// Literal variable KEY=VALUE (repeatable; treated as a credential).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Variable read from a file, KEY=PATH (repeatable).
        #[arg(long = "env-file", value_name = "KEY=PATH")]
        env_file: Vec<String>,
        /// Seconds before the CLI is terminated.
        #[arg(long, default_value_t = porter_protocol::registry::DEFAULT_TIMEOUT_SECONDS)]
        timeout: u64,
        /// Allow pattern over leading arguments (repeatable).
        #[arg(long)]
        allow: Vec<String>,
        /// Deny pattern over leading arguments (repeatable; deny wins).
        #[arg(long)]
        deny: Vec<String>,
    },
    /// List registered CLIs (variable names only, never values).
    List,
    /// Unregister a CLI.
    Remove { name: String },
    /// Set literal variables of a CLI (`KEY=` removes KEY).
    Env {
        name: String,
        #[arg(value_name = "KEY=VALUE", required = true)]
        pairs: Vec<String>,
    },
    /// Print the last audit lines.
    Log {
        #[arg(long, default_value_t = 20)]
        last: usize,
    },
}

fn pairs(texts: &[String]) -> Result<BTreeMap<String, String>> {
    texts
        .iter()
        .map(|text| manage::parse_pair(text).map_err(Into::into))
        .collect()
}

fn main() -> ExitCode {
    match run(Arguments::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line, each cause once (`{:#}` joins anyhow's chain with ": ").
            eprintln!("cliport: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Warns (without printing the value) about credential values that look like examples.
fn warn_placeholders(name: &str, env: &std::collections::BTreeMap<String, String>) {
    for (key, value) in env {
        if let Some(reason) = manage::placeholder_reason(value) {
            eprintln!(
                "cliport: warning: {name}'s {key} looks like a placeholder ({reason}); calls will fail to authenticate until it is set to the real value"
            );
        }
    }
}

fn run(arguments: Arguments) -> Result<()> {
    let path = &arguments.registry;
    match arguments.command {
        Command::Install {
            name,
            bin,
            env,
            env_file,
            timeout,
            allow,
            deny,
        } => {
            manage::check_binary(&bin)?;
            let env = pairs(&env)?;
            warn_placeholders(&name, &env);
            let mut registry = manage::load(path)?;
            let mut entry = manage::entry(&bin, env, pairs(&env_file)?, timeout);
            entry.args.allow = allow;
            entry.args.deny = deny;
            manage::install(&mut registry, &name, entry)?;
            manage::save(path, &registry).with_context(|| format!("failed to install {name}"))?;
            println!("installed {name}");
        }
        Command::List => print!("{}", manage::list(&manage::load(path)?)),
        Command::Remove { name } => {
            let mut registry = manage::load(path)?;
            manage::remove(&mut registry, &name)?;
            manage::save(path, &registry)?;
            println!("removed {name}");
        }
        Command::Env { name, pairs: texts } => {
            let mut registry = manage::load(path)?;
            let pairs: Vec<(String, String)> = texts
                .iter()
                .map(|text| manage::parse_pair(text))
                .collect::<Result<_, _>>()?;
            // An empty value removes the variable: only values being set are judged.
            let set: BTreeMap<String, String> = pairs
                .iter()
                .filter(|(_, value)| !value.is_empty())
                .cloned()
                .collect();
            warn_placeholders(&name, &set);
            manage::set_env(&mut registry, &name, &pairs)?;
            manage::save(path, &registry)?;
            println!("updated {name}");
        }
        Command::Log { last } => {
            for line in manage::tail(&arguments.audit_log, last)? {
                println!("{line}");
            }
        }
    }
    Ok(())
}
