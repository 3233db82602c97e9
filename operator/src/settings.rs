//! Operator-wide settings that shape every bot (default images, API server address).
//! Plain data, filled by `main` from flags; no I/O.

/// The agent ClusterRole's name when `--agent-cluster-role` is not given.
pub const DEFAULT_AGENT_CLUSTER_ROLE: &str = "saint-agent";

/// The chart's default `webhookIngress.allowedAnnotations`: cert-manager's issuer
/// annotations. What [`OperatorSettings::with_tag`] allows (offline rendering, tests);
/// the operator binary allows only what its flags name.
pub const CHART_ALLOWED_INGRESS_ANNOTATIONS: [&str; 2] =
    ["cert-manager.io/cluster-issuer", "cert-manager.io/issuer"];

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
    /// The chart's shared embedder, when it deploys one: bots with
    /// `spec.memory.embedder: shared` embed through it instead of loading the model.
    pub shared_embedder: Option<SharedEmbedder>,
    /// Annotations a bot's `spec.webhookIngress.annotations` may set on its Ingress
    /// (`--allowed-ingress-annotation`, the chart value
    /// `webhookIngress.allowedAnnotations`): exact keys, or `prefix/*` for every key
    /// under a prefix. Any other annotation is refused, naming it: the ingress
    /// controller is shared, and an annotation such as `server-snippet` configures it
    /// for every tenant. Empty: none.
    pub allowed_ingress_annotations: Vec<String>,
}

/// Why a `--shared-embedder` or `--shared-embedder-weights` value was refused; each
/// variant carries the value as given.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{value:?} is not <namespace>/<service>:<port>")]
    EmbedderShape { value: String },
    #[error("{value:?}: namespace and service must be DNS labels (lowercase letters, digits, '-')")]
    EmbedderLabel { value: String },
    #[error("{value:?}: the port must be a number from 1 to 65535")]
    EmbedderPort { value: String },
    #[error("{value:?} is not a weights setting (f32 or int16)")]
    Weights { value: String },
}

/// A `saint-embedder` Service: one copy of the embedding model for every bot that
/// points at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedEmbedder {
    /// Namespace of the Service and its pods.
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// Port of the Service and of its pods (the chart uses one number for both).
    pub port: u16,
    /// How its model holds the weights: part of the model name bots record, so a
    /// change re-embeds their indexes instead of mixing vectors of two models.
    pub weights: saint_config::ModelWeights,
}

/// Labels of the shared embedder's pods (the chart sets them); bots' NetworkPolicies
/// open egress to exactly these pods.
pub const SHARED_EMBEDDER_POD_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/name", "saint-embedder"),
    ("app.kubernetes.io/component", "embedder"),
];

impl SharedEmbedder {
    /// Parses `<namespace>/<service>:<port>` (the `--shared-embedder` flag).
    pub fn parse(value: &str) -> Result<Self, SettingsError> {
        let shape = || SettingsError::EmbedderShape {
            value: value.to_owned(),
        };
        let (namespace, rest) = value.split_once('/').ok_or_else(shape)?;
        let (service, port) = rest.rsplit_once(':').ok_or_else(shape)?;
        let label = |part: &str| {
            !part.is_empty()
                && part.len() <= 63
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        };
        if !label(namespace) || !label(service) {
            return Err(SettingsError::EmbedderLabel {
                value: value.to_owned(),
            });
        }
        let port: u16 = port.parse().ok().filter(|port| *port != 0).ok_or_else(|| {
            SettingsError::EmbedderPort {
                value: value.to_owned(),
            }
        })?;
        Ok(Self {
            namespace: namespace.to_string(),
            service: service.to_string(),
            port,
            weights: saint_config::ModelWeights::F32,
        })
    }

    /// The model name bots send and record: the weights are part of it.
    pub fn model(&self) -> &'static str {
        match self.weights {
            saint_config::ModelWeights::F32 => "all-MiniLM-L6-v2",
            saint_config::ModelWeights::Int16 => "all-MiniLM-L6-v2-int16",
        }
    }

    /// Parses `f32` or `int16` (the `--shared-embedder-weights` flag).
    pub fn parse_weights(value: &str) -> Result<saint_config::ModelWeights, SettingsError> {
        match value {
            "f32" => Ok(saint_config::ModelWeights::F32),
            "int16" => Ok(saint_config::ModelWeights::Int16),
            other => Err(SettingsError::Weights {
                value: other.to_owned(),
            }),
        }
    }

    /// The base URL bots call (`/v1/embeddings` below it).
    pub fn url(&self) -> String {
        format!(
            "http://{}.{}.svc:{}",
            self.service, self.namespace, self.port
        )
    }
}

impl OperatorSettings {
    /// Settings with the given image tag for the three default images, and the chart's
    /// default annotation allowlist.
    pub fn with_tag(tag: &str) -> Self {
        Self {
            agent_image: format!("ghcr.io/saint-work/saint-agent:{tag}"),
            porter_image: format!("ghcr.io/saint-work/saint-porter:{tag}"),
            sandbox_image: format!("ghcr.io/saint-work/saint-sandbox:{tag}"),
            api_server_cidrs: Vec::new(),
            api_server_port: 6443,
            agent_cluster_role: DEFAULT_AGENT_CLUSTER_ROLE.to_string(),
            shared_embedder: None,
            allowed_ingress_annotations: CHART_ALLOWED_INGRESS_ANNOTATIONS
                .map(str::to_string)
                .to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_embedder_flag_parses_and_refuses_other_shapes() {
        let parsed = SharedEmbedder::parse("saint-system/saint-embedder:8090").expect("parses");
        assert_eq!(parsed.url(), "http://saint-embedder.saint-system.svc:8090");
        for bad in [
            "saint-embedder:8090",
            "saint-system/saint-embedder",
            "saint-system/saint-embedder:0",
            "saint-system/saint-embedder:70000",
            "Saint/embedder:80",
            "ns/svc.evil.com:80",
            "ns/-svc:80",
            "/svc:80",
        ] {
            let error = SharedEmbedder::parse(bad).expect_err(bad).to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn shared_embedder_weights_are_f32_or_int16() {
        assert_eq!(
            SharedEmbedder::parse_weights("int16").expect("parses"),
            saint_config::ModelWeights::Int16
        );
        assert_eq!(
            SharedEmbedder::parse_weights("f16")
                .expect_err("f16")
                .to_string(),
            "\"f16\" is not a weights setting (f32 or int16)"
        );
    }
}
