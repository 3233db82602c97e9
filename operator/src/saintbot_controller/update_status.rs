//! Computes and writes the SaintBot's status: its conditions, counts and config hash,
//! and Events on real transitions. Condition logic is pure; [`report`] is the one tail
//! both reconcile paths (applied and invalid) end with. Contact and Role statuses are the
//! references controller's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::Event;

use super::{Context, bot_key, validate::ValidatedSaintBot};
use crate::cache::child_state::rollout::Problem;
use crate::{
    crd::{SaintBot, SaintBotStatus},
    status::{
        self, ConditionType, Reason, StatusError, carry_transition_times, condition, find,
        problem_event, transition_event, with_kstatus,
    },
};

/// What reconcile achieved, as far as status is concerned.
pub enum Outcome<'a> {
    /// Rendered and applied.
    Applied {
        bot: &'a ValidatedSaintBot,
        config_hash: String,
        /// Whether the bot's Deployment has a ready pod of its current generation.
        pod_ready: bool,
        /// Secrets (or keys of them) the pod needs that do not exist (the status
        /// message names them).
        missing_secrets: Option<String>,
        /// Why the pod cannot be created, rolled out or started, in the words of the
        /// Deployment's conditions or the kubelet ([`crate::cache::child_state::rollout`]).
        pod_problem: Option<Problem>,
        /// `ModelAvailable`'s reason and message, from the agent's model-chain report
        /// ([`super::model_chain`]).
        model_available: (Reason, String),
    },
    /// The spec (or what it refers to) cannot be rendered.
    Invalid { reason: Reason, message: String },
    /// The API server refused a child; the message names it and quotes the refusal.
    /// Only `Ready` changes: what was rendered before stays recorded.
    ApplyFailed { message: String },
}

/// The whole SaintBot status for an outcome. Pure.
pub fn bot_status(bot: &SaintBot, outcome: &Outcome<'_>, now: &Time) -> SaintBotStatus {
    let generation = bot.metadata.generation;
    let previous = bot.status.clone().unwrap_or_default();
    let condition =
        |type_, reason, message: String| condition(type_, reason, message, generation, now);
    let (conditions, counts, config_hash) = match outcome {
        Outcome::ApplyFailed { message } => {
            let ready = condition(ConditionType::Ready, Reason::ApplyFailed, message.clone());
            let mut conditions: Vec<Condition> = previous
                .conditions
                .iter()
                .filter(|kept| kept.type_ != ConditionType::Ready.as_str())
                .cloned()
                .collect();
            conditions.insert(0, ready);
            (
                conditions,
                (previous.contacts, previous.roles, previous.conflicts),
                previous.config_hash.clone(),
            )
        }
        Outcome::Invalid { reason, message } => (
            vec![
                condition(ConditionType::Ready, *reason, message.clone()),
                condition(ConditionType::ConfigRendered, *reason, message.clone()),
            ],
            (previous.contacts, previous.roles, previous.conflicts),
            previous.config_hash.clone(),
        ),
        Outcome::Applied {
            bot: validated,
            config_hash,
            pod_ready,
            missing_secrets,
            pod_problem,
            model_available,
        } => {
            let (ready_reason, ready_message) = ready(
                validated,
                *pod_ready,
                missing_secrets.as_ref(),
                pod_problem.as_ref(),
            );
            let ready = condition(ConditionType::Ready, ready_reason, ready_message);
            let (linked_reason, linked_message) = identities_linked(validated);
            let linked = condition(
                ConditionType::IdentitiesLinked,
                linked_reason,
                linked_message,
            );
            let identity = &validated.identity;
            let problems = identity.conflicting_identities().len()
                + identity.contacts_with_missing_role().len();
            let rendered = condition(
                ConditionType::ConfigRendered,
                Reason::ConfigRendered,
                format!("bot-config.json sha256 {config_hash}"),
            );
            let isolated = credentials_isolated(generation, now);
            let served = channels_served(&validated.config.channels, generation, now);
            let priced = models_priced(&validated.config, generation, now);
            let available = condition(
                ConditionType::ModelAvailable,
                model_available.0,
                status::truncate(&model_available.1, 1000),
            );
            (
                vec![ready, rendered, linked, isolated, served, priced, available],
                (
                    validated.config.contacts.len() as i32,
                    validated.config.roles.len() as i32,
                    problems as i32,
                ),
                Some(config_hash.clone()),
            )
        }
    };
    SaintBotStatus {
        conditions: carry_transition_times(&previous.conditions, with_kstatus(conditions)),
        observed_generation: generation,
        contacts: counts.0,
        roles: counts.1,
        conflicts: counts.2,
        config_hash,
    }
}

/// `Ready` of an applied bot: suspended, else waiting for a Secret, else what keeps the
/// pod from running, else whether it is ready.
fn ready(
    validated: &ValidatedSaintBot,
    pod_ready: bool,
    missing_secrets: Option<&String>,
    pod_problem: Option<&Problem>,
) -> (Reason, String) {
    if validated.suspend {
        (
            Reason::Suspended,
            "spec.suspend is true; scaled to zero".into(),
        )
    } else if let Some(message) = missing_secrets {
        (Reason::SecretMissing, message.clone())
    } else if let Some((reason, message)) = pod_problem {
        // Before readiness: a rollout that cannot go on leaves an old pod ready with
        // what the bot no longer asks for.
        (*reason, message.clone())
    } else if pod_ready {
        (Reason::PodReady, "the bot pod is ready".into())
    } else {
        (
            Reason::PodNotReady,
            "config rendered; waiting for the bot pod".into(),
        )
    }
}

/// `IdentitiesLinked`: every contact identifier linked, or which are not and why.
fn identities_linked(validated: &ValidatedSaintBot) -> (Reason, String) {
    let identity = &validated.identity;
    let conflicting = identity.conflicting_identities();
    // Contacts of a Role left out as invalid are named with the Role's problem.
    let left_out = super::validate::roles::left_out_summary(&validated.left_out_roles);
    let missing: Vec<(&str, &str)> = identity
        .contacts_with_missing_role()
        .into_iter()
        .filter(|(_, role)| {
            !validated
                .left_out_roles
                .iter()
                .any(|left| left.error.role == *role)
        })
        .collect();
    if conflicting.is_empty() && missing.is_empty() && left_out.is_none() {
        return (
            Reason::AllLinked,
            "every contact identifier is linked".into(),
        );
    }
    let mut parts: Vec<String> = Vec::new();
    if !conflicting.is_empty() {
        parts.push(format!(
            "claimed by several contacts, linked to none: {}",
            conflicting.iter().copied().collect::<Vec<_>>().join(", ")
        ));
    }
    if !missing.is_empty() {
        let listed: Vec<String> = missing
            .iter()
            .map(|(contact, role)| format!("{contact} (role {role})"))
            .collect();
        parts.push(format!(
            "contacts naming missing roles, left out: {}",
            listed.join(", ")
        ));
    }
    parts.extend(left_out);
    let reason = if conflicting.is_empty() {
        Reason::RoleNotFound
    } else {
        Reason::IdentifierConflict
    };
    (reason, parts.join("; "))
}

/// `CredentialsIsolated`: always True, reason `Injected`. Porter runs no CLI, so no
/// credential is ever handed to a process in the sandbox: each stays in the `porter`
/// container and is put on the wire by its proxy. The condition stays so that dashboards
/// and scripts reading it keep working.
fn credentials_isolated(generation: Option<i64>, now: &Time) -> Condition {
    condition(
        ConditionType::CredentialsIsolated,
        Reason::Injected,
        "credentials stay in the porter container; sandboxes get placeholders".to_string(),
        generation,
        now,
    )
}

/// `ChannelsServed`: True when this version serves every declared channel; False,
/// reason `ChannelNotServed`, naming the channels whose kind it does not. Every kind has
/// keys in `saint_config::channel_settings` today, so this is True for any bot the CRD
/// admits; it stays as the guard for a kind added to `ChannelKind` before its reader (the
/// CRD would accept it as declared, the agent would ignore it, and without this nobody
/// would learn why no message arrives).
fn channels_served(
    channels: &[saint_config::ChannelConfig],
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    channels_served_by(
        channels,
        |kind| saint_config::channel_settings::keys(kind).is_some(),
        generation,
        now,
    )
}

/// [`channels_served`] with the served kinds given by `served`.
fn channels_served_by(
    channels: &[saint_config::ChannelConfig],
    served: impl Fn(saint_config::ChannelKind) -> bool,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let not_served: Vec<String> = channels
        .iter()
        .filter(|channel| !served(channel.kind))
        .map(|channel| format!("{} ({})", channel.name, channel.kind.prefix()))
        .collect();
    let (reason, message) = if not_served.is_empty() {
        (
            Reason::AllChannelsServed,
            "the agent serves every declared channel".to_string(),
        )
    } else {
        let served_kinds: Vec<&str> = saint_config::ChannelKind::ALL
            .into_iter()
            .filter(|kind| served(*kind))
            .map(saint_config::ChannelKind::prefix)
            .collect();
        (
            Reason::ChannelNotServed,
            format!(
                "declared but not served by this version, so nobody is answered there: {} \
                 (served kinds: {})",
                not_served.join(", "),
                served_kinds.join(", ")
            ),
        )
    };
    condition(
        ConditionType::ChannelsServed,
        reason,
        message,
        generation,
        now,
    )
}

/// `ModelsPriced`: True when `model.prices` prices every model the bot's turns call;
/// False otherwise, reason `UnpricedModelsRefused` (the agent refuses those calls) or
/// `UnpricedModelsAllowed` (`budget.unpricedModels: allow`: they count as free), the
/// message naming the models and what to set — the line the agent's `/readyz` shows.
fn models_priced(
    config: &saint_config::BotConfig,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let (reason, message) = match config.unpriced_models_warning() {
        None => (
            Reason::AllModelsPriced,
            "model.prices prices every model in use: budgets count every call".to_string(),
        ),
        Some(warning) => match config.budget.unpriced_models {
            saint_config::UnpricedModels::Refuse => (Reason::UnpricedModelsRefused, warning),
            saint_config::UnpricedModels::Allow => (Reason::UnpricedModelsAllowed, warning),
        },
    };
    condition(
        ConditionType::ModelsPriced,
        reason,
        message,
        generation,
        now,
    )
}

/// The Events a status change deserves: only transitions (a changed status or reason of
/// `Ready` or `IdentitiesLinked`, or a new config hash), never a repeat of the same
/// state. Pure.
pub fn transition_events(previous: Option<&SaintBotStatus>, next: &SaintBotStatus) -> Vec<Event> {
    let previous_conditions: &[Condition] = previous
        .map(|status| status.conditions.as_slice())
        .unwrap_or_default();
    let mut events: Vec<Event> = [ConditionType::Ready, ConditionType::IdentitiesLinked]
        .into_iter()
        .filter_map(|type_| {
            let now = find(&next.conditions, type_.as_str())?;
            transition_event(find(previous_conditions, type_.as_str()), now, "Reconcile")
        })
        .collect();
    // A Warning when a channel becomes unserved or the unserved set changes.
    if let Some(now) = find(&next.conditions, ConditionType::ChannelsServed.as_str()) {
        let before = find(previous_conditions, ConditionType::ChannelsServed.as_str());
        events.extend(problem_event(before, now, "Reconcile"));
    }
    let hash_changed = next.config_hash.is_some()
        && previous.and_then(|status| status.config_hash.as_ref()) != next.config_hash.as_ref();
    if hash_changed {
        events.push(Event {
            type_: Reason::ConfigRendered.severity().event_type(),
            reason: Reason::ConfigRendered.to_string(),
            note: Some(format!(
                "rendered bot-config.json sha256 {}",
                next.config_hash.clone().unwrap_or_default()
            )),
            action: "RenderConfig".to_string(),
            secondary: None,
        });
    }
    events
}

/// The tail of every SaintBot reconcile, applied or invalid: computes the status for
/// `outcome`, writes it (unless unchanged), publishes the Events its transitions deserve
/// and records readiness in the metrics. Returns the status written.
pub async fn report(
    context: &Context,
    bot: &SaintBot,
    outcome: &Outcome<'_>,
    now: &Time,
) -> Result<SaintBotStatus, StatusError> {
    let next = bot_status(bot, outcome, now);
    let events = transition_events(bot.status.as_ref(), &next);
    status::report(
        &context.client,
        &context.recorder,
        bot,
        bot.status.as_ref(),
        &next,
        &events,
    )
    .await?;
    context
        .metrics
        .record_readiness(bot_key(bot), status::is_ready(&next.conditions));
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    fn ready(reason: Reason, at: &str) -> Condition {
        condition(
            ConditionType::Ready,
            reason,
            String::new(),
            Some(1),
            &time(at),
        )
    }

    #[test]
    fn an_unpriced_model_is_named_refused_by_default_and_warned_about_when_allowed() {
        let now = time("2026-01-01T00:00:00Z");
        let mut config = saint_config::BotConfig::from_json(include_str!(
            "../../../agent-pod/config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        let priced = models_priced(&config, Some(1), &now);
        assert_eq!(
            (priced.status.as_str(), priced.reason.as_str()),
            ("True", "AllModelsPriced")
        );
        config.roles.get_mut("owner").unwrap().model = Some("acme-local-llm".into());
        let refused = models_priced(&config, Some(1), &now);
        assert_eq!(
            (refused.status.as_str(), refused.reason.as_str()),
            ("False", "UnpricedModelsRefused")
        );
        assert!(
            refused.message.contains("\"acme-local-llm\"")
                && refused.message.contains("model.prices")
                && refused.message.contains("budget.unpricedModels: allow"),
            "{}",
            refused.message
        );
        config.budget.unpriced_models = saint_config::UnpricedModels::Allow;
        let allowed = models_priced(&config, Some(1), &now);
        assert_eq!(
            (allowed.status.as_str(), allowed.reason.as_str()),
            ("False", "UnpricedModelsAllowed")
        );
        assert!(
            allowed.message.contains("no budget stops them"),
            "{}",
            allowed.message
        );
    }

    #[test]
    fn every_kind_is_served_and_an_unserved_one_would_be_named_with_a_warning() {
        let now = time("2026-01-01T00:00:00Z");
        let channel = |name: &str, kind| saint_config::ChannelConfig {
            name: name.into(),
            kind,
            settings: Default::default(),
            secret_env: Default::default(),
        };
        use saint_config::ChannelKind::{self, Http, Slack, Telegram};
        let every_kind: Vec<_> = ChannelKind::ALL
            .into_iter()
            .map(|kind| channel(kind.prefix(), kind))
            .collect();
        let served = channels_served(&every_kind, Some(1), &now);
        assert_eq!(
            (served.status.as_str(), served.reason.as_str()),
            ("True", "AllChannelsServed"),
            "{}",
            served.message
        );
        // A kind without a reader yet (as telegram and slack were before Channels II).
        let unserved = channels_served_by(
            &[
                channel("api", Http),
                channel("tg", Telegram),
                channel("team", Slack),
            ],
            |kind| !matches!(kind, Telegram | Slack),
            Some(1),
            &now,
        );
        assert_eq!(
            (unserved.status.as_str(), unserved.reason.as_str()),
            ("False", "ChannelNotServed")
        );
        assert!(
            unserved.message.contains("tg (telegram), team (slack)"),
            "{}",
            unserved.message
        );
        assert!(!unserved.message.contains("api"), "{}", unserved.message);
        let status = |condition: Condition| SaintBotStatus {
            conditions: vec![condition],
            ..SaintBotStatus::default()
        };
        let events = transition_events(Some(&status(served)), &status(unserved.clone()));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "ChannelNotServed");
        assert!(matches!(
            events[0].type_,
            kube::runtime::events::EventType::Warning
        ));
        assert!(
            transition_events(Some(&status(unserved.clone())), &status(unserved)).is_empty(),
            "the same unserved channels again are silent"
        );
    }

    #[test]
    fn events_fire_on_transitions_only() {
        let first = SaintBotStatus {
            conditions: vec![ready(Reason::PodNotReady, "2026-01-01T00:00:00Z")],
            config_hash: Some("abc".into()),
            ..SaintBotStatus::default()
        };
        let reasons = |events: Vec<Event>| {
            events
                .into_iter()
                .map(|event| event.reason)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(transition_events(None, &first)),
            vec!["PodNotReady", "ConfigRendered"]
        );
        assert!(
            transition_events(Some(&first), &first).is_empty(),
            "a repeat of the same state is silent"
        );
        let ready_now = SaintBotStatus {
            conditions: vec![ready(Reason::PodReady, "2026-01-01T00:01:00Z")],
            ..first.clone()
        };
        assert_eq!(
            reasons(transition_events(Some(&first), &ready_now)),
            vec!["PodReady"]
        );
    }
}
