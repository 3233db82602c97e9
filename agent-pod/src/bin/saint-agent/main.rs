//! `saint-agent`: parses the command line, sets up logging and traces, and dispatches:
//! `run` (the wiring, `run.rs`), `up` (`up_command.rs`), and a person's records
//! (`ledger`, `outcomes`, `erase`, `export`: `records.rs`). The runtime itself is the
//! `saint_agent` library.

mod records;
mod run;
mod up_command;

use crate::{
    records::{erase, export, print_ledger, print_outcomes},
    run::{RunExtras, run},
    up_command::up,
};
use std::{net::SocketAddr, path::PathBuf};

use clap::{Parser, Subcommand};
use saint_agent::{config_watch::ConfigStore, runtime::process_env, telemetry};
use saint_sandbox::local_porter::LocalPorterMode;

/// The Saint agent runtime: one bot serving a whole company, each person by their role.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bot: load the config, serve the HTTP channel, talk to the configured model.
    ///
    /// The model endpoint comes from `model.baseUrl` in the config (or SAINT_MODEL_BASE_URL);
    /// its API key from the environment variable named by `model.apiKeyEnv`
    /// (normally SAINT_MODEL_API_KEY). The HTTP channel's bearer token comes from the
    /// variable named by the http channel's `secretEnv.token`.
    Run(RunArgs),
    /// Start a ready bot on this machine with a chat page: the example company (Ana the
    /// owner, Marko, Ivan, and strangers), its files under your data directory, its own
    /// Porter and bubblewrap sandboxes; prints the page's address.
    ///
    /// The model is found in this order: SAINT_MODEL_BASE_URL (with SAINT_MODEL_PROVIDER
    /// `anthropic`|`openai`, SAINT_MODEL_NAME, SAINT_MODEL_API_KEY); else the bot's own
    /// Anthropic endpoint when SAINT_MODEL_API_KEY is set; else a local Ollama on
    /// 127.0.0.1:11434 (SAINT_OLLAMA_URL). With none the bot still starts, and the page
    /// and the log say what to set.
    Up(UpArgs),
    /// Erase everything kept about one person: their transcripts (their sessions, the
    /// group messages they wrote, their jobs' and sub-agents' sessions), attachments,
    /// memory notes and index rows, inbox and outbox rows and scheduled jobs; their usage
    /// lines keep their costs under a pseudonym. Prints what was removed. Refused while
    /// an agent runs on the workspace (in a cluster, set `erase: true` on the Contact).
    Erase(PersonArgs),
    /// Write everything kept about one person to one zip archive.
    Export {
        #[command(flatten)]
        person: PersonArgs,
        /// The archive to write.
        #[arg(long)]
        output: PathBuf,
    },
    /// Validate a config file and exit (0 if valid).
    CheckConfig {
        /// Rendered bot config (bot-config.json).
        #[arg(long, env = "SAINT_CONFIG")]
        config: PathBuf,
    },
    /// Print what became of each message the channels received, oldest first, one JSON
    /// object a line: answered, refused (the sender was told why), ignored or failed,
    /// with the reason, or pending while it waits. Safe while the bot runs.
    Outcomes(OutcomesArgs),
    /// Print what the bot did for people and what it cost, oldest first: model calls
    /// (with tokens and cost), tool calls, approvals and Porter's request decisions
    /// (host, method, path, allowed or refused). A person's costs sum to their
    /// `saint_llm_cost_usd_total`. Safe while the bot runs.
    Ledger(LedgerArgs),
}

#[derive(clap::Args)]
struct LedgerArgs {
    /// Workspace directory of the bot (its `logs/usage.jsonl`, and in a pod Porter's
    /// `logs/porter.jsonl`).
    #[arg(long, env = "SAINT_WORKSPACE")]
    workspace: PathBuf,
    /// Porter's audit log besides `logs/porter.jsonl` (one machine: the state
    /// directory's `porter-control/audit.jsonl`); repeatable.
    #[arg(long = "porter-audit")]
    porter_audits: Vec<PathBuf>,
    /// Only this person (contact slug).
    #[arg(long)]
    contact: Option<String>,
    /// Only this role.
    #[arg(long)]
    role: Option<String>,
    /// Only turns started so (`message`, `cron`, `heartbeat`, `subagent`); leaves out
    /// Porter's lines, which name no trigger.
    #[arg(long)]
    trigger: Option<String>,
    /// From this time on (RFC 3339, `2026-11-01T00:00:00Z`).
    #[arg(long)]
    since: Option<jiff::Timestamp>,
    /// Before this time (RFC 3339).
    #[arg(long)]
    until: Option<jiff::Timestamp>,
    /// `jsonl` (one object a line) or `csv` (a header row, then a row an entry).
    #[arg(long, value_enum, default_value_t = LedgerFormat::Jsonl)]
    format: LedgerFormat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LedgerFormat {
    Jsonl,
    Csv,
}

#[derive(clap::Args)]
struct OutcomesArgs {
    /// Workspace directory of the bot.
    #[arg(long, env = "SAINT_WORKSPACE")]
    workspace: PathBuf,
    /// Only messages after this one (the `id` of the last line read).
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// At most this many lines.
    #[arg(long, default_value_t = 10_000)]
    limit: usize,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Rendered bot config (bot-config.json); reloaded when it changes.
    #[arg(long, env = "SAINT_CONFIG")]
    config: PathBuf,
    /// Workspace directory (memory, sessions, logs; the persona files the config's
    /// persona directory does not hold, or all of them without one).
    #[arg(long, env = "SAINT_WORKSPACE")]
    workspace: PathBuf,
    /// Address of the HTTP channel. Default: loopback on the HTTP channel's
    /// `settings.port` (8080 when it names none) — on a laptop the bot is not offered to
    /// the network unless asked (the operator sets all addresses in the pod).
    #[arg(long, env = "SAINT_LISTEN")]
    listen: Option<SocketAddr>,
    /// Address of `/metrics` and of the `/readyz` that says why (never served on the
    /// HTTP address: they name people, roles and settings).
    #[arg(long, env = "SAINT_METRICS_LISTEN", default_value = "127.0.0.1:9090")]
    metrics_listen: SocketAddr,
    /// A name the bot is reached by (a webhook Ingress host, this machine's name on the
    /// network): requests naming any other `Host` are refused with 421. Loopback names
    /// are always answered; past loopback also IP addresses and, in a pod, the bot's
    /// Service names. Repeat it, or list names comma-separated in SAINT_PUBLIC_HOSTS.
    #[arg(
        long = "public-host",
        env = "SAINT_PUBLIC_HOSTS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    public_hosts: Vec<String>,
    /// Model base URL overriding the config's `model.baseUrl`.
    #[arg(long, env = "SAINT_MODEL_BASE_URL")]
    model_base_url: Option<String>,
    /// How often the config file is checked for changes while idle, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    config_poll_ms: u64,
    /// How long shutdown waits for running turns, in seconds.
    #[arg(long, default_value_t = 25)]
    drain_seconds: u64,
    /// Whether to run Porter (the CLI credential broker) as a child: `auto` starts it
    /// when sandbox.backend is local and no Porter listens on the configured socket.
    #[arg(long, env = "SAINT_LOCAL_PORTER", value_enum, default_value_t = LocalPorterMode::Auto)]
    local_porter: LocalPorterMode,
    /// Porter's registry (CLIs and their credentials) for the Porter this agent runs;
    /// created empty in the sandbox state directory when not given. Add CLIs with
    /// `cliport --registry FILE install NAME --bin PATH --env KEY=VALUE`.
    #[arg(long, env = "SAINT_PORTER_REGISTRY", value_name = "FILE")]
    porter_registry: Option<PathBuf>,
    /// The porter binary (default: `porter` next to saint-agent).
    #[arg(long, env = "SAINT_PORTER_BIN")]
    porter_bin: Option<PathBuf>,
    /// Serve the chat page at /chat on the HTTP address (open it as
    /// /chat#token=<the HTTP channel's token>).
    #[arg(long)]
    chat_page: bool,
}

#[derive(clap::Args)]
struct PersonArgs {
    /// Rendered bot config (bot-config.json): the person's identities.
    #[arg(long, env = "SAINT_CONFIG")]
    config: PathBuf,
    /// The bot's workspace directory.
    #[arg(long, env = "SAINT_WORKSPACE")]
    workspace: PathBuf,
    /// The person's contact slug (a Contact already removed from the config is found by
    /// what the workspace remembers).
    #[arg(long)]
    contact: String,
}

#[derive(clap::Args)]
struct UpArgs {
    /// Where bots' files live (bot file, persona, workspace, Porter registry, the page's
    /// token). Default: $XDG_DATA_HOME/saint, else ~/.local/share/saint.
    #[arg(long, env = "SAINT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Address of the chat page and the HTTP API. Past loopback the page has no person
    /// picker: each person opens their own link, printed at start.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Address of `/metrics` and of the `/readyz` that says why (never on the page's
    /// address).
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_listen: SocketAddr,
    /// A name the page is reached by besides loopback names and IP addresses (this
    /// machine's name on the network); other `Host` names are refused. Repeatable.
    #[arg(long = "public-host", value_name = "NAME")]
    public_hosts: Vec<String>,
    /// Do not build Porter and the sandbox runner (they are built under `cargo run`).
    #[arg(long)]
    no_build: bool,
    /// Run without memory (skips fetching the embedding model).
    #[arg(long)]
    no_memory: bool,
    /// Start over: remove the bot's files (bot file, persona, workspace with its memory
    /// and conversations, Porter registry, page token) and its sandbox state, then set
    /// the example bot up afresh. Refused while the bot runs.
    #[arg(long)]
    reset: bool,
}

fn main() -> std::process::ExitCode {
    // saint-media's extraction child (hidden): it limits itself and parses one hostile
    // file, so none of the agent (logging, allocator, flags) is set up for it.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|argument| argument == saint_media::CHILD_SUBCOMMAND)
    {
        return saint_media::child_main();
    }
    let cli = Cli::parse();
    let telemetry = match init_logging_and_telemetry(&cli.command) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("saint-agent: {:#}", anyhow::Error::from(error));
            return std::process::ExitCode::FAILURE;
        }
    };
    // Before any thread starts: the memory model's freed buffers must leave the
    // process, and all threads share one heap (an idle bot is what a fleet multiplies).
    saint_memory::allocator::return_large_blocks_at_free();
    saint_memory::allocator::share_one_heap();
    // In the pod the agent and Porter's CLIs run as different uids in one group: what
    // the agent creates on the workspace (a folder a CLI then clones into) must be
    // writable for the group, and nothing is for other users.
    if matches!(cli.command, Command::Run(_)) {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o007));
    }
    let exporting_traces = telemetry.is_some();
    let result = match cli.command {
        Command::CheckConfig { config } => ConfigStore::load(&config)
            .map(|_| ())
            .map_err(anyhow::Error::from),
        Command::Run(arguments) => run(
            arguments,
            process_env(),
            RunExtras {
                require_model: true,
                exporting_traces,
                ..RunExtras::default()
            },
        ),
        Command::Up(arguments) => up(arguments),
        Command::Erase(person) => erase(person),
        Command::Export { person, output } => export(person, output),
        Command::Outcomes(arguments) => print_outcomes(&arguments),
        Command::Ledger(arguments) => print_ledger(&arguments),
    };
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One clear line, not a backtrace.
            eprintln!("saint-agent: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The log on stderr (compact for `up`'s person at a terminal, JSON for `run`'s log
/// collector), and for `run` the OTLP exporter its bot file names. `RUST_LOG` filters
/// the log only: the exported spans are the runtime's own, whatever the log level.
fn init_logging_and_telemetry(
    command: &Command,
) -> Result<Option<telemetry::Telemetry>, telemetry::TelemetryError> {
    use tracing_subscriber::{
        Layer, filter::FilterExt, layer::SubscriberExt, util::SubscriberInitExt,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        .and(tracing_subscriber::filter::filter_fn(|metadata| {
            metadata.target() != telemetry::TARGET
        }));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colour for a person at a terminal only, never escape codes in a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = if matches!(command, Command::Up(_)) {
        logs.compact().with_filter(filter).boxed()
    } else {
        logs.json().with_filter(filter).boxed()
    };
    let registry = tracing_subscriber::registry().with(logs);
    let otlp = match command {
        Command::Run(arguments) => telemetry::otlp_of_file(&arguments.config),
        _ => None,
    };
    let Some((bot, otlp)) = otlp else {
        registry.init();
        return Ok(None);
    };
    match telemetry::layer(&bot, &otlp, &|name| std::env::var(name).ok()) {
        Ok((exporter, telemetry)) => {
            registry.with(exporter).init();
            tracing::info!(endpoint = %otlp.endpoint, "traces are exported over OTLP");
            Ok(Some(telemetry))
        }
        Err(error) => {
            registry.init();
            Err(error)
        }
    }
}
