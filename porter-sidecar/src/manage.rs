//! `cliport` operations on the registry file (local mode) and the audit log.
//!
//! Pure edits on a `Registry` value plus atomic file read/write helpers; never touches
//! the daemon (which picks changes up by itself).

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
};

use porter_protocol::registry::{CliEntry, CliMode, Registry, RegistryError};
use thiserror::Error;

/// Why a `cliport` command failed.
#[derive(Debug, Error)]
pub enum ManageError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid porter registry {path}")]
    InvalidFile {
        path: PathBuf,
        #[source]
        source: RegistryError,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{0:?} is not KEY=VALUE")]
    Pair(String),
    #[error("no CLI named {0:?} is registered")]
    Unknown(String),
    #[error("{name:?} is not a valid CLI name or {bin:?} is not an absolute path")]
    Invalid { name: String, bin: String },
    #[error(
        "{bin} does not exist: install the CLI in the Porter container first (`command -v NAME` prints its path)"
    )]
    MissingBinary { bin: String },
    #[error("{bin} is not an executable file")]
    NotExecutable { bin: String },
}

/// Refuses a binary Porter could not run: missing, not a regular file (after
/// symlinks, as exec follows them), or without an execute bit.
pub fn check_binary(bin: &str) -> Result<(), ManageError> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(bin) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(ManageError::MissingBinary {
                bin: bin.to_owned(),
            })
        }
        Ok(metadata) if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 => Ok(()),
        _ => Err(ManageError::NotExecutable {
            bin: bin.to_owned(),
        }),
    }
}

/// Why a credential value looks like an example left in place rather than a real
/// secret (`…`, `<token>`, `YOUR_TOKEN`, `changeme`), if it does. The value itself is
/// never part of the answer: it may be a real credential.
pub fn placeholder_reason(value: &str) -> Option<&'static str> {
    let lower = value.trim().to_ascii_lowercase();
    if lower.is_empty() {
        Some("it is empty")
    } else if lower.contains('…') || lower.contains("...") {
        Some("it contains an ellipsis")
    } else if lower.starts_with('<') && lower.ends_with('>') {
        Some("it is an <angle-bracket> placeholder")
    } else if [
        "your_",
        "your-",
        "changeme",
        "replace",
        "xxxx",
        "placeholder",
        "example",
    ]
    .iter()
    .any(|marker| lower.contains(marker))
    {
        Some("it reads like an example value")
    } else {
        None
    }
}

/// Parses `KEY=VALUE`.
pub fn parse_pair(text: &str) -> Result<(String, String), ManageError> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(ManageError::Pair(text.to_owned())),
    }
}

/// Reads the registry, or an empty one if the file does not exist yet.
pub fn load(path: &Path) -> Result<Registry, ManageError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Registry::from_json(&text).map_err(|source| ManageError::InvalidFile {
            path: path.to_owned(),
            source,
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Registry::default()),
        Err(source) => Err(ManageError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Writes the registry atomically (temp file + rename, mode 0600: it may hold values).
pub fn save(path: &Path, registry: &Registry) -> Result<(), ManageError> {
    use std::os::unix::fs::OpenOptionsExt;
    let error = |source| ManageError::Write {
        path: path.to_owned(),
        source,
    };
    // Round-trip through the checked parser so `cliport` never writes a file the
    // daemon would refuse.
    Registry::from_json(&registry.to_json())?;
    let directory = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(directory).map_err(error)?;
    let temporary = directory.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .map(|name| name.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(error)?;
    file.write_all(registry.to_json().as_bytes())
        .map_err(error)?;
    file.sync_all().map_err(error)?;
    std::fs::rename(&temporary, path).map_err(error)
}

/// Adds or replaces a CLI.
pub fn install(registry: &mut Registry, name: &str, entry: CliEntry) -> Result<(), ManageError> {
    let mut candidate = registry.clone();
    candidate.clis.insert(name.to_owned(), entry.clone());
    if Registry::from_json(&candidate.to_json()).is_err() {
        return Err(ManageError::Invalid {
            name: name.to_owned(),
            bin: entry.bin,
        });
    }
    *registry = candidate;
    Ok(())
}

/// Removes a CLI.
pub fn remove(registry: &mut Registry, name: &str) -> Result<(), ManageError> {
    registry
        .clis
        .remove(name)
        .map(|_| ())
        .ok_or_else(|| ManageError::Unknown(name.to_owned()))
}

/// Sets (`KEY=VALUE`) or, with an empty value, removes literal variables of a CLI.
pub fn set_env(
    registry: &mut Registry,
    name: &str,
    pairs: &[(String, String)],
) -> Result<(), ManageError> {
    let entry = registry
        .clis
        .get_mut(name)
        .ok_or_else(|| ManageError::Unknown(name.to_owned()))?;
    for (key, value) in pairs {
        if value.is_empty() {
            entry.env.remove(key);
        } else {
            entry.env.insert(key.clone(), value.clone());
        }
    }
    Ok(())
}

/// A listing: one line per CLI with variable *names* only (values never printed).
pub fn list(registry: &Registry) -> String {
    let mut out = String::new();
    for (name, entry) in &registry.clis {
        let mut names: Vec<&str> = entry.env.keys().map(String::as_str).collect();
        names.extend(entry.env_from_files.keys().map(String::as_str));
        names.extend(entry.env_passthrough.iter().map(String::as_str));
        let limit = entry
            .rate_limit
            .map(|limit| format!(" rate={}/min", limit.per_minute))
            .unwrap_or_default();
        // Env mode is labelled weaker every time it is listed: its secret sits in the
        // environment of a process that runs caller-chosen arguments.
        let mode = match entry.effective_mode() {
            CliMode::Inject => "mode=inject".to_owned(),
            CliMode::Env if names.is_empty() => "mode=env (no credential)".to_owned(),
            CliMode::Env => "mode=env (WEAKER: the secret is in the CLI's environment)".to_owned(),
        };
        let profile = match (entry.profile, crate::policy::effective_profile(name, entry)) {
            (Some(profile), _) => format!("profile={}", profile.as_str()),
            (None, Some(profile)) => format!("profile={} (from the name)", profile.as_str()),
            (None, None) if !entry.commands.is_empty() || !entry.global_options.is_empty() => {
                "profile=custom".to_owned()
            }
            (None, None) => "profile=none (any arguments the patterns allow)".to_owned(),
        };
        out.push_str(&format!(
            "{name}\t{}\ttimeout={}s{limit}\tenv=[{}]\t{mode}\t{profile}\n",
            entry.bin,
            entry.timeout_seconds,
            names.join(",")
        ));
    }
    out
}

/// The last `count` lines of the audit log.
pub fn tail(path: &Path, count: usize) -> Result<Vec<String>, ManageError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManageError::Read {
        path: path.to_owned(),
        source,
    })?;
    let lines: Vec<&str> = text.lines().collect();
    Ok(lines[lines.len().saturating_sub(count)..]
        .iter()
        .map(|line| (*line).to_owned())
        .collect())
}

/// Builds an entry from `install` flags.
pub fn entry(
    bin: &str,
    env: BTreeMap<String, String>,
    env_from_files: BTreeMap<String, String>,
    timeout_seconds: u64,
) -> CliEntry {
    CliEntry {
        bin: bin.to_owned(),
        env,
        env_from_files,
        timeout_seconds,
        ..CliEntry::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_env_list_remove_round_trip_through_the_file() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("registry.json");
        let mut registry = load(&path).unwrap();
        install(
            &mut registry,
            "gog",
            entry(
                "/usr/local/bin/gog",
                BTreeMap::from([parse_pair("GOG_PASSWORD=hunter22").unwrap()]),
                BTreeMap::new(),
                30,
            ),
        )
        .unwrap();
        set_env(
            &mut registry,
            "gog",
            &[parse_pair("GOG_ACCOUNT=a@b.c").unwrap()],
        )
        .unwrap();
        save(&path, &registry).unwrap();
        let reread = load(&path).unwrap();
        assert_eq!(reread, registry);
        let listing = list(&reread);
        assert!(
            listing
                .contains("gog\t/usr/local/bin/gog\ttimeout=30s\tenv=[GOG_ACCOUNT,GOG_PASSWORD]"),
            "{listing}"
        );
        assert!(!listing.contains("hunter22"));
        assert!(
            listing.contains("\tmode=env (WEAKER: the secret is in the CLI's environment)\tprofile=gog (from the name)"),
            "{listing}"
        );
        assert!(
            install(
                &mut registry.clone(),
                "../x",
                entry("/bin/true", BTreeMap::new(), BTreeMap::new(), 1)
            )
            .is_err()
        );
        assert!(
            install(
                &mut registry.clone(),
                "x",
                entry("true", BTreeMap::new(), BTreeMap::new(), 1)
            )
            .is_err()
        );
        remove(&mut registry, "gog").unwrap();
        assert!(matches!(
            remove(&mut registry, "gog"),
            Err(ManageError::Unknown(_))
        ));
        assert!(parse_pair("=x").is_err());
    }
}
