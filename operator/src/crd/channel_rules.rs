//! CEL rules for `spec.channels[]`, generated from `saint_config::channel_settings` — the
//! one list of keys the agent's channel readers use too — so `kubectl apply` refuses a
//! missing or misspelt key with the same words the agent would log, and the two lists
//! cannot drift. Kinds this version does not serve (no entry in `channel_settings::keys`)
//! get no key rules: the CRD keeps accepting them and the operator reports them in the
//! `ChannelsServed` condition instead.

use kube::core::{Message, Rule};
use saint_config::{
    ChannelKind,
    channel_settings::{self, ChannelKeys},
};

/// CEL: `v` is a TCP port number. `int()` only after the digits check, so it cannot fail.
const PORT: &str = "v.matches('^[0-9]{1,5}$') && int(v) >= 1 && int(v) <= 65535";

/// Format checks on setting values, as (kind, key, CEL condition on `v`, what the value
/// must be), the same the agent's channel readers apply (agent-pod/channels), so a bad
/// value is refused at `kubectl apply` rather than in the pod's log. Only applied when
/// the key is present; a key listed here must be one of the kind's settings (a unit test
/// holds this table to `channel_settings`).
pub const SETTING_FORMATS: &[(ChannelKind, &str, &str, &str)] = &[
    (
        ChannelKind::Whatsapp,
        "phoneNumberId",
        "v.matches('^[0-9]{1,32}$')",
        "digits (the id Meta shows for the number, not the phone number)",
    ),
    (
        ChannelKind::Whatsapp,
        "apiBaseUrl",
        "v.startsWith('https://') || v.startsWith('http://')",
        "an http:// or https:// URL",
    ),
    (
        ChannelKind::Email,
        "address",
        "v.matches('^[^@\\\\s]+@[^@\\\\s]+$')",
        "an e-mail address",
    ),
    (
        ChannelKind::Email,
        "imapPort",
        PORT,
        "a port number (1-65535)",
    ),
    (
        ChannelKind::Email,
        "smtpPort",
        PORT,
        "a port number (1-65535)",
    ),
    (
        ChannelKind::Email,
        "imapSecurity",
        "v in ['tls', 'starttls', 'none']",
        "one of tls, starttls, none",
    ),
    (
        ChannelKind::Email,
        "smtpSecurity",
        "v in ['tls', 'starttls', 'none']",
        "one of tls, starttls, none",
    ),
    (
        ChannelKind::Email,
        "pollSeconds",
        "v.matches('^[0-9]{1,4}$') && int(v) >= 5 && int(v) <= 3600",
        "a whole number of seconds from 5 to 3600",
    ),
    (ChannelKind::Http, "port", PORT, "a port number (1-65535)"),
];

/// Channel kinds that receive platform webhooks on the agent's HTTP port at
/// `/channels/<name>/webhook` (what `spec.webhookIngress` exposes).
pub fn receives_webhooks(kind: ChannelKind) -> bool {
    matches!(kind, ChannelKind::Whatsapp)
}

/// CEL on the SaintBot spec: `webhookIngress` only with a channel receiving webhooks —
/// otherwise the Ingress would route nothing and the field would do nothing, silently.
pub fn webhook_ingress_needs_a_webhook_channel() -> Rule {
    let kinds: Vec<&str> = ChannelKind::ALL
        .into_iter()
        .filter(|kind| receives_webhooks(*kind))
        .map(ChannelKind::prefix)
        .collect();
    rule(
        format!(
            "!has(self.webhookIngress) || (has(self.channels) && self.channels.exists(c, c.kind in {}))",
            cel_list(&kinds)
        ),
        format!(
            "webhookIngress needs a channel that receives webhooks (kind {})",
            kinds.join(" or ")
        ),
    )
}

/// The kinds this version serves, with their keys, in declaration order.
pub fn served_kinds() -> impl Iterator<Item = (ChannelKind, ChannelKeys)> {
    ChannelKind::ALL
        .into_iter()
        .filter_map(|kind| channel_settings::keys(kind).map(|keys| (kind, keys)))
}

/// "a whatsapp channel", "an email channel".
fn a_channel(kind: ChannelKind) -> String {
    let name = kind.prefix();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u', 'h']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name} channel")
}

/// `'a', 'b'` as a CEL list literal.
fn cel_list(keys: &[&str]) -> String {
    let quoted: Vec<String> = keys.iter().map(|key| format!("'{key}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// "x.a, x.b and x.c".
fn field_list(prefix: &str, keys: &[&str]) -> String {
    let named: Vec<String> = keys.iter().map(|key| format!("{prefix}.{key}")).collect();
    match named.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => named.join(""),
    }
}

fn rule(condition: String, message: String) -> Rule {
    Rule::new(condition).message(Message::Message(message))
}

/// Every rule on one `channels[]` entry: per served kind, its required settings and
/// secrets, no unknown settings or secrets, and the formats of [`SETTING_FORMATS`].
pub fn channel_rules() -> Vec<Rule> {
    let mut rules = Vec::new();
    for (kind, keys) in served_kinds() {
        let name = kind.prefix();
        // Each rule holds for other kinds; `has(...)` because both maps may be left out.
        let other_kind = format!("self.kind != '{name}'");
        for (map, required, known) in [
            ("settings", keys.required_settings, keys.settings),
            ("secrets", keys.required_secrets, keys.secrets),
        ] {
            if !required.is_empty() {
                rules.push(rule(
                    format!(
                        "{other_kind} || (has(self.{map}) && {}.all(k, k in self.{map}))",
                        cel_list(required)
                    ),
                    format!(
                        "channels[]: {} needs {}",
                        a_channel(kind),
                        field_list(map, required)
                    ),
                ));
            }
            rules.push(rule(
                format!(
                    "{other_kind} || !has(self.{map}) || self.{map}.all(k, k in {})",
                    cel_list(known)
                ),
                format!(
                    "channels[].{map}: unknown key for {} (known: {})",
                    a_channel(kind),
                    known.join(", ")
                ),
            ));
        }
        for (_, key, condition, must_be) in SETTING_FORMATS
            .iter()
            .filter(|(format_kind, ..)| *format_kind == kind)
        {
            // Bind the value to `v` through a one-element list so the condition reads
            // the same in the table as in the CRD.
            rules.push(rule(
                format!(
                    "{other_kind} || !has(self.settings) || !('{key}' in self.settings) \
                     || [self.settings['{key}']].all(v, {condition})"
                ),
                format!(
                    "channels[].settings.{key} of {} must be {must_be}",
                    a_channel(kind)
                ),
            ));
        }
    }
    rules
}

/// `#[schemars(transform = …)]` hook: appends [`channel_rules`] to the schema of
/// `ChannelSpec` (one attribute per rule could not be generated from the key lists).
pub fn add_channel_rules(schema: &mut schemars::Schema) {
    for rule in channel_rules() {
        kube::core::validate(schema, rule).expect("a CEL rule serialises");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_check_is_for_a_setting_its_kind_takes() {
        for (kind, key, _, _) in SETTING_FORMATS {
            let keys = channel_settings::keys(*kind)
                .unwrap_or_else(|| panic!("{kind:?} is not served but has a format check"));
            assert!(
                keys.settings.contains(key),
                "{key} is not a setting of {kind:?} ({:?})",
                keys.settings
            );
        }
    }

    #[test]
    fn messages_name_the_fields_in_plain_words() {
        let messages: Vec<String> = channel_rules()
            .into_iter()
            .filter_map(|rule| match rule.message {
                Some(Message::Message(message)) => Some(message),
                _ => None,
            })
            .collect();
        for expected in [
            "channels[]: a whatsapp channel needs settings.phoneNumberId",
            "channels[]: a whatsapp channel needs secrets.accessToken, secrets.appSecret and secrets.verifyToken",
            "channels[].settings: unknown key for a whatsapp channel (known: phoneNumberId, apiBaseUrl)",
            "channels[]: an email channel needs settings.address, settings.imapHost and settings.smtpHost",
            "channels[]: an email channel needs secrets.password",
            "channels[]: an http channel needs secrets.token",
        ] {
            assert!(
                messages.iter().any(|message| message == expected),
                "missing {expected:?} in {messages:#?}"
            );
        }
    }
}
