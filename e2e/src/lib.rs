//! Harness for the end-to-end scenarios: reaches the control plane that
//! `e2e/run.sh` started (etcd, kube-apiserver, kube-controller-manager on
//! loopback) and drives kubectl, helm and operator processes against it.
//!
//! Nothing here starts or fakes an API server: when the environment `run.sh`
//! exports is missing, every entry point fails with the reason.

pub mod chart;
pub mod company_bot;
pub mod crds;
pub mod environment;
pub mod examples;
pub mod manifests;
pub mod namespace;
pub mod node;
pub mod operator_process;
pub mod pods;
pub mod service_account;
pub mod standin;
pub mod tools;
pub mod wait;

pub use environment::Environment;

/// Name of the field manager the scenarios apply objects with.
pub const FIELD_MANAGER: &str = "saint-e2e";

/// The message the API server gave for a refused request, or the client error.
pub fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// A scenario's failure, shown with its message rather than `Debug`, so a
/// failing test prints the API server's (or the tool's) own words.
pub struct Failure(String);

impl Failure {
    /// A failure described in words (not from an error value).
    pub fn message(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl std::fmt::Debug for Failure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

// Error types show their cause as `source`, not in `Display`: print the whole chain.
impl<E: std::error::Error + 'static> From<E> for Failure {
    fn from(error: E) -> Self {
        Self(saint_config::ErrorChain(&error).to_string())
    }
}

/// What every scenario returns.
pub type TestResult = Result<(), Failure>;
