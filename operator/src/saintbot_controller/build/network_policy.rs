//! NetworkPolicies: the bot pod reaches the internet, DNS and the API server but not the
//! cluster's private ranges, and admits the webhook Ingress's controller to its HTTP port;
//! sandbox pods get no ingress and no egress at all. Pure.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::json;

use super::{
    child_metadata, typed,
    workload::{AGENT_METRICS_PORT, PORTER_METRICS_PORT, agent_http_port},
};
use crate::{
    labels::{
        agent_network_policy_name, agent_selector, sandbox_network_policy_name, sandbox_selector,
    },
    saintbot_controller::validate::ValidatedSaintBot,
};

/// Ranges the bot pod may not reach even though "the internet" is allowed: private
/// networks (pods, services, nodes), shared address space, loopback and link-local
/// (cloud metadata endpoints hand out credentials).
pub const PRIVATE_IPV4_RANGES: &[&str] = &[
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
];

/// IPv6 counterparts: unique-local, link-local, loopback.
pub const PRIVATE_IPV6_RANGES: &[&str] = &["::1/128", "fc00::/7", "fe80::/10"];

/// `<bot>-agent`: ingress to the HTTP and metrics ports; egress to public addresses,
/// cluster DNS and the API server endpoints.
pub fn agent_network_policy(bot: &ValidatedSaintBot) -> NetworkPolicy {
    let mut egress = vec![
        json!({"to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE_IPV4_RANGES}},
            {"ipBlock": {"cidr": "::/0", "except": PRIVATE_IPV6_RANGES}},
        ]}),
        json!({
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }],
            "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
        }),
    ];
    if !bot.api_server_cidrs.is_empty() {
        let peers: Vec<_> = bot
            .api_server_cidrs
            .iter()
            .map(|cidr| json!({"ipBlock": {"cidr": cidr}}))
            .collect();
        egress.push(
            json!({"to": peers, "ports": [{"port": bot.api_server_port, "protocol": "TCP"}]}),
        );
    }
    // The HTTP channel, and the agent's and Porter's metrics for scraping (no secrets
    // there); Porter's call and control sockets are unix sockets only.
    let mut ingress = vec![json!({"ports": [
        {"port": agent_http_port(bot), "protocol": "TCP"},
        {"port": AGENT_METRICS_PORT, "protocol": "TCP"},
        {"port": PORTER_METRICS_PORT, "protocol": "TCP"},
    ]})];
    // The webhook Ingress's controller, to the HTTP port only. The rule above admits it
    // today as well; this one states the Ingress's need on its own, so narrowing the
    // HTTP channel's sources later cannot silently cut the platforms' webhooks off.
    if let Some(webhooks) = &bot.webhook_ingress {
        ingress.push(json!({
            "from": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": webhooks.controller_namespace,
            }}}],
            "ports": [{"port": agent_http_port(bot), "protocol": "TCP"}],
        }));
    }
    let metadata = serde_json::to_value(child_metadata(
        bot,
        agent_network_policy_name(&bot.name),
        "agent",
    ))
    .expect("metadata serialises");
    typed(json!({
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": agent_selector(&bot.name)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }))
}

/// `<bot>-sandbox`: selects the bot's sandbox pods and allows nothing. Commands reach
/// credentials only through the Porter unix socket, never the network.
pub fn sandbox_network_policy(bot: &ValidatedSaintBot) -> NetworkPolicy {
    let metadata = serde_json::to_value(child_metadata(
        bot,
        sandbox_network_policy_name(&bot.name),
        "sandbox",
    ))
    .expect("metadata serialises");
    typed(json!({
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": sandbox_selector(&bot.name)},
            "policyTypes": ["Ingress", "Egress"],
        },
    }))
}
