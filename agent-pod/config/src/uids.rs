//! The user and group ids the bot's three kinds of process run as: the agent, Porter
//! and every sandbox. Defined here once; the operator's Deployment and sandbox Job
//! template, the agent's Job builder and Porter's peer gate import them. The images'
//! `USER` lines and the chart's admission policy spell the numbers in files Rust cannot
//! import; the tests below read those files and fail when they disagree.
//!
//! Pure: constants only.

/// The agent container's uid. The only uid Porter's control socket admits: whoever
/// may register tokens decides what every sandbox command may run.
pub const AGENT_UID: u32 = 65532;

/// The Porter container's uid; the CLIs it brokers run as it too. Neither the agent nor
/// a sandbox runs as it, so neither can read Porter's memory or its mounted secrets
/// through the uid.
pub const PORTER_UID: u32 = 65533;

/// Every sandbox pod's uid, and the only uid Porter's call socket admits (the sandbox's
/// CLI shims are its only callers). Not 65534, which Debian images give to `nobody`.
pub const SANDBOX_UID: u32 = 65531;

/// The one group all three share (the pods' `runAsGroup`, `fsGroup` and
/// `supplementalGroups`): each side's unix sockets are mode 0660, so the agent can open
/// a sandbox's runner socket and a sandbox Porter's call socket, and files on the
/// workspace are shared through it. Group membership opens a socket file; the peer gate
/// behind it looks at the uid only.
pub const SHARED_GID: u32 = 65532;

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn repository_file(relative: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(relative);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("failed to read {}: {error}", path.display()))
    }

    /// The last `USER uid:gid` line of a Dockerfile.
    fn image_user(dockerfile: &str) -> (u32, u32) {
        let text = repository_file(dockerfile);
        let user = text
            .lines()
            .filter_map(|line| line.trim().strip_prefix("USER "))
            .next_back()
            .unwrap_or_else(|| panic!("{dockerfile} has no USER line"));
        let (uid, gid) = user
            .trim()
            .split_once(':')
            .unwrap_or_else(|| panic!("{dockerfile}: USER {user} is not uid:gid"));
        (uid.parse().unwrap(), gid.parse().unwrap())
    }

    #[test]
    fn the_three_uids_differ_and_none_is_root() {
        let uids = [AGENT_UID, PORTER_UID, SANDBOX_UID];
        for (index, uid) in uids.iter().enumerate() {
            assert_ne!(*uid, 0);
            assert!(!uids[index + 1..].contains(uid), "uid {uid} used twice");
        }
        assert_ne!(SHARED_GID, 0);
    }

    #[test]
    fn the_images_run_as_the_same_ids() {
        assert_eq!(
            image_user("sandbox-image/Dockerfile"),
            (SANDBOX_UID, SHARED_GID)
        );
        assert_eq!(
            image_user("porter-sidecar/Dockerfile"),
            (PORTER_UID, SHARED_GID)
        );
    }

    #[test]
    fn the_admission_policy_requires_the_sandbox_uid() {
        let policy = repository_file("charts/saint/templates/admission-policy.yaml");
        let expected = format!("- name: sandboxUid\n      expression: \"{SANDBOX_UID}\"");
        assert!(
            policy.contains(&expected),
            "charts/saint/templates/admission-policy.yaml must define the variable\n{expected}"
        );
    }
}
