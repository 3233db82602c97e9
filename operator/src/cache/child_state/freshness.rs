//! Whether a child as the operator last saw it (its cached metadata) still is what the
//! bot wants. Every child the operator writes carries the hash of the object it was built
//! as; a child whose hash matches and that nobody else has written to needs no request
//! at all, which is what keeps a resync of a large fleet cheap. A child some other field
//! manager has changed (`kubectl edit`, a sidecar injector, a hand-added NetworkPolicy
//! rule) has drifted: server-side apply alone would keep the foreign fields (it removes
//! only fields the applier itself set before), so such a child is restored whole. A
//! label the operator sets that was removed or changed (`kubectl label … saint.work/bot-`)
//! leaves no foreign owner of content behind; the cache compares those labels by value,
//! and an apply puts them back. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde::Serialize;
use serde_json::Value;

pub use crate::labels::DESIRED_HASH_ANNOTATION;
use crate::labels::{FIELD_MANAGER, LIVE_CONTENT_ANNOTATION, LIVE_LABELS_ANNOTATION};

/// A field another manager may own on a Deployment without it counting as drift:
/// `kubectl rollout restart` stamps it to restart the pods, and reverting it would
/// undo the restart a person asked for.
const ROLLOUT_RESTART_FIELD: [&str; 5] = [
    "f:spec",
    "f:template",
    "f:metadata",
    "f:annotations",
    "f:kubectl.kubernetes.io/restartedAt",
];

/// What to do with one child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Not in the cache: create it.
    Missing,
    /// Built differently than what is stored (or by an older operator): apply it.
    Stale,
    /// Someone else wrote to its content: restore it whole. The managers who did.
    Drifted { managers: Vec<String> },
    /// A label the operator sets was removed or changed: apply it (server-side apply
    /// puts the label back and takes back a changed one).
    Relabel,
    /// Exactly what the bot wants: no request.
    Current,
}

/// The hash stamped on a child: SHA-256 of its JSON as built (builders are pure and
/// their maps ordered, so the same inputs always hash the same).
pub fn desired_hash<K: Serialize>(object: &K) -> String {
    let bytes = serde_json::to_vec(object).expect("Kubernetes objects serialise");
    super::sha256_hex(&bytes)
}

/// Stamps `hash` on `meta`'s annotations.
pub fn stamp(meta: &mut ObjectMeta, hash: &str) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(DESIRED_HASH_ANNOTATION.to_string(), hash.to_string());
}

/// Who a change is put down to when the content differs but no field manager owns it
/// (someone rewrote the managed fields as well).
pub const UNATTRIBUTED: &str = "(unattributed: managed fields rewritten)";

/// Judges a child. `hash`: of the child as built; `content`: the hash of its compared
/// content as built, `labels` of its operator labels ([`super::content`]). `repairable`:
/// whether foreign writes count as drift for its kind (a PersistentVolumeClaim is bound
/// by the volume controller, which owns `spec.volumeName`; that is not drift). Labels
/// are compared for every kind.
pub fn freshness(
    cached: Option<&ObjectMeta>,
    hash: &str,
    content: &str,
    labels: &str,
    repairable: bool,
) -> Freshness {
    let Some(meta) = cached else {
        return Freshness::Missing;
    };
    let managers = if repairable {
        foreign_writers(meta)
    } else {
        Vec::new()
    };
    if !managers.is_empty() {
        return Freshness::Drifted { managers };
    }
    let stamped = meta
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(DESIRED_HASH_ANNOTATION));
    if stamped.map(String::as_str) != Some(hash) {
        return Freshness::Stale;
    }
    let annotation = |key: &str| {
        meta.annotations
            .as_ref()
            .and_then(|annotations| annotations.get(key))
            .map(String::as_str)
    };
    if annotation(LIVE_LABELS_ANNOTATION) != Some(labels) {
        return Freshness::Relabel;
    }
    let live = annotation(LIVE_CONTENT_ANNOTATION);
    if repairable && live != Some(content) {
        return Freshness::Drifted {
            managers: vec![UNATTRIBUTED.to_string()],
        };
    }
    Freshness::Current
}

/// Field managers other than the operator that own content of the object (anything but
/// metadata and status), through the main resource or a subresource other than status.
pub fn foreign_writers(meta: &ObjectMeta) -> Vec<String> {
    let mut managers: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| writes_content(entry))
        .map(|entry| entry.manager.clone().unwrap_or_else(|| "(unnamed)".into()))
        .collect();
    managers.sort();
    managers.dedup();
    managers
}

/// The field manager the API server files every field under when an object without
/// managed fields is first applied to.
pub const PLACEHOLDER_MANAGER: &str = "before-first-apply";

/// The managed fields to keep after a repair: every entry but the placeholder's. A
/// repair strips every owner (so no foreign field survives), and the API server then
/// files all fields the operator did not just apply under [`PLACEHOLDER_MANAGER`];
/// dropping that entry leaves the operator sole owner, so a field it later stops
/// applying is removed rather than kept alive by the placeholder. A foreign writer that
/// slipped in meanwhile keeps its entry, and so stays visible as drift.
pub fn without_placeholder(entries: &[ManagedFieldsEntry]) -> Vec<ManagedFieldsEntry> {
    entries
        .iter()
        .filter(|entry| entry.manager.as_deref() != Some(PLACEHOLDER_MANAGER))
        .cloned()
        .collect()
}

fn writes_content(entry: &ManagedFieldsEntry) -> bool {
    // Only the operator's server-side applies are its own: anyone may write under its
    // name with another operation (`kubectl edit --field-manager=saint-operator`).
    if entry.manager.as_deref() == Some(FIELD_MANAGER)
        && entry.operation.as_deref() == Some("Apply")
    {
        return false;
    }
    if entry.subresource.as_deref() == Some("status") {
        return false;
    }
    let Some(FieldsV1(fields)) = &entry.fields_v1 else {
        return false;
    };
    let mut leaves = Vec::new();
    leaf_paths(fields, &mut Vec::new(), &mut leaves);
    leaves.iter().any(|path| {
        let top = path.first().map(String::as_str);
        !matches!(top, Some("f:metadata" | "f:status") | None)
            && path.as_slice() != ROLLOUT_RESTART_FIELD
    })
}

/// Every owned path in a `fieldsV1` set. A `"."` key stands for its parent itself.
fn leaf_paths(fields: &Value, prefix: &mut Vec<String>, leaves: &mut Vec<Vec<String>>) {
    match fields.as_object() {
        Some(children) if !children.is_empty() => {
            for (key, child) in children {
                if key == "." {
                    leaves.push(prefix.clone());
                    continue;
                }
                prefix.push(key.clone());
                leaf_paths(child, prefix, leaves);
                prefix.pop();
            }
        }
        _ => leaves.push(prefix.clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An entry as the API server records it: the operator applies, others update.
    fn entry(manager: &str, subresource: Option<&str>, fields: Value) -> ManagedFieldsEntry {
        let operation = if manager == FIELD_MANAGER {
            "Apply"
        } else {
            "Update"
        };
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(Into::into),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    fn meta(hash: Option<&str>, entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        let mut meta = ObjectMeta {
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        };
        if let Some(hash) = hash {
            stamp(&mut meta, hash);
        }
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.insert(LIVE_CONTENT_ANNOTATION.into(), "built".into());
        annotations.insert(LIVE_LABELS_ANNOTATION.into(), "labelled".into());
        meta
    }

    #[test]
    fn a_child_with_the_same_hash_and_only_the_operators_fields_is_current() {
        let own = entry(FIELD_MANAGER, None, json!({"f:spec": {"f:egress": {}}}));
        let status = entry(
            "kube-controller-manager",
            Some("status"),
            json!({"f:status": {"f:replicas": {}}}),
        );
        let revision = entry(
            "kube-controller-manager",
            None,
            json!({"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}}),
        );
        let cached = meta(Some("abc"), vec![own, status, revision]);
        assert_eq!(
            freshness(Some(&cached), "abc", "built", "labelled", true),
            Freshness::Current
        );
        assert_eq!(
            freshness(Some(&cached), "def", "built", "labelled", true),
            Freshness::Stale
        );
        assert_eq!(
            freshness(None, "abc", "built", "labelled", true),
            Freshness::Missing
        );
        assert_eq!(
            freshness(Some(&meta(None, vec![])), "abc", "built", "labelled", true),
            Freshness::Stale
        );
    }

    #[test]
    fn a_hand_added_egress_rule_or_sidecar_is_drift_whatever_the_hash() {
        let edit = entry(
            "kubectl-edit",
            None,
            json!({"f:spec": {"f:egress": {}, "f:policyTypes": {}}}),
        );
        let cached = meta(Some("abc"), vec![edit]);
        assert_eq!(
            freshness(Some(&cached), "abc", "built", "labelled", true),
            Freshness::Drifted {
                managers: vec!["kubectl-edit".into()]
            }
        );
        let sidecar = entry(
            "injector",
            None,
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"spy\"}": {".": {}, "f:image": {}}}}}}}),
        );
        assert_eq!(
            foreign_writers(&meta(None, vec![sidecar])),
            vec!["injector".to_string()]
        );
        // `kubectl scale` writes spec.replicas through the scale subresource.
        let scale = entry(
            "kubectl",
            Some("scale"),
            json!({"f:spec": {"f:replicas": {}}}),
        );
        assert_eq!(
            foreign_writers(&meta(None, vec![scale])),
            vec!["kubectl".to_string()]
        );
        // A ConfigMap's data or a RoleBinding's subjects are content too.
        let data = entry("kubectl-patch", None, json!({"f:data": {"f:x": {}}}));
        let subjects = entry("kubectl-patch", None, json!({"f:subjects": {}}));
        assert_eq!(foreign_writers(&meta(None, vec![data, subjects])).len(), 1);
    }

    #[test]
    fn a_rollout_restart_or_a_bound_claim_is_not_drift() {
        let restart = entry(
            "kubectl-rollout",
            None,
            json!({"f:spec": {"f:template": {"f:metadata": {"f:annotations": {
                "f:kubectl.kubernetes.io/restartedAt": {}}}}}}),
        );
        assert!(foreign_writers(&meta(None, vec![restart])).is_empty());
        // The same manager also touching another template field is drift.
        let restart_and_more = entry(
            "kubectl-rollout",
            None,
            json!({"f:spec": {"f:template": {"f:metadata": {"f:annotations": {
                "f:kubectl.kubernetes.io/restartedAt": {}, "f:other": {}}}}}}),
        );
        assert_eq!(
            foreign_writers(&meta(None, vec![restart_and_more])).len(),
            1
        );
        let bound = entry(
            "kube-controller-manager",
            None,
            json!({"f:spec": {"f:volumeName": {}}}),
        );
        let claim = meta(Some("abc"), vec![bound]);
        assert_eq!(
            freshness(Some(&claim), "abc", "built", "labelled", false),
            Freshness::Current
        );
    }

    #[test]
    fn a_removed_label_is_put_back_on_every_kind_the_claim_included() {
        let mut cached = meta(Some("abc"), vec![]);
        cached
            .annotations
            .as_mut()
            .unwrap()
            .insert(LIVE_LABELS_ANNOTATION.into(), "unlabelled".into());
        for repairable in [true, false] {
            assert_eq!(
                freshness(Some(&cached), "abc", "built", "labelled", repairable),
                Freshness::Relabel
            );
        }
    }

    #[test]
    fn the_hash_changes_with_the_object() {
        let a = json!({"kind": "ConfigMap", "data": {"a": "1"}});
        let b = json!({"kind": "ConfigMap", "data": {"a": "2"}});
        assert_eq!(desired_hash(&a), desired_hash(&a.clone()));
        assert_ne!(desired_hash(&a), desired_hash(&b));
    }

    #[test]
    fn a_change_whose_managed_fields_were_rewritten_is_drift_by_its_content() {
        // Written under the operator's name with another operation: foreign all the same.
        let disguised = ManagedFieldsEntry {
            manager: Some(FIELD_MANAGER.into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:egress": {}}}))),
            ..ManagedFieldsEntry::default()
        };
        assert_eq!(
            foreign_writers(&meta(None, vec![disguised])),
            vec![FIELD_MANAGER.to_string()]
        );
        // Managed fields stripped with the change: nobody owns it, the content tells.
        let stripped = meta(Some("abc"), vec![]);
        assert_eq!(
            freshness(Some(&stripped), "abc", "other", "labelled", true),
            Freshness::Drifted {
                managers: vec![UNATTRIBUTED.to_string()]
            }
        );
        // A claim's content is not compared.
        assert_eq!(
            freshness(Some(&stripped), "abc", "other", "labelled", false),
            Freshness::Current
        );
    }
}
