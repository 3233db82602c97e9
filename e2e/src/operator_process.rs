//! Runs `saint-operator` as a separate process with a given kubeconfig (a
//! ServiceAccount token, never the admin's) and stops it when dropped, so a
//! failing scenario never leaves an operator behind.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// The operator could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum OperatorProcessError {
    #[error("failed to create operator log {path}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to start {binary}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
}

/// A running operator; killed (and reaped) on drop.
#[derive(Debug)]
pub struct OperatorProcess {
    child: Option<Child>,
    log_path: PathBuf,
}

impl OperatorProcess {
    /// Starts `binary arguments…` with `KUBECONFIG=kubeconfig`, logging to `log_path`.
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        arguments: &[String],
        environment: &[(&str, String)],
        log_path: PathBuf,
    ) -> Result<Self, OperatorProcessError> {
        let log = File::create(&log_path).map_err(|source| OperatorProcessError::Log {
            path: log_path.clone(),
            source,
        })?;
        let log_for_stderr = log
            .try_clone()
            .map_err(|source| OperatorProcessError::Log {
                path: log_path.clone(),
                source,
            })?;
        let child = Command::new(binary)
            .args(arguments)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .envs(environment.iter().map(|(name, value)| (*name, value)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            .spawn()
            .map_err(|source| OperatorProcessError::Spawn {
                binary: binary.to_owned(),
                source,
            })?;
        Ok(Self {
            child: Some(child),
            log_path,
        })
    }

    /// Kills the process at once (SIGKILL): a crash, not a graceful exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process has exited, with its status.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Everything the operator logged so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
