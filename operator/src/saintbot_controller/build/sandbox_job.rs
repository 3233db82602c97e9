//! The sandbox Job template rendered into `BotConfig.sandbox.jobTemplate`: the agent
//! copies it, fills `metadata.name` and scope labels, and creates it. Every
//! security-relevant field is decided here. Pure: no client.

use k8s_openapi::api::batch::v1::Job;
use serde_json::json;

use super::typed;
use crate::{
    labels::{SANDBOX_LABEL, agent_selector, labels, workspace_claim_name},
    saintbot_controller::validate::ValidatedSaintBot,
};

/// Seconds a finished sandbox Job is kept (for debugging) before Kubernetes deletes it.
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 300;

/// The Job template: non-root, read-only root, all capabilities dropped, seccomp
/// RuntimeDefault, no service-account token, no Secrets, no network (NetworkPolicy
/// `<bot>-sandbox` selects its labels), pinned to the bot pod's node so it can mount the
/// ReadWriteOnce workspace and reach the Porter socket on it.
pub fn job_template(bot: &ValidatedSaintBot) -> Job {
    let mut sandbox_labels = labels(&bot.name, "sandbox");
    sandbox_labels.insert(SANDBOX_LABEL.to_string(), "true".to_string());
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "fsGroup": 65532,
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
                {"name": "agent-workspace", "mountPath": "/agent", "readOnly": true},
                {"name": "scratch", "mountPath": "/workspace"},
                {"name": "agent-workspace", "mountPath": "/run/saint", "subPath": ".saint/run"},
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
        "metadata": {"namespace": bot.namespace, "labels": sandbox_labels},
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
