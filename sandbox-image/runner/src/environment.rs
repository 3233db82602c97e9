//! Builds a command's environment: a minimal base plus exactly what the request gives.
//!
//! Pure. The runner's own environment (which may hold its runner token) is never
//! inherited: the child starts from nothing.

use std::{collections::BTreeMap, path::Path};

/// The environment of one command: `PATH` (shim directory first, so `gh` is the Porter
/// proxy), `HOME=/workspace`, `LANG=C.UTF-8`, then the request's variables on top.
pub fn command_environment(
    shim_directory: &Path,
    home: &Path,
    requested: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut environment = BTreeMap::from([
        (
            "PATH".to_string(),
            format!("{}:/usr/local/bin:/usr/bin:/bin", shim_directory.display()),
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
    fn base_puts_shims_first_and_request_variables_on_top() {
        let requested = BTreeMap::from([
            ("CLIPORT_TOKEN".to_string(), "t1".to_string()),
            ("LANG".to_string(), "hr_HR.UTF-8".to_string()),
        ]);
        let environment = command_environment(
            Path::new("/tmp/saint-bin"),
            Path::new("/workspace"),
            &requested,
        );
        assert_eq!(
            environment,
            BTreeMap::from([
                ("CLIPORT_TOKEN".to_string(), "t1".to_string()),
                ("HOME".to_string(), "/workspace".to_string()),
                ("LANG".to_string(), "hr_HR.UTF-8".to_string()),
                (
                    "PATH".to_string(),
                    "/tmp/saint-bin:/usr/local/bin:/usr/bin:/bin".to_string()
                ),
            ])
        );
    }
}
