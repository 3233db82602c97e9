//! What of each child kind must stay exactly as the operator built it, compared by value.
//! Field-manager records say who wrote what, but any writer may rewrite them (or write
//! under the operator's name), so a fence cannot rest on them alone: the cache keeps a
//! hash of each child's live content, and a child whose content differs from what was
//! built is restored whatever its managed fields claim. Only fields the API server never
//! defaults are compared, so an untouched child always matches. Pure.

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, PersistentVolumeClaim, Service, ServiceAccount},
    networking::v1::{Ingress, NetworkPolicy},
    rbac::v1::RoleBinding,
};
use kube::Resource;
use serde_json::{Value, json};

use crate::labels::DESIRED_HASH_ANNOTATION;
// The annotations live with the other labels (a leaf module), so this module and
// `freshness` do not import each other.
pub use crate::labels::{LIVE_CONTENT_ANNOTATION, LIVE_LABELS_ANNOTATION};

/// A child kind's compared content, and what else the cache keeps of it.
pub trait Content: Resource<DynamicType = ()> + Clone {
    /// Whether the operator looks children of this kind up by their labels (so the
    /// cache keeps them).
    const FOUND_BY_LABELS: bool = false;
    /// The fields compared by value; `Null` compares nothing.
    fn content(&self) -> Value;
    /// Whether the child's current generation has a ready pod (Deployments only).
    fn pod_ready(&self) -> bool {
        false
    }
    /// Why the child's pod cannot be created or rolled out (Deployments only).
    fn rollout_problem(&self) -> Option<super::rollout::Problem> {
        None
    }
}

/// The values of the label keys the operator sets on every child (absent ones as
/// `null`), in key order. Every kind is compared by them, the claim included: the
/// operator's watches, the admission policy and people find a bot's children by these
/// labels, so one removed or changed is drift. Labels others add are not compared.
pub fn operator_labels<K: Resource>(object: &K) -> Value {
    let labels = object.meta().labels.as_ref();
    let keys = crate::labels::labels("", "").into_keys();
    Value::Array(
        keys.map(|key| json!([key, labels.and_then(|labels| labels.get(&key))]))
            .collect(),
    )
}

/// SHA-256 of a child's [`operator_labels`].
pub fn labels_hash<K: Resource>(object: &K) -> String {
    let bytes = serde_json::to_vec(&operator_labels(object)).expect("JSON values serialise");
    super::sha256_hex(&bytes)
}

/// The annotations a person or tool could add to change behaviour (an ingress
/// controller's snippets, a workload identity), without the operator's own stamp.
fn annotations<K: Resource>(object: &K) -> Value {
    let mut annotations = object.meta().annotations.clone().unwrap_or_default();
    annotations.remove(DESIRED_HASH_ANNOTATION);
    annotations.remove(LIVE_CONTENT_ANNOTATION);
    json!(annotations)
}

/// SHA-256 of a child's compared content.
pub fn content_hash<K: Content>(object: &K) -> String {
    let bytes = serde_json::to_vec(&object.content()).expect("JSON values serialise");
    super::sha256_hex(&bytes)
}

impl Content for NetworkPolicy {
    fn content(&self) -> Value {
        json!(self.spec)
    }
}

impl Content for RoleBinding {
    fn content(&self) -> Value {
        json!({"roleRef": self.role_ref, "subjects": self.subjects})
    }
}

impl Content for ConfigMap {
    fn content(&self) -> Value {
        json!({"data": self.data, "binaryData": self.binary_data})
    }
}

impl Content for ServiceAccount {
    fn content(&self) -> Value {
        json!({
            "annotations": annotations(self),
            "automountServiceAccountToken": self.automount_service_account_token,
            "imagePullSecrets": self.image_pull_secrets,
        })
    }
}

impl Content for Service {
    /// Where traffic goes: the selector and the type (ports are defaulted by the server).
    fn content(&self) -> Value {
        let spec = self.spec.as_ref();
        json!({
            "selector": spec.and_then(|spec| spec.selector.clone()),
            "type": spec.and_then(|spec| spec.type_.clone()),
        })
    }
}

impl Content for Ingress {
    /// A webhook Ingress no longer wanted is found by its labels and deleted.
    const FOUND_BY_LABELS: bool = true;
    fn content(&self) -> Value {
        json!({"annotations": annotations(self), "spec": self.spec})
    }
}

impl Content for PersistentVolumeClaim {
    /// The volume controller binds a claim and its spec is mostly immutable: nothing
    /// is compared.
    fn content(&self) -> Value {
        Value::Null
    }
}

impl Content for Deployment {
    /// The pod's shape, in fields the server never defaults: which containers run
    /// which images, which volumes, as which account, in which namespaces of the host.
    /// A sidecar, a swapped image or an extra volume changes it.
    fn content(&self) -> Value {
        let spec = self.spec.as_ref();
        let pod = spec.and_then(|spec| spec.template.spec.as_ref());
        let containers = |list: Option<&Vec<k8s_openapi::api::core::v1::Container>>| {
            list.into_iter()
                .flatten()
                .map(|container| json!([container.name, container.image]))
                .collect::<Vec<_>>()
        };
        json!({
            "replicas": spec.and_then(|spec| spec.replicas),
            "containers": containers(pod.map(|pod| &pod.containers)),
            "initContainers": containers(pod.and_then(|pod| pod.init_containers.as_ref())),
            "volumes": pod
                .and_then(|pod| pod.volumes.as_ref())
                .into_iter()
                .flatten()
                .map(|volume| volume.name.clone())
                .collect::<Vec<_>>(),
            "serviceAccountName": pod.and_then(|pod| pod.service_account_name.clone()),
            "hostNetwork": pod.and_then(|pod| pod.host_network),
            "hostPID": pod.and_then(|pod| pod.host_pid),
            "hostIPC": pod.and_then(|pod| pod.host_ipc),
            "runtimeClassName": pod.and_then(|pod| pod.runtime_class_name.clone()),
        })
    }
    fn pod_ready(&self) -> bool {
        super::rollout::pod_ready(self)
    }
    fn rollout_problem(&self) -> Option<super::rollout::Problem> {
        super::rollout::rollout_problem(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(egress: Option<Value>) -> NetworkPolicy {
        let mut spec = json!({"podSelector": {"matchLabels": {"saint.work/sandbox": "true"}},
            "policyTypes": ["Ingress", "Egress"]});
        if let Some(egress) = egress {
            spec["egress"] = egress;
        }
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn an_added_rule_sidecar_subject_or_annotation_changes_the_content() {
        assert_eq!(content_hash(&policy(None)), content_hash(&policy(None)));
        assert_ne!(
            content_hash(&policy(None)),
            content_hash(&policy(Some(json!([{}]))))
        );

        let deployment = |containers: Value| -> Deployment {
            serde_json::from_value(json!({"spec": {"selector": {}, "template": {"spec": {
                "containers": containers}}}}))
            .unwrap()
        };
        let two = deployment(
            json!([{"name": "agent", "image": "a:1"}, {"name": "porter", "image": "p:1"}]),
        );
        let spy = deployment(
            json!([{"name": "agent", "image": "a:1"}, {"name": "porter", "image": "p:1"},
            {"name": "spy", "image": "s:1"}]),
        );
        let swapped = deployment(
            json!([{"name": "agent", "image": "evil:1"}, {"name": "porter", "image": "p:1"}]),
        );
        assert_ne!(content_hash(&two), content_hash(&spy));
        assert_ne!(content_hash(&two), content_hash(&swapped));

        let mut ingress: Ingress =
            serde_json::from_value(json!({"metadata": {"name": "i"}, "spec": {}})).unwrap();
        let before = content_hash(&ingress);
        // The operator's own stamps are not content.
        crate::cache::child_state::freshness::stamp(&mut ingress.metadata, "abc");
        assert_eq!(content_hash(&ingress), before);
        ingress.metadata.annotations.as_mut().unwrap().insert(
            "nginx.ingress.kubernetes.io/configuration-snippet".into(),
            "proxy_pass http://evil;".into(),
        );
        assert_ne!(content_hash(&ingress), before);
    }

    #[test]
    fn a_removed_or_changed_operator_label_changes_the_labels_hash_and_a_foreign_one_does_not() {
        let claim = |labels: Value| -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "c", "labels": labels}})).unwrap()
        };
        let built = json!(crate::labels::labels("my-bot", "workspace"));
        let before = labels_hash(&claim(built.clone()));
        let mut removed = built.clone();
        removed.as_object_mut().unwrap().remove("saint.work/bot");
        assert_ne!(labels_hash(&claim(removed)), before);
        let mut changed = built.clone();
        changed["saint.work/bot"] = json!("other-bot");
        assert_ne!(labels_hash(&claim(changed)), before);
        let mut added = built;
        added["team"] = json!("sales");
        assert_eq!(labels_hash(&claim(added)), before);
    }
}
