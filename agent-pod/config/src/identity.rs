//! Who a message is from, in the one canonical form both sides compare: the operator
//! renders Contacts' identifiers through [`ChannelIdentity::parse`] and the agent parses
//! every inbound sender through the same function, so a person is recognised exactly
//! when the operator linked them. Pure: no I/O.
//!
//! One rule per channel kind, following the platform's own case and format rules:
//!
//! | kind | canonical peer | accepted input |
//! | --- | --- | --- |
//! | whatsapp | E.164, `+385991234567` | `+…`, `00…`, or WhatsApp's `wa_id` (international digits without `+`); spaces, `-`, `.`, `()` |
//! | email | lower-case address | any case, surrounding spaces |
//! | slack | member id in Slack's upper case, `U024BE7LH` | any case |
//! | telegram | numeric user id, `222222222` | leading zeros dropped |
//! | discord | snowflake user id, or handle in lower case (`ana.h`, legacy `ana#1234`) | any case |
//! | matrix | user id in lower case, `@ana:example.org` | any case (localparts are lower case since Matrix 1.0's grammar; server names are DNS names) |
//! | http | the API caller's peer id, lower-cased | |
//!
//! Phone numbers are checked structurally (country code first digit 1–9, 7–15 digits in
//! all) rather than against libphonenumber metadata: identity needs one canonical form,
//! not a judgement of whether a range is allocated, and operator and agent images of
//! different ages would otherwise disagree about the same number.

use std::{borrow::Borrow, fmt, str::FromStr};

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use crate::ChannelKind;

/// Why an identity, a peer or a slug was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("failed to parse identity {value:?}: expected <channel>:<peer> (e.g. slack:U024BE7LH)")]
    MissingChannel { value: String },
    #[error("failed to parse identity {value:?}: unknown channel {channel:?}")]
    UnknownChannel { value: String, channel: String },
    #[error("failed to normalise {noun} {value:?}: expected {expected}")]
    InvalidPeer {
        kind: ChannelKind,
        noun: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(
        "failed to parse contact slug {value:?}: expected a DNS-1123 label (lower-case letters, digits and '-', at most 63)"
    )]
    InvalidSlug { value: String },
}

/// One kind's rule: the words its error uses and the normalising function (`None`: refused).
struct PeerRule {
    noun: &'static str,
    expected: &'static str,
    normalise: fn(&str) -> Option<String>,
}

fn rule(kind: ChannelKind) -> PeerRule {
    match kind {
        ChannelKind::Whatsapp => PeerRule {
            noun: "phone",
            expected: "E.164 (+ country code and number, 7–15 digits)",
            normalise: normalise_phone,
        },
        ChannelKind::Email => PeerRule {
            noun: "email",
            expected: "name@domain.tld",
            normalise: normalise_email,
        },
        ChannelKind::Slack => PeerRule {
            noun: "slack id",
            expected: "a member id (U… or W…)",
            normalise: normalise_slack,
        },
        ChannelKind::Telegram => PeerRule {
            noun: "telegram id",
            expected: "a numeric user id",
            normalise: normalise_telegram,
        },
        ChannelKind::Discord => PeerRule {
            noun: "discord id",
            expected: "a numeric user id or a handle (2–32 of a-z, 0-9, '_', '.'; legacy name#1234)",
            normalise: normalise_discord,
        },
        ChannelKind::Matrix => PeerRule {
            noun: "matrix id",
            expected: "a user id @localpart:server.name",
            normalise: normalise_matrix,
        },
        ChannelKind::Http => PeerRule {
            noun: "http peer",
            expected: "1–256 printable characters without spaces",
            normalise: normalise_http,
        },
    }
}

/// The canonical peer of `raw` on a channel of `kind` (see the module table).
pub fn normalise_peer(kind: ChannelKind, raw: &str) -> Result<String, IdentityError> {
    let rule = rule(kind);
    (rule.normalise)(raw).ok_or_else(|| IdentityError::InvalidPeer {
        kind,
        noun: rule.noun,
        value: raw.to_string(),
        expected: rule.expected,
    })
}

// Separators people type inside phone numbers.
fn is_phone_separator(character: char) -> bool {
    matches!(character, ' ' | '-' | '.' | '(' | ')' | '\u{a0}')
}

fn normalise_phone(raw: &str) -> Option<String> {
    let compact: String = raw
        .trim()
        .chars()
        .filter(|character| !is_phone_separator(*character))
        .collect();
    // `+`, the `00` international prefix, or WhatsApp's `wa_id` (international digits
    // without `+`). A national number starts with a trunk `0`, which no country code
    // does, so it is refused below instead of being guessed into some country.
    let digits = compact
        .strip_prefix('+')
        .or_else(|| compact.strip_prefix("00"))
        .unwrap_or(&compact);
    let valid = (7..=15).contains(&digits.len())
        && digits.bytes().all(|byte| byte.is_ascii_digit())
        && !digits.starts_with('0');
    valid.then(|| format!("+{digits}"))
}

fn normalise_email(raw: &str) -> Option<String> {
    let lowered = raw.trim().to_lowercase();
    let (local, domain) = lowered.split_once('@')?;
    let valid = !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !lowered.chars().any(|character| character.is_whitespace());
    valid.then_some(lowered)
}

// Slack member ids are upper-case on the wire (`U024BE7LH`; `W…` on Enterprise Grid).
fn normalise_slack(raw: &str) -> Option<String> {
    let upper = raw.trim().to_ascii_uppercase();
    let valid = (3..=32).contains(&upper.len())
        && (upper.starts_with('U') || upper.starts_with('W'))
        && upper.bytes().all(|byte| byte.is_ascii_alphanumeric());
    valid.then_some(upper)
}

// Telegram user ids are positive integers; the number, not its spelling, is the id.
fn normalise_telegram(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let id: u64 = trimmed.parse().ok()?;
    (id > 0).then(|| id.to_string())
}

// Discord user ids are snowflakes (decimal u64). Handles are case-insensitive: current
// usernames are 2–32 of `a-z 0-9 _ .` without `..`; legacy ones carry `#` and four digits.
fn normalise_discord(raw: &str) -> Option<String> {
    let lowered = raw.trim().to_lowercase();
    if !lowered.is_empty() && lowered.bytes().all(|byte| byte.is_ascii_digit()) {
        let id: u64 = lowered.parse().ok()?;
        return (id > 0).then(|| id.to_string());
    }
    let (name, discriminator) = match lowered.split_once('#') {
        Some((name, discriminator)) => (name, Some(discriminator)),
        None => (lowered.as_str(), None),
    };
    let name_valid = (2..=32).contains(&name.len())
        && name.bytes().all(|byte| {
            byte.is_ascii_lowercase() || byte.is_ascii_digit() || matches!(byte, b'_' | b'.')
        })
        && !name.contains("..");
    let discriminator_valid = discriminator
        .is_none_or(|digits| digits.len() == 4 && digits.bytes().all(|byte| byte.is_ascii_digit()));
    (name_valid && discriminator_valid).then_some(lowered)
}

// Matrix user ids: `@localpart:server_name`, at most 255 bytes, split at the first `:`
// (server names may contain more). Localparts are printable ASCII without `:`. The
// spec's grammar makes localparts lower case (homeservers fold what people type when
// registering and logging in) and server names are DNS names, so ids differing only in
// case name one person: lower case is the one form both sides compare, and two
// Contacts writing `@Ana:…` and `@ana:…` are in conflict, as for every other kind.
fn normalise_matrix(raw: &str) -> Option<String> {
    let lowered = raw.trim().to_ascii_lowercase();
    let trimmed = lowered.as_str();
    let rest = trimmed.strip_prefix('@')?;
    let (localpart, server_name) = rest.split_once(':')?;
    let valid = trimmed.len() <= 255
        && !localpart.is_empty()
        && localpart.bytes().all(|byte| (0x21..=0x7e).contains(&byte))
        && is_server_name(server_name);
    valid.then(|| trimmed.to_string())
}

// `host [":" port]`, host a DNS name, an IPv4 literal or a bracketed IPv6 literal.
fn is_server_name(server_name: &str) -> bool {
    let (host, port) = if let Some(rest) = server_name.strip_prefix('[') {
        let Some((literal, after)) = rest.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return false,
            },
        };
        if literal.is_empty()
            || !literal
                .bytes()
                .all(|byte| byte.is_ascii_hexdigit() || matches!(byte, b':' | b'.'))
        {
            return false;
        }
        (None, port)
    } else {
        match server_name.rsplit_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(server_name), None),
        }
    };
    let host_valid = host.is_none_or(|host| {
        (1..=230).contains(&host.len())
            && host
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.'))
    });
    let port_valid = port.is_none_or(|port| {
        (1..=5).contains(&port.len()) && port.bytes().all(|byte| byte.is_ascii_digit())
    });
    host_valid && port_valid
}

fn normalise_http(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    let valid = (1..=256).contains(&trimmed.chars().count())
        && !trimmed
            .chars()
            .any(|character| character.is_whitespace() || character.is_control());
    valid.then(|| trimmed.to_lowercase())
}

/// A sender or recipient on one channel, canonical (`whatsapp:+385991234567`,
/// `slack:U024BE7LH`). Ordered and compared by its text, so sorted identity lists keep
/// the order of their strings.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ChannelIdentity {
    // `<prefix>:<peer>`; the kind is kept too so it need not be parsed back.
    text: String,
    kind: ChannelKind,
}

impl ChannelIdentity {
    /// Parses a peer as received on (or typed for) a channel of `kind`.
    pub fn parse(kind: ChannelKind, peer: &str) -> Result<Self, IdentityError> {
        let peer = normalise_peer(kind, peer)?;
        Ok(Self {
            text: format!("{}:{peer}", kind.prefix()),
            kind,
        })
    }

    /// The channel kind.
    pub fn kind(&self) -> ChannelKind {
        self.kind
    }

    /// The canonical peer (`+385991234567`), without the channel prefix.
    pub fn peer(&self) -> &str {
        &self.text[self.kind.prefix().len() + 1..]
    }

    /// `<channel>:<peer>`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ChannelIdentity {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.text)
    }
}

impl fmt::Debug for ChannelIdentity {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, formatter)
    }
}

impl FromStr for ChannelIdentity {
    type Err = IdentityError;

    /// Parses `<channel>:<peer>`, splitting at the first `:` (Matrix peers contain more).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (channel, peer) =
            text.split_once(':')
                .ok_or_else(|| IdentityError::MissingChannel {
                    value: text.to_string(),
                })?;
        let kind = channel
            .parse::<ChannelKind>()
            .map_err(|_| IdentityError::UnknownChannel {
                value: text.to_string(),
                channel: channel.to_string(),
            })?;
        Self::parse(kind, peer)
    }
}

impl TryFrom<String> for ChannelIdentity {
    type Error = IdentityError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<ChannelIdentity> for String {
    fn from(identity: ChannelIdentity) -> Self {
        identity.text
    }
}

impl AsRef<str> for ChannelIdentity {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl PartialEq<str> for ChannelIdentity {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for ChannelIdentity {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl PartialEq<String> for ChannelIdentity {
    fn eq(&self, other: &String) -> bool {
        &self.text == other
    }
}

/// A person's slug: a Contact's name (a DNS-1123 label), used in identity links, session
/// keys and `memory/users/<slug>/`, or for a stranger a slug derived from their identity
/// that starts with `_`, which no Contact name can.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ContactSlug(String);

impl ContactSlug {
    /// A Contact's slug: refused unless a DNS-1123 label.
    pub fn parse(name: &str) -> Result<Self, IdentityError> {
        let bytes = name.as_bytes();
        let valid = (1..=63).contains(&bytes.len())
            && bytes
                .iter()
                .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || *byte == b'-')
            && bytes[0] != b'-'
            && bytes[bytes.len() - 1] != b'-';
        if valid {
            Ok(Self(name.to_string()))
        } else {
            Err(IdentityError::InvalidSlug {
                value: name.to_string(),
            })
        }
    }

    /// The slug of someone who matches no Contact (`_whatsapp-385910000000`): usable in
    /// paths, never equal to a Contact's.
    pub fn for_stranger(identity: &ChannelIdentity) -> Self {
        let mut cleaned = String::with_capacity(identity.as_str().len());
        for character in identity.as_str().chars() {
            let character = if character.is_ascii_alphanumeric() {
                character
            } else {
                '-'
            };
            if !(character == '-' && cleaned.ends_with('-')) {
                cleaned.push(character);
            }
        }
        Self(format!("_{}", cleaned.trim_matches('-')))
    }

    /// The slug text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContactSlug {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl fmt::Debug for ContactSlug {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, formatter)
    }
}

impl FromStr for ContactSlug {
    type Err = IdentityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl TryFrom<String> for ContactSlug {
    type Error = IdentityError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<ContactSlug> for String {
    fn from(slug: ContactSlug) -> Self {
        slug.0
    }
}

impl AsRef<str> for ContactSlug {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

// Lets maps keyed by slug be read with a `&str` (`identity_links.get("ana")`); the
// derived order and equality are those of the inner string, as `Borrow` requires.
impl Borrow<str> for ContactSlug {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for ContactSlug {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ContactSlug {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for ContactSlug {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// The key of one conversation. Known people have one session across every linked
/// channel (`person:<slug>`): identity links exist precisely to merge them. Strangers
/// have one per channel identity (`peer:<identity>`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionKey(String);

impl SessionKey {
    /// The session of a known person.
    pub fn for_contact(slug: &ContactSlug) -> Self {
        Self(format!("person:{slug}"))
    }

    /// The session of a sender who matches no Contact.
    pub fn for_stranger(identity: &ChannelIdentity) -> Self {
        Self(format!("peer:{identity}"))
    }

    /// The session of a sender the channel did not authenticate, per what the message
    /// proves about its origin (`dkim:<domain>`, `unsigned`): never the session of the
    /// person the identity names, nor of someone else claiming it.
    pub fn for_unverified(identity: &str, origin: &str) -> Self {
        Self(format!("peer:{identity}~{origin}"))
    }

    /// The session of a group conversation (a group chat, a channel thread, a room) on
    /// the channel called `channel`: one session whoever writes in it. Each turn in it
    /// still runs with the role of the person who wrote that message.
    pub fn for_conversation(channel: &str, conversation: &str) -> Self {
        Self(format!("{GROUP_PREFIX}{channel}:{conversation}"))
    }

    /// Whether `key` names a group conversation's session.
    pub fn is_conversation(key: &str) -> bool {
        key.starts_with(GROUP_PREFIX)
    }

    /// The session of scheduled job `job` (each run an isolated turn in it).
    pub fn for_job(job: &str) -> Self {
        Self(format!("{JOB_PREFIX}{job}"))
    }

    /// The bot's heartbeat session.
    pub fn for_heartbeat() -> Self {
        Self(HEARTBEAT_KEY.to_string())
    }

    /// The session of sub-agent `child`, started from the session `parent`.
    pub fn for_subagent(parent: &str, child: &str) -> Self {
        Self(format!("{SUBAGENT_PREFIX}{child}:{parent}"))
    }

    /// Whether `key` names a session nobody typed into: a job's, the heartbeat's or a
    /// sub-agent's.
    pub fn is_background(key: &str) -> bool {
        key.starts_with(JOB_PREFIX) || key == HEARTBEAT_KEY || key.starts_with(SUBAGENT_PREFIX)
    }

    /// The session a sub-agent's session was started from.
    pub fn subagent_parent(key: &str) -> Option<&str> {
        key.strip_prefix(SUBAGENT_PREFIX)?
            .split_once(':')
            .map(|(_, parent)| parent)
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Prefix of group conversations' session keys.
const GROUP_PREFIX: &str = "group:";

/// Prefix of scheduled jobs' session keys.
const JOB_PREFIX: &str = "cron:";

/// The heartbeat's session key.
const HEARTBEAT_KEY: &str = "heartbeat";

/// Prefix of sub-agents' session keys (`subagent:<child>:<parent key>`).
const SUBAGENT_PREFIX: &str = "subagent:";

impl fmt::Display for SessionKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl From<SessionKey> for String {
    fn from(key: SessionKey) -> Self {
        key.0
    }
}

// Both newtypes are plain strings on the wire; their schema says so.
macro_rules! string_schema {
    ($type:ty, $name:literal) => {
        impl JsonSchema for $type {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(generator: &mut SchemaGenerator) -> Schema {
                String::json_schema(generator)
            }
        }
    };
}

string_schema!(ChannelIdentity, "ChannelIdentity");
string_schema!(ContactSlug, "ContactSlug");

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn canonical(kind: ChannelKind, raw: &str) -> String {
        normalise_peer(kind, raw).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn phones_are_normalised_to_e164() {
        assert_eq!(
            canonical(ChannelKind::Whatsapp, "+385 99 123 4567"),
            "+385991234567"
        );
        assert_eq!(
            canonical(ChannelKind::Whatsapp, "00385-99-123-4567"),
            "+385991234567"
        );
        assert_eq!(
            canonical(ChannelKind::Whatsapp, " +1 (415) 555.0100 "),
            "+14155550100"
        );
        // WhatsApp's wa_id: international digits without the plus.
        assert_eq!(
            canonical(ChannelKind::Whatsapp, "385991234567"),
            "+385991234567"
        );
        for bad in [
            "0991234567",
            "099 123 4567",
            "+0385991234567",
            "+12345",
            "+1234567890123456",
            "+38599x234567",
            "",
            "+",
        ] {
            assert!(
                normalise_peer(ChannelKind::Whatsapp, bad).is_err(),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn a_national_number_is_refused_not_guessed_into_a_country() {
        let error = ChannelIdentity::parse(ChannelKind::Whatsapp, "0991234567").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("failed to normalise phone \"0991234567\""),
            "{error}"
        );
    }

    #[test]
    fn emails_are_lower_cased_and_checked() {
        assert_eq!(
            canonical(ChannelKind::Email, " Ana@Company.HR "),
            "ana@company.hr"
        );
        for bad in [
            "ana",
            "ana@",
            "@company.hr",
            "ana@company",
            "a@b@c.hr",
            "ana @company.hr",
        ] {
            assert!(normalise_peer(ChannelKind::Email, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slack_member_ids_keep_slacks_upper_case() {
        assert_eq!(canonical(ChannelKind::Slack, "U024BE7LH"), "U024BE7LH");
        assert_eq!(canonical(ChannelKind::Slack, "u024be7lh"), "U024BE7LH");
        assert_eq!(canonical(ChannelKind::Slack, "W012A3CDE"), "W012A3CDE");
        for bad in ["B01", "U", "U02-4", "C024BE7LH", ""] {
            assert!(normalise_peer(ChannelKind::Slack, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn telegram_ids_are_numbers() {
        assert_eq!(canonical(ChannelKind::Telegram, " 222222222 "), "222222222");
        assert_eq!(canonical(ChannelKind::Telegram, "0042"), "42");
        for bad in ["0", "-100", "@ana", "99999999999999999999", ""] {
            assert!(
                normalise_peer(ChannelKind::Telegram, bad).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn discord_ids_and_handles() {
        assert_eq!(
            canonical(ChannelKind::Discord, "80351110224678912"),
            "80351110224678912"
        );
        assert_eq!(canonical(ChannelKind::Discord, "Ana.H"), "ana.h");
        assert_eq!(canonical(ChannelKind::Discord, "Ana#1234"), "ana#1234");
        for bad in ["a", "ana..h", "ana#12", "ana#abcd", "ana h", "ána", ""] {
            assert!(
                normalise_peer(ChannelKind::Discord, bad).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn matrix_ids_compare_in_lower_case() {
        assert_eq!(
            canonical(ChannelKind::Matrix, "@ana:example.org"),
            "@ana:example.org"
        );
        assert_eq!(
            canonical(ChannelKind::Matrix, " @Ana:Example.org:8448"),
            "@ana:example.org:8448"
        );
        assert_eq!(
            canonical(ChannelKind::Matrix, "@ana:[::1]:8448"),
            "@ana:[::1]:8448"
        );
        for bad in [
            "ana:example.org",
            "@:example.org",
            "@ana",
            "@ana:",
            "@a na:example.org",
            "@ana:exa mple.org",
        ] {
            assert!(normalise_peer(ChannelKind::Matrix, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn identities_display_and_parse_back() {
        let ivan: ChannelIdentity = "slack:u024be7lh".parse().unwrap();
        assert_eq!(ivan.kind(), ChannelKind::Slack);
        assert_eq!(ivan.peer(), "U024BE7LH");
        assert_eq!(ivan.to_string(), "slack:U024BE7LH");
        assert_eq!(ivan.to_string().parse::<ChannelIdentity>().unwrap(), ivan);
        let matrix: ChannelIdentity = "matrix:@ana:example.org".parse().unwrap();
        assert_eq!(matrix.peer(), "@ana:example.org");
        assert!(matches!(
            "ana".parse::<ChannelIdentity>(),
            Err(IdentityError::MissingChannel { .. })
        ));
        assert!(matches!(
            "fax:123".parse::<ChannelIdentity>(),
            Err(IdentityError::UnknownChannel { .. })
        ));
    }

    #[test]
    fn identities_serialise_as_their_text() {
        let identity = ChannelIdentity::parse(ChannelKind::Whatsapp, "+385 99 123 4567").unwrap();
        assert_eq!(
            serde_json::to_string(&identity).unwrap(),
            "\"whatsapp:+385991234567\""
        );
        let back: ChannelIdentity = serde_json::from_str("\"whatsapp:+385991234567\"").unwrap();
        assert_eq!(back, identity);
        assert!(serde_json::from_str::<ChannelIdentity>("\"whatsapp:0991234567\"").is_err());
    }

    #[test]
    fn slugs_are_dns_labels_and_strangers_never_collide() {
        assert!(ContactSlug::parse("acme-ana").is_ok());
        for bad in ["Ana", "-ana", "ana-", "ana.h", "", "_x"] {
            assert!(ContactSlug::parse(bad).is_err(), "{bad:?}");
        }
        let stranger = ContactSlug::for_stranger(
            &ChannelIdentity::parse(ChannelKind::Whatsapp, "00385 91 000 0000").unwrap(),
        );
        assert_eq!(stranger, "_whatsapp-385910000000");
        assert!(ContactSlug::parse(stranger.as_str()).is_err());
    }

    #[test]
    fn session_keys() {
        let slug = ContactSlug::parse("ana").unwrap();
        assert_eq!(SessionKey::for_contact(&slug).as_str(), "person:ana");
        let identity: ChannelIdentity = "telegram:999".parse().unwrap();
        assert_eq!(
            SessionKey::for_stranger(&identity).as_str(),
            "peer:telegram:999"
        );
    }
}
