//! Shared plumbing of the file tools: path parsing against the workspace and the role's
//! path rules, error mapping.
//!
//! Touches nothing itself; the file tools call it before any file-system access.

use std::sync::Arc;

use crate::{
    ToolContext, ToolError,
    guard::{
        paths::{PathError, Workspace, WorkspacePath},
        role_paths::{RolePathError, RolePaths},
    },
};

/// Largest file the file tools read or rewrite, in bytes.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// An opened workspace plus the caller's path rules.
pub struct FileAccess {
    /// The workspace root descriptor.
    pub workspace: Workspace,
    /// The caller's compiled path rules.
    pub rules: Arc<RolePaths>,
}

impl FileAccess {
    /// Opens the workspace and compiles the caller's rules.
    pub fn for_caller(context: &ToolContext) -> Result<Self, ToolError> {
        let rules = RolePaths::new(
            &context.caller.role,
            &context.config.file_access,
            &context.caller.slug,
        )
        .map_err(|_| ToolError::Failed("failed to load the file rules of your role".to_string()))?;
        let workspace = Workspace::open(&context.workspace).map_err(path_error)?;
        Ok(Self {
            workspace,
            rules: Arc::new(rules),
        })
    }

    /// Parses a path and checks the caller may read it.
    pub fn readable(&self, context: &ToolContext, raw: &str) -> Result<WorkspacePath, ToolError> {
        let path = WorkspacePath::parse(raw, &context.workspace).map_err(path_error)?;
        self.rules.check_read(path.as_str()).map_err(role_error)?;
        Ok(path)
    }

    /// Parses a path and checks the caller may write it.
    pub fn writable(&self, context: &ToolContext, raw: &str) -> Result<WorkspacePath, ToolError> {
        let path = WorkspacePath::parse(raw, &context.workspace).map_err(path_error)?;
        self.rules.check_write(path.as_str()).map_err(role_error)?;
        Ok(path)
    }
}

/// Maps a containment error to what the model sees.
pub fn path_error(error: PathError) -> ToolError {
    match error {
        PathError::NotFound(_) => ToolError::NotFound(error.to_string()),
        PathError::Io { .. } | PathError::Workspace => ToolError::Failed(error.to_string()),
        PathError::TooLarge(..) => ToolError::InvalidInput(error.to_string()),
        _ => ToolError::Denied(error.to_string()),
    }
}

/// Maps a role path refusal to what the model sees.
pub fn role_error(error: RolePathError) -> ToolError {
    match error {
        RolePathError::BadGlob { .. } => {
            ToolError::Failed("failed to load the file rules of your role".to_string())
        }
        refusal => ToolError::Denied(refusal.to_string()),
    }
}

/// Runs blocking file work off the async runtime.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ToolError::Failed("file operation was interrupted".to_string()))?
}
