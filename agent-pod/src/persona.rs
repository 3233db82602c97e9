//! Persona files (`SOUL.md`, …, `COMPANY.md`) for the system prompt: each read by name
//! from the config's persona directory when the directory holds it, otherwise from the
//! workspace. The rule is stated once, on [`saint_config::PersonaConfig`]; which names a
//! prompt asks for is the role's business (`prompt.rs`). Read-only: every file is opened
//! beneath its directory through saint-paths (no symlink followed, size-capped).
//!
//! On Kubernetes the directory is the SaintBot's persona ConfigMap, which the kubelet
//! lays out as
//!
//! ```text
//! ..2026_11_23_12_00_00.123456789/SOUL.md    the files, in a timestamped directory
//! ..data -> ..2026_11_23_12_00_00.123456789  swapped atomically on every update
//! SOUL.md -> ..data/SOUL.md                  one symlink per key
//! ```
//!
//! The per-key symlinks are never followed: saint-paths refuses every symlink, and
//! following "only the safe ones" would be a second, weaker containment check. Instead
//! `..data` is read with readlink (not followed) once per read, its target accepted only
//! when it is a single plain name — a directory directly inside the mount — and the
//! files are opened beneath the mount as `<target>/SOUL.md`, again with no symlink
//! followed. So a `..data` naming `/etc` or `../x`, a target that is itself a symlink,
//! and a file inside it that is a symlink are all refused. (Mounting each key with
//! `items` and `subPath` would avoid the symlinks, but the kubelet never updates
//! subPath mounts: a persona change would wait for a restart.)
//!
//! The kubelet deletes the old timestamped directory right after swapping `..data`, so a
//! read racing an update could mix two versions or miss files. `..data` is therefore
//! read again after the files, and the read repeats when it moved. A plain directory
//! (no `..data`, e.g. in local mode) is read directly, symlinks refused the same way.

use std::{collections::BTreeSet, io, path::Path};

use saint_config::{BotConfig, ErrorChain, PersonaConfig};
use saint_tools::guard::paths::{PathError, Workspace, WorkspacePath, is_safe_component};

/// The kubelet's name for the symlink to the current version of a ConfigMap volume.
const DATA_LINK: &str = "..data";

/// Reads of the directory before giving up when `..data` moves during every one (the
/// kubelet updates a volume at most every sync period, so the second read normally wins).
const SNAPSHOT_ATTEMPTS: usize = 3;

/// Why the persona directory as a whole could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PersonaError {
    #[error("failed to open the persona directory")]
    Open(#[source] io::Error),
    #[error("failed to read the persona directory's {DATA_LINK} link")]
    DataLink(#[source] io::Error),
    #[error(
        "refused the persona directory's {DATA_LINK} link: its target {0:?} is not a plain name inside the directory"
    )]
    DataTarget(String),
    #[error(
        "failed to read the persona directory: {DATA_LINK} moved during {SNAPSHOT_ATTEMPTS} reads in a row"
    )]
    KeptChanging,
}

/// A persona directory held open.
#[derive(Debug)]
pub struct PersonaDirectory {
    root: Workspace,
}

/// One file as the directory holds it: its text, absent, or refused.
pub type DirectoryFile = Result<Option<String>, PathError>;

impl PersonaDirectory {
    /// Opens the directory (its own path is trusted configuration, like the workspace's).
    pub fn open(path: &Path) -> Result<Self, PersonaError> {
        // saint-paths says only that the open failed; std says why (missing, not a
        // directory, permission).
        std::fs::read_dir(path).map_err(PersonaError::Open)?;
        Workspace::open(path)
            .map(|root| Self { root })
            .map_err(|_| PersonaError::Open(io::Error::other("not a readable directory")))
    }

    /// Reads each of `names` (plain file names) from one version of the directory, in
    /// order: `Ok(None)` when the directory does not hold it, an error when it holds it
    /// but it is refused (a symlink, a hard link, not a regular file, over `max_bytes`,
    /// not UTF-8).
    pub fn read_files(
        &self,
        names: &[&str],
        max_bytes: u64,
    ) -> Result<Vec<DirectoryFile>, PersonaError> {
        for _ in 0..SNAPSHOT_ATTEMPTS {
            let version = self.data_directory()?;
            let files = names
                .iter()
                .map(|name| self.read_one(version.as_deref(), name, max_bytes))
                .collect();
            if self.data_directory()? == version {
                return Ok(files);
            }
        }
        Err(PersonaError::KeptChanging)
    }

    /// The target of `..data` (a directory name inside the mount), or `None` for a plain
    /// directory without one.
    fn data_directory(&self) -> Result<Option<String>, PersonaError> {
        // read_link never follows the link; the mount's own path is trusted.
        let target = match std::fs::read_link(self.root.root_path().join(DATA_LINK)) {
            Ok(target) => target,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(PersonaError::DataLink(error)),
        };
        match target.to_str() {
            Some(name) if is_safe_component(name) && name != DATA_LINK => {
                Ok(Some(name.to_string()))
            }
            _ => Err(PersonaError::DataTarget(target.display().to_string())),
        }
    }

    fn read_one(&self, version: Option<&str>, name: &str, max_bytes: u64) -> DirectoryFile {
        if !is_safe_component(name) {
            return Ok(None);
        }
        let relative = match version {
            Some(version) => format!("{version}/{name}"),
            None => name.to_string(),
        };
        let path = WorkspacePath::parse(&relative, self.root.root_path())?;
        match self.root.read_text(&path, max_bytes) {
            Ok(text) => Ok(Some(text)),
            Err(PathError::NotFound(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// The persona files among `names`, in that order, as `(name, text)`: from the persona
/// directory when `persona` names one and it holds the file, else from
/// `read_workspace` (which returns `None` for a missing, refused or empty file). A file
/// the directory holds but refuses is logged and left out. Only plain names are looked
/// up in the directory (a ConfigMap key cannot hold a `/`); paths come from the
/// workspace alone. Empty files give no entry.
pub fn read_persona_files(
    persona: Option<&PersonaConfig>,
    names: &[&str],
    max_bytes: u64,
    read_workspace: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let from_directory: Vec<Option<DirectoryFile>> = match persona {
        None => vec![None; names.len()],
        Some(persona) => match PersonaDirectory::open(Path::new(&persona.directory))
            .and_then(|directory| directory.read_files(names, max_bytes))
        {
            Ok(files) => files.into_iter().map(Some).collect(),
            Err(error) => {
                tracing::warn!(
                    directory = %persona.directory,
                    error = %ErrorChain(&error),
                    "persona directory unreadable; persona files come from the workspace"
                );
                vec![None; names.len()]
            }
        },
    };
    names
        .iter()
        .zip(from_directory)
        .filter_map(|(name, held)| {
            let text = match held {
                Some(Ok(Some(text))) => Some(text),
                Some(Err(error)) => {
                    tracing::warn!(file = name, %error, "persona file refused");
                    None
                }
                Some(Ok(None)) | None => read_workspace(name),
            }?;
            (!text.trim().is_empty()).then(|| (name.to_string(), text))
        })
        .collect()
}

/// Every persona file name some role of `config` asks for, sorted: the bootstrap files
/// and the plain `inject` names.
pub fn wanted_names(config: &BotConfig) -> Vec<&str> {
    let mut names = BTreeSet::new();
    for role in config.roles.values() {
        names.extend(role.bootstrap.iter().map(String::as_str));
        names.extend(
            role.inject
                .iter()
                .map(String::as_str)
                .filter(|name| is_safe_component(name)),
        );
    }
    names.into_iter().collect()
}

/// Where each persona file some role asks for comes from, checked once at start so a
/// persona that cannot reach the model is said then, not noticed in answers.
#[derive(Debug, Default)]
pub struct PersonaSources {
    /// The configured persona directory, if any.
    pub directory: Option<String>,
    /// Files the directory holds (they win).
    pub from_directory: Vec<String>,
    /// Files left to the workspace (all of them without a usable directory).
    pub from_workspace: Vec<String>,
    /// Files the directory holds but that are refused, with why.
    pub refused: Vec<(String, PathError)>,
    /// Why the directory could not be read at all.
    pub unreadable: Option<PersonaError>,
}

impl PersonaSources {
    /// Checks the persona directory of `config` for every name of [`wanted_names`].
    pub fn check(config: &BotConfig, max_bytes: u64) -> Self {
        let names = wanted_names(config);
        let owned = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
        let Some(persona) = &config.persona else {
            return Self {
                from_workspace: owned(&names),
                ..Self::default()
            };
        };
        let mut sources = Self {
            directory: Some(persona.directory.clone()),
            ..Self::default()
        };
        match PersonaDirectory::open(Path::new(&persona.directory))
            .and_then(|directory| directory.read_files(&names, max_bytes))
        {
            Ok(files) => {
                for (name, file) in names.iter().zip(files) {
                    match file {
                        Ok(Some(_)) => sources.from_directory.push(name.to_string()),
                        Ok(None) => sources.from_workspace.push(name.to_string()),
                        Err(error) => sources.refused.push((name.to_string(), error)),
                    }
                }
            }
            Err(error) => {
                sources.from_workspace = owned(&names);
                sources.unreadable = Some(error);
            }
        }
        sources
    }

    /// One line per problem, as `/readyz` shows them.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let (Some(directory), Some(error)) = (&self.directory, &self.unreadable) {
            problems.push(format!(
                "persona directory {directory} unreadable ({}); persona files come from the workspace",
                ErrorChain(error)
            ));
        }
        for (file, error) in &self.refused {
            problems.push(format!(
                "persona file {file} refused ({error}); it is left out of every prompt"
            ));
        }
        problems
    }

    /// One line for the sources, and one warning per problem.
    pub fn log(&self) {
        let Some(directory) = &self.directory else {
            tracing::info!(
                "no persona directory configured: persona files come from the workspace"
            );
            return;
        };
        if let Some(error) = &self.unreadable {
            tracing::warn!(
                %directory,
                error = %ErrorChain(error),
                "persona directory unreadable; persona files come from the workspace"
            );
        }
        for (file, error) in &self.refused {
            tracing::warn!(%file, %error, "persona file refused; it is left out of every prompt");
        }
        tracing::info!(
            %directory,
            from_directory = ?self.from_directory,
            from_workspace = ?self.from_workspace,
            "persona files"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::symlink};

    use super::*;

    const LIMIT: u64 = 64 * 1024;

    /// A directory laid out as the kubelet lays out a ConfigMap volume.
    fn configmap_volume(files: &[(&str, &str)]) -> tempfile::TempDir {
        let mount = tempfile::tempdir().unwrap();
        let version = "..2026_11_23_12_00_00.123456789";
        fs::create_dir(mount.path().join(version)).unwrap();
        for (name, text) in files {
            fs::write(mount.path().join(version).join(name), text).unwrap();
            symlink(format!("{DATA_LINK}/{name}"), mount.path().join(name)).unwrap();
        }
        symlink(version, mount.path().join(DATA_LINK)).unwrap();
        mount
    }

    fn read(directory: &Path, names: &[&str]) -> Vec<DirectoryFile> {
        PersonaDirectory::open(directory)
            .unwrap()
            .read_files(names, LIMIT)
            .unwrap()
    }

    fn persona(directory: &Path) -> PersonaConfig {
        PersonaConfig {
            directory: directory.to_str().unwrap().to_string(),
        }
    }

    #[test]
    fn a_configmap_volume_is_read_through_its_data_link_without_following_a_symlink() {
        let mount = configmap_volume(&[("SOUL.md", "soul from the volume")]);
        let files = read(mount.path(), &["SOUL.md", "IDENTITY.md"]);
        assert_eq!(
            files,
            vec![Ok(Some("soul from the volume".to_string())), Ok(None)]
        );
    }

    #[test]
    fn an_update_of_the_volume_is_read_on_the_next_read() {
        let mount = configmap_volume(&[("SOUL.md", "first version")]);
        let directory = PersonaDirectory::open(mount.path()).unwrap();
        assert_eq!(
            directory.read_files(&["SOUL.md"], LIMIT).unwrap(),
            vec![Ok(Some("first version".to_string()))]
        );
        // What the kubelet does: a new timestamped directory, `..data` swapped by rename,
        // the old directory removed.
        let next = "..2026_11_23_12_05_00.987654321";
        fs::create_dir(mount.path().join(next)).unwrap();
        fs::write(mount.path().join(next).join("SOUL.md"), "second version").unwrap();
        symlink(next, mount.path().join("..data_tmp")).unwrap();
        fs::rename(
            mount.path().join("..data_tmp"),
            mount.path().join(DATA_LINK),
        )
        .unwrap();
        fs::remove_dir_all(mount.path().join("..2026_11_23_12_00_00.123456789")).unwrap();
        assert_eq!(
            directory.read_files(&["SOUL.md"], LIMIT).unwrap(),
            vec![Ok(Some("second version".to_string()))]
        );
    }

    #[test]
    fn a_data_link_leaving_the_directory_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("SOUL.md"), "TOP SECRET OUTSIDE").unwrap();
        for target in [
            outside.path().to_str().unwrap().to_string(),
            format!(
                "../{}",
                outside.path().file_name().unwrap().to_str().unwrap()
            ),
            "..".to_string(),
        ] {
            let mount = tempfile::tempdir().unwrap();
            symlink(&target, mount.path().join(DATA_LINK)).unwrap();
            let error = PersonaDirectory::open(mount.path())
                .unwrap()
                .read_files(&["SOUL.md"], LIMIT)
                .unwrap_err();
            assert!(
                matches!(error, PersonaError::DataTarget(_)),
                "{target}: {error}"
            );
            // And the prompt gets the workspace's copy, never the outside file.
            let files =
                read_persona_files(Some(&persona(mount.path())), &["SOUL.md"], LIMIT, |_| {
                    Some("soul from the workspace".to_string())
                });
            assert_eq!(
                files,
                vec![("SOUL.md".to_string(), "soul from the workspace".to_string())],
                "{target}"
            );
        }
    }

    #[test]
    fn a_data_link_to_a_symlinked_directory_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("SOUL.md"), "TOP SECRET OUTSIDE").unwrap();
        let mount = tempfile::tempdir().unwrap();
        // A plain name, but the entry it names is itself a symlink out of the mount.
        symlink(outside.path(), mount.path().join("..2026_11_23_12_00_00.1")).unwrap();
        symlink("..2026_11_23_12_00_00.1", mount.path().join(DATA_LINK)).unwrap();
        let files = read(mount.path(), &["SOUL.md"]);
        assert!(matches!(files[0], Err(PathError::Symlink(_))), "{files:?}");
    }

    #[test]
    fn a_symlink_out_of_the_persona_directory_is_refused_and_not_replaced_by_the_workspace() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.md"), "TOP SECRET OUTSIDE").unwrap();
        // Inside a ConfigMap volume's current version, and in a plain directory.
        let mount = configmap_volume(&[("IDENTITY.md", "identity from the volume")]);
        symlink(
            outside.path().join("secret.md"),
            mount.path().join("..2026_11_23_12_00_00.123456789/SOUL.md"),
        )
        .unwrap();
        let plain = tempfile::tempdir().unwrap();
        fs::write(plain.path().join("IDENTITY.md"), "identity from the volume").unwrap();
        symlink(
            outside.path().join("secret.md"),
            plain.path().join("SOUL.md"),
        )
        .unwrap();
        for directory in [mount.path(), plain.path()] {
            let files = read(directory, &["SOUL.md", "IDENTITY.md"]);
            assert!(matches!(files[0], Err(PathError::Symlink(_))), "{files:?}");
            assert_eq!(files[1], Ok(Some("identity from the volume".to_string())));
            let prompt_files = read_persona_files(
                Some(&persona(directory)),
                &["SOUL.md", "IDENTITY.md"],
                LIMIT,
                |name| Some(format!("{name} from the workspace")),
            );
            assert_eq!(
                prompt_files,
                vec![(
                    "IDENTITY.md".to_string(),
                    "identity from the volume".to_string()
                )],
                "the declared SOUL.md is refused, and the workspace's does not stand in for it"
            );
        }
    }

    #[test]
    fn the_directory_wins_and_the_workspace_fills_what_it_lacks() {
        let mount = configmap_volume(&[("SOUL.md", "declared soul"), ("HEARTBEAT.md", "")]);
        let files = read_persona_files(
            Some(&persona(mount.path())),
            &["SOUL.md", "TOOLS.md", "HEARTBEAT.md", "memory/shared/x.md"],
            LIMIT,
            |name| Some(format!("{name} from the workspace")),
        );
        // The declared HEARTBEAT.md is empty: it gives no entry, and the workspace's copy
        // does not stand in for it.
        assert_eq!(
            files,
            vec![
                ("SOUL.md".to_string(), "declared soul".to_string()),
                (
                    "TOOLS.md".to_string(),
                    "TOOLS.md from the workspace".to_string()
                ),
                (
                    "memory/shared/x.md".to_string(),
                    "memory/shared/x.md from the workspace".to_string()
                ),
            ]
        );
    }

    #[test]
    fn an_oversized_persona_file_is_refused() {
        let big = "x".repeat(LIMIT as usize + 1);
        let mount = configmap_volume(&[("SOUL.md", &big)]);
        assert!(matches!(
            read(mount.path(), &["SOUL.md"])[0],
            Err(PathError::TooLarge(_, _))
        ));
    }

    #[test]
    fn the_start_up_check_names_each_file_by_source_and_each_refusal() {
        let mut config: BotConfig = serde_json::from_str(include_str!(
            "../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        let mount = configmap_volume(&[("SOUL.md", "declared soul"), ("IDENTITY.md", "me")]);
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.md"), "TOP SECRET OUTSIDE").unwrap();
        symlink(
            outside.path().join("secret.md"),
            mount
                .path()
                .join("..2026_11_23_12_00_00.123456789/AGENTS.md"),
        )
        .unwrap();
        config.persona = Some(persona(mount.path()));
        let sources = PersonaSources::check(&config, LIMIT);
        assert_eq!(sources.from_directory, ["IDENTITY.md", "SOUL.md"]);
        assert_eq!(
            sources.refused,
            [(
                "AGENTS.md".to_string(),
                PathError::Symlink("..2026_11_23_12_00_00.123456789/AGENTS.md".to_string())
            )]
        );
        assert!(sources.from_workspace.contains(&"COMPANY.md".to_string()));
        assert!(!sources.from_workspace.contains(&"AGENTS.md".to_string()));
        assert!(sources.unreadable.is_none());

        config.persona = Some(PersonaConfig {
            directory: "/nonexistent/saint-persona".to_string(),
        });
        let sources = PersonaSources::check(&config, LIMIT);
        assert!(matches!(sources.unreadable, Some(PersonaError::Open(_))));
        assert_eq!(sources.from_workspace, wanted_names(&config));

        config.persona = None;
        let sources = PersonaSources::check(&config, LIMIT);
        assert_eq!(
            (sources.directory, sources.from_workspace.len()),
            (None, wanted_names(&config).len())
        );
    }

    #[test]
    fn without_a_directory_or_with_a_missing_one_the_workspace_is_the_source() {
        let workspace = |name: &str| Some(format!("{name} from the workspace"));
        let expected = vec![(
            "SOUL.md".to_string(),
            "SOUL.md from the workspace".to_string(),
        )];
        assert_eq!(
            read_persona_files(None, &["SOUL.md"], LIMIT, workspace),
            expected
        );
        let missing = PersonaConfig {
            directory: "/nonexistent/saint-persona".to_string(),
        };
        assert_eq!(
            read_persona_files(Some(&missing), &["SOUL.md"], LIMIT, workspace),
            expected
        );
    }
}
