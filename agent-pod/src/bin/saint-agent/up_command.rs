//! `saint-agent up`: a bot on this machine from the starter files, with the model it
//! finds, then `run`.

use crate::{
    RunArgs, UpArgs,
    run::{RunExtras, run},
};
use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use saint_agent::{
    config_watch::{self},
    model_discovery::{self, ModelChoice},
    runtime::{EnvLookup, endpoint_for, process_env},
    starter::{BotFiles, Starter},
    up,
};
use saint_config::ChannelKind;
use saint_sandbox::local_porter::LocalPorterMode;

pub(crate) fn up(arguments: UpArgs) -> anyhow::Result<()> {
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
pub(crate) fn companion_problems(env: &EnvLookup, no_build: bool) -> Vec<String> {
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
pub(crate) fn embedding_model(
    env: &EnvLookup,
    no_memory: bool,
    notices: &mut Vec<String>,
) -> Option<PathBuf> {
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
pub(crate) fn install_notices(
    installed: &saint_agent::starter::Installed,
    files: &BotFiles,
) -> Vec<String> {
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
pub(crate) fn with_page_token(
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
pub(crate) fn discover_model(
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
