//! Runs kubectl and helm (built by `e2e/setup.sh`) against the control plane
//! and returns their output; a failure carries the tool's own stderr.

use std::{path::Path, process::Stdio};

use tokio::process::Command;

/// A command that could not run or exited non-zero.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("failed to start {program}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{command}` exited with {status}:\n{stderr}{stdout}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        stdout: String,
        stderr: String,
    },
}

/// Output of a successful command.
#[derive(Debug)]
pub struct ToolOutput {
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program arguments…` with `KUBECONFIG` set, optionally feeding stdin.
pub async fn run(
    program: &Path,
    kubeconfig: &Path,
    arguments: &[&str],
    stdin: Option<&str>,
) -> Result<ToolOutput, ToolError> {
    use tokio::io::AsyncWriteExt;

    let command_line = format!(
        "{} {}",
        program.file_name().unwrap_or_default().to_string_lossy(),
        arguments.join(" ")
    );
    let mut child = Command::new(program)
        .args(arguments)
        .env("KUBECONFIG", kubeconfig)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ToolError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|source| ToolError::Spawn {
                program: program.display().to_string(),
                source,
            })?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|source| ToolError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if output.status.success() {
        Ok(ToolOutput { stdout, stderr })
    } else {
        Err(ToolError::Failed {
            command: command_line,
            status: output.status,
            stdout,
            stderr,
        })
    }
}
