//! Kubernetes Events on the bot's SaintBot for channel trouble a person must act on —
//! a credential the platform refuses — so `kubectl describe sbot` says why nobody gets
//! answers. Only in a cluster, where the operator passes the SaintBot's uid.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes channel Events for one bot.
pub struct ChannelEvents {
    recorder: Recorder,
    reference: ObjectReference,
}

impl ChannelEvents {
    /// Events on SaintBot `namespace/name` (uid `uid`), reported as `saint-agent`.
    pub fn new(client: kube::Client, name: &str, namespace: &str, uid: &str) -> Self {
        let reporter = Reporter {
            controller: "saint-agent".to_string(),
            instance: std::env::var("HOSTNAME").ok(),
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
}
