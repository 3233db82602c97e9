//! Dead letters told to the bot's owners, in a chat message. A reply (or any message)
//! a channel gave up on is already `failed` in the outbox, counted in
//! `saint_channel_dead_letters`, on `/readyz` and, in a cluster, a Warning Event; the
//! people who can do something about it — the Contacts whose role is `owner` — are
//! also told where they talk to the bot.
//!
//! Once per dead letter, and at most one notice per [`NOTICE_WINDOW`]: the first dead
//! letter is told at once, the ones that follow within the window are told together
//! when it ends. The notice and the mark on each dead letter it tells of are one
//! transaction, so a restart neither repeats nor loses one. It names the channel, the
//! recipient (their Contact slug, or a masked address for anyone else) and the reason,
//! never the message's text. An owner is told on their first identity whose channel
//! can send to them now (WhatsApp only within 24 hours of their last message), other
//! than an address that just failed; a notice that cannot be delivered either is a dead
//! letter that is not told about in turn.

use std::{sync::Arc, time::Duration};

use saint_channels::{
    OutboundBody,
    queue::{self, DeadLetter},
};
use saint_config::{BotConfig, ChannelIdentity, ErrorChain};
use tokio_util::sync::CancellationToken;

use super::hub::ChannelHub;
use crate::runtime::Recipient;

/// The role whose Contacts are told.
pub const OWNER_ROLE: &str = "owner";
/// At most one notice per this long; dead letters in between are told in the next one.
pub const NOTICE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Dead letters listed one by one in a notice; more are counted.
const LISTED: usize = 5;
/// The longest reason quoted.
const REASON_CHARS: usize = 300;

/// Tells the owners about dead letters until `stop`: at start (what a crash left
/// untold), whenever the hub records one, and when a window ends with some untold.
pub async fn run(hub: Arc<ChannelHub>, stop: CancellationToken) {
    loop {
        let telling = hub.clone();
        let next = tokio::task::spawn_blocking(move || tell_owners(&telling, queue::now_ms()))
            .await
            .unwrap_or_else(|_| Err("the task stopped".to_string()));
        let wait = match next {
            Ok(Some(at)) => Duration::from_millis((at - queue::now_ms()).clamp(0, i64::MAX) as u64),
            Ok(None) => NOTICE_WINDOW,
            Err(error) => {
                tracing::error!(%error, "failed to tell the owners about dead letters; retrying");
                Duration::from_secs(60)
            }
        };
        tokio::select! {
            _ = hub.dead_letter_ready.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Queues one notice to each reachable owner about every untold dead letter, unless a
/// notice went out less than [`NOTICE_WINDOW`] ago; returns when to try again (`None`:
/// nothing is waiting).
pub fn tell_owners(hub: &ChannelHub, now: i64) -> Result<Option<i64>, String> {
    let config = hub.live_config();
    let window = NOTICE_WINDOW.as_millis() as i64;
    let (told, later) = hub
        .store
        .queue("tell the owners about dead letters", |transaction| {
            let dead = queue::unreported_dead_letters(transaction)?;
            if dead.is_empty() {
                return Ok((Vec::new(), None));
            }
            if let Some(last) = queue::last_dead_letter_notice_at(transaction)?
                && now - last < window
            {
                return Ok((Vec::new(), Some(last + window)));
            }
            // A channel that can send, and where the platform still lets the bot write
            // to the owner (WhatsApp: within 24 hours of their last message).
            let can_reach = |name: &str, identity: &str| {
                hub.channel(name).is_some_and(|channel| {
                    channel.transport.reply_window().is_none_or(|window| {
                        queue::last_inbound_at(transaction, name, identity)
                            .ok()
                            .flatten()
                            .is_some_and(|at| now - at < window.as_millis() as i64)
                    })
                })
            };
            let recipients = config.as_deref().map_or_else(Vec::new, |config| {
                owner_recipients(config, &dead, can_reach)
            });
            let body = OutboundBody {
                text: notice_text(config.as_deref(), &dead),
                files: Vec::new(),
                context: Default::default(),
            };
            let mut notice = 0;
            for recipient in &recipients {
                let id = queue::enqueue(
                    transaction,
                    &recipient.channel,
                    &recipient.identity,
                    &body,
                    queue::DEAD_LETTER_NOTICE,
                    None,
                )?;
                if notice == 0 {
                    notice = id;
                }
            }
            let ids: Vec<i64> = dead.iter().map(|letter| letter.id).collect();
            queue::mark_dead_letters_reported(transaction, &ids, notice)?;
            if recipients.is_empty() {
                tracing::warn!(
                    dead_letters = ids.len(),
                    "no owner can be told about undeliverable messages: no Contact with role \
                     owner has an identity on a channel that can send"
                );
            }
            Ok((recipients, None))
        })
        .map_err(|error| ErrorChain(&error).to_string())?;
    for recipient in &told {
        tracing::info!(channel = %recipient.channel, to = %recipient.identity, "owner told about undeliverable messages");
        if let Some(channel) = hub.channel(&recipient.channel) {
            channel.outbox_ready.notify_one();
        }
    }
    Ok(later)
}

/// Where each owner is told: their first identity on a channel that can reach it
/// (`can_reach(channel, identity)`), other than an address one of `dead` was for.
pub fn owner_recipients(
    config: &BotConfig,
    dead: &[DeadLetter],
    can_reach: impl Fn(&str, &str) -> bool,
) -> Vec<Recipient> {
    config
        .contacts
        .iter()
        .filter(|contact| contact.role == OWNER_ROLE)
        .filter_map(|contact| {
            contact
                .identities
                .iter()
                .filter(|identity| {
                    !dead
                        .iter()
                        .any(|letter| letter.recipient == identity.as_str())
                })
                .find_map(|identity| {
                    config
                        .channels
                        .iter()
                        .filter(|channel| channel.kind == identity.kind())
                        .find(|channel| can_reach(&channel.name, identity.as_str()))
                        .map(|channel| Recipient {
                            channel: channel.name.clone(),
                            identity: identity.to_string(),
                        })
                })
        })
        .collect()
}

/// What the owners read: one line per dead letter (channel, recipient, reason), at most
/// [`LISTED`] of them, and never a message's text.
pub fn notice_text(config: Option<&BotConfig>, dead: &[DeadLetter]) -> String {
    let mut text = if dead.len() == 1 {
        "I could not deliver a message and gave up on it:\n".to_string()
    } else {
        format!(
            "I could not deliver {} messages and gave up on them:\n",
            dead.len()
        )
    };
    for letter in dead.iter().take(LISTED) {
        let (named, masked) = recipient_name(config, &letter.recipient);
        text.push_str(&format!(
            "- on {} to {named}: {}\n",
            letter.channel,
            reason_for_owner(letter, &masked)
        ));
    }
    if dead.len() > LISTED {
        text.push_str(&format!("- and {} more\n", dead.len() - LISTED));
    }
    text.push_str(
        "\nThe messages themselves are not repeated here; `saint-agent outcomes` and /readyz \
         on the bot's metrics port have the details.",
    );
    text
}

/// How a recipient is named to the owners, and how their address reads in a reason: a
/// Contact by slug; anyone else by a masked address.
fn recipient_name(config: Option<&BotConfig>, recipient: &str) -> (String, String) {
    let masked = mask(recipient);
    let slug = recipient
        .parse::<ChannelIdentity>()
        .ok()
        .and_then(|identity| {
            config.and_then(|config| crate::identity::linked_slug(config, &identity).cloned())
        });
    match slug {
        Some(slug) => (slug.to_string(), masked),
        None => (masked.clone(), masked),
    }
}

/// `identity` (`kind:peer`) with most of its peer hidden: enough for an owner to
/// recognise whom it was for, not to write to them. `email:zana@acme.example` →
/// `email:z…@acme.example`, `matrix:@ana:acme.example` → `matrix:@a…:acme.example`,
/// `whatsapp:+385991234567` → `whatsapp:+3…67`.
pub fn mask(identity: &str) -> String {
    let (kind, peer) = identity.split_once(':').unwrap_or(("", identity));
    let first = |text: &str| text.chars().next().map(String::from).unwrap_or_default();
    let masked = if let Some(rest) = peer.strip_prefix('@')
        && let Some((user, server)) = rest.split_once(':')
    {
        format!("@{}…:{server}", first(user))
    } else if let Some((local, domain)) = peer.rsplit_once('@') {
        format!("{}…@{domain}", first(local))
    } else {
        let characters: Vec<char> = peer.chars().collect();
        if characters.len() < 6 {
            "…".to_string()
        } else {
            let head: String = characters[..2].iter().collect();
            let tail: String = characters[characters.len() - 2..].iter().collect();
            format!("{head}…{tail}")
        }
    };
    if kind.is_empty() {
        masked
    } else {
        format!("{kind}:{masked}")
    }
}

/// The reason as the owners read it: on one line, the recipient's address masked and
/// the message's text left out wherever the platform quoted them, at most
/// [`REASON_CHARS`] characters.
fn reason_for_owner(letter: &DeadLetter, masked: &str) -> String {
    let mut reason = letter.reason.replace(['\r', '\n'], " ");
    let text = letter.text.trim();
    if text.chars().count() >= 8 && reason.contains(text) {
        reason = reason.replace(text, "[the message]");
    }
    let full = letter.recipient.as_str();
    let peer = full.split_once(':').map_or(full, |(_, peer)| peer);
    let masked_peer = masked.split_once(':').map_or(masked, |(_, peer)| peer);
    // A short peer (a small id) could be any number in the reason: left as it is.
    for address in [full, peer] {
        if address.chars().count() >= 6 {
            reason = reason.replace(address, masked_peer);
        }
    }
    if reason.chars().count() > REASON_CHARS {
        reason = reason.chars().take(REASON_CHARS).collect::<String>() + "…";
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config_watch::ConfigStore, metering::Metering, session::SessionStore};

    /// A hub serving a Telegram and a WhatsApp channel (neither connected), where Ana
    /// (owner) is `whatsapp:+385991234567` and `telegram:111111111`, in that order, and
    /// Ivan (employee) `telegram:333333333`.
    fn telegram_hub() -> (tempfile::TempDir, ChannelHub) {
        let directory = tempfile::tempdir().unwrap();
        let mut config: serde_json::Value = serde_json::from_str(include_str!(
            "../../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        config["channels"] = serde_json::json!([
            {"name": "telegram", "kind": "telegram",
             "settings": {"apiBaseUrl": "http://127.0.0.1:9"},
             "secretEnv": {"botToken": "TG_TOKEN"}},
            {"name": "whatsapp", "kind": "whatsapp",
             "settings": {"phoneNumberId": "100000000000001", "apiBaseUrl": "http://127.0.0.1:9"},
             "secretEnv": {"accessToken": "WA", "appSecret": "WA", "verifyToken": "WA"}},
        ]);
        for contact in config["contacts"].as_array_mut().unwrap() {
            if contact["slug"] == "ana" {
                contact["identities"]
                    .as_array_mut()
                    .unwrap()
                    .push("telegram:111111111".into());
            }
        }
        config["identityLinks"]["ana"]
            .as_array_mut()
            .unwrap()
            .push("telegram:111111111".into());
        let path = directory.path().join("bot-config.json");
        std::fs::write(&path, config.to_string()).unwrap();
        let live = Arc::new(ConfigStore::load(&path).unwrap());
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let store =
            Arc::new(SessionStore::open(workspace.join("sessions/transcripts.sqlite3")).unwrap());
        let metering = Arc::new(Metering::open(&workspace).unwrap());
        let hub = ChannelHub::from_config(
            &live.last_good(),
            Some(live.clone()),
            &|name: &str| match name {
                "TG_TOKEN" => Some("123456:token".to_string()),
                "WA" => Some("wa-secret".to_string()),
                _ => None,
            },
            store,
            metering,
            &workspace,
        );
        assert!(hub.channel("telegram").is_some() && hub.channel("whatsapp").is_some());
        (directory, hub)
    }

    /// A reply to `recipient` given up on.
    fn dead_letter(hub: &ChannelHub, recipient: &str) -> i64 {
        hub.store
            .queue("fail a reply", |transaction| {
                let body = OutboundBody {
                    text: "The launch code is 0000.".to_string(),
                    files: Vec::new(),
                    context: Default::default(),
                };
                let id = queue::enqueue(transaction, "telegram", recipient, &body, "reply", None)?;
                queue::fail_outbound(
                    transaction,
                    id,
                    "telegram: Forbidden: bot was blocked by the user (HTTP 403)",
                )?;
                Ok(id)
            })
            .unwrap()
    }

    /// The notices queued so far: (recipient, text, created at).
    fn notices(hub: &ChannelHub) -> Vec<(String, String, i64)> {
        hub.store
            .queue("read the outbox", |transaction| {
                let mut statement = transaction.prepare(
                    "SELECT recipient, json_extract(body, '$.text'), created_at FROM outbox
                     WHERE origin = 'dead_letter_notice' ORDER BY id",
                )?;
                statement
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                    .collect()
            })
            .unwrap()
    }

    fn told_by(hub: &ChannelHub, id: i64) -> Option<i64> {
        hub.store
            .queue("read the outbox", |transaction| {
                transaction.query_row(
                    "SELECT owner_notice FROM outbox WHERE id = ?1",
                    [id],
                    |row| row.get(0),
                )
            })
            .unwrap()
    }

    #[test]
    fn each_dead_letter_is_told_to_the_owner_once_and_a_burst_waits_for_the_window() {
        let (_directory, hub) = telegram_hub();
        let to_ivan = dead_letter(&hub, "telegram:333333333");
        assert_eq!(tell_owners(&hub, queue::now_ms()), Ok(None));
        let told = notices(&hub);
        assert_eq!(told.len(), 1);
        let (recipient, text, first_at) = told[0].clone();
        assert_eq!(
            recipient, "telegram:111111111",
            "Ana, on a channel that can reach her: she has not written on WhatsApp in a day"
        );
        assert!(
            text.contains(
                "- on telegram to ivan: telegram: Forbidden: bot was blocked by the user (HTTP 403)"
            ),
            "{text}"
        );
        assert!(!text.contains("launch code"), "{text}");
        assert!(
            told_by(&hub, to_ivan).is_some_and(|notice| notice > to_ivan),
            "marked told by the notice"
        );
        // Told once, however often the task looks.
        assert_eq!(tell_owners(&hub, queue::now_ms()), Ok(None));
        assert_eq!(notices(&hub).len(), 1);

        // The next one within the window waits for its end, then is told alone.
        let to_stranger = dead_letter(&hub, "telegram:444444444");
        let window = NOTICE_WINDOW.as_millis() as i64;
        assert_eq!(
            tell_owners(&hub, queue::now_ms()),
            Ok(Some(first_at + window))
        );
        assert_eq!(notices(&hub).len(), 1);
        assert_eq!(told_by(&hub, to_stranger), None);
        assert_eq!(tell_owners(&hub, first_at + window), Ok(None));
        let told = notices(&hub);
        assert_eq!(told.len(), 2);
        assert!(
            told[1].1.starts_with("I could not deliver a message")
                && told[1].1.contains("- on telegram to telegram:44…44: ")
                && !told[1].1.contains("ivan"),
            "{}",
            told[1].1
        );

        // A dead letter to the owner's only reachable address is not told there.
        let to_ana = dead_letter(&hub, "telegram:111111111");
        assert_eq!(tell_owners(&hub, told[1].2 + window), Ok(None));
        assert_eq!(notices(&hub).len(), 2);
        assert_eq!(told_by(&hub, to_ana), Some(0), "nobody could be told");
    }

    #[test]
    fn an_owner_who_wrote_on_whatsapp_within_a_day_is_told_there() {
        let (_directory, hub) = telegram_hub();
        dead_letter(&hub, "telegram:333333333");
        hub.store
            .queue("store Ana's message", |transaction| {
                transaction.execute(
                    "INSERT INTO inbox (channel, platform_id, sender, body, state, next_attempt_at, received_at)
                     VALUES ('whatsapp', 'wamid.1', 'whatsapp:+385991234567', '{}', 'answered', 0, ?1)",
                    [queue::now_ms() - 3_600_000],
                )
            })
            .unwrap();
        assert_eq!(tell_owners(&hub, queue::now_ms()), Ok(None));
        let told = notices(&hub);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].0, "whatsapp:+385991234567");
    }

    #[test]
    fn a_notice_that_cannot_be_delivered_is_not_told_about() {
        let (_directory, hub) = telegram_hub();
        dead_letter(&hub, "telegram:333333333");
        assert_eq!(tell_owners(&hub, queue::now_ms()), Ok(None));
        let notice = hub
            .store
            .queue("fail the notice", |transaction| {
                let id: i64 = transaction.query_row(
                    "SELECT id FROM outbox WHERE origin = 'dead_letter_notice'",
                    [],
                    |row| row.get(0),
                )?;
                queue::fail_outbound(transaction, id, "telegram: chat not found")?;
                Ok(id)
            })
            .unwrap();
        let later = queue::now_ms() + 2 * NOTICE_WINDOW.as_millis() as i64;
        assert_eq!(tell_owners(&hub, later), Ok(None));
        assert_eq!(notices(&hub).len(), 1);
        assert_eq!(told_by(&hub, notice), None);
    }

    fn letter(recipient: &str, reason: &str, text: &str) -> DeadLetter {
        DeadLetter {
            id: 1,
            channel: "email".into(),
            recipient: recipient.into(),
            reason: reason.into(),
            text: text.into(),
            failed_at: 0,
        }
    }

    #[test]
    fn addresses_are_masked_enough_to_recognise_not_to_write_to() {
        assert_eq!(mask("email:žana@acme.example"), "email:ž…@acme.example");
        assert_eq!(mask("matrix:@ana:acme.example"), "matrix:@a…:acme.example");
        assert_eq!(mask("whatsapp:+385991234567"), "whatsapp:+3…67");
        assert_eq!(mask("telegram:42"), "telegram:…");
    }

    #[test]
    fn the_notice_never_quotes_the_message_nor_the_full_address() {
        let text = "The salary of Marko is 4,200 EUR.";
        let dead = [letter(
            "email:žana@acme.example",
            &format!("email: 553 5.6.7 <žana@acme.example>: SMTPUTF8 required\nfor: {text}"),
            text,
        )];
        let notice = notice_text(None, &dead);
        assert!(
            notice.starts_with("I could not deliver a message"),
            "{notice}"
        );
        assert!(
            notice.contains("- on email to email:ž…@acme.example: email: 553 5.6.7 <ž…@acme.example>: SMTPUTF8 required for: [the message]"),
            "{notice}"
        );
        assert!(
            !notice.contains("4,200") && !notice.contains("žana"),
            "{notice}"
        );
    }

    #[test]
    fn a_burst_is_listed_up_to_a_few_and_counted() {
        let dead: Vec<DeadLetter> = (0..8)
            .map(|n| {
                letter(
                    &format!("telegram:10000{n}"),
                    "Forbidden: bot was blocked by the user",
                    "hi",
                )
            })
            .collect();
        let notice = notice_text(None, &dead);
        assert!(
            notice.starts_with("I could not deliver 8 messages"),
            "{notice}"
        );
        assert_eq!(notice.matches("\n- on email").count(), LISTED);
        assert!(notice.contains("- and 3 more"), "{notice}");
    }
}
