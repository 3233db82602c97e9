//! The `Contact` resource (short name `ct`): one person, their role and the identifiers
//! through which bots recognise them. Pure types, no client.

// `printcolumn(...)` repeats `type_ = …` by design; clippy reads it as a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{E164_PATTERN, EMAIL_PATTERN, dns_label_list_rule, dns_label_rule};

/// A person a bot knows. The Contact's name is its canonical slug (used in identity links
/// and in `memory/users/<name>/`); `role` decides what the bot may do for them.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "saint.work",
    version = "v1alpha1",
    kind = "Contact",
    plural = "contacts",
    singular = "contact",
    namespaced,
    shortname = "ct",
    category = "saint",
    status = "ContactStatus",
    doc = "A person Saint bots know: display name, role and channel identifiers (phone, email, chat ids).",
    printcolumn(name = "Display Name", type_ = "string", json_path = ".spec.displayName", priority = 1),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role", description = "Saint Role of this person"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Conflicts", type_ = "integer", json_path = ".status.conflictCount", description = "Identifiers also claimed by other contacts"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = super::label_name_rule("Contact", "it becomes the person's slug"),
)]
#[serde(rename_all = "camelCase")]
pub struct ContactSpec {
    /// Name shown to the model and in logs (e.g. `Ana Horvat`).
    /// One line: the bot quotes it in its prompt, so newlines and other control
    /// characters are refused.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = super::formats::single_line_rule("displayName"))]
    pub display_name: String,

    /// Name of the Saint `Role` (in this namespace) this person holds.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = dns_label_rule("role"))]
    pub role: String,

    /// Channel identifiers. Each one may belong to one Contact only; a clash is reported
    /// on both Contacts and neither gets the identifier.
    #[serde(default)]
    pub identifiers: ContactIdentifiers,

    /// Names of the SaintBots that know this person. Empty: every bot in the namespace
    /// (subject to each bot's `contactSelector`).
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    #[x_kube(validation = dns_label_list_rule("bots"))]
    pub bots: Vec<String>,

    /// Erase everything the bots keep about this person: transcripts, attachments,
    /// memory notes, channel queue rows, scheduled jobs and sub-agent sessions are
    /// deleted and usage lines pseudonymised, when each bot next loads its config. Set
    /// it, wait for the bot to reload, then delete the Contact.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub erase: bool,
}

/// How a person appears on each channel. All optional.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContactIdentifiers {
    /// Phone number in E.164 form (`+385991234567`). Used for WhatsApp unless `whatsapp`
    /// is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), regex(pattern = r"^\+[1-9][0-9]{6,14}$"))]
    #[x_kube(validation = kube::core::Rule::new(format!("self.matches('{}')", E164_PATTERN.replace('\\', "\\\\")))
        .message("identifiers.phone must be E.164: '+', country code, number, no spaces (e.g. +385991234567)"))]
    pub phone: Option<String>,

    /// WhatsApp number in E.164 form, when it differs from `phone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), regex(pattern = r"^\+[1-9][0-9]{6,14}$"))]
    #[x_kube(validation = kube::core::Rule::new(format!("self.matches('{}')", E164_PATTERN.replace('\\', "\\\\")))
        .message("identifiers.whatsapp must be E.164: '+', country code, number, no spaces (e.g. +385991234567)"))]
    pub whatsapp: Option<String>,

    /// Email address; compared case-insensitively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 254), email)]
    #[x_kube(validation = kube::core::Rule::new(format!("self.matches('{}')", EMAIL_PATTERN.replace('\\', "\\\\")))
        .message("identifiers.email must be an email address (name@domain.tld)"))]
    pub email: Option<String>,

    /// Telegram numeric user id (e.g. `222222222`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20), regex(pattern = "^[0-9]{1,20}$"))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[0-9]{1,20}$')")
        .message("identifiers.telegram must be a numeric Telegram user id"))]
    pub telegram: Option<String>,

    /// Slack member id (e.g. `U024BE7LH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = "^[UWuw][A-Za-z0-9]{2,31}$"))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[UWuw][A-Za-z0-9]{2,31}$')")
        .message("identifiers.slack must be a Slack member id (U… or W…)"))]
    pub slack: Option<String>,

    /// Discord user id or handle (e.g. `ana#1234` or `ana.h`); compared case-insensitively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 64))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[A-Za-z0-9_.#]{2,64}$')")
        .message("identifiers.discord must be a Discord id or handle (letters, digits, '_', '.', '#')"))]
    pub discord: Option<String>,

    /// Matrix user id (e.g. `@ana:example.org`); compared exactly, as Matrix does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 4, max = 255), regex(pattern = "^@[!-9;-~]+:[!-~]+$"))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^@[!-9;-~]+:[!-~]+$')")
        .message("identifiers.matrix must be a Matrix user id (@localpart:server.name)"))]
    pub matrix: Option<String>,
}

/// What the operator found about this Contact.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
// Until the operator's first status write, the API server shows `observedGeneration: 0`:
// kstatus (Flux, kpt) then reads the object as InProgress, not as a Current object
// without conditions. A status default is applied on every read, never stored.
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct ContactStatus {
    /// `Ready` is True when the role exists and every identifier is linked (reason
    /// `Linked`, or `Unused` when no SaintBot uses the Contact); False with reason
    /// `RoleNotFound` (the message names the role), `IdentifierConflict` or
    /// `InvalidIdentifier` otherwise, with `Stalled` True beside it (kstatus: Failed).
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of entries in `conflicts`.
    #[serde(default)]
    pub conflict_count: i32,
    /// Identifiers this Contact shares with other Contacts; none of them is linked.
    #[serde(default)]
    pub conflicts: Vec<IdentifierConflict>,
}

/// One identifier claimed by more than one Contact.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct IdentifierConflict {
    /// The normalised identity (`whatsapp:+385991234567`).
    pub identity: String,
    /// The other Contacts claiming it, sorted.
    pub contacts: Vec<String>,
}
