//! Operator-wide settings that shape every bot (default images, API server address).
//! Plain data, filled by `main` from flags; no I/O.

/// The agent ClusterRole's name when `--agent-cluster-role` is not given.
pub const DEFAULT_AGENT_CLUSTER_ROLE: &str = "saint-agent";

/// Defaults the operator applies to bots that do not override them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorSettings {
    /// Default image of the `agent` container.
    pub agent_image: String,
    /// Default image of the `porter` container.
    pub porter_image: String,
    /// Default image of sandbox pods.
    pub sandbox_image: String,
    /// CIDRs of the Kubernetes API server endpoints the agent may reach (it creates
    /// sandbox Jobs). NetworkPolicies act after service translation, so these are the
    /// endpoint addresses, not the `kubernetes` Service's ClusterIP.
    pub api_server_cidrs: Vec<String>,
    /// TCP port of the API server endpoints.
    pub api_server_port: i32,
    /// The ClusterRole each bot's agent account is bound to in its namespace (sandbox
    /// Jobs, their pods, Events). The operator holds only `bind` on it, never the rights
    /// themselves.
    pub agent_cluster_role: String,
}

impl OperatorSettings {
    /// Settings with the given image tag for the three default images.
    pub fn with_tag(tag: &str) -> Self {
        Self {
            agent_image: format!("ghcr.io/saint-work/saint-agent:{tag}"),
            porter_image: format!("ghcr.io/saint-work/saint-porter:{tag}"),
            sandbox_image: format!("ghcr.io/saint-work/saint-sandbox:{tag}"),
            api_server_cidrs: Vec::new(),
            api_server_port: 6443,
            agent_cluster_role: DEFAULT_AGENT_CLUSTER_ROLE.to_string(),
        }
    }
}
