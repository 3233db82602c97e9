//! `saint-agent up`: one command from a fresh clone to a bot answering on a chat page.
//! This module holds its machine-side steps (where the files live, the helper binaries,
//! the embedding model, the page's tokens and address); `main` runs the bot itself
//! exactly as `run` does.

use std::{
    io::Read,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::runtime::EnvLookup;

/// Where `up` keeps bots: `SAINT_DATA_DIR`, else `$XDG_DATA_HOME/saint`, else
/// `~/.local/share/saint` — never the repository, so no bot file or credential ends up
/// in a commit.
pub fn data_directory(env: &EnvLookup) -> anyhow::Result<PathBuf> {
    if let Some(directory) = env("SAINT_DATA_DIR") {
        return Ok(PathBuf::from(directory));
    }
    if let Some(directory) = env("XDG_DATA_HOME") {
        return Ok(Path::new(&directory).join("saint"));
    }
    let home = env("HOME").context(
        "neither SAINT_DATA_DIR, XDG_DATA_HOME nor HOME is set: pass --data-dir DIRECTORY",
    )?;
    Ok(Path::new(&home).join(".local/share/saint"))
}

/// The binaries the bot runs besides the agent, found next to `saint-agent`.
pub const COMPANIONS: [&str; 2] = ["porter", "saint-sandbox-runner"];

/// The packages `up` builds under `cargo run`: the agent itself is named too, so this
/// build resolves the same features as the `cargo run -p saint-agent` that started it
/// and compiles only Porter's and the runner's own crates (tests/one_build.rs).
pub const BUILT_TOGETHER: [&str; 3] = ["saint-agent", "porter", "saint-sandbox-runner"];

/// Makes sure Porter and the sandbox runner sit next to this binary. Under `cargo run`
/// they are built (or found up to date) with the same profile, so the README's one
/// command is enough; elsewhere their absence is reported, and the bot runs without
/// them rather than not at all. Whether `exec` runs is said once the sandbox is set up
/// (a runner named by SAINT_SANDBOX_RUNNER works wherever it is), not guessed here.
pub fn ensure_companions(env: &EnvLookup) -> Vec<String> {
    let Ok(executable) = std::env::current_exe() else {
        return vec![
            "cannot locate saint-agent's own binary to look for Porter and the sandbox runner beside it"
                .to_string(),
        ];
    };
    let Some(directory) = executable.parent() else {
        return Vec::new();
    };
    if let Some(cargo) = env("CARGO") {
        let profile = match directory.file_name().and_then(|name| name.to_str()) {
            Some("debug") => "dev".to_string(),
            Some(other) => other.to_string(),
            None => "dev".to_string(),
        };
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        eprintln!("saint-agent up: building Porter and the sandbox runner (profile {profile})");
        let mut build = Command::new(cargo);
        build
            .arg("build")
            .arg("--manifest-path")
            .arg(&manifest)
            .args(["--profile", &profile]);
        for package in BUILT_TOGETHER {
            build.args(["-p", package]);
        }
        match build.status() {
            Ok(status) if status.success() => {}
            Ok(status) => {
                return vec![format!(
                    "building Porter and the sandbox runner failed ({status})"
                )];
            }
            Err(error) => {
                return vec![format!(
                    "failed to run cargo to build Porter and the sandbox runner: {error}"
                )];
            }
        }
    }
    COMPANIONS
        .iter()
        .filter(|name| !directory.join(name).is_file())
        .map(|name| {
            format!(
                "{name} is not next to saint-agent in {}: build it with `cargo build -p porter \
                 -p saint-sandbox-runner` (same profile)",
                directory.display()
            )
        })
        .collect()
}

/// One notice naming the CLIs the bot file lists that Porter's registry lacks, with
/// the command that registers one (the registry is created empty when missing).
pub fn unregistered_clis(
    files: &crate::starter::BotFiles,
    config: &saint_config::BotConfig,
) -> anyhow::Result<Vec<String>> {
    let (registered, _) = saint_sandbox::local_porter::ensure_registry(&files.porter_registry)?;
    let missing: Vec<&str> = config
        .porter
        .clis
        .iter()
        .map(String::as_str)
        .filter(|cli| !registered.iter().any(|name| name == cli))
        .collect();
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    let cliport = std::env::current_exe()
        .ok()
        .and_then(|executable| Some(executable.parent()?.join("cliport")))
        .filter(|path| path.is_file())
        .map_or_else(|| "cliport".to_string(), |path| path.display().to_string());
    Ok(vec![format!(
        "CLIs {} are listed by the bot but have no credential in Porter, so their requests \
         cannot authenticate yet; register one (the secret is read from stdin): {cliport} \
         --registry {} install gh --host api.github.com --host github.com --placeholder-env \
         GH_TOKEN --git --secret-stdin",
        missing.join(", "),
        files.porter_registry.display()
    )])
}

/// Files of the local embedding model.
const MODEL_FILES: [&str; 3] = ["model.safetensors", "config.json", "tokenizer.json"];

/// Why memory has no embedding model on this machine.
///
/// `Fetch` keeps the I/O error in its message rather than as a `source`: its caller
/// shows the reason in one notice line through `Display`.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddingModelError {
    #[error("HOME is not set")]
    NoHome,
    #[error(
        "no embedding model in {} (set SAINT_MODEL_DIR to a directory holding {})",
        directory.display(),
        MODEL_FILES.join(", ")
    )]
    Missing { directory: PathBuf },
    #[error(
        "fetching the embedding model failed ({status}); run {} yourself, then start again",
        script.display()
    )]
    FetchFailed {
        script: PathBuf,
        status: std::process::ExitStatus,
    },
    #[error("failed to run {}: {error}", script.display())]
    Fetch {
        script: PathBuf,
        error: std::io::Error,
    },
}

/// The embedding model memory needs: `SAINT_MODEL_DIR` or the cache, fetched once by
/// the repository's script when run from a source checkout. `None` (memory off) with
/// the reason when it cannot be had.
pub fn embedding_model(env: &EnvLookup) -> Result<PathBuf, EmbeddingModelError> {
    let directory = match env("SAINT_MODEL_DIR") {
        Some(directory) => PathBuf::from(directory),
        None => {
            let home = env("HOME").ok_or(EmbeddingModelError::NoHome)?;
            Path::new(&home).join(".cache/saint/models/all-MiniLM-L6-v2")
        }
    };
    let complete = |directory: &Path| {
        MODEL_FILES
            .iter()
            .all(|file| directory.join(file).is_file())
    };
    if complete(&directory) {
        return Ok(directory);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("memory/fetch-model.sh");
    if !script.is_file() {
        return Err(EmbeddingModelError::Missing { directory });
    }
    eprintln!("saint-agent up: fetching the embedding model for memory (about 90 MB, once)");
    let fetched = Command::new("bash")
        .arg(&script)
        .arg(&directory)
        .stdout(std::process::Stdio::null())
        .status();
    match fetched {
        Ok(status) if status.success() && complete(&directory) => Ok(directory),
        Ok(status) => Err(EmbeddingModelError::FetchFailed { script, status }),
        Err(error) => Err(EmbeddingModelError::Fetch { script, error }),
    }
}

/// Points a bot with memory at the embedding model this machine has: a local model
/// directory without the model's files becomes `model` (when there is one), and memory
/// is turned off when there is none — memory that cannot start would stop the bot.
/// A bot file that turns memory off, or names a model that is there, is left alone.
pub fn fit_memory(config: &mut saint_config::BotConfig, model: Option<&Path>) {
    if !config.memory.enabled {
        return;
    }
    if let saint_config::EmbeddingsConfig::Local { model_dir, weights } = &config.memory.embeddings
    {
        let present = MODEL_FILES
            .iter()
            .all(|file| Path::new(model_dir).join(file).is_file());
        if present {
            return;
        }
        match model {
            Some(directory) => {
                config.memory.embeddings = saint_config::EmbeddingsConfig::Local {
                    model_dir: directory.display().to_string(),
                    weights: *weights,
                }
            }
            None => config.memory.enabled = false,
        }
    }
}

/// What `up` says, in the log and on the page, when it listens past loopback.
pub fn listening_warning(listen: SocketAddr) -> String {
    format!(
        "listening on {listen}, beyond this machine: anyone who can reach it can try the page \
         and the API. The page has no person picker here; give each person only their own \
         link, and keep the page's main token (the HTTP channel's) to yourself"
    )
}

/// Each contact's own page token, kept in `person-tokens/<slug>` beside the bot file
/// (mode 0600, in a 0700 directory) so their links survive restarts. A contact added
/// while the bot runs gets theirs at the next start.
pub fn person_tokens(
    files: &crate::starter::BotFiles,
    config: &saint_config::BotConfig,
) -> anyhow::Result<crate::channel::state::PersonTokens> {
    use std::os::unix::fs::DirBuilderExt;
    let directory = files.directory.join("person-tokens");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&directory)
        .with_context(|| format!("failed to create {}", directory.display()))?;
    let tokens = config
        .contacts
        .iter()
        .map(|contact| {
            let slug = contact.slug.to_string();
            chat_token(&directory.join(&slug)).map(|token| (slug, token))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(crate::channel::state::PersonTokens::new(tokens))
}

/// Where the page's links point: the first `--public-host`, else the address listened
/// on, or this machine's loopback when that is every address.
pub fn page_address(listening: SocketAddr, public_hosts: &[String]) -> String {
    let port = listening.port();
    if let Some(name) = public_hosts.first() {
        return format!("http://{name}:{port}");
    }
    let address = match listening.ip() {
        IpAddr::V4(address) if address.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(address) if address.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        address => address,
    };
    format!("http://{}", SocketAddr::new(address, port))
}

/// The chat page's token: kept in `path` (mode 0600) so the page's address stays the
/// same across restarts; 128 random bits.
pub fn chat_token(path: &Path) -> anyhow::Result<String> {
    if let Ok(token) = std::fs::read_to_string(path)
        && token.trim().len() >= 32
    {
        return Ok(token.trim().to_string());
    }
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("failed to read /dev/urandom")?;
    let token: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    {
        use std::{io::Write, os::unix::fs::OpenOptionsExt};
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("failed to write {}", path.display()))?;
        file.write_all(token.as_bytes())
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> EnvLookup {
        Arc::new(move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
    }

    #[test]
    fn data_directory_prefers_saint_then_xdg_then_home_and_never_the_working_directory() {
        assert_eq!(
            data_directory(&env_of(&[("SAINT_DATA_DIR", "/d"), ("HOME", "/h")])).unwrap(),
            PathBuf::from("/d")
        );
        assert_eq!(
            data_directory(&env_of(&[("XDG_DATA_HOME", "/x"), ("HOME", "/h")])).unwrap(),
            PathBuf::from("/x/saint")
        );
        assert_eq!(
            data_directory(&env_of(&[("HOME", "/h")])).unwrap(),
            PathBuf::from("/h/.local/share/saint")
        );
        let error = data_directory(&env_of(&[])).unwrap_err().to_string();
        assert!(error.contains("--data-dir"), "{error}");
    }

    #[test]
    fn an_embedding_model_directory_needs_saint_model_dir_or_home() {
        let error = embedding_model(&env_of(&[])).unwrap_err();
        assert!(matches!(error, EmbeddingModelError::NoHome), "{error}");
        assert_eq!(error.to_string(), "HOME is not set");
    }

    #[test]
    fn page_links_name_a_public_host_or_an_address_a_browser_can_open() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(page_address(any, &[]), "http://127.0.0.1:8080");
        assert_eq!(
            page_address("[::]:8080".parse().unwrap(), &[]),
            "http://[::1]:8080"
        );
        assert_eq!(
            page_address("192.168.1.5:8080".parse().unwrap(), &[]),
            "http://192.168.1.5:8080"
        );
        assert_eq!(
            page_address(any, &["laptop.lan".to_string()]),
            "http://laptop.lan:8080"
        );
    }

    #[test]
    fn chat_token_is_random_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("chat-token");
        let first = chat_token(&path).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(chat_token(&path).unwrap(), first);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(chat_token(&other.path().join("t")).unwrap(), first);
    }
}
