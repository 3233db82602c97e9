//! Builder tests: the example bot fixture through the real `validate`, every child compared
//! whole against golden YAML, plus the invariants a golden file alone would not name.

mod support;

use k8s_openapi::api::core::v1::Container;
use saint_operator::saintbot_controller::build::{
    Children, build_children, config_map::rendered_config_json, rbac, workload::restart_hash,
};
use support::{assert_golden, load, settings, validated};

fn yaml<T: serde::Serialize>(object: &T) -> String {
    serde_yaml_ng::to_string(object).expect("object serialises")
}

fn children() -> Children {
    build_children(&validated("acme.yaml"))
}

#[test]
fn every_child_matches_its_golden_file() {
    let children = children();
    assert_golden("service-account.yaml", &yaml(&children.service_account));
    assert_golden("role-binding.yaml", &yaml(&children.role_binding));
    assert_golden("config-map.yaml", &yaml(&children.config_map));
    assert_golden(
        "persona-config-map.yaml",
        &yaml(&children.persona_config_map),
    );
    assert_golden("workspace-claim.yaml", &yaml(&children.workspace_claim));
    assert_golden("service.yaml", &yaml(&children.service));
    assert_golden(
        "agent-network-policy.yaml",
        &yaml(&children.agent_network_policy),
    );
    assert_golden(
        "sandbox-network-policy.yaml",
        &yaml(&children.sandbox_network_policy),
    );
    assert_golden("deployment.yaml", &yaml(&children.deployment));
    assert_golden(
        "webhook-ingress.yaml",
        &yaml(
            children
                .webhook_ingress
                .as_ref()
                .expect("the fixture asks for a webhook Ingress"),
        ),
    );
}

fn bot_with(change: impl FnOnce(&mut serde_json::Value)) -> Children {
    let (bot, dereferenced) = load("acme.yaml");
    let mut value = serde_json::to_value(&bot).unwrap();
    change(&mut value);
    let bot = serde_json::from_value(value).unwrap();
    build_children(
        &saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap(),
    )
}

#[test]
fn the_webhook_ingress_routes_only_the_webhook_paths_of_webhook_channels() {
    let children = bot_with(|bot| {
        let channels = bot["spec"]["channels"].as_array_mut().unwrap();
        channels.push(serde_json::json!({
            "name": "wa-sales", "kind": "whatsapp", "settings": {"phoneNumberId": "42"},
        }));
    });
    let ingress = serde_json::to_value(children.webhook_ingress.unwrap()).unwrap();
    let paths: Vec<(String, String, String)> = ingress["spec"]["rules"][0]["http"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|path| {
            (
                path["path"].as_str().unwrap().to_string(),
                path["pathType"].as_str().unwrap().to_string(),
                path["backend"]["service"]["port"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    // The http channel `api` is not routed: its authenticated API stays in the cluster.
    assert_eq!(
        paths,
        vec![
            (
                "/channels/wa-main/webhook".into(),
                "Exact".into(),
                "http".into()
            ),
            (
                "/channels/wa-sales/webhook".into(),
                "Exact".into(),
                "http".into()
            ),
        ]
    );
    assert_eq!(ingress["spec"]["rules"][0]["host"], "bot.acme.example");
    assert_eq!(
        ingress["metadata"]["ownerReferences"][0]["kind"], "SaintBot",
        "garbage-collected with the bot"
    );
}

/// Telegram and Slack are routed only in their webhook modes; polling, Socket Mode,
/// Discord and Matrix connect out, so no path of theirs becomes public.
#[test]
fn only_channels_in_a_webhook_mode_get_an_ingress_path() {
    let secret = |key: &str| serde_json::json!({"name": "acme-channels", "key": key});
    let children = bot_with(|bot| {
        let channels = bot["spec"]["channels"].as_array_mut().unwrap();
        channels.extend([
            serde_json::json!({"name": "tg-poll", "kind": "telegram",
                "secrets": {"botToken": secret("tg-token")}}),
            serde_json::json!({"name": "tg-hook", "kind": "telegram",
                "settings": {"mode": "webhook"},
                "secrets": {"botToken": secret("tg-token"), "webhookSecret": secret("tg-hook")}}),
            serde_json::json!({"name": "slack-socket", "kind": "slack",
                "settings": {"mode": "socket"},
                "secrets": {"botToken": secret("slack-bot"), "appToken": secret("slack-app")}}),
            serde_json::json!({"name": "slack-events", "kind": "slack",
                "settings": {"mode": "events"},
                "secrets": {"botToken": secret("slack-bot"), "signingSecret": secret("slack-signing")}}),
            serde_json::json!({"name": "discord", "kind": "discord",
                "secrets": {"botToken": secret("discord-token")}}),
            serde_json::json!({"name": "matrix", "kind": "matrix",
                "settings": {"homeserverUrl": "https://matrix.acme.example", "userId": "@bot:acme.example"},
                "secrets": {"accessToken": secret("matrix-token")}}),
        ]);
    });
    let ingress = serde_json::to_value(children.webhook_ingress.unwrap()).unwrap();
    let paths: Vec<&str> = ingress["spec"]["rules"][0]["http"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|path| path["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        vec![
            "/channels/wa-main/webhook",
            "/channels/tg-hook/webhook",
            "/channels/slack-events/webhook",
        ]
    );

    // A Slack channel in Socket Mode is no reason for an Ingress on its own.
    let socket_only = bot_with(|bot| {
        let channels = bot["spec"]["channels"].as_array_mut().unwrap();
        channels.retain(|channel| channel["kind"] != "whatsapp");
        channels.push(serde_json::json!({"name": "slack", "kind": "slack",
            "secrets": {"botToken": secret("slack-bot"), "appToken": secret("slack-app")}}));
        bot["spec"]["heartbeat"]["notify"] = serde_json::json!([]);
    });
    assert!(socket_only.webhook_ingress.is_none());
}

#[test]
fn no_webhook_ingress_without_the_field_or_without_a_webhook_channel() {
    let without_field = bot_with(|bot| {
        bot["spec"]
            .as_object_mut()
            .unwrap()
            .remove("webhookIngress");
    });
    assert!(without_field.webhook_ingress.is_none());
    let policy = serde_json::to_value(&without_field.agent_network_policy).unwrap();
    assert_eq!(
        policy["spec"]["ingress"].as_array().unwrap().len(),
        1,
        "no ingress-controller rule without an Ingress: {policy}"
    );
    let only_http = bot_with(|bot| {
        bot["spec"]["channels"]
            .as_array_mut()
            .unwrap()
            .retain(|channel| channel["kind"] == "http");
        // No channel reaches the heartbeat's Contact any more.
        bot["spec"]["heartbeat"]["notify"] = serde_json::json!([]);
    });
    assert!(only_http.webhook_ingress.is_none());
}

#[test]
fn the_ingress_controller_namespace_reaches_only_the_http_port() {
    let policy = |children: Children| {
        let policy = serde_json::to_value(&children.agent_network_policy).unwrap();
        policy["spec"]["ingress"]
            .as_array()
            .unwrap()
            .iter()
            .find(|rule| rule.get("from").is_some())
            .cloned()
            .expect("a rule for the ingress controller")
    };
    let default = policy(children());
    assert_eq!(
        default,
        serde_json::json!({
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
            "ports": [{"port": 8080, "protocol": "TCP"}],
        })
    );
    let nginx = policy(bot_with(|bot| {
        bot["spec"]["webhookIngress"]["controllerNamespace"] = "ingress-nginx".into();
    }));
    assert_eq!(
        nginx["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "ingress-nginx"
    );
}

#[test]
fn rendered_config_matches_its_golden_file_and_parses_back() {
    let json = rendered_config_json(&validated("acme.yaml"));
    assert_golden("bot-config.json", &json);
    saint_config::BotConfig::from_json(&json).expect("the agent accepts the rendered config");
}

#[test]
fn children_have_the_expected_sorted_names() {
    let children = children();
    let mut names = vec![
        format!(
            "ConfigMap/{}",
            children.config_map.metadata.name.clone().unwrap()
        ),
        format!(
            "ConfigMap/{}",
            children.persona_config_map.metadata.name.clone().unwrap()
        ),
        format!(
            "Deployment/{}",
            children.deployment.metadata.name.clone().unwrap()
        ),
        format!(
            "NetworkPolicy/{}",
            children.agent_network_policy.metadata.name.clone().unwrap()
        ),
        format!(
            "NetworkPolicy/{}",
            children
                .sandbox_network_policy
                .metadata
                .name
                .clone()
                .unwrap()
        ),
        format!(
            "PersistentVolumeClaim/{}",
            children.workspace_claim.metadata.name.clone().unwrap()
        ),
        format!(
            "RoleBinding/{}",
            children.role_binding.metadata.name.clone().unwrap()
        ),
        format!(
            "Service/{}",
            children.service.metadata.name.clone().unwrap()
        ),
        format!(
            "ServiceAccount/{}",
            children.service_account.metadata.name.clone().unwrap()
        ),
    ];
    names.sort();
    assert_eq!(
        names,
        vec![
            "ConfigMap/my-bot-config",
            "ConfigMap/my-bot-persona",
            "Deployment/my-bot",
            "NetworkPolicy/my-bot-agent",
            "NetworkPolicy/my-bot-sandbox",
            "PersistentVolumeClaim/my-bot-workspace",
            "RoleBinding/my-bot-agent",
            "Service/my-bot",
            "ServiceAccount/my-bot-agent",
        ]
    );
}

#[test]
fn the_agent_is_bound_to_the_agent_cluster_role_in_its_own_namespace_only() {
    let mut settings = support::settings();
    settings.agent_cluster_role = "saint-release-agent".to_string();
    let bot = support::validated_with("acme.yaml", &settings);
    let binding = rbac::agent_role_binding(&bot);
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(binding.role_ref.name, "saint-release-agent");
    assert_eq!(binding.metadata.namespace.as_deref(), Some("acme"));
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(subjects[0].name, "my-bot-agent");
    assert_eq!(subjects[0].namespace.as_deref(), Some("acme"));
}

fn containers() -> (Container, Container) {
    let spec = children().deployment.spec.unwrap().template.spec.unwrap();
    let mut containers = spec.containers.into_iter();
    (containers.next().unwrap(), containers.next().unwrap())
}

fn secret_names(container: &Container) -> Vec<String> {
    let mut names: Vec<String> = container
        .env
        .iter()
        .flatten()
        .filter_map(|variable| {
            variable
                .value_from
                .as_ref()?
                .secret_key_ref
                .as_ref()
                .map(|secret| secret.name.clone())
        })
        .collect();
    names.extend(
        container
            .env_from
            .iter()
            .flatten()
            .filter_map(|source| source.secret_ref.as_ref().map(|secret| secret.name.clone())),
    );
    names
}

#[test]
fn llm_channel_and_collector_credentials_reach_only_the_agent_container() {
    let (agent, porter) = containers();
    assert_eq!(agent.name, "agent");
    assert_eq!(porter.name, "porter");
    let mut agent_secrets = secret_names(&agent);
    agent_secrets.sort();
    assert_eq!(
        agent_secrets,
        vec![
            "acme-channels",
            "acme-channels",
            "acme-channels",
            "acme-channels",
            "acme-llm",
            // The OTLP collector's Authorization header (spec.telemetry.otlp.headers).
            "acme-otel",
        ]
    );
    assert_eq!(secret_names(&porter), Vec::<String>::new());
    assert!(
        !porter
            .volume_mounts
            .iter()
            .flatten()
            .any(|mount| mount.name == "kube-api-access")
    );
}

/// CLI and MCP server credentials are files of one projected volume that only the
/// `porter` container mounts: not the agent, not the init container, never as
/// environment variables.
#[test]
fn the_porter_container_is_the_only_one_mounting_cli_credentials() {
    let pod = children().deployment.spec.unwrap().template.spec.unwrap();
    let mounting: Vec<&str> = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .filter(|container| {
            container
                .volume_mounts
                .iter()
                .flatten()
                .any(|mount| mount.name == "porter-secrets")
        })
        .map(|container| container.name.as_str())
        .collect();
    assert_eq!(mounting, ["porter"]);
    let porter = pod
        .containers
        .iter()
        .find(|container| container.name == "porter")
        .unwrap();
    let mount = porter
        .volume_mounts
        .iter()
        .flatten()
        .find(|mount| mount.name == "porter-secrets")
        .unwrap();
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/etc/porter-secrets", Some(true))
    );
    assert!(
        porter.env_from.is_none(),
        "no Secret reaches Porter's environment"
    );
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|volume| volume.name == "porter-secrets")
        .unwrap();
    let projected = volume.projected.as_ref().unwrap();
    assert_eq!(projected.default_mode, Some(0o440));
    let files: Vec<(String, String, String)> = projected
        .sources
        .iter()
        .flatten()
        .flat_map(|source| {
            let secret = source.secret.as_ref().unwrap();
            secret
                .items
                .iter()
                .flatten()
                .map(|item| (item.path.clone(), secret.name.clone(), item.key.clone()))
        })
        .collect();
    assert_eq!(
        files,
        [
            ("gh/secret".into(), "acme-github".into(), "token".into()),
            (
                "gog/oauth2-client-secret".into(),
                "acme-google".into(),
                "client-secret".into()
            ),
            (
                "gog/secret".into(),
                "acme-google".into(),
                "refresh-token".into()
            ),
            (
                "mcp-sheets/secret".into(),
                "acme-sheets".into(),
                "api-key".into()
            ),
            ("mcp-wiki/secret".into(), "acme-wiki".into(), "token".into()),
        ]
    );
}

/// Porter mounts of the workspace only its socket directory (where the sandboxes see
/// it) and the logs; it runs no CLI, so no workspace files, no call homes.
#[test]
fn porter_serves_its_proxy_and_mounts_only_its_socket_directory_and_the_logs() {
    let (_, porter) = containers();
    let workspace_mounts: Vec<(String, Option<String>)> = porter
        .volume_mounts
        .iter()
        .flatten()
        .filter(|mount| mount.name == "workspace")
        .map(|mount| (mount.mount_path.clone(), mount.sub_path.clone()))
        .collect();
    assert_eq!(
        workspace_mounts,
        [
            ("/run/saint/porter".into(), Some(".saint/run/porter".into())),
            ("/var/lib/saint/workspace/logs".into(), Some("logs".into())),
        ]
    );
    let env: Vec<(String, String)> = porter
        .env
        .iter()
        .flatten()
        .map(|variable| {
            (
                variable.name.clone(),
                variable.value.clone().unwrap_or_default(),
            )
        })
        .collect();
    let value = |name: &str| {
        env.iter()
            .find(|(variable, _)| variable == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(
        value("PORTER_PROXY_SOCKET"),
        Some(saint_config::sandbox_contract::PORTER_SOCKET_PATH)
    );
    assert_eq!(
        value("PORTER_CA_CERTIFICATE"),
        Some(saint_config::sandbox_contract::PORTER_CA_PATH)
    );
    for gone in ["PORTER_SOCKET", "PORTER_WORKSPACE", "PORTER_CALL_HOMES"] {
        assert_eq!(value(gone), None, "{gone}");
    }
}

#[test]
fn pods_are_pod_security_restricted() {
    let deployment = children().deployment;
    let pod = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .clone()
        .unwrap();
    let sandbox_job = saint_operator::saintbot_controller::build::sandbox_job::job_template(
        &validated("acme.yaml"),
    );
    let sandbox_pod = sandbox_job.spec.unwrap().template.spec.unwrap();
    for pod in [pod, sandbox_pod] {
        let pod_context = pod.security_context.clone().unwrap();
        assert_eq!(pod_context.run_as_non_root, Some(true));
        assert_eq!(pod_context.seccomp_profile.unwrap().type_, "RuntimeDefault");
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert!(pod.host_network.is_none() && pod.host_pid.is_none() && pod.host_ipc.is_none());
        for volume in pod.volumes.iter().flatten() {
            assert!(
                volume.host_path.is_none(),
                "hostPath volume {}",
                volume.name
            );
        }
        for container in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            let context = container.security_context.clone().unwrap();
            assert_eq!(
                context.allow_privilege_escalation,
                Some(false),
                "{}",
                container.name
            );
            assert_eq!(
                context.read_only_root_filesystem,
                Some(true),
                "{}",
                container.name
            );
            assert_eq!(
                context.capabilities.unwrap().drop,
                Some(vec!["ALL".to_string()]),
                "{}",
                container.name
            );
            let resources = container.resources.clone().unwrap();
            assert!(
                resources.requests.is_some() && resources.limits.is_some(),
                "{}",
                container.name
            );
        }
    }
}

#[test]
fn the_sandbox_template_has_no_secrets_no_token_and_sandbox_labels() {
    let job = saint_operator::saintbot_controller::build::sandbox_job::job_template(&validated(
        "acme.yaml",
    ));
    let text = serde_json::to_string(&job).unwrap();
    assert!(
        !text.contains("secret"),
        "sandbox Job mentions a secret: {text}"
    );
    let labels = job
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert_eq!(labels["saint.work/sandbox"], "true");
    assert_eq!(labels["saint.work/bot"], "my-bot");
    let spec = job.spec.unwrap();
    assert!(spec.active_deadline_seconds.is_some() && spec.ttl_seconds_after_finished.is_some());
    let mounts: Vec<(String, bool)> = spec.template.spec.unwrap().containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .map(|mount| (mount.mount_path.clone(), mount.read_only.unwrap_or(false)))
        .collect();
    assert!(mounts.contains(&("/agent".to_string(), true)));
    assert!(mounts.contains(&("/workspace".to_string(), false)));
}

#[test]
fn a_sandbox_can_write_only_its_own_runner_directory_on_the_workspace() {
    let job = saint_operator::saintbot_controller::build::sandbox_job::job_template(&validated(
        "acme.yaml",
    ));
    let pod = job.spec.unwrap().template.spec.unwrap();
    let workspace_volumes: Vec<String> = pod
        .volumes
        .iter()
        .flatten()
        .filter(|volume| volume.persistent_volume_claim.is_some())
        .map(|volume| volume.name.clone())
        .collect();
    assert_eq!(workspace_volumes, vec!["agent-workspace".to_string()]);
    let mounts: Vec<_> = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .filter(|mount| workspace_volumes.contains(&mount.name))
        .collect();
    let writable: Vec<_> = mounts
        .iter()
        .filter(|mount| mount.read_only != Some(true))
        .map(|mount| (mount.mount_path.as_str(), mount.sub_path.as_deref()))
        .collect();
    // The only writable mount of the workspace is the placeholder the agent replaces
    // with `.saint/run/sandboxes/<job>`: never Porter's directory, never `.saint/run`.
    assert_eq!(
        writable,
        vec![(
            saint_config::SANDBOX_RUN_MOUNT_PATH,
            Some(saint_config::SANDBOX_RUN_SUBPATH_PLACEHOLDER)
        )]
    );
    assert!(
        saint_config::SANDBOX_RUN_SUBPATH_PLACEHOLDER
            .starts_with(saint_config::SANDBOX_RUN_SUBPATH_PREFIX)
    );
    let porter = mounts
        .iter()
        .find(|mount| mount.mount_path == "/run/saint/porter")
        .expect("porter socket directory mounted");
    assert_eq!(porter.sub_path.as_deref(), Some(".saint/run/porter"));
    assert_eq!(porter.read_only, Some(true));
}

#[test]
fn the_sandbox_template_is_owned_by_the_saintbot_without_blocking_its_deletion() {
    let job = saint_operator::saintbot_controller::build::sandbox_job::job_template(&validated(
        "acme.yaml",
    ));
    let owners = job.metadata.owner_references.unwrap();
    assert_eq!(owners.len(), 1);
    let owner = &owners[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str()
        ),
        ("saint.work/v1alpha1", "SaintBot", "my-bot")
    );
    assert!(!owner.uid.is_empty());
    assert_eq!(owner.controller, Some(true));
    // true would need update rights on saintbots/finalizers, which the agent lacks.
    assert_eq!(owner.block_owner_deletion, Some(false));
}

#[test]
fn the_agent_can_open_sandbox_sockets_and_porter_admits_the_sandbox_uid() {
    let deployment = children().deployment;
    let bot_pod = deployment.spec.unwrap().template.spec.unwrap();
    let sandbox_pod = saint_operator::saintbot_controller::build::sandbox_job::job_template(
        &validated("acme.yaml"),
    )
    .spec
    .unwrap()
    .template
    .spec
    .unwrap();
    let bot_context = bot_pod.security_context.clone().unwrap();
    let sandbox_context = sandbox_pod.security_context.unwrap();
    // The runner creates its socket 0660 as the sandbox user; the agent needs that
    // user or its group.
    let sandbox_uid = sandbox_context.run_as_user.unwrap();
    let sandbox_gid = sandbox_context.run_as_group.unwrap();
    let agent_groups: Vec<i64> = bot_context
        .supplemental_groups
        .clone()
        .unwrap_or_default()
        .into_iter()
        .chain(bot_context.run_as_group)
        .chain(bot_context.fs_group)
        .collect();
    assert!(
        bot_context.run_as_user == Some(sandbox_uid) || agent_groups.contains(&sandbox_gid),
        "agent {bot_context:?} cannot open a socket of {sandbox_uid}:{sandbox_gid}"
    );
    assert_eq!(bot_context.fs_group, sandbox_context.fs_group);
    assert_eq!(
        bot_context.supplemental_groups,
        sandbox_context.supplemental_groups
    );
    let allowed_uids = |bot: &saint_operator::saintbot_controller::validate::ValidatedSaintBot| {
        let deployment = saint_operator::saintbot_controller::build::workload::deployment(bot);
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        let porter = pod
            .containers
            .into_iter()
            .find(|container| container.name == "porter")
            .unwrap();
        porter
            .env
            .into_iter()
            .flatten()
            .find(|variable| variable.name == "PORTER_ALLOWED_UIDS")
            .and_then(|variable| variable.value)
            .map(|uids| {
                uids.split(',')
                    .map(|uid| uid.parse::<i64>().unwrap())
                    .collect::<Vec<_>>()
            })
    };
    // Plain runtime: Porter admits exactly the pod user, which is the sandbox's, and the
    // agent's only for the HTTP MCP server it reaches through the proxy.
    let mut plain = validated("acme.yaml");
    plain.sandbox.runtime_class_name = None;
    let agent_uid = i64::from(saint_config::uids::AGENT_UID);
    assert_eq!(allowed_uids(&plain), Some(vec![sandbox_uid, agent_uid]));
    plain
        .config
        .mcp
        .servers
        .retain(|server| !matches!(server.transport, saint_config::McpTransport::Http { .. }));
    assert_eq!(allowed_uids(&plain), Some(vec![sandbox_uid]));
    // gVisor: the socket peer is the runtime's process; no uid filter (token decides).
    let gvisor = validated("acme.yaml");
    assert!(gvisor.sandbox.runtime_class_name.is_some());
    assert_eq!(allowed_uids(&gvisor), None);
}

#[test]
fn agent_and_porter_have_http_probes_on_their_own_ports() {
    let deployment = children().deployment;
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let probe = |container: &str, kind: &str| -> (String, String) {
        let container = pod
            .containers
            .iter()
            .find(|candidate| candidate.name == container)
            .unwrap();
        let probe = match kind {
            "liveness" => container.liveness_probe.clone(),
            "readiness" => container.readiness_probe.clone(),
            _ => container.startup_probe.clone(),
        }
        .unwrap_or_else(|| panic!("{} has no {kind} probe", container.name));
        let http = probe.http_get.unwrap();
        let port = match http.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name) => {
                let port = container
                    .ports
                    .iter()
                    .flatten()
                    .find(|port| port.name.as_deref() == Some(name.as_str()))
                    .unwrap_or_else(|| panic!("probe names unknown port {name}"));
                port.container_port.to_string()
            }
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port) => {
                port.to_string()
            }
        };
        (http.path.unwrap(), port)
    };
    assert_eq!(
        probe("agent", "liveness"),
        ("/healthz".into(), "8080".into())
    );
    assert_eq!(
        probe("agent", "readiness"),
        ("/readyz".into(), "8080".into())
    );
    assert_eq!(
        probe("agent", "startup"),
        ("/healthz".into(), "8080".into())
    );
    let porter = pod
        .containers
        .iter()
        .find(|container| container.name == "porter")
        .unwrap();
    let listen = porter
        .env
        .iter()
        .flatten()
        .find(|variable| variable.name == "PORTER_METRICS_LISTEN")
        .and_then(|variable| variable.value.clone())
        .expect("porter serves /healthz");
    for kind in ["liveness", "readiness", "startup"] {
        let (path, port) = probe("porter", kind);
        assert_eq!(path, "/healthz");
        assert!(listen.ends_with(&format!(":{port}")), "{listen} vs {port}");
    }
}

#[test]
fn a_contact_change_re_renders_the_config_but_keeps_the_pod() {
    let (bot, mut dereferenced) = load("acme.yaml");
    let before =
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap();
    dereferenced.contacts[0].spec.identifiers.email = Some("ana.new@acme.hr".to_string());
    let after =
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap();
    assert_ne!(
        build_children(&before).config_map,
        build_children(&after).config_map
    );
    assert_eq!(
        build_children(&before).deployment,
        build_children(&after).deployment
    );
}

#[test]
fn an_image_or_channel_change_rolls_the_pod() {
    let (mut bot, dereferenced) = load("acme.yaml");
    let before = restart_hash(
        &saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap(),
    );
    bot.spec.images.agent = Some("registry.example/agent:next".to_string());
    let image_changed = restart_hash(
        &saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap(),
    );
    assert_ne!(before, image_changed);
    let (mut bot, dereferenced) = load("acme.yaml");
    bot.spec.channels.pop();
    // The heartbeat's Contact may no longer be reachable on the channels left.
    if let Some(heartbeat) = bot.spec.heartbeat.as_mut() {
        heartbeat.notify.clear();
    }
    let channel_changed = restart_hash(
        &saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap(),
    );
    assert_ne!(before, channel_changed);
}

#[test]
fn suspend_scales_to_zero() {
    let (mut bot, dereferenced) = load("acme.yaml");
    bot.spec.suspend = true;
    let validated =
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap();
    assert_eq!(
        build_children(&validated).deployment.spec.unwrap().replicas,
        Some(0)
    );
}

#[test]
fn a_missing_default_role_is_refused_with_role_not_found() {
    let (mut bot, dereferenced) = load("acme.yaml");
    bot.spec.default_role = "visitor".to_string();
    let error =
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap_err();
    assert_eq!(error.reason().as_str(), "RoleNotFound");
    assert!(error.to_string().contains("spec.defaultRole"), "{error}");
}

#[test]
fn the_chart_examples_render_through_the_real_validate() {
    use saint_operator::offline::{Manifests, read_manifests};
    let examples =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/saint/examples");
    let mut manifests = Manifests::default();
    for file in ["saintbot.yaml", "contacts.yaml", "roles.yaml"] {
        let path = examples.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("failed to read {}: {error}", path.display()));
        read_manifests(&text, "acme", &mut manifests)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    }
    assert_eq!(manifests.bots.len(), 1);
    let validated = saint_operator::saintbot_controller::validate::validate(
        &manifests.bots[0],
        &manifests.dereferenced,
        &settings(),
    )
    .expect("the chart's example bot validates");
    let slugs: Vec<&str> = validated
        .config
        .identity_links
        .keys()
        .map(|slug| slug.as_str())
        .collect();
    assert_eq!(slugs, vec!["ana", "ivan", "marko"]);
    assert!(
        validated.identity.problems.is_empty(),
        "{:?}",
        validated.identity.problems
    );
    saint_config::BotConfig::from_json(&rendered_config_json(&validated))
        .expect("the agent accepts it");
    // The example company's MCP server: the owner's alone, its token Porter's.
    let docs = validated
        .config
        .mcp
        .server("docs")
        .expect("docs is declared");
    assert_eq!(
        docs.credential
            .as_ref()
            .map(|credential| credential.porter_entry.as_str()),
        Some("mcp-docs")
    );
    assert!(validated.registry.clis.contains_key("mcp-docs"));
    let allows_docs = |role: &str| {
        validated.config.roles[role]
            .tools
            .allow
            .iter()
            .any(|pattern| pattern.starts_with("docs."))
    };
    assert!(allows_docs("owner"));
    for role in ["manager", "employee", "external", "heartbeat"] {
        assert!(!allows_docs(role), "{role}");
    }
    // Spoken replies: the engine is rendered, `tts` is the owner's and the manager's.
    let speech = validated
        .config
        .media
        .speech
        .as_ref()
        .expect("media.speech");
    assert_eq!(speech.api_key_env.as_deref(), Some("SAINT_SPEECH_API_KEY"));
    assert_eq!(
        speech.price(&validated.config.model.prices, 1_000_000),
        Some(15.0),
        "speech is priced in model.prices under its model"
    );
    for (role, has_tts) in [
        ("owner", true),
        ("manager", true),
        ("employee", false),
        ("external", false),
    ] {
        let allows = validated.config.roles[role]
            .tools
            .allow
            .iter()
            .any(|tool| tool == "tts");
        assert_eq!(allows, has_tts, "{role}");
    }
}

#[test]
fn the_speech_key_reaches_only_the_agent_container_and_rolls_the_pod() {
    let plain = bot_with(|_| {});
    let spoken = bot_with(|bot| {
        bot["spec"]["media"] = serde_json::json!({"speech": {
            "baseUrl": "https://speech.acme-ana.example", "model": "tts-1",
            "apiKeySecretRef": {"name": "acme-speech", "key": "api-key"}}});
        bot["spec"]["model"]["prices"]["tts-1"] =
            serde_json::json!({"inputPerMtok": 0, "outputPerMtok": 0, "perMillionCharacters": 15});
    });
    let spec = spoken
        .deployment
        .spec
        .clone()
        .unwrap()
        .template
        .spec
        .unwrap();
    let (agent, porter) = (&spec.containers[0], &spec.containers[1]);
    let variable = agent
        .env
        .iter()
        .flatten()
        .find(|variable| variable.name == "SAINT_SPEECH_API_KEY")
        .expect("the agent gets the speech key");
    let secret = variable
        .value_from
        .as_ref()
        .and_then(|source| source.secret_key_ref.as_ref())
        .unwrap();
    assert_eq!(
        (secret.name.as_str(), secret.key.as_str()),
        ("acme-speech", "api-key")
    );
    assert!(!secret_names(porter).contains(&"acme-speech".to_string()));
    let config = saint_config::BotConfig::from_json(
        spoken.config_map.data.as_ref().unwrap()["bot-config.json"].as_str(),
    );
    assert!(config.is_ok(), "{config:?}");
    let hash = |children: &Children| {
        children
            .deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
    };
    assert_ne!(hash(&plain), hash(&spoken), "a new key needs a new pod");
}

/// The fixture's `gh` and `gog` entries become the registry Porter loads: each secret a
/// file under `/etc/porter-secrets`, nothing else of the Secret.
#[test]
fn porter_clis_render_into_a_registry_porter_accepts() {
    let validated = validated("acme.yaml");
    assert_eq!(
        serde_json::to_value(&validated.registry).unwrap(),
        serde_json::json!({
            "version": 2,
            "clis": {
                "gh": {
                    "hosts": ["api.github.com", "github.com", "uploads.github.com"],
                    "secret": {"file": "/etc/porter-secrets/gh/secret"},
                    "placeholderEnv": ["GH_TOKEN"],
                    "git": true,
                    "requests": {"employee": [
                        {"methods": ["GET"], "paths": ["/repos/*/*/pulls", "/repos/*/*/pulls/**"]},
                    ]},
                },
                "gog": {
                    "hosts": ["oauth2.googleapis.com", "www.googleapis.com", "gmail.googleapis.com"],
                    "secret": {"file": "/etc/porter-secrets/gog/secret"},
                    "oauth2": {
                        "tokenUrl": "https://oauth2.googleapis.com/token",
                        "clientId": "1234567890-acme.apps.googleusercontent.com",
                        "clientSecret": {"file": "/etc/porter-secrets/gog/oauth2-client-secret"},
                    },
                    "placeholderEnv": ["GOG_REFRESH_TOKEN"],
                },
                "mcp-sheets": {
                    "hosts": ["sheets.acme.example"],
                    "secret": {"file": "/etc/porter-secrets/mcp-sheets/secret"},
                    "inject": [{"query": "key"}],
                    "placeholderEnv": ["SAINT_MCP_SHEETS_TOKEN", "SHEETS_API_KEY"],
                },
                "mcp-wiki": {
                    "hosts": ["wiki.acme.example"],
                    "secret": {"file": "/etc/porter-secrets/mcp-wiki/secret"},
                    "inject": [{"header": "X-Wiki-Token"}],
                    "placeholderEnv": ["SAINT_MCP_WIKI_TOKEN"],
                    "requests": {"owner": [{"methods": ["*"], "paths": ["/**"]}]},
                },
            },
        })
    );
    let parsed = porter_protocol::registry::Registry::from_json(&validated.registry.to_json())
        .expect("porter accepts the rendered registry");
    assert_eq!(parsed, validated.registry);
    // CLI names only: the MCP servers' entries are named by their credentials.
    assert_eq!(validated.config.porter.clis, ["gh", "gog"]);
}

/// The fixture's three MCP servers in the bot config: an HTTP one whose credential
/// Porter holds (entry, placeholder variable, the header the agent sends it in), a
/// stdio one with a credential and a stdio one without; limits the spec leaves out take
/// the contract's defaults.
#[test]
fn mcp_servers_render_into_the_config_naming_their_porter_entries() {
    let validated = validated("acme.yaml");
    assert_eq!(
        serde_json::to_value(&validated.config.mcp).unwrap(),
        serde_json::json!({"servers": [
            {
                "name": "wiki",
                "transport": {"http": {"url": "https://wiki.acme.example/mcp"}},
                "credential": {
                    "porterEntry": "mcp-wiki",
                    "placeholderEnv": "SAINT_MCP_WIKI_TOKEN",
                    "header": "X-Wiki-Token",
                },
                "maxTools": 64, "maxSchemaBytes": 16384, "maxResultChars": 8000,
                "timeoutSeconds": 60,
            },
            {
                "name": "sheets",
                "transport": {"stdio": {"command": ["mcp-sheets", "--stdio"]}},
                "credential": {
                    "porterEntry": "mcp-sheets",
                    "placeholderEnv": "SAINT_MCP_SHEETS_TOKEN",
                    "header": "Authorization",
                },
                "maxTools": 64, "maxSchemaBytes": 16384, "maxResultChars": 20000,
                "timeoutSeconds": 30,
            },
            {
                "name": "calc",
                "transport": {"stdio": {"command": ["mcp-calc"]}},
                "maxTools": 64, "maxSchemaBytes": 16384, "maxResultChars": 20000,
                "timeoutSeconds": 60,
            },
        ]})
    );
    // Each credential names an entry of the registry, whose placeholders include the
    // variable the config names.
    for server in &validated.config.mcp.servers {
        let Some(credential) = &server.credential else {
            continue;
        };
        let entry = &validated.registry.clis[&credential.porter_entry];
        assert!(
            entry.placeholder_env.contains(&credential.placeholder_env),
            "{}",
            server.name
        );
    }
    assert!(!validated.registry.clis.contains_key("mcp-calc"));
}

/// The contract end to end: the bot config exactly as the operator writes it into the
/// ConfigMap, with MCP servers and Roles allowing their tools, passes the agent's own
/// `saint_config::validate`; a Role allowing a server the bot lacks fails the bot
/// before the agent ever sees it.
#[test]
fn the_rendered_mcp_config_passes_the_agents_own_validation() {
    let children = children();
    let json = &children.config_map.data.as_ref().unwrap()["bot-config.json"];
    let config: saint_config::BotConfig = serde_json::from_str(json).unwrap();
    saint_config::validate(&config).expect("the agent's validate accepts the rendered config");
    assert_eq!(config.mcp.servers.len(), 3);
    assert!(
        config.roles["owner"]
            .tools
            .allow
            .contains(&"wiki.*".to_string())
    );

    let (mut bot, dereferenced) = load("acme.yaml");
    bot.spec.mcp.servers.retain(|server| server.name != "wiki");
    let error =
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap_err();
    assert_eq!(error.reason(), saint_operator::status::Reason::InvalidSpec);
    assert_eq!(
        error.to_string(),
        "failed to render MCP servers: spec.mcp.servers: Role \"owner\" allows \"wiki.*\" \
         (spec.tools.allow), but this bot declares no server \"wiki\": declare it, or select \
         Roles that do not name it"
    );
}

/// Porter requires a host to belong to one entry: an MCP server claiming a CLI's host,
/// or another server's, is refused naming both; so is a CLI taking an MCP entry's name.
#[test]
fn a_host_claimed_by_a_cli_and_an_mcp_server_is_refused_naming_both() {
    let refused = |change: &dyn Fn(&mut saint_operator::crd::SaintBot)| {
        let (mut bot, dereferenced) = load("acme.yaml");
        change(&mut bot);
        let error = saint_operator::saintbot_controller::validate::validate(
            &bot,
            &dereferenced,
            &settings(),
        )
        .unwrap_err();
        assert_eq!(error.reason(), saint_operator::status::Reason::InvalidSpec);
        error.to_string()
    };
    assert_eq!(
        refused(&|bot| bot.spec.mcp.servers[1]
            .hosts
            .push("API.github.com:443".into())),
        "failed to render MCP servers: spec.mcp.servers[sheets].hosts: api.github.com:443 is \
         already a host of gh: a host carries one credential, so it belongs to one entry of \
         porter.clis and mcp.servers only"
    );
    assert_eq!(
        refused(&|bot| bot.spec.mcp.servers[1]
            .hosts
            .push("wiki.acme.example".into())),
        "failed to render MCP servers: spec.mcp.servers[sheets].hosts: wiki.acme.example:443 \
         is already a host of MCP server wiki: a host carries one credential, so it belongs to \
         one entry of porter.clis and mcp.servers only"
    );
    assert_eq!(
        refused(&|bot| {
            let mut cli = bot.spec.porter.clis[0].clone();
            cli.name = "mcp-wiki".into();
            cli.hosts = vec!["example.org".into()];
            cli.placeholder_env.clear();
            bot.spec.porter.clis.push(cli);
        }),
        "failed to render porter CLIs: spec.porter.clis[mcp-wiki].name: mcp-wiki is the Porter \
         entry of spec.mcp.servers[wiki]: give the CLI another name"
    );
    assert_eq!(
        refused(
            &|bot| bot.spec.porter.clis[0].placeholder_env = vec!["SAINT_MCP_WIKI_TOKEN".into()]
        ),
        "failed to render MCP servers: spec.mcp.servers[wiki].placeholderEnv: \
         SAINT_MCP_WIKI_TOKEN already holds the placeholder of gh"
    );
}

#[test]
fn an_oauth2_token_url_outside_the_hosts_is_refused_naming_the_field() {
    let (mut bot, dereferenced) = load("acme.yaml");
    let gog = &mut bot.spec.porter.clis[1];
    gog.hosts.retain(|host| host != "oauth2.googleapis.com");
    let error =
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .unwrap_err();
    assert_eq!(error.reason(), saint_operator::status::Reason::InvalidSpec);
    assert_eq!(
        error.to_string(),
        "failed to render porter CLIs: spec.porter.clis[gog].oauth2.tokenUrl: \
         its host oauth2.googleapis.com:443 must be among hosts"
    );
}

/// The HTTP channel's `settings.port` is the agent's port everywhere the pod needs it:
/// the address the agent is told to listen on, the container port (which the probes
/// name), the Service and both NetworkPolicy rules.
#[test]
fn the_http_channels_port_is_the_pods_http_port_everywhere() {
    let children = bot_with(|bot| {
        bot["spec"]["channels"][0]["settings"]["port"] = "8443".into();
        bot["spec"]["webhookIngress"]["controllerNamespace"] = "ingress-nginx".into();
    });
    let deployment = serde_json::to_value(&children.deployment).unwrap();
    let agent = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|container| container["name"] == "agent")
        .unwrap()
        .clone();
    let listen = agent["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|env| env["name"] == "SAINT_LISTEN")
        .unwrap()["value"]
        .clone();
    assert_eq!(listen, "0.0.0.0:8443");
    assert!(
        agent["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|port| port["name"] == "http" && port["containerPort"] == 8443),
        "{agent}"
    );
    let service = serde_json::to_value(&children.service).unwrap();
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|port| port["name"] == "http" && port["port"] == 8443),
        "{service}"
    );
    let policy = serde_json::to_value(&children.agent_network_policy).unwrap();
    let text = policy["spec"]["ingress"].to_string();
    assert!(text.contains("8443") && !text.contains("8080"), "{text}");
}

#[test]
fn an_http_port_that_is_another_listener_s_or_disagrees_is_refused_naming_the_field() {
    let (bot, dereferenced) = load("acme.yaml");
    let refused = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut value = serde_json::to_value(&bot).unwrap();
        change(&mut value);
        let bot = serde_json::from_value(value).unwrap();
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default()
    };
    let metrics = refused(&|bot| bot["spec"]["channels"][0]["settings"]["port"] = "9090".into());
    assert!(
        metrics.contains("spec.channels[api].settings.port") && metrics.contains("metrics port"),
        "{metrics}"
    );
    let two = refused(&|bot| {
        let mut second = bot["spec"]["channels"][0].clone();
        second["name"] = "api2".into();
        second["settings"]["port"] = "8081".into();
        second["secrets"]["token"]["key"] = "api-token-2".into();
        bot["spec"]["channels"].as_array_mut().unwrap().push(second);
    });
    assert!(
        two.contains("spec.channels[api2].settings.port") && two.contains("one HTTP port"),
        "{two}"
    );
}

/// Egress rules of the agent NetworkPolicy that name one address (ipBlock /32 or /128).
fn single_address_egress(children: &Children) -> Vec<serde_json::Value> {
    let policy = serde_json::to_value(&children.agent_network_policy).unwrap();
    policy["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| {
            rule["to"].as_array().is_some_and(|peers| {
                peers.len() == 1
                    && peers[0]["ipBlock"]["cidr"]
                        .as_str()
                        .is_some_and(|cidr| cidr.ends_with("/32") || cidr.ends_with("/128"))
            })
        })
        .cloned()
        .collect()
}

#[test]
fn a_model_server_at_a_private_address_is_reachable_at_exactly_that_address_and_port() {
    let with_model_url = |url: &str| {
        let url = url.to_owned();
        bot_with(move |bot| bot["spec"]["model"]["baseUrl"] = url.into())
    };
    // The API server's endpoints (settings()) are a /32 rule of their own.
    let baseline = single_address_egress(&children());
    let added = |children: Children| {
        let mut rules = single_address_egress(&children);
        rules.retain(|rule| !baseline.contains(rule));
        rules
    };
    assert_eq!(
        added(with_model_url("http://10.88.0.1:8000/v1")),
        vec![serde_json::json!({
            "to": [{"ipBlock": {"cidr": "10.88.0.1/32"}}],
            "ports": [{"port": 8000, "protocol": "TCP"}],
        })]
    );
    // The scheme's port when none is written; IPv6 literals too.
    assert_eq!(
        added(with_model_url("https://[fd00::7]/")),
        vec![serde_json::json!({
            "to": [{"ipBlock": {"cidr": "fd00::7/128"}}],
            "ports": [{"port": 443, "protocol": "TCP"}],
        })]
    );
    assert_eq!(
        added(with_model_url("http://192.168.1.20/"))[0]["ports"][0]["port"],
        80
    );
    // A public address is already allowed, and a host name is never resolved into a rule.
    assert!(added(with_model_url("https://203.0.113.9:8443/")).is_empty());
    assert!(added(with_model_url("http://ollama.ai.svc:11434/")).is_empty());
    assert!(added(with_model_url("http://10-88-0-1.example.com/")).is_empty());
    // An IPv4-mapped IPv6 literal is the IPv4 address a policy matches.
    assert_eq!(
        added(with_model_url("http://[::ffff:10.0.0.5]:8000/"))[0]["to"][0]["ipBlock"]["cidr"],
        "10.0.0.5/32"
    );
}

#[test]
fn a_model_url_at_a_metadata_link_local_or_loopback_address_is_refused_naming_the_field() {
    let (bot, dereferenced) = load("acme.yaml");
    for url in [
        "http://169.254.169.254/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://[fe80::1]:8000/",
        "http://127.0.0.1:11434/",
        "http://[::1]:11434/",
        "http://[::ffff:169.254.169.254]/",
        "http://0.0.0.0:8000/",
    ] {
        let mut value = serde_json::to_value(&bot).unwrap();
        value["spec"]["model"]["baseUrl"] = url.into();
        let bot = serde_json::from_value(value).unwrap();
        let message = saint_operator::saintbot_controller::validate::validate(
            &bot,
            &dereferenced,
            &settings(),
        )
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
        assert!(
            message.contains("spec.model.baseUrl") && message.contains("never reach"),
            "{url}: {message}"
        );
    }
}

/// The example bot with `spec.memory` set, validated with `settings`.
fn with_memory(
    memory: serde_json::Value,
    settings: &saint_operator::settings::OperatorSettings,
) -> Result<
    saint_operator::saintbot_controller::validate::ValidatedSaintBot,
    saint_operator::saintbot_controller::validate::ValidateError,
> {
    let (bot, dereferenced) = load("acme.yaml");
    let mut value = serde_json::to_value(&bot).unwrap();
    value["spec"]["memory"] = memory;
    let bot = serde_json::from_value(value).unwrap();
    saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, settings)
}

fn embedder_egress(children: &Children) -> Vec<serde_json::Value> {
    let policy = serde_json::to_value(&children.agent_network_policy).unwrap();
    policy["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| {
            rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "embedder"
        })
        .cloned()
        .collect()
}

#[test]
fn a_bot_on_the_shared_embedder_gets_its_url_and_egress_to_exactly_its_pods() {
    let mut settings = settings();
    settings.shared_embedder = Some(
        saint_operator::settings::SharedEmbedder::parse("saint-system/saint-embedder:8090")
            .unwrap(),
    );
    let bot = with_memory(serde_json::json!({"embedder": "shared"}), &settings).unwrap();
    let children = build_children(&bot);
    let config: saint_config::BotConfig =
        saint_config::BotConfig::from_json(&rendered_config_json(&bot))
            .expect("the agent accepts the rendered config");
    assert_eq!(
        config.memory.embeddings,
        saint_config::EmbeddingsConfig::Openai {
            base_url: "http://saint-embedder.saint-system.svc:8090".to_string(),
            model: "all-MiniLM-L6-v2".to_string(),
            api_key_env: None,
            dimensions: 384,
        }
    );
    assert_eq!(
        embedder_egress(&children),
        vec![serde_json::json!({
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "saint-system"}},
                "podSelector": {"matchLabels": {
                    "app.kubernetes.io/name": "saint-embedder",
                    "app.kubernetes.io/component": "embedder",
                }},
            }],
            "ports": [{"port": 8090, "protocol": "TCP"}],
        })]
    );

    // A bot on its local model gets no such rule, even where a shared embedder exists.
    for local in [
        serde_json::json!({}),
        serde_json::json!({"embedder": "local", "weights": "int16"}),
        serde_json::json!({"enabled": false}),
    ] {
        let children = build_children(&with_memory(local.clone(), &settings).unwrap());
        assert!(embedder_egress(&children).is_empty(), "{local}");
    }
    // Memory off renders memory off: the agent never loads the model.
    let off = with_memory(serde_json::json!({"enabled": false}), &settings).unwrap();
    let config = saint_config::BotConfig::from_json(&rendered_config_json(&off)).unwrap();
    assert!(!config.memory.enabled);
}

#[test]
fn shared_memory_without_a_shared_embedder_is_refused_naming_the_field_and_the_chart_value() {
    let error = with_memory(serde_json::json!({"embedder": "shared"}), &settings())
        .expect_err("no shared embedder configured")
        .to_string();
    assert!(
        error.contains("spec.memory.embedder") && error.contains("embedder.enabled=true"),
        "{error}"
    );
}

/// Tenancy: a host and path another bot routed first are withheld with `HostClaimed`
/// naming that bot — no Ingress, everything else rendered; the earlier bot keeps it.
#[test]
fn a_webhook_path_an_earlier_bot_routes_on_the_host_is_withheld_naming_that_bot() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use saint_operator::saintbot_controller::validate::{
        validate,
        webhook_ingress::{HostClaim, claims_sharing_host},
    };
    let (mut bot, mut dereferenced) = load("acme.yaml");
    bot.metadata.creation_timestamp = Some(Time("2026-02-01T00:00:00Z".parse().unwrap()));
    let mut earlier = bot.clone();
    // Same namespace, so the rival renders with the fixture's Roles below; the e2e suite
    // shows the claim across namespaces.
    earlier.metadata.name = Some("acme-rival".to_string());
    earlier.metadata.creation_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().unwrap()));
    dereferenced.host_claims = claims_sharing_host(&bot, [&earlier, &bot]);
    assert_eq!(
        dereferenced.host_claims,
        vec![HostClaim::of(&earlier).unwrap()],
        "the bot's own claim is not among the others'"
    );
    let validated = validate(&bot, &dereferenced, &settings()).expect("the rest renders");
    assert!(validated.webhook_ingress.is_none());
    assert!(build_children(&validated).webhook_ingress.is_none());
    let (reason, message) = validated.webhook_problem.expect("the Ingress is withheld");
    assert_eq!(reason.as_str(), "HostClaimed");
    assert!(
        message.contains("host \"bot.acme.example\" path \"/channels/wa-main/webhook\"")
            && message.contains("SaintBot acme/acme-rival"),
        "{message}"
    );
    let mut rival_view = dereferenced.clone();
    rival_view.host_claims = claims_sharing_host(&earlier, [&earlier, &bot]);
    let owner = validate(&earlier, &rival_view, &settings()).expect("the earliest bot renders");
    assert!(owner.webhook_ingress.is_some() && owner.webhook_problem.is_none());
}

#[test]
fn an_ingress_annotation_outside_the_chart_allowlist_is_refused_naming_it_and_the_value() {
    let (mut bot, dereferenced) = load("acme.yaml");
    bot.spec
        .webhook_ingress
        .as_mut()
        .unwrap()
        .annotations
        .insert(
            "nginx.ingress.kubernetes.io/server-snippet".to_string(),
            "return 200;".to_string(),
        );
    let error =
        saint_operator::saintbot_controller::validate::validate(&bot, &dereferenced, &settings())
            .expect_err("the annotation is not on the list");
    assert_eq!(error.reason().as_str(), "InvalidSpec");
    let message = error.to_string();
    assert!(
        message.contains(
            "spec.webhookIngress.annotations[\"nginx.ingress.kubernetes.io/server-snippet\"]"
        ) && message.contains("webhookIngress.allowedAnnotations")
            && message.contains("allowed: cert-manager.io/cluster-issuer, cert-manager.io/issuer"),
        "{message}"
    );
}

/// `OperatorSettings::with_tag` (offline rendering, these tests) allows what the chart
/// allows by default, so a rendering here refuses exactly what an installed operator would.
#[test]
fn the_default_annotation_allowlist_is_the_chart_s() {
    let values: serde_json::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/saint/values.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        values["webhookIngress"]["allowedAnnotations"],
        serde_json::json!(saint_operator::settings::CHART_ALLOWED_INGRESS_ANNOTATIONS)
    );
}

/// A two-entry chain with a rotated key: each key reaches the agent container as the
/// variable the rendered config names, and only the agent container.
#[test]
fn the_failover_chain_s_keys_reach_the_agent_as_the_config_names_them() {
    let children = bot_with(|bot| {
        let model = &mut bot["spec"]["model"];
        model["additionalApiKeySecretRefs"] =
            serde_json::json!([{"name": "llm-spare", "key": "api-key"}]);
        model["fallbacks"] = serde_json::json!([{
            "provider": "openai", "name": "gpt-4.1",
            "apiKeySecretRef": {"name": "openai", "key": "api-key"},
        }]);
        model["failover"] = serde_json::json!({"deadlineSeconds": 30});
    });
    let config: saint_config::BotConfig = serde_json::from_str(
        children
            .config_map
            .data
            .as_ref()
            .unwrap()
            .get(saint_config::CONFIG_FILE_NAME)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        config.model.additional_api_key_envs,
        vec!["SAINT_MODEL_API_KEY_1"]
    );
    assert_eq!(
        serde_json::to_value(&config.model.fallbacks).unwrap(),
        serde_json::json!([{
            "provider": "openai", "name": "gpt-4.1", "baseUrl": "https://api.openai.com/v1",
            "apiKeyEnv": "SAINT_MODEL_FALLBACK_1_API_KEY",
        }])
    );
    assert_eq!(config.model.failover.deadline_seconds, 30);
    assert_eq!(
        config.model.failover.cool_down_seconds,
        saint_config::DEFAULT_COOL_DOWN_SECONDS
    );
    let deployment = serde_json::to_value(&children.deployment).unwrap();
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    for container in containers {
        let env = container["env"].as_array().cloned().unwrap_or_default();
        let secret_of = |name: &str| {
            env.iter()
                .find(|variable| variable["name"] == name)
                .map(|variable| variable["valueFrom"]["secretKeyRef"]["name"].clone())
        };
        if container["name"] == "agent" {
            assert_eq!(
                secret_of("SAINT_MODEL_API_KEY_1"),
                Some(serde_json::json!("llm-spare"))
            );
            assert_eq!(
                secret_of("SAINT_MODEL_FALLBACK_1_API_KEY"),
                Some(serde_json::json!("openai"))
            );
        } else {
            assert_eq!(
                secret_of("SAINT_MODEL_FALLBACK_1_API_KEY"),
                None,
                "{}",
                container["name"]
            );
        }
    }
}

/// The rendered config of `children`, as the agent reads it.
fn config_of(children: &Children) -> saint_config::BotConfig {
    serde_json::from_str(
        children
            .config_map
            .data
            .as_ref()
            .unwrap()
            .get(saint_config::CONFIG_FILE_NAME)
            .unwrap(),
    )
    .unwrap()
}

/// Each OTLP header's value is a Secret key in the agent container's environment, under
/// the variable the rendered config names for it; no other container has it, and the
/// agent's own validation accepts the result.
#[test]
fn the_collector_s_headers_reach_only_the_agent_as_the_config_names_them() {
    let children = bot_with(|bot| {
        bot["spec"]["telemetry"] = serde_json::json!({"otlp": {
            "endpoint": "https://otel.acme.example",
            "headers": [
                {"name": "Authorization", "secretKeyRef": {"name": "otel-auth", "key": "authorization"}},
                {"name": "X-Scope-OrgID", "secretKeyRef": {"name": "otel-tenant", "key": "tenant"}},
            ],
        }});
    });
    let config = config_of(&children);
    saint_config::validate(&config).expect("the agent accepts the rendered telemetry");
    let otlp = config.telemetry.otlp.expect("traces are exported");
    assert_eq!(otlp.endpoint, "https://otel.acme.example");
    assert_eq!(otlp.batch_delay_millis, 5_000);
    let expected = [
        ("Authorization", "otel-auth", "authorization"),
        ("X-Scope-OrgID", "otel-tenant", "tenant"),
    ];
    assert_eq!(
        otlp.headers_env.keys().collect::<Vec<_>>(),
        ["Authorization", "X-Scope-OrgID"]
    );
    let pod =
        serde_json::to_value(&children.deployment).unwrap()["spec"]["template"]["spec"].clone();
    let containers = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(pod["initContainers"].as_array().into_iter().flatten());
    for container in containers {
        let env = container["env"].as_array().cloned().unwrap_or_default();
        for (header, secret, key) in expected {
            let variable = &otlp.headers_env[header];
            let found = env.iter().find(|entry| entry["name"] == variable.as_str());
            if container["name"] == "agent" {
                assert_eq!(
                    found.map(|entry| entry["valueFrom"]["secretKeyRef"].clone()),
                    Some(serde_json::json!({"name": secret, "key": key})),
                    "{header}"
                );
            } else {
                assert_eq!(found, None, "{header} in {}", container["name"]);
            }
        }
        // No Secret of the collector's in any other way either.
        let text = container.to_string();
        if container["name"] != "agent" {
            assert!(
                !text.contains("otel-auth") && !text.contains("otel-tenant"),
                "{}",
                container["name"]
            );
        }
    }
    // A public host name gets no egress rule of its own: the internet rule covers it.
    assert!(
        !serde_json::to_string(&children.agent_network_policy)
            .unwrap()
            .contains("4318")
    );
}

/// The fixture's collector, by a private address, is reachable at exactly that address
/// and port; an address no rule opens is refused naming the field.
#[test]
fn a_collector_at_a_private_address_gets_exactly_its_egress_rule() {
    let rule = serde_json::json!({
        "to": [{"ipBlock": {"cidr": "10.43.7.20/32"}}],
        "ports": [{"port": 4318, "protocol": "TCP"}],
    });
    assert!(single_address_egress(&children()).contains(&rule));
    let without = bot_with(|bot| {
        bot["spec"].as_object_mut().unwrap().remove("telemetry");
    });
    assert!(!single_address_egress(&without).contains(&rule));
    assert!(config_of(&without).telemetry.otlp.is_none());

    let (bot, dereferenced) = load("acme.yaml");
    for endpoint in [
        "http://169.254.169.254/",
        "http://127.0.0.1:4318/",
        "http://[::1]:4318/",
    ] {
        let mut value = serde_json::to_value(&bot).unwrap();
        value["spec"]["telemetry"]["otlp"]["endpoint"] = endpoint.into();
        let bot = serde_json::from_value(value).unwrap();
        let message = saint_operator::saintbot_controller::validate::validate(
            &bot,
            &dereferenced,
            &settings(),
        )
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
        assert!(
            message.contains("spec.telemetry.otlp.endpoint") && message.contains("never reach"),
            "{endpoint}: {message}"
        );
    }
}

/// The agent reads `telemetry` only when it starts: a change rolls the pod.
#[test]
fn a_telemetry_change_rolls_the_pod() {
    let hash = |change: fn(&mut serde_json::Value)| {
        let (bot, dereferenced) = load("acme.yaml");
        let mut value = serde_json::to_value(&bot).unwrap();
        change(&mut value);
        let bot = serde_json::from_value(value).unwrap();
        restart_hash(
            &saint_operator::saintbot_controller::validate::validate(
                &bot,
                &dereferenced,
                &settings(),
            )
            .unwrap(),
        )
    };
    let before = hash(|_| {});
    let removed = hash(|bot| {
        bot["spec"].as_object_mut().unwrap().remove("telemetry");
    });
    let moved = hash(|bot| {
        bot["spec"]["telemetry"]["otlp"]["endpoint"] = "http://10.43.7.21:4318".into();
    });
    let rekeyed = hash(|bot| {
        bot["spec"]["telemetry"]["otlp"]["headers"][0]["secretKeyRef"]["key"] = "other".into();
    });
    assert_ne!(before, removed);
    assert_ne!(before, moved);
    assert_ne!(before, rekeyed);
}

/// The fixture's employee rules, as the agent reads them.
#[test]
fn approval_rules_render_into_the_role_with_their_defaults() {
    let config = config_of(&children());
    let rules = serde_json::to_value(&config.roles["employee"].approvals).unwrap();
    assert_eq!(
        rules,
        serde_json::json!([
            {"tools": ["exec"], "when": {"command": "git push*"},
             "approvers": {"roles": ["owner"]}, "timeoutSeconds": 3600},
            {"tools": ["message"], "approvers": {"contacts": ["acme-ana"]}, "timeoutSeconds": 600},
        ])
    );
    assert!(config.roles["owner"].approvals.is_empty());
}
