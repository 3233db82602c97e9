//! `cliport` operations on the registry file (local mode) and the audit log.
//!
//! Pure edits on a `Registry` value plus atomic file read/write helpers; never touches
//! the daemon (which picks changes up by itself).

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use porter_protocol::registry::{
    CliEntry, InjectAt, Registry, RegistryError, RequestRule, SecretSource,
};
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
    #[error("no CLI named {0:?} is registered")]
    Unknown(String),
    #[error("--inject {0:?}: expected authorization, header:NAME or query:NAME")]
    InjectPlace(String),
    #[error("--allow {0:?}: expected ROLE:METHOD[,METHOD…]:PATH (PATH starts with /)")]
    Rule(String),
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

/// Parses an `--inject` value: `authorization`, `header:NAME` or `query:NAME`.
pub fn parse_inject(text: &str) -> Result<InjectAt, ManageError> {
    match text.split_once(':') {
        None if text.eq_ignore_ascii_case("authorization") => Ok(InjectAt::Authorization),
        Some(("header", name)) if !name.is_empty() => Ok(InjectAt::Header(name.to_owned())),
        Some(("query", name)) if !name.is_empty() => Ok(InjectAt::Query(name.to_owned())),
        _ => Err(ManageError::InjectPlace(text.to_owned())),
    }
}

/// Parses an `--allow` value `ROLE:METHOD[,METHOD…]:PATH` into the role and its rule.
pub fn parse_rule(text: &str) -> Result<(String, RequestRule), ManageError> {
    let refused = || ManageError::Rule(text.to_owned());
    let (role, rest) = text.split_once(':').ok_or_else(refused)?;
    let (methods, path) = rest.split_once(':').ok_or_else(refused)?;
    if role.is_empty() || methods.is_empty() || !path.starts_with('/') {
        return Err(refused());
    }
    Ok((
        role.to_owned(),
        RequestRule {
            methods: methods
                .split(',')
                .map(|method| method.trim().to_ascii_uppercase())
                .collect(),
            paths: vec![path.to_owned()],
            graphql: None,
        },
    ))
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

/// Adds or replaces a CLI's credential; the registry's own checks name what is wrong.
pub fn install(registry: &mut Registry, name: &str, entry: CliEntry) -> Result<(), ManageError> {
    let mut candidate = registry.clone();
    candidate.clis.insert(name.to_owned(), entry);
    Registry::from_json(&candidate.to_json())?;
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

/// A listing: one line per credential, never a secret value.
pub fn list(registry: &Registry) -> String {
    let mut out = String::new();
    for (name, entry) in &registry.clis {
        let secret = match &entry.secret {
            SecretSource::File(path) => format!("file {path}"),
            SecretSource::Env(variable) => format!("env {variable}"),
            SecretSource::Value(_) => "value (in this file)".to_owned(),
        };
        let inject: Vec<String> = entry
            .inject_at()
            .iter()
            .map(|place| match place {
                InjectAt::Authorization => "authorization".to_owned(),
                InjectAt::Header(header) => format!("header:{header}"),
                InjectAt::Query(parameter) => format!("query:{parameter}"),
            })
            .collect();
        let oauth = if entry.oauth2.is_some() {
            " oauth2"
        } else {
            ""
        };
        let git = if entry.git { " git" } else { "" };
        let roles = if entry.requests.is_empty() {
            "any request".to_owned()
        } else {
            entry
                .requests
                .iter()
                .map(|(role, rules)| format!("{role}:{}", rules.len()))
                .collect::<Vec<_>>()
                .join(",")
        };
        out.push_str(&format!(
            "{name}\thosts={}\tsecret={secret}\tinject={}{oauth}{git}\tenv=[{}]\trequests={roles}\n",
            entry.hosts.join(","),
            inject.join(","),
            entry.placeholder_env.join(","),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_list_remove_round_trip_through_the_file() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("registry.json");
        let mut registry = load(&path).unwrap();
        let (role, rule) = parse_rule("employee:get,head:/repos/*/*/pulls").unwrap();
        assert_eq!(rule.methods, ["GET", "HEAD"]);
        install(
            &mut registry,
            "gh",
            CliEntry {
                hosts: vec!["api.github.com".into(), "github.com".into()],
                secret: SecretSource::Value("ghp_hunter22".into()),
                placeholder_env: vec!["GH_TOKEN".into()],
                git: true,
                requests: [(role, vec![rule])].into(),
                ..CliEntry::default()
            },
        )
        .unwrap();
        save(&path, &registry).unwrap();
        let reread = load(&path).unwrap();
        assert_eq!(reread, registry);
        let listing = list(&reread);
        assert_eq!(
            listing,
            "gh\thosts=api.github.com,github.com\tsecret=value (in this file)\tinject=authorization git\tenv=[GH_TOKEN]\trequests=employee:1\n"
        );
        let no_hosts = install(&mut registry.clone(), "x", CliEntry::default()).unwrap_err();
        assert!(no_hosts.to_string().contains("clis.x.hosts"), "{no_hosts}");
        remove(&mut registry, "gh").unwrap();
        assert!(matches!(
            remove(&mut registry, "gh"),
            Err(ManageError::Unknown(_))
        ));
        assert_eq!(
            parse_inject("query:key").unwrap(),
            InjectAt::Query("key".into())
        );
        assert!(parse_inject("cookie:x").is_err());
        assert!(parse_rule("employee:GET:repos").is_err());
    }
}
