//! Status as every Saint resource reports it: typed condition types and reasons (a reason
//! knows whether it makes its condition True or False and which Event type it deserves),
//! the one way a condition is built and keeps its transition time, the Events a change
//! deserves, and the one status write — server-side apply on the status subresource,
//! skipped when nothing changed. Both controllers use it; it imports neither.

use std::{fmt, str::FromStr};

use k8s_openapi::{
    NamespaceResourceScope,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType},
};
use saint_config::ErrorChain;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use crate::{events::Publisher, labels::FIELD_MANAGER};

/// The condition types Saint resources report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// Every resource: usable as a whole.
    Ready,
    /// SaintBot: the config was rendered from the spec, Contacts and Roles.
    ConfigRendered,
    /// SaintBot: every Contact identifier is linked (no conflicts, no missing roles).
    IdentitiesLinked,
    /// SaintBot: every Porter CLI keeps its credential outside the CLI's process.
    CredentialsIsolated,
    /// SaintBot: the agent serves every declared channel (kind).
    ChannelsServed,
    /// SaintBot: every model its turns call has a price, so budgets count every call.
    ModelsPriced,
    /// SaintBot: no current report from its agent that a call failed on every model of
    /// its failover chain (`crate::cache::chain_reports`).
    ModelAvailable,
    /// kstatus' abnormal-true condition: True, with `Ready`'s reason and message, while
    /// the operator works towards `Ready` and nothing needs a person. Absent otherwise.
    Reconciling,
    /// kstatus' abnormal-true condition: True, with `Ready`'s reason and message, when
    /// `Ready` cannot come without a person's change (an invalid spec, a missing Role or
    /// Secret, a refused child or pod). GitOps tools (Flux, kpt, cli-utils' kstatus)
    /// report such an object as Failed instead of waiting for their timeout. Absent
    /// otherwise.
    Stalled,
}

impl ConditionType {
    /// The `type` field as written.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::ConfigRendered => "ConfigRendered",
            ConditionType::IdentitiesLinked => "IdentitiesLinked",
            ConditionType::CredentialsIsolated => "CredentialsIsolated",
            ConditionType::ChannelsServed => "ChannelsServed",
            ConditionType::ModelsPriced => "ModelsPriced",
            ConditionType::ModelAvailable => "ModelAvailable",
            ConditionType::Reconciling => "Reconciling",
            ConditionType::Stalled => "Stalled",
        }
    }
}

/// How a reason reads to a human: all is well, the operator waits for something that
/// usually comes by itself, or a person has to act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The condition holds: status True, Normal Events.
    Healthy,
    /// Not there yet, nothing to fix (a pod starting, a bot suspended): status False,
    /// Normal Events; on `Ready`, also `Reconciling=True` (kstatus: InProgress) unless
    /// the wait is on purpose ([`Reason::Suspended`]).
    Progressing,
    /// Something needs a person (in the specs, or what they refer to): status False,
    /// Warning Events; on `Ready`, also `Stalled=True` (kstatus: Failed).
    Problem,
}

impl Severity {
    /// The condition's `status`: True only when healthy.
    pub fn condition_status(self) -> &'static str {
        match self {
            Severity::Healthy => "True",
            Severity::Progressing | Severity::Problem => "False",
        }
    }

    /// The type of an Event about a condition with this severity.
    pub fn event_type(self) -> EventType {
        match self {
            Severity::Problem => EventType::Warning,
            Severity::Healthy | Severity::Progressing => EventType::Normal,
        }
    }
}

/// Why a condition is what it is. The CamelCase name is the condition's `reason` and
/// the reason of Events about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// SaintBot `Ready`: the bot pod is ready.
    PodReady,
    /// SaintBot `Ready`: config rendered, the pod is not ready yet.
    PodNotReady,
    /// SaintBot `Ready`: `spec.suspend` scaled the bot to zero.
    Suspended,
    /// SaintBot `ConfigRendered`: the config was rendered.
    ConfigRendered,
    /// SaintBot `IdentitiesLinked`: every identifier is linked.
    AllLinked,
    /// An identifier is claimed by more than one Contact; none of them gets it.
    IdentifierConflict,
    /// A Role named by a Contact or by `spec.defaultRole` does not exist or is not selected.
    RoleNotFound,
    /// SaintBot: a ConfigMap (or a key in it) a skill names does not exist; retried with
    /// backoff until it does (the message names the field).
    ConfigMapNotFound,
    /// SaintBot `Ready`: the API server refused a child; the message names it and
    /// quotes the API server. Retried with backoff.
    ApplyFailed,
    /// SaintBot `Ready`: a Secret the pod needs does not exist; the message names it and
    /// what needs it. Retried with backoff (Secrets are not watched).
    SecretMissing,
    /// Contact `Ready`: an identifier cannot be normalised.
    InvalidIdentifier,
    /// Contact `Ready`: every identifier is linked.
    Linked,
    /// Contact `Ready`: no SaintBot in the namespace uses the Contact.
    Unused,
    /// Role `Ready`: bots can render the Role.
    Valid,
    /// The spec cannot be rendered (the message names the field).
    InvalidSpec,
    /// SaintBot `CredentialsIsolated`: credentials stay in the `porter` container;
    /// sandboxes get placeholders (always: Porter runs no CLI).
    Injected,
    /// SaintBot `ChannelsServed`: this version serves every declared channel.
    AllChannelsServed,
    /// SaintBot `ChannelsServed`: a declared channel's kind is not served by this
    /// version (accepted by the CRD, ignored by the agent); the message names it.
    ChannelNotServed,
    /// SaintBot `ModelsPriced`: `model.prices` prices every model in use.
    AllModelsPriced,
    /// SaintBot `ModelsPriced`: a model in use has no price, so the agent refuses its
    /// calls; the message names it and what to set.
    UnpricedModelsRefused,
    /// SaintBot `ModelsPriced`: a model in use has no price and `budget.unpricedModels`
    /// is `allow`: its calls count as free and no budget stops them.
    UnpricedModelsAllowed,
    /// SaintBot `Ready`: the Deployment cannot create the bot pod (its `ReplicaFailure`
    /// condition: a LimitRange, a ResourceQuota or an admission policy refuses it); the
    /// message quotes the refusal.
    ReplicaFailure,
    /// SaintBot `Ready`: the Deployment's rollout made no progress within its deadline
    /// (`Progressing=False`); the message quotes it.
    ProgressDeadlineExceeded,
    /// SaintBot `Ready`: a container of the bot pod cannot be configured (a Secret or
    /// ConfigMap key it names is missing); the message names the container and quotes
    /// the kubelet.
    CreateContainerConfigError,
    /// SaintBot `Ready`: an image of the bot pod cannot be pulled (kubelet backing off).
    ImagePullBackOff,
    /// SaintBot `Ready`: an image of the bot pod cannot be pulled (first failure).
    ErrImagePull,
    /// SaintBot `Ready`: a container of the bot pod keeps exiting.
    CrashLoopBackOff,
    /// SaintBot `Ready`: the `spec.webhookIngress` host and a path are routed for another
    /// SaintBot created earlier; this bot gets no Ingress (the message names the owner).
    HostClaimed,
    /// SaintBot `ModelAvailable`: the running agent has not reported its whole model
    /// chain failing (or reported it answering again since).
    NoChainFailure,
    /// SaintBot `ModelAvailable`: the running agent reports that a call failed on every
    /// model of its failover chain and none has answered since; the message names each
    /// entry, its model and how its last attempt ended.
    ChainFailing,
}

impl Reason {
    /// Every reason, for parsing and for tests.
    pub const ALL: [Reason; 30] = [
        Reason::PodReady,
        Reason::PodNotReady,
        Reason::Suspended,
        Reason::ConfigRendered,
        Reason::AllLinked,
        Reason::IdentifierConflict,
        Reason::RoleNotFound,
        Reason::ConfigMapNotFound,
        Reason::ApplyFailed,
        Reason::SecretMissing,
        Reason::InvalidIdentifier,
        Reason::Linked,
        Reason::Unused,
        Reason::Valid,
        Reason::InvalidSpec,
        Reason::Injected,
        Reason::AllChannelsServed,
        Reason::ChannelNotServed,
        Reason::AllModelsPriced,
        Reason::UnpricedModelsRefused,
        Reason::UnpricedModelsAllowed,
        Reason::ReplicaFailure,
        Reason::ProgressDeadlineExceeded,
        Reason::CreateContainerConfigError,
        Reason::ImagePullBackOff,
        Reason::ErrImagePull,
        Reason::CrashLoopBackOff,
        Reason::HostClaimed,
        Reason::NoChainFailure,
        Reason::ChainFailing,
    ];

    /// The `reason` field as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PodReady => "PodReady",
            Reason::PodNotReady => "PodNotReady",
            Reason::Suspended => "Suspended",
            Reason::ConfigRendered => "ConfigRendered",
            Reason::AllLinked => "AllLinked",
            Reason::IdentifierConflict => "IdentifierConflict",
            Reason::RoleNotFound => "RoleNotFound",
            Reason::ConfigMapNotFound => "ConfigMapNotFound",
            Reason::ApplyFailed => "ApplyFailed",
            Reason::SecretMissing => "SecretMissing",
            Reason::InvalidIdentifier => "InvalidIdentifier",
            Reason::Linked => "Linked",
            Reason::Unused => "Unused",
            Reason::Valid => "Valid",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Injected => "Injected",
            Reason::AllChannelsServed => "AllChannelsServed",
            Reason::ChannelNotServed => "ChannelNotServed",
            Reason::AllModelsPriced => "AllModelsPriced",
            Reason::UnpricedModelsRefused => "UnpricedModelsRefused",
            Reason::UnpricedModelsAllowed => "UnpricedModelsAllowed",
            Reason::ReplicaFailure => "ReplicaFailure",
            Reason::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            Reason::CreateContainerConfigError => "CreateContainerConfigError",
            Reason::ImagePullBackOff => "ImagePullBackOff",
            Reason::ErrImagePull => "ErrImagePull",
            Reason::CrashLoopBackOff => "CrashLoopBackOff",
            Reason::HostClaimed => "HostClaimed",
            Reason::NoChainFailure => "NoChainFailure",
            Reason::ChainFailing => "ChainFailing",
        }
    }

    /// Whether the reason means healthy, on its way, or a problem for a person.
    pub fn severity(self) -> Severity {
        match self {
            Reason::PodReady
            | Reason::ConfigRendered
            | Reason::AllLinked
            | Reason::Linked
            | Reason::Unused
            | Reason::Valid
            | Reason::Injected
            | Reason::AllChannelsServed
            | Reason::AllModelsPriced
            | Reason::NoChainFailure => Severity::Healthy,
            Reason::PodNotReady | Reason::Suspended => Severity::Progressing,
            Reason::IdentifierConflict
            | Reason::RoleNotFound
            | Reason::ConfigMapNotFound
            | Reason::ApplyFailed
            | Reason::SecretMissing
            | Reason::InvalidIdentifier
            | Reason::InvalidSpec
            | Reason::ChannelNotServed
            | Reason::UnpricedModelsRefused
            | Reason::UnpricedModelsAllowed
            | Reason::ReplicaFailure
            | Reason::ProgressDeadlineExceeded
            | Reason::CreateContainerConfigError
            | Reason::ImagePullBackOff
            | Reason::ErrImagePull
            | Reason::CrashLoopBackOff
            | Reason::HostClaimed
            | Reason::ChainFailing => Severity::Problem,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A `reason` string no Saint condition uses.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown condition reason {0:?}")]
pub struct UnknownReason(pub String);

impl FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == text)
            .ok_or_else(|| UnknownReason(text.to_string()))
    }
}

/// The severity of a written condition: its reason's, or — for a reason this version
/// does not know (written by another version) — read from its status.
pub fn severity_of(condition: &Condition) -> Severity {
    match condition.reason.parse::<Reason>() {
        Ok(reason) => reason.severity(),
        Err(_) if condition.status == "True" => Severity::Healthy,
        Err(_) => Severity::Problem,
    }
}

/// A condition whose status follows from its reason.
pub fn condition(
    type_: ConditionType,
    reason: Reason,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.as_str().to_string(),
        status: reason.severity().condition_status().to_string(),
        reason: reason.as_str().to_string(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// Keeps `lastTransitionTime` of a condition whose status did not change: GitOps tools
/// and humans read it as "since when is this so".
pub fn carry_transition_times(previous: &[Condition], mut next: Vec<Condition>) -> Vec<Condition> {
    for condition in &mut next {
        if let Some(old) = find(previous, condition.type_.as_str())
            && old.status == condition.status
        {
            condition.last_transition_time = old.last_transition_time.clone();
        }
    }
    next
}

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|condition| condition.type_ == type_)
}

/// Whether the `Ready` condition is present and True.
pub fn is_ready(conditions: &[Condition]) -> bool {
    find(conditions, ConditionType::Ready.as_str()).is_some_and(|ready| ready.status == "True")
}

/// The kstatus conditions (cli-utils' `pkg/kstatus`, read by Flux, kpt and Argo CD's
/// health checks) that go with `ready`: `Stalled=True` when a person has to act,
/// `Reconciling=True` while the operator waits for something that comes by itself,
/// neither when ready or suspended (kstatus reads their absence as False). Each carries
/// `Ready`'s reason, message, generation and time, so a pipeline fails with the reason
/// instead of waiting for its timeout.
pub fn kstatus_conditions(ready: &Condition) -> Vec<Condition> {
    let type_ = match (severity_of(ready), ready.reason.parse::<Reason>()) {
        (Severity::Problem, _) => ConditionType::Stalled,
        (Severity::Progressing, Ok(Reason::Suspended)) | (Severity::Healthy, _) => {
            return Vec::new();
        }
        (Severity::Progressing, _) => ConditionType::Reconciling,
    };
    vec![Condition {
        type_: type_.as_str().to_string(),
        status: "True".to_string(),
        ..ready.clone()
    }]
}

/// `conditions` with the kstatus conditions their `Ready` deserves appended (any
/// earlier ones replaced).
pub fn with_kstatus(mut conditions: Vec<Condition>) -> Vec<Condition> {
    conditions.retain(|condition| {
        condition.type_ != ConditionType::Stalled.as_str()
            && condition.type_ != ConditionType::Reconciling.as_str()
    });
    let extra = find(&conditions, ConditionType::Ready.as_str())
        .map(kstatus_conditions)
        .unwrap_or_default();
    conditions.extend(extra);
    conditions
}

fn event(condition: &Condition, action: &str) -> Event {
    Event {
        type_: severity_of(condition).event_type(),
        reason: condition.reason.clone(),
        note: Some(truncate(&condition.message, 1000)),
        action: action.to_string(),
        secondary: None,
    }
}

/// The Event a condition's change deserves: one when its status or reason moved, none
/// for a repeat of the same state, and none for a resource that starts out healthy.
pub fn transition_event(
    before: Option<&Condition>,
    now: &Condition,
    action: &str,
) -> Option<Event> {
    let changed =
        before.is_none_or(|before| before.status != now.status || before.reason != now.reason);
    let first_and_healthy = before.is_none() && severity_of(now) == Severity::Healthy;
    (changed && !first_and_healthy).then(|| event(now, action))
}

/// The Event a problem deserves: a Warning when the condition turns into a problem or
/// its problem changes (reason or message), nothing while healthy or unchanged.
pub fn problem_event(before: Option<&Condition>, now: &Condition, action: &str) -> Option<Event> {
    let changed =
        before.is_none_or(|before| before.reason != now.reason || before.message != now.message);
    (changed && severity_of(now) == Severity::Problem).then(|| event(now, action))
}

/// At most `limit` bytes of `text`, cut at a character boundary (Event notes are capped at 1 kB).
pub fn truncate(text: &str, limit: usize) -> String {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Status could not be written.
#[derive(Debug, thiserror::Error)]
#[error("failed to patch status of {kind} {name:?}")]
pub struct StatusError {
    /// Kind of the object (`SaintBot`, `Contact`, `Role`).
    pub kind: String,
    /// Name of the object.
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// The status tail every reconcile ends with: writes `next` onto `object`'s status
/// subresource with server-side apply unless it equals `current`, then publishes
/// `events` about the object. Returns whether a write happened.
pub async fn report<K, S>(
    client: &Client,
    recorder: &Publisher,
    object: &K,
    current: Option<&S>,
    next: &S,
    events: &[Event],
) -> Result<bool, StatusError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug,
    S: Serialize + PartialEq,
{
    let written = if current == Some(next) {
        false
    } else {
        let name = object.name_any();
        let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
        let patch = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": next,
        });
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| StatusError {
            kind: K::kind(&()).to_string(),
            name,
            source,
        })?;
        true
    };
    publish(recorder, object, events).await;
    Ok(written)
}

/// Publishes Events about `object`. Event failures are logged, never fatal: an Event is a
/// courtesy to humans, status is the record.
pub async fn publish<K>(recorder: &Publisher, object: &K, events: &[Event])
where
    K: Resource<DynamicType = ()>,
{
    let reference = object.object_ref(&());
    for event in events {
        if let Err(error) = recorder.publish(event, &reference).await {
            tracing::warn!(
                error = %ErrorChain(&error),
                object = ?reference.name,
                reason = %event.reason,
                "failed to publish event"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    fn ready(reason: Reason, at: &str) -> Condition {
        condition(ConditionType::Ready, reason, "", Some(1), &time(at))
    }

    #[test]
    fn every_reason_knows_its_condition_status_and_event_type() {
        let table: Vec<(&str, &str, EventType)> = Reason::ALL
            .into_iter()
            .map(|reason| {
                (
                    reason.as_str(),
                    reason.severity().condition_status(),
                    reason.severity().event_type(),
                )
            })
            .collect();
        use EventType::{Normal, Warning};
        assert_eq!(
            table,
            vec![
                ("PodReady", "True", Normal),
                ("PodNotReady", "False", Normal),
                ("Suspended", "False", Normal),
                ("ConfigRendered", "True", Normal),
                ("AllLinked", "True", Normal),
                ("IdentifierConflict", "False", Warning),
                ("RoleNotFound", "False", Warning),
                ("ConfigMapNotFound", "False", Warning),
                ("ApplyFailed", "False", Warning),
                ("SecretMissing", "False", Warning),
                ("InvalidIdentifier", "False", Warning),
                ("Linked", "True", Normal),
                ("Unused", "True", Normal),
                ("Valid", "True", Normal),
                ("InvalidSpec", "False", Warning),
                ("Injected", "True", Normal),
                ("AllChannelsServed", "True", Normal),
                ("ChannelNotServed", "False", Warning),
                ("AllModelsPriced", "True", Normal),
                ("UnpricedModelsRefused", "False", Warning),
                ("UnpricedModelsAllowed", "False", Warning),
                ("ReplicaFailure", "False", Warning),
                ("ProgressDeadlineExceeded", "False", Warning),
                ("CreateContainerConfigError", "False", Warning),
                ("ImagePullBackOff", "False", Warning),
                ("ErrImagePull", "False", Warning),
                ("CrashLoopBackOff", "False", Warning),
                ("HostClaimed", "False", Warning),
                ("NoChainFailure", "True", Normal),
                ("ChainFailing", "False", Warning),
            ]
        );
    }

    #[test]
    fn a_problem_stalls_progress_reconciles_and_ready_or_suspended_adds_neither() {
        let at = "2026-01-01T00:00:00Z";
        let kstatus = |reason: Reason| -> Vec<(String, String, String, Option<i64>)> {
            let ready = Condition {
                message: format!("why {reason}"),
                ..ready(reason, at)
            };
            kstatus_conditions(&ready)
                .into_iter()
                .map(|condition| {
                    (
                        condition.type_,
                        condition.status,
                        format!("{}: {}", condition.reason, condition.message),
                        condition.observed_generation,
                    )
                })
                .collect()
        };
        let stalled = |reason: &str| {
            vec![(
                "Stalled".to_string(),
                "True".to_string(),
                format!("{reason}: why {reason}"),
                Some(1),
            )]
        };
        for reason in [
            Reason::InvalidSpec,
            Reason::RoleNotFound,
            Reason::IdentifierConflict,
            Reason::ApplyFailed,
            Reason::SecretMissing,
            Reason::ConfigMapNotFound,
            Reason::ReplicaFailure,
            Reason::CrashLoopBackOff,
        ] {
            assert_eq!(kstatus(reason), stalled(reason.as_str()), "{reason}");
        }
        assert_eq!(
            kstatus(Reason::PodNotReady),
            vec![(
                "Reconciling".to_string(),
                "True".to_string(),
                "PodNotReady: why PodNotReady".to_string(),
                Some(1)
            )]
        );
        assert!(kstatus(Reason::PodReady).is_empty());
        assert!(kstatus(Reason::Suspended).is_empty());
        // A healed object loses the condition; a repeat keeps one.
        let stalled_then_ready = with_kstatus(vec![
            ready(Reason::PodReady, at),
            condition(
                ConditionType::Stalled,
                Reason::InvalidSpec,
                "",
                Some(1),
                &time(at),
            ),
        ]);
        assert_eq!(stalled_then_ready.len(), 1);
        let twice = with_kstatus(with_kstatus(vec![ready(Reason::InvalidSpec, at)]));
        let types: Vec<&str> = twice
            .iter()
            .map(|condition| condition.type_.as_str())
            .collect();
        assert_eq!(types, ["Ready", "Stalled"]);
    }

    #[test]
    fn a_condition_takes_its_status_from_its_reason_and_reasons_parse_back() {
        let now = time("2026-01-01T00:00:00Z");
        for reason in Reason::ALL {
            let built = condition(ConditionType::Ready, reason, "m", Some(2), &now);
            assert_eq!(built.status, reason.severity().condition_status());
            assert_eq!(built.reason.parse::<Reason>(), Ok(reason));
            assert_eq!(built.observed_generation, Some(2));
        }
        assert_eq!(
            "Mystery".parse::<Reason>(),
            Err(UnknownReason("Mystery".into()))
        );
        let foreign = |status: &str| Condition {
            status: status.into(),
            reason: "Mystery".into(),
            ..ready(Reason::Valid, "2026-01-01T00:00:00Z")
        };
        assert_eq!(severity_of(&foreign("True")), Severity::Healthy);
        assert_eq!(severity_of(&foreign("False")), Severity::Problem);
    }

    #[test]
    fn last_transition_time_moves_only_when_the_status_changes() {
        let previous = vec![ready(Reason::PodNotReady, "2026-01-01T00:00:00Z")];
        let same = carry_transition_times(
            &previous,
            vec![ready(Reason::Suspended, "2026-01-02T00:00:00Z")],
        );
        assert_eq!(
            same[0].last_transition_time,
            time("2026-01-01T00:00:00Z"),
            "reason alone is not a transition"
        );
        let flipped = carry_transition_times(
            &previous,
            vec![ready(Reason::PodReady, "2026-01-02T00:00:00Z")],
        );
        assert_eq!(
            flipped[0].last_transition_time,
            time("2026-01-02T00:00:00Z")
        );
    }

    #[test]
    fn transitions_get_events_typed_by_severity_and_a_healthy_start_gets_none() {
        let at = "2026-01-01T00:00:00Z";
        let starting = ready(Reason::PodNotReady, at);
        let first = transition_event(None, &starting, "Reconcile").unwrap();
        assert_eq!(
            (first.reason.as_str(), first.type_),
            ("PodNotReady", EventType::Normal)
        );
        assert!(transition_event(Some(&starting), &starting, "Reconcile").is_none());
        assert!(transition_event(None, &ready(Reason::PodReady, at), "Reconcile").is_none());
        let broken = transition_event(Some(&starting), &ready(Reason::InvalidSpec, at), "x");
        assert_eq!(broken.unwrap().type_, EventType::Warning);
    }

    #[test]
    fn problems_get_a_warning_when_they_appear_or_change_and_nothing_else() {
        let at = "2026-01-01T00:00:00Z";
        let conflict = Condition {
            message: "x".into(),
            ..ready(Reason::IdentifierConflict, at)
        };
        let warning = problem_event(None, &conflict, "ResolveIdentities").unwrap();
        assert_eq!(
            (warning.reason.as_str(), warning.type_),
            ("IdentifierConflict", EventType::Warning)
        );
        assert!(problem_event(Some(&conflict), &conflict, "ResolveIdentities").is_none());
        let other = Condition {
            message: "y".into(),
            ..conflict.clone()
        };
        assert!(problem_event(Some(&conflict), &other, "ResolveIdentities").is_some());
        assert!(problem_event(Some(&conflict), &ready(Reason::Linked, at), "x").is_none());
        assert!(problem_event(None, &ready(Reason::PodNotReady, at), "x").is_none());
    }

    #[test]
    fn long_event_notes_are_cut_at_a_character_boundary() {
        let text = "ž".repeat(600);
        let cut = truncate(&text, 1000);
        assert!(cut.len() <= 1000 && cut.chars().all(|character| character == 'ž'));
    }
}
