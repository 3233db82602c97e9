//! Kubernetes Events on the bot's SaintBot for trouble a person must act on — a channel
//! credential the platform refuses, a model chain failing on every entry — so `kubectl
//! describe sbot` says why nobody gets answers. Only in a cluster, where the operator
//! passes the SaintBot's uid. The instance reported is the pod's name (its hostname):
//! the operator tells a report of the running agent from one of a pod gone by it.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes channel Events for one bot.
pub struct ChannelEvents {
    recorder: Recorder,
    reference: ObjectReference,
}

impl ChannelEvents {
    /// Events on SaintBot `namespace/name` (uid `uid`), reported as `saint-agent` by
    /// this pod (its hostname).
    pub fn new(client: kube::Client, name: &str, namespace: &str, uid: &str) -> Self {
        Self::reporting_as(client, name, namespace, uid, std::env::var("HOSTNAME").ok())
    }

    /// The same, reported by the agent of pod `instance` (`None`: no pod named).
    pub fn reporting_as(
        client: kube::Client,
        name: &str,
        namespace: &str,
        uid: &str,
        instance: Option<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: "saint-agent".to_string(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
            reference: ObjectReference {
                api_version: Some("saint.work/v1alpha1".to_string()),
                kind: Some("SaintBot".to_string()),
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                uid: Some(uid.to_string()),
                ..ObjectReference::default()
            },
        }
    }

    /// A Warning `ChannelCredentialsRefused`: "`<channel>`: `<the platform's reason>`".
    pub async fn credentials_refused(
        &self,
        channel: &str,
        reason: &str,
    ) -> Result<(), kube::Error> {
        let event = Event {
            type_: EventType::Warning,
            reason: "ChannelCredentialsRefused".to_string(),
            note: Some(format!("channel {channel}: {reason}")),
            action: "Deliver".to_string(),
            secondary: None,
        };
        self.recorder.publish(&event, &self.reference).await
    }

    /// A Warning `MessageUndeliverable`, once per message given up on:
    /// "channel `<channel>`: to `<recipient>`: `<reason>`".
    pub async fn message_undeliverable(
        &self,
        channel: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let event = Event {
            type_: EventType::Warning,
            reason: "MessageUndeliverable".to_string(),
            note: Some(format!("channel {channel}: {note}")),
            action: "Deliver".to_string(),
            secondary: None,
        };
        self.recorder.publish(&event, &self.reference).await
    }

    /// A Warning (`warning`) or Normal Event `reason` of `action`, its note as given
    /// (cut to the 1 kB an Event note may hold). The model chain's reports are sent
    /// so ([`crate::runtime::ChainReport::publish`]).
    pub async fn note(
        &self,
        warning: bool,
        reason: &str,
        note: &str,
        action: &str,
    ) -> Result<(), kube::Error> {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(
                note.char_indices()
                    .take_while(|(at, character)| at + character.len_utf8() <= 1000)
                    .map(|(_, character)| character)
                    .collect(),
            ),
            action: action.to_string(),
            secondary: None,
        };
        self.recorder.publish(&event, &self.reference).await
    }
}
