//! The custom resources of group `saint.work/v1alpha1`: `SaintBot`, `Contact` and `Role`.
//!
//! Pure types: the doc comments become `kubectl explain` text and the CEL rules become
//! `x-kubernetes-validations`, so the API server refuses bad manifests with a message
//! naming the field. Nothing here talks to a cluster.

pub mod channel_rules;
pub mod contact;
pub mod formats;
pub mod mcp;
pub mod media;
pub mod proactive;
pub mod role;
pub mod saintbot;
pub mod wire_rules;

use kube::{
    KubeSchema,
    core::{Message, Rule},
};
use saint_config::{BOOTSTRAP_FILES, KNOWN_TOOLS, TOOL_GROUPS};
use serde::{Deserialize, Serialize};

pub use self::{
    contact::{Contact, ContactIdentifiers, ContactSpec, ContactStatus, IdentifierConflict},
    role::{Role, RoleSpec, RoleStatus},
    saintbot::{SaintBot, SaintBotSpec, SaintBotStatus},
};

/// API group of every Saint resource.
pub const GROUP: &str = "saint.work";

/// API version of every Saint resource.
pub const VERSION: &str = "v1alpha1";

/// A DNS-1123 label: lower-case alphanumerics and `-`, starting and ending alphanumeric.
pub const DNS_1123_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A DNS-1035 label: a DNS-1123 label starting with a letter (Service names).
pub const DNS_1035_LABEL_PATTERN: &str = "^[a-z]([-a-z0-9]*[a-z0-9])?$";

/// Longest DNS label (and label value).
pub const MAX_LABEL_LENGTH: usize = 63;

/// CEL at the top of a CRD: `metadata.name` is a DNS-1123 label, at most 63 characters
/// (`kind` names the resource in the message, `why` says what the name becomes).
pub(crate) fn label_name_rule(kind: &str, why: &str) -> Rule {
    Rule::new(format!(
        "size(self.metadata.name) <= {MAX_LABEL_LENGTH} && self.metadata.name.matches('{DNS_1123_LABEL_PATTERN}')"
    ))
    .message(Message::Message(format!(
        "metadata.name of a {kind} must be a DNS-1123 label (lower-case letters, digits and '-', at most {MAX_LABEL_LENGTH}): {why}"
    )))
}

/// An E.164 phone number: `+`, a non-zero country digit, 7 to 15 digits in all.
pub const E164_PATTERN: &str = r"^\+[1-9][0-9]{6,14}$";

/// A plausible email address (the API server's `email` format checks it further).
pub const EMAIL_PATTERN: &str = r"^[^@\s]+@[^@\s]+\.[^@\s]+$";

/// A reference to one key of a Secret in the bot's namespace.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, KubeSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    /// Name of the Secret (same namespace as the SaintBot).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = formats::object_name_rule("name", "a Secret"))]
    pub name: String,
    /// Key inside the Secret's `data`.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(format!("self.matches('{SECRET_KEY_PATTERN}')"))
        .message("key must be a Secret key: letters, digits, '-', '_' and '.'"))]
    pub key: String,
}

/// A key of a Secret's or ConfigMap's `data`.
pub const SECRET_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";

/// CEL for a Secret key reference: both parts present. `field` names the field in the message.
pub(crate) fn secret_key_rule(field: &str) -> Rule {
    Rule::new("self.name != '' && self.key != ''").message(Message::Message(format!(
        "{field} must name both a Secret (name) and a key in it (key)"
    )))
}

/// An MCP server's tool pattern: `<server>.<tool>` or a glob over the tool part
/// (`docs.search`, `docs.*`, `docs.get_*`), as `saint_config::mcp::is_server_tool_pattern`
/// reads it (which the operator's `validate` step applies again). Written for a CEL
/// string literal: each regex backslash is doubled.
pub const SERVER_TOOL_PATTERN: &str = r"^[a-z][a-z0-9-]{0,30}[.][A-Za-z0-9_*?!\\[\\]-]+$";

/// CEL for a list of tool patterns: known tools, `group:<known>`, globs over tool names
/// or an MCP server's tools (`docs.*`). Globs are checked against the known tools, and
/// server patterns against the bot's servers, again by the operator's `validate` step.
pub(crate) fn tool_patterns_rule(field: &str) -> Rule {
    let tools = quoted_list(KNOWN_TOOLS.iter().copied());
    let groups = quoted_list(TOOL_GROUPS.iter().map(|(name, _)| *name));
    Rule::new(format!(
        "self.all(t, t in {tools} || (t.startsWith('group:') && t.substring(6) in {groups}) \
         || ((t.contains('*') || t.contains('?')) && t.matches('^[a-z_*?]+$')) \
         || t.matches('{SERVER_TOOL_PATTERN}'))"
    ))
    .message(Message::Message(format!(
        "{field} entries must be known tools ({}), group:<{}>, globs over tool names or an MCP server's tools (<server>.<tool>, <server>.*)",
        KNOWN_TOOLS.join(", "),
        TOOL_GROUPS
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join("|"),
    )))
}

/// CEL for a list of bootstrap file names.
pub(crate) fn bootstrap_files_rule(field: &str) -> Rule {
    let files = quoted_list(BOOTSTRAP_FILES.iter().copied());
    Rule::new(format!("self.all(f, f in {files})")).message(Message::Message(format!(
        "{field} entries must be one of {}",
        BOOTSTRAP_FILES.join(", ")
    )))
}

/// CEL for a DNS-1123 label string.
pub(crate) fn dns_label_rule(field: &str) -> Rule {
    Rule::new(format!("self.matches('{DNS_1123_LABEL_PATTERN}')")).message(Message::Message(
        format!(
            "{field} must be a DNS-1123 label (lower-case letters, digits and '-', at most 63)"
        ),
    ))
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels (host names, most object names).
pub const DNS_1123_SUBDOMAIN_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// CEL for a DNS-1123 subdomain string (a host name: no scheme, port or path).
pub(crate) fn dns_subdomain_rule(field: &str) -> Rule {
    Rule::new(format!("self.matches('{DNS_1123_SUBDOMAIN_PATTERN}')")).message(Message::Message(
        format!(
            "{field} must be a DNS name (lower-case letters, digits, '-' and '.'; no scheme, port or path)"
        ),
    ))
}

/// CEL for a list of DNS-1123 labels.
pub(crate) fn dns_label_list_rule(field: &str) -> Rule {
    Rule::new(format!(
        "self.all(n, n.matches('{DNS_1123_LABEL_PATTERN}'))"
    ))
    .message(Message::Message(format!(
        "{field} entries must be DNS-1123 labels (lower-case letters, digits and '-')"
    )))
}

fn quoted_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.map(|item| format!("'{item}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Every CRD with the file name `crdgen` writes it to, in a fixed order.
pub fn all_crds() -> Vec<(
    &'static str,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
)> {
    use kube::CustomResourceExt;
    vec![
        ("saint.work_saintbots.yaml", SaintBot::crd()),
        ("saint.work_contacts.yaml", Contact::crd()),
        ("saint.work_roles.yaml", Role::crd()),
    ]
}

/// The YAML document `crdgen` writes for one CRD (with a do-not-edit header).
pub fn crd_yaml(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> String {
    let body = serde_yaml_ng::to_string(crd).expect("a CRD always serialises to YAML");
    format!("# Generated by `cargo run -p saint-operator --bin crdgen`; do not edit.\n{body}")
}
