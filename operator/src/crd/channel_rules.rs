//! CEL rules for `spec.channels[]`, generated from `saint_config::channel_settings` — the
//! one list of keys the agent's channel readers use too — so `kubectl apply` refuses a
//! missing or misspelt key with the same words the agent would log, and the two lists
//! cannot drift. Every kind this version knows has keys there; a kind added to
//! `ChannelKind` without keys would get no key rules (the CRD would accept it as declared)
//! and be reported in the `ChannelsServed` condition instead.

use std::collections::BTreeMap;

use kube::core::{Message, Rule};
use saint_config::{
    ChannelKind,
    channel_settings::{self, ChannelKeys},
};

/// CEL: `v` is a TCP port number. `int()` only after the digits check, so it cannot fail.
const PORT: &str = "v.matches('^[0-9]{1,5}$') && int(v) >= 1 && int(v) <= 65535";
/// CEL: `v` is an http(s) URL with a host (a DNS name, IPv4 or bracketed IPv6 literal),
/// an optional port and path — `https://` alone is no URL. Whether plain `http://` is
/// allowed is [`insecure_rules`]' business.
pub const HTTP_URL: &str = "v.matches('^https?://([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*|\\\\[[0-9A-Fa-f:.]+\\\\])(:[0-9]{1,5})?([/?#].*)?$')";
/// What [`HTTP_URL`] asks for, in the refusal.
const HTTP_URL_WORDS: &str =
    "an https:// URL with a host (http:// only with channels[].allowInsecure)";
/// CEL: `v` is a host to connect to — a DNS name, an IPv4 or an IPv6 literal — with no
/// port (the port is a setting of its own) and nothing else.
const HOST: &str = "v.matches('^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$') || v.matches('^[0-9A-Fa-f]*:[0-9A-Fa-f]*:[0-9A-Fa-f:.]*$')";
/// CEL: `v` is an IP address with an optional port, as the agent parses `dnsServer`
/// (IPv4 `a.b.c.d[:port]`, IPv6 `[literal]:port`).
const IP_AND_PORT: &str = "v.matches('^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])([.](25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}(:[0-9]{1,5})?|\\\\[[0-9A-Fa-f:.]+\\\\]:[0-9]{1,5})$')";
/// CEL: `v` is a `groupPolicy` (see `saint_config::channel_settings::GROUP_SETTINGS`).
const GROUP_POLICY: &str = "v in ['open', 'contacts', 'disabled']";
/// CEL: `v` is a `requireMention`.
const TRUE_OR_FALSE: &str = "v in ['true', 'false']";

/// Format checks on setting values, as (kind, key, CEL condition on `v`, what the value
/// must be), the same the agent's channel readers apply (agent-pod/channels), so a bad
/// value is refused at `kubectl apply` rather than in the pod's log. Only applied when
/// the key is present; a key listed here must be one of the kind's settings (a unit test
/// holds this table to `channel_settings`). `settings.mode` is checked from
/// [`CHANNEL_MODES`], which also says what each mode needs.
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
        HTTP_URL,
        HTTP_URL_WORDS,
    ),
    (
        ChannelKind::Email,
        "address",
        "v.matches('^[^@\\\\s]+@[^@\\\\s]+$')",
        "an e-mail address",
    ),
    (
        ChannelKind::Email,
        "imapHost",
        HOST,
        "a host name or IP address, without a port (that is settings.imapPort)",
    ),
    (
        ChannelKind::Email,
        "smtpHost",
        HOST,
        "a host name or IP address, without a port (that is settings.smtpPort)",
    ),
    (
        ChannelKind::Email,
        "dnsServer",
        IP_AND_PORT,
        "an IP address with an optional port (192.0.2.53, 192.0.2.53:53 or [2001:db8::53]:53)",
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
    (
        ChannelKind::Email,
        "replyLimitPerHour",
        "v.matches('^[0-9]{1,5}$') && int(v) >= 1 && int(v) <= 10000",
        "a whole number of replies from 1 to 10000",
    ),
    (ChannelKind::Http, "port", PORT, "a port number (1-65535)"),
    (
        ChannelKind::Http,
        "chatPage",
        TRUE_OR_FALSE,
        "true or false",
    ),
    (
        ChannelKind::Telegram,
        "apiBaseUrl",
        HTTP_URL,
        HTTP_URL_WORDS,
    ),
    (
        ChannelKind::Telegram,
        "groupPolicy",
        GROUP_POLICY,
        "one of open, contacts, disabled",
    ),
    (
        ChannelKind::Telegram,
        "requireMention",
        TRUE_OR_FALSE,
        "true or false",
    ),
    (ChannelKind::Slack, "apiBaseUrl", HTTP_URL, HTTP_URL_WORDS),
    (
        ChannelKind::Slack,
        "groupPolicy",
        GROUP_POLICY,
        "one of open, contacts, disabled",
    ),
    (
        ChannelKind::Slack,
        "requireMention",
        TRUE_OR_FALSE,
        "true or false",
    ),
    (ChannelKind::Discord, "apiBaseUrl", HTTP_URL, HTTP_URL_WORDS),
    (
        ChannelKind::Discord,
        "groupPolicy",
        GROUP_POLICY,
        "one of open, contacts, disabled",
    ),
    (
        ChannelKind::Discord,
        "requireMention",
        TRUE_OR_FALSE,
        "true or false",
    ),
    (
        ChannelKind::Matrix,
        "homeserverUrl",
        HTTP_URL,
        HTTP_URL_WORDS,
    ),
    (
        ChannelKind::Matrix,
        "userId",
        "v.matches('^@[^:\\\\s]+:[^\\\\s]+$')",
        "a Matrix user id (@localpart:server)",
    ),
    (
        ChannelKind::Matrix,
        "groupPolicy",
        GROUP_POLICY,
        "one of open, contacts, disabled",
    ),
    (
        ChannelKind::Matrix,
        "requireMention",
        TRUE_OR_FALSE,
        "true or false",
    ),
];

/// A kind whose `settings.mode` decides how messages arrive: over a connection the agent
/// opens (the default mode), or by the platform calling the agent's webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelModes {
    /// The kind.
    pub kind: ChannelKind,
    /// Every value `settings.mode` takes, the default (used when it is left out) first.
    pub modes: &'static [&'static str],
    /// The mode in which the platform calls `/channels/<name>/webhook`.
    pub webhook_mode: &'static str,
    /// Secrets only one mode uses, as (secret, mode): required in that mode and refused in
    /// the others, as the agent's readers do — a secret nothing checks is a mistake.
    pub mode_secrets: &'static [(&'static str, &'static str)],
}

/// The kinds with modes, as the agent's readers take them (agent-pod/channels).
pub const CHANNEL_MODES: &[ChannelModes] = &[
    ChannelModes {
        kind: ChannelKind::Telegram,
        modes: &["polling", "webhook"],
        webhook_mode: "webhook",
        mode_secrets: &[("webhookSecret", "webhook")],
    },
    ChannelModes {
        kind: ChannelKind::Slack,
        modes: &["socket", "events"],
        webhook_mode: "events",
        mode_secrets: &[("appToken", "socket"), ("signingSecret", "events")],
    },
];

/// Kinds that receive webhooks in every configuration.
const ALWAYS_WEBHOOKS: &[ChannelKind] = &[ChannelKind::Whatsapp];

/// The modes of `kind`, if it has any.
pub fn channel_modes(kind: ChannelKind) -> Option<&'static ChannelModes> {
    CHANNEL_MODES.iter().find(|modes| modes.kind == kind)
}

/// Whether a channel of `kind` with `settings` receives platform webhooks on the agent's
/// HTTP port at `/channels/<name>/webhook` (what `spec.webhookIngress` exposes):
/// whatsapp always, telegram in mode webhook, slack in mode events. The others connect
/// out and need no Ingress.
pub fn receives_webhooks(kind: ChannelKind, settings: &BTreeMap<String, String>) -> bool {
    if ALWAYS_WEBHOOKS.contains(&kind) {
        return true;
    }
    channel_modes(kind).is_some_and(|modes| {
        // Trimmed as the agent's readers read it.
        settings.get("mode").map(|mode| mode.trim()) == Some(modes.webhook_mode)
    })
}

/// CEL on a `channels[]` entry `channel`: its `settings.mode` is `mode`. The default mode
/// also when the setting is left out or is no other mode, so a misspelt mode is refused
/// by its format rule alone, not again for the default mode's secrets.
fn mode_is(channel: &str, modes: &ChannelModes, mode: &str) -> String {
    if modes.modes.first() == Some(&mode) {
        format!(
            "(!has({channel}.settings) || !('mode' in {channel}.settings) \
             || !({channel}.settings['mode'] in {}))",
            cel_list(&modes.modes[1..])
        )
    } else {
        format!(
            "(has({channel}.settings) && 'mode' in {channel}.settings \
             && {channel}.settings['mode'] == '{mode}')"
        )
    }
}

/// "settings.mode webhook", "settings.mode socket (the default)".
fn mode_words(modes: &ChannelModes, mode: &str) -> String {
    if modes.modes.first() == Some(&mode) {
        format!("settings.mode {mode} (the default)")
    } else {
        format!("settings.mode {mode}")
    }
}

/// "kind whatsapp, telegram with settings.mode webhook or slack with settings.mode events".
fn webhook_channel_words() -> String {
    let mut kinds: Vec<String> = ALWAYS_WEBHOOKS
        .iter()
        .map(|kind| kind.prefix().to_string())
        .collect();
    kinds.extend(CHANNEL_MODES.iter().map(|modes| {
        format!(
            "{} with settings.mode {}",
            modes.kind.prefix(),
            modes.webhook_mode
        )
    }));
    match kinds.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            format!("kind {} or {last}", rest.join(", "))
        }
        _ => format!("kind {}", kinds.join("")),
    }
}

/// CEL on the SaintBot spec: `webhookIngress` only with a channel receiving webhooks —
/// otherwise the Ingress would route nothing and the field would do nothing, silently.
/// The same test as [`receives_webhooks`], for each channel `c`.
pub fn webhook_ingress_needs_a_webhook_channel() -> Rule {
    let always: Vec<&str> = ALWAYS_WEBHOOKS.iter().map(|kind| kind.prefix()).collect();
    let mut receives = vec![format!("c.kind in {}", cel_list(&always))];
    receives.extend(CHANNEL_MODES.iter().map(|modes| {
        format!(
            "(c.kind == '{}' && {})",
            modes.kind.prefix(),
            mode_is("c", modes, modes.webhook_mode)
        )
    }));
    rule(
        format!(
            "!has(self.webhookIngress) || (has(self.channels) && self.channels.exists(c, {}))",
            receives.join(" || ")
        ),
        format!(
            "webhookIngress needs a channel that receives webhooks ({})",
            webhook_channel_words()
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
        if let Some(modes) = channel_modes(kind) {
            rules.extend(mode_rules(modes, &other_kind));
        }
        rules.extend(insecure_rules(kind, &other_kind));
    }
    rules
}

/// Settings whose value may send the channel's secrets in clear text, per kind: as
/// (kind, key, CEL condition on `v` that is the insecure choice, what it exposes).
pub const INSECURE_SETTINGS: &[(ChannelKind, &str, &str, &str)] = &[
    (
        ChannelKind::Whatsapp,
        "apiBaseUrl",
        "v.startsWith('http://')",
        "is plain http://: the access token would cross the network in clear text",
    ),
    (
        ChannelKind::Telegram,
        "apiBaseUrl",
        "v.startsWith('http://')",
        "is plain http://: the bot token would cross the network in clear text",
    ),
    (
        ChannelKind::Slack,
        "apiBaseUrl",
        "v.startsWith('http://')",
        "is plain http://: the bot token would cross the network in clear text",
    ),
    (
        ChannelKind::Discord,
        "apiBaseUrl",
        "v.startsWith('http://')",
        "is plain http://: the bot token would cross the network in clear text",
    ),
    (
        ChannelKind::Matrix,
        "homeserverUrl",
        "v.startsWith('http://')",
        "is plain http://: the access token would cross the network in clear text",
    ),
    (
        ChannelKind::Email,
        "imapSecurity",
        "v == 'none'",
        "is none: the password would cross the network in clear text",
    ),
    (
        ChannelKind::Email,
        "smtpSecurity",
        "v == 'none'",
        "is none: the password would cross the network in clear text",
    ),
];

/// The rules of [`INSECURE_SETTINGS`] for `kind`: such a value only beside
/// `allowInsecure`, which says why it is acceptable (a stand-in on loopback, a server
/// inside the pod's own network), so clear text is never the result of a typo.
fn insecure_rules(kind: ChannelKind, other_kind: &str) -> Vec<Rule> {
    INSECURE_SETTINGS
        .iter()
        .filter(|(insecure_kind, ..)| *insecure_kind == kind)
        .map(|(_, key, insecure, exposes)| {
            rule(
                format!(
                    "{other_kind} || has(self.allowInsecure) || !has(self.settings) \
                     || !('{key}' in self.settings) || ![self.settings['{key}']].all(v, {insecure})"
                ),
                format!(
                    "channels[].settings.{key} of {} {exposes}; use TLS, or set \
                     channels[].allowInsecure to say why clear text is acceptable here",
                    a_channel(kind)
                ),
            )
        })
        .collect()
}

/// The rules of a kind with modes: `settings.mode` is one of them, each mode's secret is
/// there in its mode and absent in the others — as the agent's reader refuses them.
fn mode_rules(modes: &ChannelModes, other_kind: &str) -> Vec<Rule> {
    let kind = modes.kind;
    let mut rules = vec![rule(
        format!(
            "{other_kind} || !has(self.settings) || !('mode' in self.settings) \
             || self.settings['mode'] in {}",
            cel_list(modes.modes)
        ),
        format!(
            "channels[].settings.mode of {} must be one of {}",
            a_channel(kind),
            modes.modes.join(", ")
        ),
    )];
    for (secret, mode) in modes.mode_secrets {
        let in_mode = mode_is("self", modes, mode);
        let has_secret = format!("(has(self.secrets) && '{secret}' in self.secrets)");
        rules.push(rule(
            format!("{other_kind} || !{in_mode} || {has_secret}"),
            format!(
                "channels[]: {} in {} needs secrets.{secret}",
                a_channel(kind),
                mode_words(modes, mode)
            ),
        ));
        rules.push(rule(
            format!("{other_kind} || {in_mode} || !{has_secret}"),
            format!(
                "channels[].secrets.{secret} of {} is used only in {}: set that mode or \
                 remove the secret",
                a_channel(kind),
                mode_words(modes, mode)
            ),
        ));
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
    fn every_insecure_setting_is_a_setting_its_kind_takes_and_every_url_has_one() {
        for (kind, key, _, _) in INSECURE_SETTINGS {
            let keys = channel_settings::keys(*kind).unwrap();
            assert!(keys.settings.contains(key), "{key} of {kind:?}");
        }
        // A base URL added to the format table without a clear-text rule would let
        // http:// through unremarked.
        for (kind, key, condition, _) in SETTING_FORMATS {
            if *condition == HTTP_URL {
                assert!(
                    INSECURE_SETTINGS
                        .iter()
                        .any(|(insecure_kind, insecure_key, ..)| insecure_kind == kind
                            && insecure_key == key),
                    "{key} of {kind:?} is a URL without a clear-text rule"
                );
            }
        }
    }

    #[test]
    fn every_mode_table_entry_is_held_to_its_kinds_keys() {
        for modes in CHANNEL_MODES {
            let keys = channel_settings::keys(modes.kind)
                .unwrap_or_else(|| panic!("{:?} is not served but has modes", modes.kind));
            assert!(keys.settings.contains(&"mode"), "{:?}", modes.kind);
            assert!(modes.modes.contains(&modes.webhook_mode), "{modes:?}");
            for (secret, mode) in modes.mode_secrets {
                assert!(keys.secrets.contains(secret), "{secret} of {modes:?}");
                // Required in one mode only: the kind's always-required list cannot hold it.
                assert!(!keys.required_secrets.contains(secret), "{secret}");
                assert!(modes.modes.contains(mode), "{mode} of {modes:?}");
            }
        }
    }

    #[test]
    fn only_webhook_modes_receive_webhooks() {
        let settings = |mode: Option<&str>| -> BTreeMap<String, String> {
            mode.map(|mode| ("mode".to_string(), mode.to_string()))
                .into_iter()
                .collect()
        };
        let cases = [
            (ChannelKind::Whatsapp, None, true),
            (ChannelKind::Telegram, None, false),
            (ChannelKind::Telegram, Some("polling"), false),
            (ChannelKind::Telegram, Some("webhook"), true),
            (ChannelKind::Slack, None, false),
            (ChannelKind::Slack, Some("socket"), false),
            (ChannelKind::Slack, Some(" events"), true),
            (ChannelKind::Discord, None, false),
            (ChannelKind::Matrix, None, false),
            (ChannelKind::Email, None, false),
            (ChannelKind::Http, None, false),
        ];
        for (kind, mode, expected) in cases {
            assert_eq!(
                receives_webhooks(kind, &settings(mode)),
                expected,
                "{kind:?} {mode:?}"
            );
        }
        let message = match webhook_ingress_needs_a_webhook_channel().message {
            Some(Message::Message(message)) => message,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            message,
            "webhookIngress needs a channel that receives webhooks (kind whatsapp, telegram \
             with settings.mode webhook or slack with settings.mode events)"
        );
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
            "channels[].settings.mode of a telegram channel must be one of polling, webhook",
            "channels[]: a telegram channel in settings.mode webhook needs secrets.webhookSecret",
            "channels[].secrets.webhookSecret of a telegram channel is used only in settings.mode webhook: set that mode or remove the secret",
            "channels[]: a slack channel in settings.mode socket (the default) needs secrets.appToken",
            "channels[]: a slack channel in settings.mode events needs secrets.signingSecret",
            "channels[].secrets.signingSecret of a slack channel is used only in settings.mode events: set that mode or remove the secret",
            "channels[].secrets.appToken of a slack channel is used only in settings.mode socket (the default): set that mode or remove the secret",
            "channels[].settings.groupPolicy of a slack channel must be one of open, contacts, disabled",
            "channels[].settings.userId of a matrix channel must be a Matrix user id (@localpart:server)",
            "channels[].settings.homeserverUrl of a matrix channel is plain http://: the access token would cross the network in clear text; use TLS, or set channels[].allowInsecure to say why clear text is acceptable here",
            "channels[].settings.imapHost of an email channel must be a host name or IP address, without a port (that is settings.imapPort)",
            "channels[]: a matrix channel needs settings.homeserverUrl and settings.userId",
        ] {
            assert!(
                messages.iter().any(|message| message == expected),
                "missing {expected:?} in {messages:#?}"
            );
        }
    }
}
