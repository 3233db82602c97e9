//! What Porter's proxy does on the wire with one credential: where it puts the secret
//! in a request (`InjectSpec`) and which requests each role may make with it
//! (`RequestRuleSpec`). Shared by `porter.clis[]` and `mcp.servers[]`, so it is a leaf
//! both import.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One place in a request where Porter's proxy puts the secret: exactly one of
/// `authorization: true`, `header` or `query`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "(has(self.authorization) ? 1 : 0) + (has(self.header) ? 1 : 0) + (has(self.query) ? 1 : 0) == 1"
).message("porter.clis[].inject[] entries are exactly one of {authorization: true}, {header: NAME} or {query: NAME}"))]
pub struct InjectSpec {
    /// `true`: the `Authorization` header (`Bearer`, `token`, or `Basic` with the
    /// placeholder as user or password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self")
        .message("porter.clis[].inject[].authorization is either true or left out"))]
    pub authorization: Option<bool>,
    /// A request header whose value holds the placeholder (`X-Api-Key`); not
    /// `Authorization`, `Cookie`, `Host` or other headers the proxy manages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[A-Za-z0-9!#$%&*+.^_|~-]+$')")
        .message("porter.clis[].inject[].header must be an HTTP header name"))]
    pub header: Option<String>,
    /// A query parameter whose value is the placeholder (`key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[!-~]+$')")
        .message("porter.clis[].inject[].query must be a query parameter name (printable ASCII, no spaces)"))]
    pub query: Option<String>,
}

/// Requests a role may make through the injecting proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestRuleSpec {
    /// HTTP methods (`GET`, `POST`, …); `*` for any.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 16)))]
    pub methods: Vec<String>,
    /// Path patterns without query: `*` within a segment, `**` for any segments
    /// (`/repos/*/*/pulls/**`).
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 512)))]
    pub paths: Vec<String>,
    /// Makes this a GraphQL rule: every operation in the body must be admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphql: Option<GraphqlRuleSpec>,
}

/// Which GraphQL operations a rule admits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphqlRuleSpec {
    /// Query operations are admitted.
    #[serde(default)]
    pub queries: bool,
    /// Root mutation fields admitted (`addComment`; `*` for any). Matched by field, not
    /// by operation name, which the client chooses freely.
    #[serde(default)]
    #[schemars(length(max = 128), inner(length(min = 1, max = 128)))]
    pub mutations: Vec<String>,
}
