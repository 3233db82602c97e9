//! Leader election on a `coordination.k8s.io/v1` Lease, so two operator replicas never
//! reconcile at once. `decide` is pure; `LeaseLock` does the get/create/replace, relying
//! on `resourceVersion` (optimistic concurrency) so two candidates cannot both win.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{Api, Client, api::PostParams};
use saint_config::ErrorChain;
use tokio::sync::watch;

/// Why the Lease could not be read or written (conflicts are not errors: they mean
/// someone else won).
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("failed to read Lease {name:?}")]
    Get { name: String, source: kube::Error },
    #[error("failed to write Lease {name:?}")]
    Write { name: String, source: kube::Error },
}

/// What to do with the Lease as it is now.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// No Lease yet: create this one.
    Create(Lease),
    /// Renew ours or take over an expired one: replace with this (same resourceVersion).
    Replace(Lease),
    /// Someone else holds a live Lease.
    Follow { holder: String },
}

/// Decides, from the current Lease, whether `identity` may hold it at `now`. Pure.
pub fn decide(
    current: Option<&Lease>,
    name: &str,
    identity: &str,
    now: jiff::Timestamp,
    duration: Duration,
) -> Decision {
    let duration_seconds = duration.as_secs() as i32;
    let fresh_spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(duration_seconds),
        acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let Some(current) = current else {
        return Decision::Create(Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(fresh_spec(0, None)),
        });
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let transitions = spec.lease_transitions.unwrap_or(0);
    let mut next = current.clone();
    if holder == identity {
        next.spec = Some(fresh_spec(transitions, spec.acquire_time.clone()));
        return Decision::Replace(next);
    }
    let held_for = spec
        .lease_duration_seconds
        .unwrap_or(duration_seconds)
        .max(1);
    let expired = match &spec.renew_time {
        Some(MicroTime(renewed)) => now.as_second() >= renewed.as_second() + i64::from(held_for),
        None => true,
    };
    if holder.is_empty() || expired {
        next.spec = Some(fresh_spec(transitions + 1, None));
        return Decision::Replace(next);
    }
    Decision::Follow { holder }
}

/// One candidate for one Lease.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

impl LeaseLock {
    /// A candidate `identity` for Lease `namespace/name`, held for `duration` per renewal.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    /// Tries once to acquire or renew. `Ok(true)`: we lead until `duration` from now.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaderError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|source| LeaderError::Get {
                name: self.name.clone(),
                source,
            })?;
        let decision = decide(
            current.as_ref(),
            &self.name,
            &self.identity,
            jiff::Timestamp::now(),
            self.duration,
        );
        let written = match decision {
            Decision::Follow { .. } => return Ok(false),
            Decision::Create(lease) => self.api.create(&PostParams::default(), &lease).await,
            // `replace` sends the resourceVersion we read: if another candidate wrote in
            // between, the API server refuses with 409 and we stay a follower.
            Decision::Replace(lease) => {
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(error) if is_conflict(&error) => Ok(false),
            Err(source) => Err(LeaderError::Write {
                name: self.name.clone(),
                source,
            }),
        }
    }

    /// Gives the Lease up (on shutdown) so another replica takes over at once.
    pub async fn release(&self) -> Result<(), LeaderError> {
        let Some(mut lease) =
            self.api
                .get_opt(&self.name)
                .await
                .map_err(|source| LeaderError::Get {
                    name: self.name.clone(),
                    source,
                })?
        else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_conflict(&error) => Ok(()),
            Err(source) => Err(LeaderError::Write {
                name: self.name.clone(),
                source,
            }),
        }
    }

    /// Keeps trying every `retry` and publishes leadership on `leading`. A renewal that
    /// fails (error or lost race) publishes `false` at once: better no leader for a
    /// moment than two.
    pub async fn run(&self, retry: Duration, leading: watch::Sender<bool>) {
        loop {
            let leader = match self.try_acquire_or_renew().await {
                Ok(leader) => leader,
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "leader election failed");
                    false
                }
            };
            if *leading.borrow() != leader {
                tracing::info!(leader, identity = %self.identity, "leadership changed");
            }
            leading.send_replace(leader);
            tokio::time::sleep(retry).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    fn held_by(holder: &str, renewed: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("saint-operator".into()),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(at(renewed))),
                acquire_time: Some(MicroTime(at(renewed))),
                lease_transitions: Some(2),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn no_lease_means_create_one_held_by_us() {
        let Decision::Create(lease) = decide(
            None,
            "saint-operator",
            "pod-a",
            at("2026-01-01T00:00:00Z"),
            Duration::from_secs(15),
        ) else {
            panic!("expected create");
        };
        assert_eq!(
            lease.spec.unwrap().holder_identity.as_deref(),
            Some("pod-a")
        );
    }

    #[test]
    fn a_live_lease_of_someone_else_is_followed() {
        let lease = held_by("pod-b", "2026-01-01T00:00:00Z");
        let decision = decide(
            Some(&lease),
            "saint-operator",
            "pod-a",
            at("2026-01-01T00:00:10Z"),
            Duration::from_secs(15),
        );
        assert_eq!(
            decision,
            Decision::Follow {
                holder: "pod-b".into()
            }
        );
    }

    #[test]
    fn an_expired_lease_is_taken_over_with_the_read_resource_version() {
        let lease = held_by("pod-b", "2026-01-01T00:00:00Z");
        let Decision::Replace(next) = decide(
            Some(&lease),
            "saint-operator",
            "pod-a",
            at("2026-01-01T00:00:16Z"),
            Duration::from_secs(15),
        ) else {
            panic!("expected take-over");
        };
        assert_eq!(next.metadata.resource_version.as_deref(), Some("42"));
        let spec = next.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("pod-a"));
        assert_eq!(spec.lease_transitions, Some(3));
    }

    #[test]
    fn our_own_lease_is_renewed_keeping_acquire_time() {
        let lease = held_by("pod-a", "2026-01-01T00:00:00Z");
        let Decision::Replace(next) = decide(
            Some(&lease),
            "saint-operator",
            "pod-a",
            at("2026-01-01T00:00:05Z"),
            Duration::from_secs(15),
        ) else {
            panic!("expected renew");
        };
        let spec = next.spec.unwrap();
        assert_eq!(spec.renew_time, Some(MicroTime(at("2026-01-01T00:00:05Z"))));
        assert_eq!(
            spec.acquire_time,
            Some(MicroTime(at("2026-01-01T00:00:00Z")))
        );
        assert_eq!(spec.lease_transitions, Some(2));
    }
}
