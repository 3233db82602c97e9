//! Publishes Kubernetes Events (`events.k8s.io/v1`) about Saint's objects, keeping
//! nothing. kube's `Recorder` remembers every Event it sent for six minutes so that a
//! repeat becomes a series count; the operator sends Events only on transitions, which
//! do not repeat within minutes, so at a thousand bots that memory held megabytes for
//! nothing.

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event as KubeEvent},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{Api, Client, api::PostParams, runtime::events::Event};

/// Sends Events as one reporting controller.
#[derive(Clone)]
pub struct Publisher {
    client: Client,
    reporter: String,
}

impl Publisher {
    /// A publisher reporting as `reporter` (also its instance name).
    pub fn new(client: Client, reporter: &str) -> Self {
        Self {
            client,
            reporter: reporter.to_string(),
        }
    }

    /// Creates one Event about `regarding`, in its namespace.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let object = event_object(event, regarding, &self.reporter, jiff::Timestamp::now());
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        Api::<KubeEvent>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &object)
            .await
            .map(|_| ())
    }
}

/// The Event object for `event` about `regarding` at `now`. Pure. Its name is the
/// object's plus the time in hexadecimal nanoseconds, as other controllers name theirs.
pub fn event_object(
    event: &Event,
    regarding: &ObjectReference,
    reporter: &str,
    now: jiff::Timestamp,
) -> KubeEvent {
    let name = format!(
        "{}.{:x}",
        regarding.name.as_deref().unwrap_or(reporter),
        now.as_nanosecond()
    );
    KubeEvent {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(
                regarding
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_string()),
            ),
            ..ObjectMeta::default()
        },
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        type_: Some(
            match event.type_ {
                kube::runtime::events::EventType::Normal => "Normal",
                kube::runtime::events::EventType::Warning => "Warning",
            }
            .to_string(),
        ),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some(reporter.to_string()),
        reporting_instance: Some(reporter.to_string()),
        ..KubeEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::events::EventType;

    use super::*;

    #[test]
    fn an_event_names_its_object_reason_and_reporter_in_the_object_namespace() {
        let regarding = ObjectReference {
            api_version: Some("saint.work/v1alpha1".into()),
            kind: Some("SaintBot".into()),
            name: Some("my-bot".into()),
            namespace: Some("acme".into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "SecretMissing".into(),
            note: Some("Secret acme/acme-llm is missing".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        let now: jiff::Timestamp = "2026-11-26T05:00:00Z".parse().unwrap();
        let object = event_object(&event, &regarding, "saint-operator", now);
        assert_eq!(
            object.metadata.name.as_deref(),
            Some(format!("my-bot.{:x}", now.as_nanosecond()).as_str())
        );
        assert_eq!(object.metadata.namespace.as_deref(), Some("acme"));
        assert_eq!(object.type_.as_deref(), Some("Warning"));
        assert_eq!(object.reason.as_deref(), Some("SecretMissing"));
        assert_eq!(object.action.as_deref(), Some("Reconcile"));
        assert_eq!(object.regarding.as_ref(), Some(&regarding));
        assert_eq!(
            object.reporting_controller.as_deref(),
            Some("saint-operator")
        );
        assert_eq!(object.event_time, Some(MicroTime(now)));
    }
}
