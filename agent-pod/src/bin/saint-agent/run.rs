//! `saint-agent run`: the wiring. Opens the stores, starts memory, the sandbox and its
//! tools, the channels and the background work, serves the HTTP channel and metrics,
//! and drains on SIGTERM.

use crate::RunArgs;
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
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
    persona,
    prompt::MAX_PROMPT_FILE_BYTES,
    runtime::{EnvLookup, ModelAccess, Outlets, Runtime, RuntimeOptions, endpoint_for},
    schedule::Schedule,
    session::SessionStore,
    subagents::Subagents,
    up,
};
use saint_config::{ErrorChain, SandboxBackend};
use saint_sandbox::{
    backend,
    local_porter::{self, LocalPorterOptions},
    state_lock,
};
use saint_tools::{
    exec::{ExecLimits, ExecTool},
    memory_get::MemoryGetTool,
    memory_search::MemorySearchTool,
    message::MessageTool,
    process::ProcessTool,
    toolset::ToolSet,
};
use tokio_util::sync::CancellationToken;

/// What `up` adds to a plain `run`.
#[derive(Default)]
pub(crate) struct RunExtras {
    /// Applied to every config read (the model `up` found).
    pub(crate) overlay: Option<config_watch::Overlay>,
    /// Lines for the log and the chat page.
    pub(crate) notices: Vec<String>,
    /// Lines the person who started the bot must not miss: logged as warnings and shown
    /// first on the page.
    pub(crate) warnings: Vec<String>,
    /// Each contact's own page token, when the page has no person picker.
    pub(crate) person_tokens: Option<PersonTokens>,
    /// Serve the chat page; its token is printed in the page's address.
    pub(crate) chat_token: Option<String>,
    /// Whether a model that cannot be reached stops the start (`run`) or is reported (`up`).
    pub(crate) require_model: bool,
    /// Whether this process exports traces (`run` with `telemetry.otlp`, set up in
    /// `main` before any thread starts).
    pub(crate) exporting_traces: bool,
}

/// The HTTP channel's address: `--listen` (or `SAINT_LISTEN`) when given — saying so
/// when it differs from the channel's `settings.port` — else loopback on that port.
pub(crate) fn listen_address(
    listen: Option<SocketAddr>,
    config: &saint_config::BotConfig,
) -> SocketAddr {
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

pub(crate) fn run(arguments: RunArgs, env: EnvLookup, mut extras: RunExtras) -> anyhow::Result<()> {
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
pub(crate) struct Opened {
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
pub(crate) fn report_start_problems(
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
pub(crate) fn create_workspace(workspace: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(workspace)
        .with_context(|| format!("failed to create workspace {}", workspace.display()))?;
    workspace
        .canonicalize()
        .with_context(|| format!("failed to resolve workspace {}", workspace.display()))
}

/// What the bot does on its own, said once at start: its heartbeat and its skills.
pub(crate) fn log_unprompted_work(config: &saint_config::BotConfig, workspace: &Path) {
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
pub(crate) fn start_memory(
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
pub(crate) async fn run_agent(
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
pub(crate) struct AgentLocks {
    // Released in this order, the workspace's first.
    _workspace: state_lock::StateLock,
    _state: Option<state_lock::StateLock>,
}

pub(crate) fn lock_agent(
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
pub(crate) async fn channel_hub(
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
pub(crate) fn with_memory_tools(tools: ToolSet, memory: &saint_memory::Memory) -> ToolSet {
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
pub(crate) struct Sandboxed {
    tools: ToolSet,
    /// Stopped at shutdown, after the turns have drained.
    sandboxes: Option<Arc<dyn saint_sandbox::Sandbox>>,
    /// Said from what happened here, not guessed earlier from which binaries exist.
    available: bool,
    mcp_parts: saint_tools::mcp::LinkParts,
}

/// With a sandbox: `exec`, background processes and the browser, all in it. Without
/// one, `exec` stays the placeholder and the notices say why.
pub(crate) async fn with_sandbox_tools(
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
pub(crate) async fn with_started_tools(
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
pub(crate) fn set_outlets(runtime: &Runtime, channels: &Arc<ChannelHub>) {
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
pub(crate) struct Background {
    schedule: Arc<Schedule>,
    subagents: Arc<Subagents>,
    clock: Arc<Clock>,
    /// Where retention and `erase: true` Contacts are kept to.
    workspace: PathBuf,
}

pub(crate) async fn serve(
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
pub(crate) fn app_state(
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
pub(crate) fn allowed_hosts(
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
pub(crate) fn print_addresses(
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
pub(crate) fn print_person_links(
    tokens: &PersonTokens,
    config: &saint_config::BotConfig,
    page: &str,
) {
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
pub(crate) fn spawn_drain_on_signal(state: &AppState, drain_deadline: Duration) {
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
pub(crate) struct BackgroundTasks {
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
pub(crate) fn spawn_approval_expiry(
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

pub(crate) async fn shutdown_signal() {
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
