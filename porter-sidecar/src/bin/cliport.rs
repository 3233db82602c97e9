//! `cliport`: manage Porter's registry in local mode and read its audit log.

use std::{io::Read, path::PathBuf, process::ExitCode};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use porter::manage;
use porter_protocol::registry::{CliEntry, OAuth2, SecretSource};

/// Manage the credentials Porter injects (local mode) and inspect its audit log. Edits
/// the same registry file the operator renders; a running porter picks changes up by
/// itself. The CLI itself runs in the sandbox: install it there (or in the sandbox
/// image); Porter only needs to know its hosts and secret.
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
    /// Register (or replace) a credential:
    /// `cliport install gh --host api.github.com --host github.com --secret-stdin --placeholder-env GH_TOKEN --git`.
    Install(Box<Install>),
    /// List registered credentials (where each secret comes from, never its value).
    List,
    /// Unregister a credential.
    Remove { name: String },
    /// Print the last audit lines.
    Log {
        #[arg(long, default_value_t = 20)]
        last: usize,
    },
}

#[derive(Debug, Args)]
struct Install {
    /// The CLI's name (what the audit log and `list` show).
    name: String,
    /// A host (`name` or `name:port`) the credential may reach (repeatable, at least one).
    #[arg(long = "host", required = true)]
    hosts: Vec<String>,
    /// The secret is in this file (read by Porter at every reload).
    #[arg(long, group = "secret")]
    secret_file: Option<String>,
    /// The secret is this variable of Porter's environment.
    #[arg(long, group = "secret")]
    secret_env: Option<String>,
    /// Read the secret from stdin (kept in the registry file, mode 0600; it never
    /// appears in the shell's history).
    #[arg(long, group = "secret")]
    secret_stdin: bool,
    /// Where the secret goes on the wire (repeatable): `authorization` (Bearer, token,
    /// Basic — the default), `header:NAME`, `query:NAME`.
    #[arg(long = "inject", value_name = "PLACE")]
    inject: Vec<String>,
    /// Variable a sandbox command gets holding the placeholder (repeatable): `GH_TOKEN`.
    #[arg(long = "placeholder-env", value_name = "VARIABLE")]
    placeholder_env: Vec<String>,
    /// git over HTTPS: git's credential helper answers the placeholder for the hosts.
    #[arg(long)]
    git: bool,
    /// A request a role may make (repeatable): `ROLE:METHOD[,METHOD…]:PATH`, PATH with
    /// `*` within a segment and `**` for any segments. None: any request to the hosts.
    #[arg(long = "allow", value_name = "ROLE:METHODS:PATH")]
    allow: Vec<String>,
    /// OAuth 2.0 refresh held by Porter: the token endpoint (its host must be a --host);
    /// the secret is then the refresh token.
    #[arg(long, requires = "oauth2_client_id")]
    oauth2_token_url: Option<String>,
    /// OAuth 2.0 client id.
    #[arg(long, requires = "oauth2_token_url")]
    oauth2_client_id: Option<String>,
    /// OAuth 2.0 client secret, read from this file.
    #[arg(long, requires = "oauth2_token_url")]
    oauth2_client_secret_file: Option<String>,
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

fn secret(install: &Install) -> Result<SecretSource> {
    Ok(match (&install.secret_file, &install.secret_env) {
        (Some(path), _) => SecretSource::File(path.clone()),
        (_, Some(variable)) => SecretSource::Env(variable.clone()),
        _ if install.secret_stdin => {
            let mut value = String::new();
            std::io::stdin()
                .take(64 * 1024)
                .read_to_string(&mut value)
                .context("failed to read the secret from stdin")?;
            let value = value.trim_end_matches(['\n', '\r']).to_owned();
            if let Some(reason) = manage::placeholder_reason(&value) {
                eprintln!(
                    "cliport: warning: {}'s secret looks like a placeholder ({reason}); requests will fail to authenticate until it is the real value",
                    install.name
                );
            }
            SecretSource::Value(value)
        }
        _ => bail!("name the secret: --secret-file PATH, --secret-env VARIABLE or --secret-stdin"),
    })
}

fn entry(install: &Install) -> Result<CliEntry> {
    let mut requests = std::collections::BTreeMap::<String, Vec<_>>::new();
    for text in &install.allow {
        let (role, rule) = manage::parse_rule(text)?;
        requests.entry(role).or_default().push(rule);
    }
    let oauth2 = match (&install.oauth2_token_url, &install.oauth2_client_id) {
        (Some(token_url), Some(client_id)) => Some(OAuth2 {
            token_url: token_url.clone(),
            client_id: client_id.clone(),
            client_secret: install
                .oauth2_client_secret_file
                .clone()
                .map(SecretSource::File),
            placeholder_ttl_seconds: None,
        }),
        _ => None,
    };
    Ok(CliEntry {
        hosts: install.hosts.clone(),
        secret: secret(install)?,
        inject: install
            .inject
            .iter()
            .map(|text| manage::parse_inject(text))
            .collect::<Result<_, _>>()?,
        oauth2,
        placeholder_env: install.placeholder_env.clone(),
        git: install.git,
        requests,
        mode: None,
    })
}

fn run(arguments: Arguments) -> Result<()> {
    let path = &arguments.registry;
    match arguments.command {
        Command::Install(install) => {
            let entry = entry(&install)?;
            let mut registry = manage::load(path)?;
            manage::install(&mut registry, &install.name, entry)?;
            manage::save(path, &registry)
                .with_context(|| format!("failed to install {}", install.name))?;
            println!("installed {}", install.name);
        }
        Command::List => print!("{}", manage::list(&manage::load(path)?)),
        Command::Remove { name } => {
            let mut registry = manage::load(path)?;
            manage::remove(&mut registry, &name)?;
            manage::save(path, &registry)?;
            println!("removed {name}");
        }
        Command::Log { last } => {
            for line in manage::tail(&arguments.audit_log, last)? {
                println!("{line}");
            }
        }
    }
    Ok(())
}
