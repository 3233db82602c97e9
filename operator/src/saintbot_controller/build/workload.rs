//! The bot Deployment `<bot>`: one replica (zero when suspended), Recreate, containers
//! `agent` and `porter`. Decides which container gets which credential. Pure: no client.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use saint_config::{
    PERSONA_MOUNT_PATH, SKILLS_MOUNT_PATH,
    sandbox_contract::{
        PORTER_CA_PATH, PORTER_CONTROL_MOUNT_PATH, PORTER_CONTROL_SOCKET_PATH, PORTER_RUN_SUBPATH,
        PORTER_SOCKET_PATH, SANDBOX_PORTER_MOUNT_PATH,
    },
    uids::{AGENT_UID, PORTER_UID, SANDBOX_UID, SHARED_GID},
};
use serde_json::{Value, json};

use super::{child_metadata, sha256_hex, typed};
use crate::{
    labels::{
        RESTART_HASH_ANNOTATION, agent_account_name, agent_selector, config_map_name, labels,
        persona_config_map_name, workspace_claim_name,
    },
    saintbot_controller::validate::{
        MODEL_API_KEY_ENV, PORTER_SECRETS_DIR, ValidatedSaintBot, WEB_SEARCH_API_KEY_ENV,
    },
};

const WORKSPACE: &str = "/var/lib/saint/workspace";
/// The workspace's `logs` directory (the agent's and Porter's logs).
const LOGS_SUBPATH: &str = "logs";
/// Porter's audit log, in [`LOGS_SUBPATH`] (the same path in the agent and Porter).
const PORTER_AUDIT_LOG: &str = "/var/lib/saint/workspace/logs/porter.jsonl";
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The agent's HTTP channel (and webhooks), on the pod address, when the HTTP channel's
/// `settings.port` names no other.
pub(crate) const AGENT_HTTP_PORT: u16 = 8080;

/// The agent's HTTP port: the HTTP channel's `settings.port` (validated), else
/// [`AGENT_HTTP_PORT`]. The pod's address, container port, Service and NetworkPolicy
/// all use it, and the agent reads the same setting.
pub(crate) fn agent_http_port(bot: &ValidatedSaintBot) -> u16 {
    bot.config
        .channels
        .iter()
        .filter(|channel| channel.kind == saint_config::ChannelKind::Http)
        .find_map(|channel| channel.settings.get("port")?.trim().parse().ok())
        .unwrap_or(AGENT_HTTP_PORT)
}
/// The agent's metrics listener, on the pod address.
pub(crate) const AGENT_METRICS_PORT: u16 = 9090;
/// Porter's `/healthz` and `/metrics` listener.
pub(crate) const PORTER_METRICS_PORT: u16 = 9091;

/// An HTTP probe on a named container port.
fn http_probe(path: &str, port: &str, period_seconds: i32, failure_threshold: i32) -> Value {
    json!({
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period_seconds,
        "failureThreshold": failure_threshold,
        "timeoutSeconds": 2,
    })
}

/// Hash of the inputs that need a new pod: images, model, channels, the Porter registry
/// and every credential reference. Contacts and Roles are deliberately absent: they only
/// change the ConfigMap, which the agent reloads in place.
pub fn restart_hash(bot: &ValidatedSaintBot) -> String {
    let mut inputs = json!({
        "agentImage": bot.agent_image,
        "porterImage": bot.porter_image,
        "model": bot.config.model,
        "channels": bot.config.channels,
        "porterRegistry": bot.registry,
        "modelApiKey": bot.model_api_key,
        "channelSecrets": bot.channel_secrets,
        "webSearchApiKey": bot.web_search_api_key,
        "porterSecretFiles": bot.porter_secret_files.iter().map(|file| json!([file.relative_path, file.secret])).collect::<Vec<_>>(),
    });
    // Only when present, so bots without speech keep their hash (and pods).
    if bot.speech_api_key.is_some() {
        inputs["speechApiKey"] = json!(bot.speech_api_key);
    }
    // Only when present, so bots without a failover chain keep their hash (and pods).
    if !bot.model_api_keys.is_empty() {
        inputs["modelApiKeys"] = json!(bot.model_api_keys);
    }
    // An environment variable from a Secret is read when the pod starts; bots without
    // transcription keep their hash.
    if let Some(secret) = &bot.transcription_api_key {
        inputs["transcriptionApiKey"] = json!(secret);
    }
    // Likewise: the agent reads `telemetry` only when it starts, so a change needs a new
    // pod; bots without it keep their hash.
    if bot.config.telemetry.otlp.is_some() {
        inputs["telemetry"] = json!(bot.config.telemetry);
        inputs["telemetrySecrets"] = json!(bot.telemetry_secrets);
    }
    sha256_hex(
        serde_json::to_string(&inputs)
            .expect("inputs serialise")
            .as_bytes(),
    )
}

fn secret_env(name: &str, secret: &crate::crd::SecretKeyReference) -> Value {
    json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}})
}

/// Restricted, as `uid`: each container of the pod has its own uid (Porter tells its
/// callers apart by it) and all share the pod's group.
fn container_security_context(uid: u32) -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "runAsUser": uid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// The `agent` container: LLM, channel, web-search, transcription and OTLP header
/// credentials, the API token.
fn agent_container(bot: &ValidatedSaintBot) -> Value {
    let mut env = vec![
        json!({"name": "SAINT_CONFIG", "value": "/etc/saint/bot-config.json"}),
        json!({"name": "SAINT_WORKSPACE", "value": WORKSPACE}),
        // The agent listens on loopback unless told otherwise; in the pod the Service
        // and the kubelet's probes reach it on the pod address.
        json!({"name": "SAINT_LISTEN", "value": format!("0.0.0.0:{}", agent_http_port(bot))}),
        json!({"name": "SAINT_METRICS_LISTEN", "value": format!("0.0.0.0:{AGENT_METRICS_PORT}")}),
        // Events about the bot's channels (a token the platform refuses) go on the
        // SaintBot itself, which `kubectl describe` finds by uid.
        json!({"name": saint_config::BOT_UID_ENV, "value": bot.owner_reference.uid}),
    ];
    // The agent answers only the names it serves: its Service's, and the webhook
    // Ingress's public host, through which platforms call the webhook paths.
    if let Some(webhooks) = &bot.webhook_ingress {
        env.push(json!({"name": "SAINT_PUBLIC_HOSTS", "value": webhooks.host}));
    }
    if let Some(secret) = &bot.model_api_key {
        env.push(secret_env(MODEL_API_KEY_ENV, secret));
    }
    for (name, secret) in &bot.model_api_keys {
        env.push(secret_env(name, secret));
    }
    for (name, secret) in &bot.channel_secrets {
        env.push(secret_env(name, secret));
    }
    if let Some(secret) = &bot.web_search_api_key {
        env.push(secret_env(WEB_SEARCH_API_KEY_ENV, secret));
    }
    if let Some(secret) = &bot.transcription_api_key {
        env.push(secret_env(saint_config::TRANSCRIPTION_API_KEY_ENV, secret));
    }
    if let Some(secret) = &bot.speech_api_key {
        env.push(secret_env(saint_config::media::SPEECH_API_KEY_ENV, secret));
    }
    // The OTLP collector's header values (`telemetry.otlp.headersEnv` names them).
    for (name, secret) in &bot.telemetry_secrets {
        env.push(secret_env(name, secret));
    }
    let mut mounts = vec![
        json!({"name": "config", "mountPath": "/etc/saint", "readOnly": true}),
        // A whole-volume mount (not `items` with subPath): the kubelet updates it in
        // place, so a persona change reaches the next prompt without a restart. The
        // agent reads its `..data` layout (saint-agent's persona module).
        json!({"name": "persona", "mountPath": PERSONA_MOUNT_PATH, "readOnly": true}),
    ];
    if !bot.skills.is_empty() {
        // Whole-volume too, for the same reason: an edited SKILL.md is read fresh.
        mounts.push(json!({"name": "skills", "mountPath": SKILLS_MOUNT_PATH, "readOnly": true}));
    }
    mounts.extend([
        json!({"name": "workspace", "mountPath": WORKSPACE}),
        json!({"name": "workspace", "mountPath": "/run/saint", "subPath": ".saint/run"}),
        json!({"name": "porter-control", "mountPath": PORTER_CONTROL_MOUNT_PATH}),
        json!({"name": "tmp", "mountPath": "/tmp"}),
        json!({"name": "kube-api-access", "mountPath": TOKEN_PATH, "readOnly": true}),
    ]);
    json!({
        "name": "agent",
        "image": bot.agent_image,
        "imagePullPolicy": "IfNotPresent",
        // The image's entrypoint is `saint-agent`, whose subcommand picks what it does; the
        // pod runs the bot, whatever default a custom image sets.
        "args": ["run"],
        "env": env,
        "ports": [
            {"name": "http", "containerPort": agent_http_port(bot), "protocol": "TCP"},
            {"name": "metrics", "containerPort": AGENT_METRICS_PORT, "protocol": "TCP"},
        ],
        // Up to a minute to start (config, memory database), then `/healthz` must keep
        // answering; `/readyz` turns false while draining on SIGTERM.
        "startupProbe": http_probe("/healthz", "http", 2, 30),
        "livenessProbe": http_probe("/healthz", "http", 10, 3),
        "readinessProbe": http_probe("/readyz", "http", 5, 2),
        "resources": serde_json::to_value(&bot.agent_resources).expect("resources serialise"),
        "securityContext": container_security_context(AGENT_UID),
        "volumeMounts": mounts,
    })
}

/// The `porter` container: CLI credentials only (mounted files), no API token, and of
/// the workspace only its socket directory and the logs. Porter runs no CLI: it serves
/// the HTTPS proxy the sandboxes' commands go through and puts each credential on the
/// wire for its entry's hosts.
fn porter_container(bot: &ValidatedSaintBot) -> Value {
    let mut container = json!({
        "name": "porter",
        "image": bot.porter_image,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {"name": "PORTER_REGISTRY", "value": "/etc/saint/porter-registry.json"},
            {"name": "PORTER_PROXY_SOCKET", "value": PORTER_SOCKET_PATH},
            // Porter makes its CA at start-up and writes the certificate next to the
            // socket, where the sandboxes' commands read it to trust the proxy.
            {"name": "PORTER_CA_CERTIFICATE", "value": PORTER_CA_PATH},
            {"name": "PORTER_CONTROL_SOCKET", "value": PORTER_CONTROL_SOCKET_PATH},
            {"name": "PORTER_AUDIT_LOG", "value": PORTER_AUDIT_LOG},
            // Only the agent registers tokens: a sandbox that could would grant itself
            // any role's requests.
            {"name": "PORTER_CONTROL_UIDS", "value": AGENT_UID.to_string()},
            {"name": "PORTER_METRICS_LISTEN", "value": format!("0.0.0.0:{PORTER_METRICS_PORT}")},
        ],
        "ports": [
            {"name": "porter-metrics", "containerPort": PORTER_METRICS_PORT, "protocol": "TCP"},
        ],
        // Porter serves `/healthz` only after its proxy socket is bound.
        "startupProbe": http_probe("/healthz", "porter-metrics", 1, 30),
        "livenessProbe": http_probe("/healthz", "porter-metrics", 10, 3),
        "readinessProbe": http_probe("/healthz", "porter-metrics", 5, 2),
        "resources": serde_json::to_value(&bot.porter_resources).expect("resources serialise"),
        "securityContext": container_security_context(PORTER_UID),
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/saint", "readOnly": true},
            // The socket directory where the sandboxes mount it (read-only there).
            {"name": "workspace", "mountPath": SANDBOX_PORTER_MOUNT_PATH, "subPath": PORTER_RUN_SUBPATH},
            // The audit log only: nothing of the workspace a command or tool writes.
            {"name": "workspace", "mountPath": format!("{WORKSPACE}/{LOGS_SUBPATH}"), "subPath": LOGS_SUBPATH},
            {"name": "porter-control", "mountPath": PORTER_CONTROL_MOUNT_PATH},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    });
    // Only the sandbox uid may use Porter's proxy, and the agent's only when it calls
    // an HTTP MCP server: it reaches one solely through the proxy, with a key bound to
    // the caller like a sandbox command's (it registers keys on the control socket).
    // Under a sandbox runtime class (gVisor, Kata) the peer a unix socket reports is the
    // runtime's own process, not the sandbox user, so there the token alone decides.
    if bot.sandbox.runtime_class_name.is_none() {
        let mut uids = vec![SANDBOX_UID.to_string()];
        if bot
            .config
            .mcp
            .servers
            .iter()
            .any(|server| matches!(server.transport, saint_config::McpTransport::Http { .. }))
        {
            uids.push(AGENT_UID.to_string());
        }
        container["env"]
            .as_array_mut()
            .expect("env is a list")
            .push(json!({"name": "PORTER_ALLOWED_UIDS", "value": uids.join(",")}));
    }
    if !bot.porter_secret_files.is_empty() {
        container["volumeMounts"]
            .as_array_mut()
            .expect("mounts are a list")
            .push(json!({"name": "porter-secrets", "mountPath": PORTER_SECRETS_DIR, "readOnly": true}));
    }
    container
}

/// Creates the socket and log directories on the workspace before `agent` mounts
/// `.saint/run` as `/run/saint` and `porter` mounts `.saint/run/porter` and `logs`: a
/// missing subPath would be created by the kubelet as root, and the non-root containers
/// could not create their sockets and logs in it. The directories (and Porter's audit
/// log, if an older pod left one) are made writable for the shared group: Porter runs as
/// its own uid, not as the agent's that creates them.
/// Uses the sandbox image (it has a shell; the agent and porter images need not).
fn prepare_workspace_container(bot: &ValidatedSaintBot) -> Value {
    json!({
        "name": "prepare-workspace",
        "image": bot.sandbox.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "/bin/sh", "-c",
            // Only what this uid owns can be chmodded: an audit log Porter itself
            // created (as its own uid, already group-writable) is left alone.
            r#"set -eu; mkdir -p "$1" "$2" "$3"; for path in "$@"; do if [ -O "$path" ]; then if [ -d "$path" ]; then chmod 0770 "$path"; else chmod 0660 "$path"; fi; fi; done"#,
            "prepare-workspace",
            format!("{WORKSPACE}/{PORTER_RUN_SUBPATH}"),
            format!("{WORKSPACE}/.saint/run/sandboxes"),
            format!("{WORKSPACE}/{LOGS_SUBPATH}"),
            PORTER_AUDIT_LOG,
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "securityContext": container_security_context(AGENT_UID),
        "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE}],
    })
}

fn volumes(bot: &ValidatedSaintBot) -> Vec<Value> {
    let mut volumes = vec![
        json!({"name": "config", "configMap": {"name": config_map_name(&bot.name)}}),
        json!({"name": "persona", "configMap": {"name": persona_config_map_name(&bot.name)}}),
        json!({"name": "workspace", "persistentVolumeClaim": {"claimName": workspace_claim_name(&bot.name)}}),
        json!({"name": "porter-control", "emptyDir": {}}),
        json!({"name": "tmp", "emptyDir": {}}),
        // The same projection the kubelet would auto-mount, but only into `agent`.
        json!({"name": "kube-api-access", "projected": {"defaultMode": 292, "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}}),
    ];
    if !bot.skills.is_empty() {
        // The user's ConfigMaps themselves, projected: each skill's key becomes
        // `<name>/SKILL.md`, so the agent finds one folder per skill.
        let sources: Vec<Value> = bot
            .skills
            .iter()
            .map(|skill| {
                json!({"configMap": {"name": skill.config_map, "items": [
                    {"key": skill.key, "path": format!("{}/SKILL.md", skill.name)},
                ]}})
            })
            .collect();
        volumes.push(json!({"name": "skills", "projected": {"sources": sources}}));
    }
    if !bot.porter_secret_files.is_empty() {
        let sources: Vec<Value> = bot
            .porter_secret_files
            .iter()
            .map(|file| {
                json!({"secret": {"name": file.secret.name, "items": [{"key": file.secret.key, "path": file.relative_path}]}})
            })
            .collect();
        // 0440, never world-readable. The kubelet makes projected files root's with the
        // pod's fsGroup, so 0400 would shut Porter's uid out as well; the group is
        // shared, but only the porter container mounts this volume, so only Porter
        // (`PORTER_UID`) reads it.
        volumes.push(json!({"name": "porter-secrets", "projected": {"defaultMode": 288, "sources": sources}}));
    }
    volumes
}

/// `<bot>`: a single writer of the workspace, so `Recreate` (never two pods at once).
pub fn deployment(bot: &ValidatedSaintBot) -> Deployment {
    let metadata = serde_json::to_value(child_metadata(bot, bot.name.clone(), "agent"))
        .expect("metadata serialises");
    let mut pod_labels: BTreeMap<String, String> = labels(&bot.name, "agent");
    pod_labels.extend(agent_selector(&bot.name));
    typed(json!({
        "metadata": metadata,
        "spec": {
            "replicas": i32::from(!bot.suspend),
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": agent_selector(&bot.name)},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {RESTART_HASH_ANNOTATION: restart_hash(bot)},
                },
                "spec": {
                    "serviceAccountName": agent_account_name(&bot.name),
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    // Each container sets its own uid; the pod's is the agent's, for
                    // anything that sets none. One group for all, the sandboxes' too:
                    // sockets are mode 0660 and the workspace is shared through it.
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": AGENT_UID,
                        "runAsGroup": SHARED_GID,
                        "fsGroup": SHARED_GID,
                        "fsGroupChangePolicy": "OnRootMismatch",
                        "supplementalGroups": [SHARED_GID],
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "initContainers": [prepare_workspace_container(bot)],
                    "containers": [agent_container(bot), porter_container(bot)],
                    "volumes": volumes(bot),
                },
            },
        },
    }))
}
