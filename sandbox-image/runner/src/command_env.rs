//! Builds a command's environment: a minimal base plus exactly what the request gives.
//!
//! Pure. The runner's own environment (which may hold its runner token) is never
//! inherited: the child starts from nothing.

use std::{collections::BTreeMap, path::Path};

/// The environment of one command: `PATH`, `HOME=/workspace`, `LANG=C.UTF-8`, then
/// the request's variables on top (in practice what Porter gave the agent for this
/// command: the proxy URL with its key, placeholders, the CA and git settings).
pub fn command_environment(
    home: &Path,
    requested: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut environment = BTreeMap::from([
        (
            "PATH".to_string(),
            "/usr/local/bin:/usr/bin:/bin".to_string(),
        ),
        ("HOME".to_string(), home.display().to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ]);
    environment.extend(
        requested
            .iter()
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    environment
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_variables_go_on_top_of_the_base() {
        let requested = BTreeMap::from([
            (
                "HTTPS_PROXY".to_string(),
                "http://porter:k@127.0.0.1:3128".to_string(),
            ),
            ("LANG".to_string(), "hr_HR.UTF-8".to_string()),
        ]);
        let environment = command_environment(Path::new("/workspace"), &requested);
        assert_eq!(
            environment,
            BTreeMap::from([
                ("HOME".to_string(), "/workspace".to_string()),
                (
                    "HTTPS_PROXY".to_string(),
                    "http://porter:k@127.0.0.1:3128".to_string()
                ),
                ("LANG".to_string(), "hr_HR.UTF-8".to_string()),
                (
                    "PATH".to_string(),
                    "/usr/local/bin:/usr/bin:/bin".to_string()
                ),
            ])
        );
    }
}
