//! What the bot's grandchildren say when its pod is not ready: the Deployment's own
//! verdict (`ReplicaFailure`: its ReplicaSet cannot create the pod — a LimitRange, a
//! ResourceQuota, an admission policy; `Progressing=False`: the rollout passed its
//! deadline) and the pod's containers' waiting reasons (a missing Secret key, an image
//! that cannot be pulled, a crash loop). Each becomes the reason of the SaintBot's
//! `Ready` with the words of the controller or kubelet that found it, so a person reads
//! it where they look first. Pure but for [`agent_pods`], one label-selected list.

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{Api, Client, api::ListParams};

use crate::{labels::agent_selector, status::Reason};

/// A reason the bot pod does not run, and the message that explains it.
pub type Problem = (Reason, String);

/// The Deployment's own verdict on its rollout: `ReplicaFailure=True` (pods cannot be
/// created) before `Progressing=False` (the deadline passed), each quoted.
pub fn rollout_problem(deployment: &Deployment) -> Option<Problem> {
    let conditions = deployment.status.as_ref()?.conditions.as_ref()?;
    let quoted = |reason: &Option<String>, message: &Option<String>| {
        format!(
            "{}: {}",
            reason.as_deref().unwrap_or("(no reason)"),
            message.as_deref().unwrap_or_default()
        )
    };
    if let Some(failure) = conditions
        .iter()
        .find(|condition| condition.type_ == "ReplicaFailure" && condition.status == "True")
    {
        return Some((
            Reason::ReplicaFailure,
            format!(
                "the bot pod cannot be created: {}",
                quoted(&failure.reason, &failure.message)
            ),
        ));
    }
    conditions
        .iter()
        .find(|condition| {
            condition.type_ == "Progressing"
                && condition.status == "False"
                && condition.reason.as_deref() == Some("ProgressDeadlineExceeded")
        })
        .map(|stuck| {
            (
                Reason::ProgressDeadlineExceeded,
                format!(
                    "the bot's rollout made no progress: {}",
                    quoted(&stuck.reason, &stuck.message)
                ),
            )
        })
}

/// Whether the Deployment's current generation has a ready pod.
pub fn pod_ready(deployment: &Deployment) -> bool {
    let generation = deployment.metadata.generation;
    let Some(status) = &deployment.status else {
        return false;
    };
    let current = generation.is_none() || status.observed_generation >= generation;
    current && status.ready_replicas.unwrap_or(0) >= 1 && status.updated_replicas.unwrap_or(0) >= 1
}

/// The first container of `pods` waiting for a reason a person must fix, named with its
/// pod and the kubelet's message. Pods being deleted are left out (an old pod of a
/// rollout may crash while its replacement is fine).
pub fn pod_problem(pods: &[Pod]) -> Option<Problem> {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .find_map(|pod| {
            let status = pod.status.as_ref()?;
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            status
                .init_container_statuses
                .iter()
                .flatten()
                .chain(status.container_statuses.iter().flatten())
                .find_map(|container| {
                    let waiting = container.state.as_ref()?.waiting.as_ref()?;
                    let reason = match waiting.reason.as_deref()? {
                        "CreateContainerConfigError" => Reason::CreateContainerConfigError,
                        "ImagePullBackOff" => Reason::ImagePullBackOff,
                        "ErrImagePull" => Reason::ErrImagePull,
                        "CrashLoopBackOff" => Reason::CrashLoopBackOff,
                        _ => return None,
                    };
                    Some((
                        reason,
                        format!(
                            "container {} of pod {pod_name}: {}",
                            container.name,
                            waiting.message.as_deref().unwrap_or(reason.as_str())
                        ),
                    ))
                })
        })
}

/// Whether a kubelet reports on any of `pods` (a container status exists): its
/// containers start, wait or crash, and the next look may read a new reason. A pod no
/// node runs yet (unscheduled) has nothing to say.
pub fn reported_by_a_kubelet(pods: &[Pod]) -> bool {
    pods.iter().any(|pod| {
        pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|status| status.container_statuses.as_ref())
                .is_some_and(|statuses| !statuses.is_empty())
    })
}

/// The bot's agent pods (selected by the Deployment's own selector labels).
pub async fn agent_pods(client: &Client, namespace: &str, bot: &str) -> kube::Result<Vec<Pod>> {
    let selector: Vec<String> = agent_selector(bot)
        .into_iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&selector.join(",")))
        .await?;
    Ok(pods.items)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(conditions: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({"spec": {"selector": {}, "template": {}},
            "status": {"conditions": conditions}}))
        .unwrap()
    }

    #[test]
    fn a_replica_failure_comes_before_a_missed_deadline_and_progress_is_no_problem() {
        let refused = json!({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": "pods \"my-bot-1\" is forbidden: maximum memory usage per Container is 1Mi"});
        let stuck = json!({"type": "Progressing", "status": "False",
            "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"my-bot-1\" has timed out progressing."});
        let progressing =
            json!({"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"});
        let (reason, message) = rollout_problem(&deployment(json!([stuck, refused]))).unwrap();
        assert_eq!(reason, Reason::ReplicaFailure);
        assert_eq!(
            message,
            "the bot pod cannot be created: FailedCreate: pods \"my-bot-1\" is forbidden: \
             maximum memory usage per Container is 1Mi"
        );
        let (reason, message) = rollout_problem(&deployment(json!([stuck]))).unwrap();
        assert_eq!(reason, Reason::ProgressDeadlineExceeded);
        assert!(message.contains("has timed out progressing"), "{message}");
        assert_eq!(rollout_problem(&deployment(json!([progressing]))), None);
    }

    #[test]
    fn a_waiting_container_a_person_must_fix_is_named_with_its_pod() {
        let pod = |name: &str, waiting: serde_json::Value, deleted: bool| -> Pod {
            let mut metadata = json!({"name": name});
            if deleted {
                metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(json!({"metadata": metadata, "status": {"containerStatuses": [
                {"name": "porter", "image": "p", "imageID": "", "ready": true, "restartCount": 0,
                    "state": {"running": {}}},
                {"name": "agent", "image": "a", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"waiting": waiting}},
            ]}}))
            .unwrap()
        };
        let starting = pod("my-bot-a", json!({"reason": "ContainerCreating"}), false);
        let old_crashing = pod("my-bot-old", json!({"reason": "CrashLoopBackOff"}), true);
        assert_eq!(pod_problem(&[starting.clone(), old_crashing]), None);
        let missing_key = pod(
            "my-bot-b",
            json!({"reason": "CreateContainerConfigError",
                "message": "couldn't find key api-key in Secret acme/llm"}),
            false,
        );
        assert_eq!(
            pod_problem(&[starting, missing_key.clone()]),
            Some((
                Reason::CreateContainerConfigError,
                "container agent of pod my-bot-b: couldn't find key api-key in Secret acme/llm"
                    .to_string()
            ))
        );
        assert!(reported_by_a_kubelet(std::slice::from_ref(&missing_key)));
        let unscheduled: Pod = serde_json::from_value(json!({"metadata": {"name": "my-bot-d"},
            "status": {"phase": "Pending"}}))
        .unwrap();
        assert!(!reported_by_a_kubelet(&[unscheduled]));
        let pull = pod("my-bot-c", json!({"reason": "ImagePullBackOff"}), false);
        assert_eq!(
            pod_problem(&[pull]),
            Some((
                Reason::ImagePullBackOff,
                "container agent of pod my-bot-c: ImagePullBackOff".to_string()
            ))
        );
    }
}
