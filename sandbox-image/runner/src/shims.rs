//! Creates the Porter proxy shims: one symlink to `cliport-proxy` per registered CLI name.
//!
//! Touches only the writable shim directory it is given (never the image's own `bin`
//! directories), so adding a CLI to the bot needs no new image.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use thiserror::Error;

/// Why the shim directory could not be prepared.
#[derive(Debug, Error)]
pub enum ShimError {
    #[error("failed to create shim directory {path}")]
    CreateDirectory { path: PathBuf, source: io::Error },
    #[error("failed to link shim {name} in {directory}")]
    Link {
        name: String,
        directory: PathBuf,
        source: io::Error,
    },
    #[error("failed to read CLI names from {path}")]
    ReadNames { path: PathBuf, source: io::Error },
    #[error("refusing CLI name {0:?}: names are plain file names")]
    BadName(String),
}

/// Whether `name` can be a shim: a plain file name, nothing that walks directories or
/// looks like an option. Mirrors the Porter registry's own rule.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0'])
        && !name.starts_with('-')
        && !name.chars().any(char::is_whitespace)
}

/// Parses a names file: one CLI name per line; blank lines and `#` comments ignored.
pub fn parse_names(text: &str) -> Result<Vec<String>, ShimError> {
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !is_plain_name(line) {
            return Err(ShimError::BadName(line.to_string()));
        }
        names.push(line.to_string());
    }
    Ok(names)
}

/// Reads a names file (see [`parse_names`]).
pub fn read_names(path: &Path) -> Result<Vec<String>, ShimError> {
    let text = fs::read_to_string(path).map_err(|source| ShimError::ReadNames {
        path: path.to_path_buf(),
        source,
    })?;
    parse_names(&text)
}

/// Links `directory/cliport-proxy` and `directory/<name>` for every name to `proxy`.
///
/// Existing entries are replaced, so a restarted runner picks up a changed list.
pub fn install(directory: &Path, proxy: &Path, names: &[String]) -> Result<(), ShimError> {
    fs::create_dir_all(directory).map_err(|source| ShimError::CreateDirectory {
        path: directory.to_path_buf(),
        source,
    })?;
    let mut all = vec!["cliport-proxy".to_string()];
    for name in names {
        if !is_plain_name(name) {
            return Err(ShimError::BadName(name.clone()));
        }
        all.push(name.clone());
    }
    for name in all {
        let link = directory.join(&name);
        let link_error = |source| ShimError::Link {
            name: name.clone(),
            directory: directory.to_path_buf(),
            source,
        };
        match fs::symlink_metadata(&link) {
            Ok(_) => fs::remove_file(&link).map_err(link_error)?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(link_error(error)),
        }
        std::os::unix::fs::symlink(proxy, &link).map_err(link_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_file_skips_comments_and_refuses_paths() {
        let names = parse_names("# porter clis\ngh\n\n  jira \n").unwrap();
        assert_eq!(names, vec!["gh".to_string(), "jira".to_string()]);
        assert!(matches!(parse_names("../sh"), Err(ShimError::BadName(_))));
        assert!(matches!(parse_names("-rf"), Err(ShimError::BadName(_))));
    }

    #[test]
    fn install_links_every_name_and_the_proxy_itself() {
        let directory = tempfile::tempdir().unwrap();
        let bin = directory.path().join("bin");
        let proxy = Path::new("/opt/saint/bin/cliport-proxy");
        install(&bin, proxy, &["gh".to_string()]).unwrap();
        // Twice: a restarted runner replaces its old links instead of failing.
        install(&bin, proxy, &["gh".to_string(), "jira".to_string()]).unwrap();
        for name in ["cliport-proxy", "gh", "jira"] {
            assert_eq!(fs::read_link(bin.join(name)).unwrap(), proxy, "{name}");
        }
        assert!(matches!(
            install(&bin, proxy, &["a/b".to_string()]),
            Err(ShimError::BadName(_))
        ));
    }
}
