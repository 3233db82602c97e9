//! The sandbox Job template rendered into `BotConfig.sandbox.jobTemplate`: the agent
//! copies it, fills `metadata.name` and scope labels, and creates it. Every
//! security-relevant field is decided here. Pure: no client.

use k8s_openapi::api::batch::v1::Job;
use saint_config::{
    sandbox_contract::{
        PORTER_RUN_SUBPATH, SANDBOX_BROWSER_MOUNT_PATH, SANDBOX_BROWSER_SUBPATH_PLACEHOLDER,
        SANDBOX_PORTER_MOUNT_PATH, SANDBOX_RUN_MOUNT_PATH, SANDBOX_RUN_SUBPATH_PLACEHOLDER,
        SANDBOX_SCRATCH_MOUNT_PATH, SANDBOX_VIEW_MOUNT_PATH, SANDBOX_VIEW_SUBPATH_PLACEHOLDER,
    },
    uids::{SANDBOX_UID, SHARED_GID},
};
use serde_json::json;

use super::typed;
use crate::{
    labels::{agent_selector, sandbox_labels, workspace_claim_name},
    saintbot_controller::validate::ValidatedSaintBot,
};

/// Seconds a finished sandbox Job is kept (for debugging) before Kubernetes deletes it.
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 300;

/// The Job template: non-root as the sandbox uid, read-only root, all capabilities
/// dropped, seccomp RuntimeDefault, no service-account token, no Secrets, no network
/// (NetworkPolicy `<bot>-sandbox` selects its labels), pinned to the bot pod's node so
/// it can mount the ReadWriteOnce workspace and reach the Porter socket on it.
///
/// The workspace is never mounted whole: `/agent` is a placeholder the agent replaces
/// with the caller's view (one read-only `subPath` mount per permitted subtree or
/// file), so a command sees no runtime state and nothing the caller's role may not
/// read. The workspace volume is mounted read-only everywhere except the sandbox's own
/// runner directory: Porter's socket directory is read-only (a command must not
/// replace Porter's socket with its own listener and collect tokens and commands),
/// and `/run/saint/sandbox` gets `.saint/run/sandboxes/<job>` — the agent fills the
/// placeholder — so no sandbox can touch another one's socket.
///
/// Carries the SaintBot as controller owner so sandbox Jobs are garbage-collected
/// with the bot; `blockOwnerDeletion` is false because setting it true needs update
/// rights on `saintbots/finalizers`, which the agent's account does not have.
pub fn job_template(bot: &ValidatedSaintBot) -> Job {
    let sandbox_labels = sandbox_labels(&bot.name);
    let mut owner = bot.owner_reference.clone();
    owner.block_owner_deletion = Some(false);
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        // The sandbox uid, which Porter's proxy socket admits and its control socket
        // refuses; the group shared with the bot pod, so the agent can open the
        // runner's socket (mode 0660) and the sandbox Porter's.
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": SANDBOX_UID,
            "runAsGroup": SHARED_GID,
            "fsGroup": SHARED_GID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "supplementalGroups": [SHARED_GID],
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": agent_selector(&bot.name)},
            "topologyKey": "kubernetes.io/hostname",
        }]}},
        "containers": [{
            "name": "sandbox",
            "image": bot.sandbox.image,
            "imagePullPolicy": "IfNotPresent",
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "runAsNonRoot": true,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resources": serde_json::to_value(&bot.sandbox.resources).expect("resources serialise"),
            "volumeMounts": [
                {"name": "agent-workspace", "mountPath": SANDBOX_VIEW_MOUNT_PATH, "subPath": SANDBOX_VIEW_SUBPATH_PLACEHOLDER, "readOnly": true},
                {"name": "scratch", "mountPath": SANDBOX_SCRATCH_MOUNT_PATH},
                {"name": "agent-workspace", "mountPath": SANDBOX_PORTER_MOUNT_PATH, "subPath": PORTER_RUN_SUBPATH, "readOnly": true},
                {"name": "agent-workspace", "mountPath": SANDBOX_RUN_MOUNT_PATH, "subPath": SANDBOX_RUN_SUBPATH_PLACEHOLDER},
                {"name": "agent-workspace", "mountPath": SANDBOX_BROWSER_MOUNT_PATH, "subPath": SANDBOX_BROWSER_SUBPATH_PLACEHOLDER, "readOnly": true},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }],
        "volumes": [
            {"name": "agent-workspace", "persistentVolumeClaim": {"claimName": workspace_claim_name(&bot.name)}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
    });
    if let Some(runtime_class_name) = &bot.sandbox.runtime_class_name {
        pod_spec["runtimeClassName"] = json!(runtime_class_name);
    }
    typed(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "namespace": bot.namespace,
            "labels": sandbox_labels,
            "ownerReferences": [serde_json::to_value(&owner).expect("owner reference serialises")],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": bot.sandbox.max_lifetime_seconds,
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "template": {
                "metadata": {"labels": sandbox_labels},
                "spec": pod_spec,
            },
        },
    }))
}
