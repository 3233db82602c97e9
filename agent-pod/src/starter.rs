//! The bot `saint-agent up` starts when the user has none: the chart's example company
//! (Ana the owner, Marko the manager, Ivan an employee, and everyone else external),
//! as the operator renders it — the bundle is regenerated from the operator's output and
//! a test fails when it drifts — adapted to one machine.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::Context;
use saint_config::{BotConfig, ChannelKind, EmbeddingsConfig, PersonaConfig, SandboxBackend};
use serde::{Deserialize, Serialize};

/// The bundle's path, relative to the `saint-agent` crate.
pub const STARTER_BUNDLE_PATH: &str = "starter/acme-assistant.json";

const EMBEDDED: &str = include_str!("../starter/acme-assistant.json");

/// A rendered bot config and its persona files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Starter {
    /// The config as the operator renders it for Kubernetes.
    pub bot_config: BotConfig,
    /// Persona file name → text (the persona ConfigMap's data).
    pub persona: BTreeMap<String, String>,
    /// Skill name → its `SKILL.md` (the declared skills' ConfigMap keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub skills: BTreeMap<String, String>,
}

/// Where `up` keeps one bot's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BotFiles {
    pub directory: PathBuf,
    pub config: PathBuf,
    pub persona: PathBuf,
    pub workspace: PathBuf,
    pub porter_registry: PathBuf,
    pub chat_token: PathBuf,
}

impl BotFiles {
    /// The files of bot `name` under `data_directory`.
    pub fn new(data_directory: &Path, name: &str) -> Self {
        let directory = data_directory.join(name);
        Self {
            config: directory.join("bot-config.json"),
            persona: directory.join("persona"),
            workspace: directory.join("workspace"),
            porter_registry: directory.join("porter.json"),
            chat_token: directory.join("chat-token"),
            directory,
        }
    }
}

/// What installing the starter did, for the start-up lines.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// Whether a new bot file was written (false: the user's existing file is kept).
    pub wrote_config: bool,
    /// Declared channels left out of the local bot, by name.
    pub left_out_channels: Vec<String>,
}

impl Starter {
    /// The bundle compiled into this binary.
    pub fn embedded() -> Result<Self, serde_json::Error> {
        serde_json::from_str(EMBEDDED)
    }

    /// Deterministic JSON (pretty, trailing newline).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("starter serialises");
        text.push('\n');
        text
    }

    /// The bot's name.
    pub fn name(&self) -> &str {
        &self.bot_config.bot.name
    }

    /// The config for one machine: the bubblewrap sandbox, persona files from
    /// `files.persona`, memory from `embedding_model` (off without one), the primary
    /// model alone (no failover chain), no tool server that needs a credential, and
    /// only the HTTP channel — the others need a platform account and its tokens (WhatsApp also
    /// a public webhook), which the user adds to the bot file when they have them.
    pub fn local_config(
        &self,
        files: &BotFiles,
        embedding_model: Option<&Path>,
    ) -> (BotConfig, Vec<String>) {
        let mut config = self.bot_config.clone();
        config.schema_link = Some(format!("./{}", saint_config::bot_file::SCHEMA_FILE_NAME));
        config.sandbox.backend = SandboxBackend::Local;
        // The sandbox Job template is the operator's business in a cluster; bubblewrap
        // needs none.
        config.sandbox.job_template = None;
        // The agent links an identity to its Contact through the contacts themselves
        // when the links add nothing (one machine merges no Contacts).
        if links_only_repeat_contacts(&config) {
            config.identity_links.clear();
        }
        config.persona = Some(PersonaConfig {
            directory: files.persona.display().to_string(),
        });
        // The declared skills are installed into the workspace's skills/ (where the
        // user edits them and the sandbox sees them), not read from a mount.
        config.skills.directories.clear();
        // One machine calls the one endpoint its environment names; the cluster's
        // failover chain needs Secrets it does not have (the user adds fallbacks to
        // the bot file when they hold their keys).
        config.model.fallbacks.clear();
        config.model.additional_api_key_envs.clear();
        config.model.failover = Default::default();
        // Tool servers with a credential need a Secret this machine does not have (the
        // user registers it with `cliport` and adds the server back); roles stop naming
        // the servers left out.
        let (servers, dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut config.mcp.servers)
            .into_iter()
            .partition(|server| server.credential.is_none());
        config.mcp.servers = servers;
        for role in config.roles.values_mut() {
            role.tools.allow.retain(|pattern| {
                saint_config::mcp::pattern_server(pattern)
                    .is_none_or(|server| dropped.iter().all(|gone| gone.name != server))
            });
        }
        match embedding_model {
            Some(directory) => {
                config.memory.enabled = true;
                config.memory.embeddings = EmbeddingsConfig::Local {
                    model_dir: directory.display().to_string(),
                    weights: saint_config::ModelWeights::F32,
                };
            }
            None => config.memory.enabled = false,
        }
        let (kept, left_out): (Vec<_>, Vec<_>) = config
            .channels
            .into_iter()
            .partition(|channel| channel.kind == ChannelKind::Http);
        config.channels = kept;
        (
            config,
            left_out.into_iter().map(|channel| channel.name).collect(),
        )
    }

    /// Writes the bot file (unless one exists: the user's edits are kept) and any missing
    /// persona file and skill, private to the user.
    pub fn install(
        &self,
        files: &BotFiles,
        embedding_model: Option<&Path>,
    ) -> anyhow::Result<Installed> {
        for directory in [&files.directory, &files.persona, &files.workspace] {
            create_private_directory(directory)?;
        }
        for (name, text) in &self.persona {
            // Keys are ConfigMap keys: plain file names, never paths.
            if name.contains('/') || name == "." || name == ".." {
                anyhow::bail!("starter persona file name {name:?} is not a plain file name");
            }
            let path = files.persona.join(name);
            if !path.exists() {
                write_private(&path, text)?;
            }
        }
        for (name, text) in &self.skills {
            if !saint_tools::skills::is_skill_name(name) {
                anyhow::bail!("starter skill name {name:?} is not a skill folder name");
            }
            let folder = files
                .workspace
                .join(saint_tools::skills::WORKSPACE_SKILLS)
                .join(name);
            create_private_directory(&folder)?;
            let path = folder.join(saint_tools::skills::SKILL_FILE);
            if !path.exists() {
                write_private(&path, text)?;
            }
        }
        write_private(
            &files
                .directory
                .join(saint_config::bot_file::SCHEMA_FILE_NAME),
            &saint_config::bot_file::schema_text(),
        )?;
        let mut installed = Installed::default();
        if !files.config.exists() {
            let (config, left_out) = self.local_config(files, embedding_model);
            write_private(&files.config, &saint_config::bot_file::render(&config))?;
            installed.wrote_config = true;
            installed.left_out_channels = left_out;
        }
        Ok(installed)
    }
}

/// `up --reset`: removes the bot's files (bot file, persona, workspace with its
/// memory and sessions, Porter registry, page token) and its sandbox state, after
/// taking the state directory's lock so no running agent loses them underfoot.
/// Returns the directories removed.
pub fn reset(
    files: &BotFiles,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    // The state directory follows the bot file's bot name (and the workspace); a bot
    // file that no longer parses leaves only the data directory to remove.
    let config = std::fs::read_to_string(&files.config)
        .ok()
        .and_then(|text| BotConfig::from_json(&text).ok());
    let _lock = match &config {
        Some(config) => {
            let machine = saint_sandbox::backend::LocalMachine::from_environment(
                config,
                &files.workspace,
                env,
            );
            let lock = saint_sandbox::state_lock::lock_state_directory(&machine.state_directory)
                .context("cannot reset a bot that is running")?;
            remove_tree(&machine.state_directory, &mut removed)?;
            Some(lock)
        }
        None => None,
    };
    remove_tree(&files.directory, &mut removed)?;
    Ok(removed)
}

fn remove_tree(directory: &Path, removed: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(directory) {
        Ok(()) => {
            removed.push(directory.to_path_buf());
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => {
            Err(error).with_context(|| format!("failed to remove {}", directory.display()))
        }
    }
}

/// Whether every identity link names exactly the identities of its own Contact.
fn links_only_repeat_contacts(config: &BotConfig) -> bool {
    config.identity_links.iter().all(|(slug, identities)| {
        config.contacts.iter().any(|contact| {
            &contact.slug == slug
                && identities.len() == contact.identities.len()
                && identities
                    .iter()
                    .all(|identity| contact.identities.contains(identity))
        })
    })
}

fn create_private_directory(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .with_context(|| format!("failed to create {}", path.display()))
}

/// Writes through a temporary file and a rename, so a crash never leaves half a file.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("failed to write {}", temporary.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("failed to write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("failed to write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_config_keeps_only_http_runs_bubblewrap_and_reads_the_persona_directory() {
        let starter = Starter::embedded().unwrap();
        let files = BotFiles::new(Path::new("/data/saint"), starter.name());
        let (config, left_out) = starter.local_config(&files, None);
        assert_eq!(config.sandbox.backend, SandboxBackend::Local);
        assert_eq!(
            config.persona.as_ref().unwrap().directory,
            "/data/saint/acme-assistant/persona"
        );
        assert!(!config.memory.enabled);
        assert!(config.channels.iter().all(|c| c.kind == ChannelKind::Http));
        assert_eq!(
            left_out,
            [
                "whatsapp", "email", "telegram", "slack", "discord", "matrix"
            ]
        );
        // Skills come from the workspace here, not from the cluster's mount.
        assert!(!starter.bot_config.skills.directories.is_empty());
        assert!(config.skills.directories.is_empty());
        // The docs server needs its Secret: left out, and no role names it; otherwise
        // the roles and people are the operator's, untouched.
        assert!(starter.bot_config.mcp.server("docs").is_some());
        assert!(config.mcp.servers.is_empty());
        let mut roles = starter.bot_config.roles.clone();
        for role in roles.values_mut() {
            role.tools.allow.retain(|pattern| pattern != "docs.*");
        }
        assert_eq!(config.roles, roles);
        assert_eq!(config.contacts, starter.bot_config.contacts);
        saint_config::validate(&config).unwrap();
    }

    /// What a person opens: short, the same bot as the full rendering, and valid
    /// under the schema written beside it (checked by python3-jsonschema, the
    /// validator ./test.sh installs, so the schema is read by a tool that is not ours).
    #[test]
    fn the_bot_file_up_writes_is_short_reads_back_whole_and_validates_against_its_schema() {
        let data = tempfile::tempdir().unwrap();
        let starter = Starter::embedded().unwrap();
        let files = BotFiles::new(data.path(), starter.name());
        let model = Path::new("/opt/models/all-MiniLM-L6-v2");
        starter.install(&files, Some(model)).unwrap();
        let text = std::fs::read_to_string(&files.config).unwrap();
        let lines = text.lines().count();
        // Five roles, three people, the heartbeat, the employee's approval rules and the
        // speech engine.
        assert!(lines < 175, "the bot file has {lines} lines:\n{text}");
        let (expected, _) = starter.local_config(&files, Some(model));
        assert_eq!(BotConfig::from_json(&text).unwrap(), expected);
        assert!(!text.contains("jobTemplate"), "{text}");
        assert!(
            text.starts_with("{\n  \"$schema\": \"./bot-config.schema.json\""),
            "{text}"
        );

        let schema = files
            .directory
            .join(saint_config::bot_file::SCHEMA_FILE_NAME);
        let check = |document: &Path| {
            std::process::Command::new("python3")
                .args(["-c", "import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))"])
                .arg(document)
                .arg(&schema)
                .output()
                .expect("python3 runs (./test.sh installs python3-jsonschema)")
        };
        let valid = check(&files.config);
        assert!(
            valid.status.success(),
            "{}",
            String::from_utf8_lossy(&valid.stderr)
        );
        // The schema refuses what the agent refuses: a misspelt member.
        let misspelt = data.path().join("misspelt.json");
        std::fs::write(
            &misspelt,
            text.replacen("\"defaultRole\"", "\"defaultRol\"", 1),
        )
        .unwrap();
        let refused = check(&misspelt);
        assert!(
            !refused.status.success(),
            "a misspelt member passed the schema"
        );
        assert!(String::from_utf8_lossy(&refused.stderr).contains("defaultRol"));
    }

    #[test]
    fn reset_is_refused_while_the_bot_runs_and_then_removes_its_files_and_state() {
        let data = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let starter = Starter::embedded().unwrap();
        let files = BotFiles::new(data.path(), starter.name());
        starter.install(&files, None).unwrap();
        let state_directory = state.path().join("sandboxes");
        let env = |name: &str| {
            (name == "SAINT_SANDBOX_STATE").then(|| state_directory.display().to_string())
        };
        // A running agent holds the state directory's lock.
        let running = saint_sandbox::state_lock::lock_state_directory(&state_directory).unwrap();
        let refused = reset(&files, &env).unwrap_err();
        assert!(
            format!("{refused:#}").contains("cannot reset a bot that is running"),
            "{refused:#}"
        );
        assert!(files.config.exists() && state_directory.exists());
        drop(running);

        let removed = reset(&files, &env).unwrap();
        assert_eq!(removed, [state_directory.clone(), files.directory.clone()]);
        assert!(!files.directory.exists() && !state_directory.exists());
        // Nothing left to remove is not an error.
        assert_eq!(reset(&files, &env).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    fn install_keeps_an_existing_bot_file_and_writes_private_files() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().unwrap();
        let starter = Starter::embedded().unwrap();
        let files = BotFiles::new(data.path(), starter.name());
        let first = starter.install(&files, None).unwrap();
        assert!(first.wrote_config);
        let mode = std::fs::metadata(&files.config)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "bot file mode {mode:o}");
        std::fs::write(&files.config, "{\"edited\": true}").unwrap();
        let second = starter.install(&files, None).unwrap();
        assert!(!second.wrote_config);
        assert_eq!(
            std::fs::read_to_string(&files.config).unwrap(),
            "{\"edited\": true}"
        );
        assert!(files.persona.join("SOUL.md").is_file());
        // The example's skills land in the workspace, where the catalogue finds them;
        // an edited one is kept.
        let (config, _) = starter.local_config(&files, None);
        let catalog = saint_tools::skills::SkillCatalog::load(&files.workspace, &config);
        let installed: Vec<&str> = catalog.all().map(|skill| skill.name.as_str()).collect();
        let declared: Vec<&str> = starter.skills.keys().map(String::as_str).collect();
        assert!(!declared.is_empty());
        assert_eq!(installed, declared);
        let skill = files
            .workspace
            .join("skills")
            .join(declared[0])
            .join("SKILL.md");
        std::fs::write(&skill, "---\ndescription: mine\n---\nedited").unwrap();
        starter.install(&files, None).unwrap();
        assert!(std::fs::read_to_string(&skill).unwrap().ends_with("edited"));
    }
}
