//! `saint-agent`: parses flags, loads the config, opens the stores, serves the HTTP
//! channel and metrics, drains on SIGTERM.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use clap::{Parser, Subcommand};
use saint_agent::{
    channel::{
        events::ChannelEvents,
        host_guard::AllowedHosts,
        http::{AppState, app, drain_turns, metrics_app},
        hub::ChannelHub,
        outbox::DurableOutbox,
        startup::channel_problems,
        state::{PageSettings, PersonTokens},
        workers::start_workers,
    },
    clock::Clock,
    config_watch::{self, ConfigStore},
    heartbeat, mcp_servers,
    metering::Metering,
    model_discovery::{self, ModelChoice},
    persona,
    prompt::MAX_PROMPT_FILE_BYTES,
    runtime::{
        EnvLookup, ModelAccess, Outlets, Runtime, RuntimeOptions, endpoint_for, process_env,
    },
    schedule::Schedule,
    session::SessionStore,
    starter::{BotFiles, Starter},
    subagents::Subagents,
    telemetry, up,
};
use saint_config::{ChannelKind, ErrorChain, SandboxBackend};
use saint_sandbox::{
    backend,
    local_porter::{self, LocalPorterMode, LocalPorterOptions},
    state_lock,
};
use saint_tools::{
    exec::{ExecLimits, ExecTool},
    memory_get::MemoryGetTool,
    memory_search::MemorySearchTool,
    message::MessageTool,
    process::ProcessTool,
    registry::ToolSet,
};
use tokio_util::sync::CancellationToken;

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

/// What `up` adds to a plain `run`.
#[derive(Default)]
struct RunExtras {
    /// Applied to every config read (the model `up` found).
    overlay: Option<config_watch::Overlay>,
    /// Lines for the log and the chat page.
    notices: Vec<String>,
    /// Lines the person who started the bot must not miss: logged as warnings and shown
    /// first on the page.
    warnings: Vec<String>,
    /// Each contact's own page token, when the page has no person picker.
    person_tokens: Option<PersonTokens>,
    /// Serve the chat page; its token is printed in the page's address.
    chat_token: Option<String>,
    /// Whether a model that cannot be reached stops the start (`run`) or is reported (`up`).
    require_model: bool,
    /// Whether this process exports traces (`run` with `telemetry.otlp`, set up in
    /// `main` before any thread starts).
    exporting_traces: bool,
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

fn print_ledger(arguments: &LedgerArgs) -> anyhow::Result<()> {
    let sources =
        saint_agent::ledger::Sources::of_workspace(&arguments.workspace, &arguments.porter_audits);
    let query = saint_agent::ledger::Query {
        contact: arguments.contact.clone(),
        role: arguments.role.clone(),
        trigger: arguments.trigger.clone(),
        since: arguments.since,
        until: arguments.until,
    };
    let ledger = saint_agent::ledger::read(&sources, &query)?;
    if ledger.unreadable_lines > 0 {
        eprintln!(
            "saint-agent: {} log lines were not JSON (a line cut by a crash?) and are left out",
            ledger.unreadable_lines
        );
    }
    let output = std::io::stdout().lock();
    match arguments.format {
        LedgerFormat::Jsonl => {
            let mut writer = std::io::BufWriter::new(output);
            saint_agent::ledger::write_jsonl(&ledger.entries, &mut writer)?;
            std::io::Write::flush(&mut writer)?;
        }
        LedgerFormat::Csv => saint_agent::ledger::write_csv(&ledger.entries, output)?,
    }
    Ok(())
}

fn print_outcomes(arguments: &OutcomesArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let path = arguments
        .workspace
        .join("sessions")
        .join("transcripts.sqlite3");
    anyhow::ensure!(path.exists(), "no transcripts at {}", path.display());
    let store = SessionStore::open(path)?;
    let outcomes = store.queue("read the inbox", |transaction| {
        saint_channels::queue::outcomes(transaction, arguments.after, arguments.limit)
    })?;
    let mut output = std::io::stdout().lock();
    for outcome in outcomes {
        writeln!(output, "{}", serde_json::to_string(&outcome)?)?;
    }
    Ok(())
}

fn erase(arguments: PersonArgs) -> anyhow::Result<()> {
    use saint_agent::erasure;
    let config = saint_agent::config_watch::load_file(&arguments.config)?;
    let _lock = erasure::lock_workspace(&arguments.workspace)?;
    let person = erasure::Person::find(&arguments.workspace, Some(&config), &arguments.contact)?;
    let started = std::time::Instant::now();
    let report = erasure::erase(&arguments.workspace, &person)?;
    println!(
        "erased {} ({} identities) in {} ms",
        person.slug,
        person.identities.len(),
        started.elapsed().as_millis()
    );
    print!("{report}");
    Ok(())
}

fn export(arguments: PersonArgs, output: PathBuf) -> anyhow::Result<()> {
    use saint_agent::erasure;
    let config = saint_agent::config_watch::load_file(&arguments.config)?;
    let _lock = erasure::lock_workspace(&arguments.workspace)?;
    let person = erasure::Person::find(&arguments.workspace, Some(&config), &arguments.contact)?;
    let report = erasure::export::export(&arguments.workspace, &person, &output)?;
    println!(
        "exported {}: {} messages, {} entries to {}",
        person.slug,
        report.messages,
        report.entries.len(),
        output.display()
    );
    Ok(())
}

fn up(arguments: UpArgs) -> anyhow::Result<()> {
    let env = process_env();
    let starter = Starter::embedded().context("the embedded starter bot is corrupt")?;
    let data = match arguments.data_dir {
        Some(directory) => directory,
        None => up::data_directory(&env)?,
    };
    let files = BotFiles::new(&data, starter.name());
    let mut notices = Vec::new();
    if arguments.reset {
        for directory in saint_agent::starter::reset(&files, &*env)? {
            notices.push(format!("reset: removed {}", directory.display()));
        }
    }
    let companion_problems = companion_problems(&env, arguments.no_build);
    let companions_ready = companion_problems.is_empty();
    notices.extend(companion_problems);
    let embedding_model = embedding_model(&env, arguments.no_memory, &mut notices);
    let installed = starter.install(&files, embedding_model.as_deref())?;
    notices.extend(install_notices(&installed, &files));
    if companions_ready {
        notices.extend(up::unregistered_clis(
            &files,
            &saint_agent::config_watch::load_file(&files.config)?,
        )?);
    }
    let token = up::chat_token(&files.chat_token)?;
    let config = saint_agent::config_watch::load_file(&files.config)?;
    // The person picker lets whoever holds the page's token speak as anyone: fine for
    // the one person at this machine, not for a page others reach.
    let mut warnings = Vec::new();
    let person_tokens = if arguments.listen.ip().is_loopback() {
        None
    } else {
        warnings.push(up::listening_warning(arguments.listen));
        Some(up::person_tokens(&files, &config)?)
    };
    let env = with_page_token(env, &config, &token)?;
    let model_overlay = discover_model(&config, &env, &mut notices, &mut warnings)?;
    let memory_model = embedding_model.clone();
    let overlay: config_watch::Overlay = Arc::new(move |config| {
        if let Some(overlay) = &model_overlay {
            overlay.apply(config);
        }
        up::fit_memory(config, memory_model.as_deref());
    });
    let run_arguments = RunArgs {
        config: files.config.clone(),
        workspace: files.workspace.clone(),
        listen: Some(arguments.listen),
        metrics_listen: arguments.metrics_listen,
        model_base_url: None,
        config_poll_ms: 1000,
        drain_seconds: 25,
        local_porter: LocalPorterMode::Auto,
        // A registry named on the command line makes Porter required; without its
        // binary the bot still runs, without CLIs.
        porter_registry: companions_ready.then(|| files.porter_registry.clone()),
        porter_bin: None,
        chat_page: true,
        public_hosts: arguments.public_hosts,
    };
    run(
        run_arguments,
        env,
        RunExtras {
            overlay: Some(overlay),
            notices,
            warnings,
            person_tokens,
            chat_token: Some(token),
            require_model: false,
            exporting_traces: false,
        },
    )
}

/// What keeps Porter and the sandbox runner from working here; with `--no-build`,
/// without building them (`CARGO` hidden).
fn companion_problems(env: &EnvLookup, no_build: bool) -> Vec<String> {
    if no_build {
        let hide_cargo = env.clone();
        up::ensure_companions(
            &(Arc::new(move |name: &str| (name != "CARGO").then(|| hide_cargo(name)).flatten())
                as EnvLookup),
        )
    } else {
        up::ensure_companions(env)
    }
}

/// The embedding model's directory, or none (memory off) with a notice saying why.
fn embedding_model(env: &EnvLookup, no_memory: bool, notices: &mut Vec<String>) -> Option<PathBuf> {
    if no_memory {
        notices.push("memory: off (--no-memory)".to_string());
        return None;
    }
    match up::embedding_model(env) {
        Ok(directory) => Some(directory),
        Err(reason) => {
            notices.push(format!("memory: off — {reason}"));
            None
        }
    }
}

/// What installing the starter bot did to the user's files.
fn install_notices(installed: &saint_agent::starter::Installed, files: &BotFiles) -> Vec<String> {
    let mut notices = Vec::new();
    if installed.wrote_config {
        notices.push(format!(
            "bot file written: {} (edit it; the bot reloads it)",
            files.config.display()
        ));
    } else {
        notices.push(format!(
            "bot file: {} (yours, kept as it is)",
            files.config.display()
        ));
    }
    if !installed.left_out_channels.is_empty() {
        notices.push(format!(
            "channels {} of the example need a platform account: left out here; add them to the bot file with their secrets",
            installed.left_out_channels.join(", ")
        ));
    }
    notices
}

/// `env` with the page's token as the HTTP channel's token, unless the user set that
/// variable.
fn with_page_token(
    env: EnvLookup,
    config: &saint_config::BotConfig,
    token: &str,
) -> anyhow::Result<EnvLookup> {
    let token_variable = config
        .channels
        .iter()
        .find(|channel| channel.kind == ChannelKind::Http)
        .and_then(|channel| channel.secret_env.get("token").cloned())
        .context(
            "the bot file declares no http channel with secretEnv.token; the chat page needs one",
        )?;
    let token = token.to_string();
    Ok(Arc::new(move |name: &str| {
        env(name).or_else(|| (name == token_variable).then(|| token.clone()))
    }))
}

/// Finds the model `up` runs with and checks it answers; returns the overlay to apply
/// to every config read, if the model came from the environment or a local Ollama.
fn discover_model(
    config: &saint_config::BotConfig,
    env: &EnvLookup,
    notices: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<Option<model_discovery::ModelOverlay>> {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start tokio")?;
    let http = reqwest::Client::new();
    let discovery = tokio.block_on(model_discovery::discover(&config.model, env, &http))?;
    notices.push(discovery.summary.clone());
    // Before anyone writes: does the model answer, take the key and serve the model?
    // Said now rather than in the first person's turn.
    if !matches!(discovery.choice, ModelChoice::Missing(_)) {
        let mut effective = config.clone();
        if let ModelChoice::Overlay(overlay) = &discovery.choice {
            overlay.apply(&mut effective);
        }
        match endpoint_for(&effective.model, None, env) {
            Ok(endpoint) => {
                let check = tokio.block_on(model_discovery::check_model(
                    &endpoint,
                    &effective.model.name,
                    &http,
                ));
                if check.ok {
                    notices.push(check.message);
                } else {
                    warnings.push(check.message);
                }
            }
            Err(error) => warnings.push(format!("model check: {error}")),
        }
    }
    drop(tokio);
    // A local model is declared free; an unpriced remote one needs a price or the allowance.
    notices.extend(discovery.pricing_notice(config));
    Ok(match discovery.choice {
        ModelChoice::Overlay(overlay) => Some(overlay),
        ModelChoice::Config | ModelChoice::Missing(_) => None,
    })
}

/// The HTTP channel's address: `--listen` (or `SAINT_LISTEN`) when given — saying so
/// when it differs from the channel's `settings.port` — else loopback on that port.
fn listen_address(listen: Option<SocketAddr>, config: &saint_config::BotConfig) -> SocketAddr {
    let declared = match saint_agent::channel::startup::declared_http_port(config) {
        Ok(port) => port,
        Err(problem) => {
            tracing::warn!("{problem}");
            None
        }
    };
    match (listen, declared) {
        (Some(listen), Some(port)) if listen.port() != port && listen.port() != 0 => {
            tracing::warn!(
                "--listen {listen} overrides the http channel's settings.port {port}: listening on {listen}"
            );
            listen
        }
        (Some(listen), _) => listen,
        (None, port) => SocketAddr::from((
            [127, 0, 0, 1],
            port.unwrap_or(saint_agent::channel::startup::DEFAULT_HTTP_PORT),
        )),
    }
}

fn run(arguments: RunArgs, env: EnvLookup, mut extras: RunExtras) -> anyhow::Result<()> {
    let config = Arc::new(ConfigStore::load_with(
        &arguments.config,
        extras.overlay.clone(),
    )?);
    report_start_problems(&config, &arguments, &env, &mut extras)?;
    let workspace = create_workspace(&arguments.workspace)?;
    log_unprompted_work(&config.last_good(), &workspace);
    let store = Arc::new(SessionStore::open(
        workspace.join("sessions").join("transcripts.sqlite3"),
    )?);
    let metering = Arc::new(Metering::open(&workspace)?);
    let clock = Arc::new(Clock::from_env(|name| env(name))?);
    let options = RuntimeOptions {
        // Attachments are parsed by this binary's hidden `extract-document` child.
        media: std::env::current_exe()
            .ok()
            .map(|binary| saint_media::Extractor::new(binary, [saint_media::CHILD_SUBCOMMAND])),
        ..RuntimeOptions::default()
    };
    let model = ModelAccess::new(
        arguments.model_base_url.clone(),
        env.clone(),
        options.client.clone(),
    );
    let memory = start_memory(&workspace, &config.last_good())?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start tokio")?;
    let opened = Opened {
        config,
        workspace,
        store,
        metering,
        clock,
        options,
        model,
        memory,
    };
    tokio.block_on(run_agent(arguments, env, extras, opened))
}

/// What `run` opened before the async runtime started, handed to [`run_agent`].
struct Opened {
    config: Arc<ConfigStore>,
    workspace: PathBuf,
    store: Arc<SessionStore>,
    metering: Arc<Metering>,
    clock: Arc<Clock>,
    options: RuntimeOptions,
    model: ModelAccess,
    /// Memory (embedding model, index, watcher) must outlive the server.
    memory: Option<saint_memory::Memory>,
}

/// Logs what the person who started the bot must know before it serves; fails when no
/// model can be reached and `extras` requires one.
fn report_start_problems(
    config: &ConfigStore,
    arguments: &RunArgs,
    env: &EnvLookup,
    extras: &mut RunExtras,
) -> anyhow::Result<()> {
    if config.last_good().telemetry.otlp.is_some() && !extras.exporting_traces {
        // `up` starts its logging before it knows its bot file.
        extras.warnings.push(
            "telemetry.otlp: traces are exported only by `saint-agent run`, not by `up`"
                .to_string(),
        );
    }
    for warning in &extras.warnings {
        tracing::warn!("{warning}");
    }
    for notice in &extras.notices {
        tracing::info!("{notice}");
    }
    // Fail at start, not at the first message, when no model can be reached; `up` starts
    // anyway and says what to set.
    if let Err(error) = endpoint_for(
        &config.last_good().model,
        arguments.model_base_url.as_deref(),
        env,
    ) {
        if extras.require_model {
            return Err(error.into());
        }
        tracing::warn!("{error}");
    }
    persona::PersonaSources::check(&config.last_good(), MAX_PROMPT_FILE_BYTES).log();
    if let Some(warning) = config.last_good().unpriced_models_warning() {
        tracing::warn!("{warning}");
    }
    // One line per channel that cannot work as declared: nothing fails silently later.
    for problem in channel_problems(&config.last_good(), |name| env(name)) {
        tracing::warn!("{problem}");
    }
    Ok(())
}

/// Creates the workspace directory and returns its canonical path.
fn create_workspace(workspace: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(workspace)
        .with_context(|| format!("failed to create workspace {}", workspace.display()))?;
    workspace
        .canonicalize()
        .with_context(|| format!("failed to resolve workspace {}", workspace.display()))
}

/// What the bot does on its own, said once at start: its heartbeat and its skills.
fn log_unprompted_work(config: &saint_config::BotConfig, workspace: &Path) {
    match &config.heartbeat {
        Some(heartbeat) => tracing::info!(
            every_seconds = heartbeat.every_seconds,
            active_hours = ?heartbeat.active_hours.as_ref().map(|hours| format!("{}-{} {}", hours.start, hours.end, hours.timezone.as_deref().unwrap_or(&config.schedule.timezone))),
            role = %heartbeat.role,
            notify = ?heartbeat.notify,
            "heartbeat on"
        ),
        None => tracing::info!("no heartbeat configured"),
    }
    let skills = saint_tools::skills::SkillCatalog::load(workspace, config);
    tracing::info!(
        installed = ?skills.all().map(|skill| skill.name.as_str()).collect::<Vec<_>>(),
        "skills"
    );
}

/// A bot whose memory is enabled but cannot start (no model files) refuses to start
/// rather than answer without the memory it is supposed to have.
fn start_memory(
    workspace: &Path,
    config: &saint_config::BotConfig,
) -> anyhow::Result<Option<saint_memory::Memory>> {
    if !config.memory.enabled {
        tracing::info!("memory is disabled by the config: no memory tools");
        return Ok(None);
    }
    let memory = saint_memory::start(workspace, &config.memory)
        .context("failed to start memory (set memory.enabled: false to run without it)")?;
    Ok(Some(memory))
}

/// The async part of `run`: channels, tools, locks, Porter and the sandbox, then the
/// runtime, served until shutdown; then the sandboxes and Porter stop.
async fn run_agent(
    arguments: RunArgs,
    env: EnvLookup,
    mut extras: RunExtras,
    opened: Opened,
) -> anyhow::Result<()> {
    let Opened {
        config,
        workspace,
        store,
        metering,
        clock,
        options,
        model,
        memory,
    } = opened;
    let channels = channel_hub(&config, &env, &store, &metering, &workspace).await;
    let mut tools = ToolSet::builtin(&workspace, store.clone(), env.clone()).replace(Arc::new(
        MessageTool::new(Arc::new(DurableOutbox::new(channels.clone()))),
    ));
    // Work that runs on its own: scheduled jobs and sub-agents, each as the person
    // who started it.
    let schedule = Schedule::open(&workspace, channels.clone(), clock.clone())?;
    let subagents = Subagents::new();
    for tool in [schedule.tool(), subagents.tool()].into_iter().flatten() {
        tools = tools.replace(tool);
    }
    if let Some(memory) = &memory {
        tools = with_memory_tools(tools, memory);
    }
    let _locks = lock_agent(&config.last_good(), &workspace, &env)?;
    // One machine: the agent runs its own Porter unless another one listens.
    let porter_options = LocalPorterOptions {
        mode: arguments.local_porter,
        registry: arguments.porter_registry.clone(),
        binary: arguments.porter_bin.clone(),
    };
    let porter = local_porter::start_for_bot(
        &config.last_good(),
        &workspace,
        porter_options,
        env.as_ref(),
    )
    .await?;
    // Without a working sandbox `exec` stays the fail-closed placeholder and is
    // withheld from every role; it never runs unsandboxed.
    let sandbox = match &porter {
        Some(porter) => porter.exec_backend(&config.last_good(), workspace.clone(), env.as_ref()),
        None => backend::for_config(&config.last_good(), workspace.clone(), env.as_ref()).await,
    };
    let sandboxed =
        with_sandbox_tools(tools, sandbox, &options, &config, &mut extras.notices).await;
    let tools = with_started_tools(
        sandboxed.tools,
        &config,
        &workspace,
        &options,
        &sandboxed.mcp_parts,
        &mut extras.notices,
    )
    .await;
    // Approved top-ups credit the same accounts the runtime's budget checks read.
    let budgets = saint_agent::budget::SpendLedger::default();
    let tools = tools.replace(Arc::new(saint_agent::top_up::TopUpTool::new(
        store.clone(),
        budgets.clone(),
    )));
    let background = Background {
        schedule,
        subagents,
        clock,
        workspace: workspace.clone(),
    };
    let runtime = Runtime::new(
        config.clone(),
        store,
        model,
        tools,
        metering,
        workspace,
        options,
    )
    .with_sandbox_available(sandboxed.available)
    .with_spend_ledger(budgets);
    let runtime = Arc::new(runtime);
    background.subagents.attach(&runtime);
    set_outlets(&runtime, &channels);
    let served = serve(
        arguments, config, runtime, env, extras, channels, background,
    )
    .await;
    // Shutdown order: running turns have drained (serve), then the sandboxes stop,
    // then Porter, which their commands may have been calling.
    if let Some(sandboxes) = sandboxed.sandboxes {
        let stopped = sandboxes.shutdown().await;
        tracing::info!(stopped, "sandboxes stopped");
    }
    if let Some(porter) = porter {
        porter.stop().await;
    }
    served
}

/// Locks that keep a second agent off this one's sandboxes, Porter and workspace; held
/// until the agent exits.
struct AgentLocks {
    // Released in this order, the workspace's first.
    _workspace: state_lock::StateLock,
    _state: Option<state_lock::StateLock>,
}

fn lock_agent(
    config: &saint_config::BotConfig,
    workspace: &Path,
    env: &EnvLookup,
) -> anyhow::Result<AgentLocks> {
    // One agent per local state directory: a second one would reap this one's
    // sandboxes and replace its Porter.
    let state = if config.sandbox.backend == SandboxBackend::Local {
        let machine = backend::LocalMachine::from_environment(config, workspace, env.as_ref());
        Some(state_lock::lock_state_directory(&machine.state_directory)?)
    } else {
        None
    };
    // One agent per workspace, whatever the backend; `erase` and `export` wait for
    // it to stop. Taken after the state lock, whose refusal names the directory.
    let workspace = saint_agent::erasure::lock_workspace(workspace)?;
    Ok(AgentLocks {
        _workspace: workspace,
        _state: state,
    })
}

/// Channels other than HTTP: their transports, inbox and outbox. The `message` tool
/// sends through them.
async fn channel_hub(
    config: &Arc<ConfigStore>,
    env: &EnvLookup,
    store: &Arc<SessionStore>,
    metering: &Arc<Metering>,
    workspace: &Path,
) -> Arc<ChannelHub> {
    let lookup = env.clone();
    let channels = Arc::new(ChannelHub::from_config(
        &config.last_good(),
        Some(config.clone()),
        &move |name: &str| lookup(name),
        store.clone(),
        metering.clone(),
        workspace,
    ));
    // In a cluster the operator passes the SaintBot's uid: refused channel
    // credentials become Events on it.
    if let Some(uid) = env(saint_config::BOT_UID_ENV).filter(|uid| !uid.is_empty())
        && std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
    {
        match kube::Client::try_default().await {
            Ok(client) => {
                let bot = &config.last_good().bot;
                channels.set_events(ChannelEvents::new(client, &bot.name, &bot.namespace, &uid));
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "no Kubernetes client: channel Events are not published")
            }
        }
    }
    channels
}

/// Adds the memory tools and indexes the agent's own memory writes before the tool
/// returns; the watcher covers changes made by anything else.
fn with_memory_tools(tools: ToolSet, memory: &saint_memory::Memory) -> ToolSet {
    let tools = tools
        .replace(Arc::new(MemorySearchTool::new(memory.index.clone())))
        .replace(Arc::new(MemoryGetTool::new(memory.index.clone())));
    let index = memory.index.clone();
    tools.observe_writes(Arc::new(move |paths: &[String]| {
        if let Err(error) = index.reindex_paths(paths) {
            tracing::warn!(error = %ErrorChain(&error), "failed to re-index memory after a write");
        }
    }))
}

/// The tool set after the sandbox was tried, and what the rest of the start needs from
/// that attempt.
struct Sandboxed {
    tools: ToolSet,
    /// Stopped at shutdown, after the turns have drained.
    sandboxes: Option<Arc<dyn saint_sandbox::Sandbox>>,
    /// Said from what happened here, not guessed earlier from which binaries exist.
    available: bool,
    mcp_parts: saint_tools::mcp::LinkParts,
}

/// With a sandbox: `exec`, background processes and the browser, all in it. Without
/// one, `exec` stays the placeholder and the notices say why.
async fn with_sandbox_tools(
    mut tools: ToolSet,
    sandbox: Result<backend::ExecBackend, saint_sandbox::SandboxError>,
    options: &RuntimeOptions,
    config: &ConfigStore,
    notices: &mut Vec<String>,
) -> Sandboxed {
    match sandbox {
        Ok(exec) => {
            let tool = Arc::new(ExecTool::new(
                exec.sandbox.clone(),
                exec.porter.clone(),
                ExecLimits::default(),
            ));
            tools = tools.replace(tool.clone());
            // Background commands share exec's sandbox, checks and Porter path.
            tools = tools.replace(Arc::new(ProcessTool::new(tool.clone())));
            // The browser runs in the same sandboxes; its pages reach the web only
            // through the same SSRF rules as web_fetch.
            let browser = saint_tools::browser::BrowserTool::new(
                tool.clone(),
                Arc::new(saint_tools::guard::ssrf::SsrfGuard::default()),
                saint_tools::browser::BrowserLimits::default(),
            );
            // Screenshots are prepared like every image the model sees.
            let browser = match &options.media {
                Some(extractor) => browser.with_image_preparer(
                    saint_agent::image_tool::screenshot_preparer(extractor.clone()),
                ),
                None => browser,
            };
            tools = tools.replace(Arc::new(browser));
            tracing::info!("exec: on, commands run in the sandbox");
            notices.push("exec: on, commands run in the sandbox".to_string());
            let mcp_parts = mcp_servers::parts(Some((&exec, tool)), &config.last_good()).await;
            Sandboxed {
                tools,
                sandboxes: Some(exec.sandbox.clone()),
                available: true,
                mcp_parts,
            }
        }
        Err(error) => {
            tracing::warn!(%error, "no sandbox: exec is disabled");
            notices.push(format!("exec: off — {error}"));
            Sandboxed {
                tools,
                sandboxes: None,
                available: false,
                mcp_parts: mcp_servers::parts(None, &config.last_good()).await,
            }
        }
    }
}

/// Tools whose availability is decided at start: MCP servers' tools (listed once per
/// start), the image tool and the voice-note tool.
async fn with_started_tools(
    mut tools: ToolSet,
    config: &ConfigStore,
    workspace: &Path,
    options: &RuntimeOptions,
    mcp_parts: &saint_tools::mcp::LinkParts,
    notices: &mut Vec<String>,
) -> ToolSet {
    let (server_tools, server_notices) =
        mcp_servers::tools(&config.last_good(), workspace, mcp_parts).await;
    for tool in server_tools {
        tools = tools.replace(tool);
    }
    notices.extend(server_notices);
    // The model looks at images through the same extraction child as attachments.
    let tools = match &options.media {
        Some(extractor) => tools.replace(Arc::new(saint_agent::image_tool::ImageTool::new(
            extractor.clone(),
            Arc::new(saint_tools::guard::ssrf::SsrfGuard::default()),
        ))),
        None => tools,
    };
    // Voice notes; offered only while `media.speech` is set (runtime::turn).
    let tools = tools.replace(Arc::new(saint_agent::tts_tool::TtsTool::new()));
    if let Some(notice) = config
        .last_good()
        .media
        .speech
        .as_ref()
        .and_then(saint_agent::tts_tool::unavailable)
    {
        tracing::error!("{notice}");
        notices.push(notice);
    }
    tools
}

/// Background turns queue their answers outside a channel's own turn: wake the
/// channel's sender for them.
fn set_outlets(runtime: &Runtime, channels: &Arc<ChannelHub>) {
    let (ready_hub, send_hub) = (channels.clone(), channels.clone());
    runtime.set_outlets(Outlets {
        ready: Arc::new(move |name: &str| {
            if let Some(channel) = ready_hub.channel(name) {
                channel.outbox_ready.notify_one();
            }
        }),
        can_send: Arc::new(move |name: &str| send_hub.channel(name).is_some()),
    });
}

/// What runs without anyone writing: the scheduler, the heartbeat, sub-agents.
struct Background {
    schedule: Arc<Schedule>,
    subagents: Arc<Subagents>,
    clock: Arc<Clock>,
    /// Where retention and `erase: true` Contacts are kept to.
    workspace: PathBuf,
}

async fn serve(
    arguments: RunArgs,
    config: Arc<ConfigStore>,
    runtime: Arc<Runtime>,
    env: saint_agent::runtime::EnvLookup,
    extras: RunExtras,
    channels: Arc<ChannelHub>,
    background: Background,
) -> anyhow::Result<()> {
    let in_pod = env("KUBERNETES_SERVICE_HOST").is_some();
    let chat_page = arguments.chat_page
        || saint_agent::channel::startup::declared_chat_page(&config.last_good());
    let state = app_state(runtime.clone(), env, channels.clone(), &extras, chat_page);
    let stop_server = CancellationToken::new();
    let listen = listen_address(arguments.listen, &config.last_good());
    let bot = config.last_good().bot.clone();
    let watcher = config.spawn_watcher(
        Duration::from_millis(arguments.config_poll_ms),
        stop_server.clone(),
    );

    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| {
            format!(
                "failed to listen on {listen} (in use by another program? pass --listen with another port)"
            )
        })?;
    let metrics_listener = tokio::net::TcpListener::bind(arguments.metrics_listen)
        .await
        .with_context(|| format!("failed to listen on {}", arguments.metrics_listen))?;
    let (http_address, metrics_address) = (listener.local_addr()?, metrics_listener.local_addr()?);
    let allowed_hosts =
        |address: SocketAddr| allowed_hosts(address, &arguments.public_hosts, &bot, in_pod);
    let (http_hosts, metrics_hosts) = (allowed_hosts(http_address), allowed_hosts(metrics_address));
    print_addresses(
        &arguments,
        &extras,
        &state,
        http_address,
        metrics_address,
        chat_page,
    );
    tracing::info!(
        %http_address,
        %metrics_address,
        hosts = %http_hosts.describe(),
        "listening"
    );

    let metrics_server = tokio::spawn({
        let stop = stop_server.clone();
        let router = metrics_hosts.guard(metrics_app(state.clone()));
        async move {
            axum::serve(metrics_listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    });
    spawn_drain_on_signal(&state, Duration::from_secs(arguments.drain_seconds));
    // The dispatcher stops taking inbox rows when draining starts; senders run until the
    // turns have drained, so their replies still go out. Anything left waits in the
    // queue for the next start.
    let channel_workers = start_workers(
        &channels,
        runtime.clone(),
        state.turns.clone(),
        state.abort_turns.clone(),
        state.draining.clone(),
        stop_server.clone(),
    );
    let tasks = BackgroundTasks::spawn(&background, runtime, &state);
    axum::serve(
        listener,
        http_hosts
            .guard(app(state.clone()))
            .into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(state.draining.clone().cancelled_owned())
    .await
    .context("http server failed")?;
    let finished = drain_turns(&state, Duration::from_secs(2)).await;
    tasks.join().await;
    // Nothing is left running: sub-agents still going are cancelled and awaited.
    let cancelled = background.subagents.shutdown().await;
    if cancelled > 0 {
        tracing::info!(cancelled, "sub-agents cancelled at shutdown");
    }
    stop_server.cancel();
    for worker in channel_workers {
        let _ = worker.await;
    }
    let _ = metrics_server.await;
    let _ = watcher.await;
    tracing::info!(finished, "stopped");
    Ok(())
}

/// The HTTP channel's state, with the chat page when it is served.
fn app_state(
    runtime: Arc<Runtime>,
    env: EnvLookup,
    channels: Arc<ChannelHub>,
    extras: &RunExtras,
    chat_page: bool,
) -> AppState {
    let state = AppState::new(runtime, env).with_channels(channels);
    if extras.chat_token.is_some() || chat_page {
        return state.with_chat_page(PageSettings {
            notices: extras.notices.clone(),
            warnings: extras.warnings.clone(),
            person_tokens: extras.person_tokens.clone(),
        });
    }
    state
}

/// The host names a listener on `address` answers to.
fn allowed_hosts(
    address: SocketAddr,
    public_hosts: &[String],
    bot: &saint_config::BotIdentity,
    in_pod: bool,
) -> AllowedHosts {
    let mut allowed = AllowedHosts::for_listener(address, public_hosts);
    if in_pod {
        allowed = allowed.with_service(&bot.name, &bot.namespace);
        // The webhook Ingress's host reaches the agent only as a public host; until
        // it does, platforms' signed webhooks are answered whatever name they carry.
        if public_hosts.is_empty() {
            allowed = allowed.with_webhooks_from_any_host();
        }
    }
    allowed
}

/// Prints where the agent listens and, for the chat page, the addresses to open.
fn print_addresses(
    arguments: &RunArgs,
    extras: &RunExtras,
    state: &AppState,
    http_address: SocketAddr,
    metrics_address: SocketAddr,
    chat_page: bool,
) {
    // Tests and scripts read this line to learn the ports.
    println!("saint-agent listening http={http_address} metrics={metrics_address}");
    if let Some(token) = &extras.chat_token {
        // The token rides in the fragment, which the browser never sends to the server.
        let page = up::page_address(http_address, &arguments.public_hosts);
        println!(
            "Chat with {} at {page}/chat#token={token}",
            state.runtime.config().last_good().bot.name
        );
        for warning in &extras.warnings {
            println!("  warning: {warning}");
        }
        for notice in &extras.notices {
            println!("  {notice}");
        }
        if let Some(tokens) = &extras.person_tokens {
            print_person_links(tokens, &state.runtime.config().last_good(), &page);
        }
        println!("Press Ctrl-C to stop.");
    } else if chat_page {
        println!("Chat page: http://{http_address}/chat#token=<the HTTP channel's token>");
    }
}

/// One chat link per contact with a token of their own.
fn print_person_links(tokens: &PersonTokens, config: &saint_config::BotConfig, page: &str) {
    println!("Each person's own link (give each only theirs; it speaks only as them):");
    for (slug, token) in tokens.iter() {
        let Some(contact) = config
            .contacts
            .iter()
            .find(|contact| contact.slug.as_str() == slug)
        else {
            continue;
        };
        println!(
            "  {} ({}): {page}/chat#token={token}",
            contact.name, contact.role
        );
    }
}

/// On SIGTERM or Ctrl-C: drain, then cancel what still runs at the deadline.
fn spawn_drain_on_signal(state: &AppState, drain_deadline: Duration) {
    let (draining, abort_turns) = (state.draining.clone(), state.abort_turns.clone());
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown requested; finishing running turns");
        // Readiness fails and new messages get 503 while running turns finish.
        draining.cancel();
        // Past the deadline, running turns are cancelled; their messages are already durable.
        tokio::time::sleep(drain_deadline).await;
        abort_turns.cancel();
    });
}

/// The tasks that start turns or change stores without a message: awaited after the
/// server drained.
struct BackgroundTasks {
    scheduler: tokio::task::JoinHandle<()>,
    heartbeat: tokio::task::JoinHandle<()>,
    keeper: tokio::task::JoinHandle<()>,
    approvals: tokio::task::JoinHandle<()>,
}

impl BackgroundTasks {
    fn spawn(background: &Background, runtime: Arc<Runtime>, state: &AppState) -> Self {
        // Scheduled jobs and the heartbeat start no new turn once draining begins, finish
        // the ones running, and are cancelled with every other turn at the drain deadline.
        let scheduler = tokio::spawn(background.schedule.clone().run(
            runtime.clone(),
            state.draining.clone(),
            state.abort_turns.clone(),
        ));
        // Retention and Contacts marked `erase: true`.
        let keeper = tokio::spawn(saint_agent::erasure::keep(
            runtime.config().clone(),
            background.workspace.clone(),
            background.clock.clone(),
            state.draining.clone(),
        ));
        let approvals = spawn_approval_expiry(runtime.clone(), state.draining.clone());
        let heartbeat = tokio::spawn(heartbeat::run(
            runtime,
            background.clock.clone(),
            state.draining.clone(),
            state.abort_turns.clone(),
        ));
        Self {
            scheduler,
            heartbeat,
            keeper,
            approvals,
        }
    }

    async fn join(self) {
        let _ = self.scheduler.await;
        let _ = self.heartbeat.await;
        let _ = self.keeper.await;
        let _ = self.approvals.await;
    }
}

/// Approval requests past their deadline are refused and their requesters told.
fn spawn_approval_expiry(
    runtime: Arc<Runtime>,
    draining: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    runtime.expire_approvals().await;
                }
                () = draining.cancelled() => return,
            }
        }
    })
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "failed to install SIGTERM handler");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
