//! NetworkPolicies: the bot pod reaches the internet, DNS and the API server but not the
//! cluster's private ranges, and admits the webhook Ingress's controller to its HTTP port;
//! sandbox pods get no ingress and no egress at all. Pure.

use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use saint_config::{BotConfig, EmbeddingsConfig};
use serde_json::{Value, json};
use url::{Host, Url};

use super::{
    child_metadata, typed,
    workload::{AGENT_METRICS_PORT, PORTER_METRICS_PORT, agent_http_port},
};
use crate::{
    labels::{
        agent_network_policy_name, agent_selector, sandbox_network_policy_name, sandbox_selector,
    },
    saintbot_controller::validate::ValidatedSaintBot,
    settings::SHARED_EMBEDDER_POD_LABELS,
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
    // Public addresses are allowed above; an endpoint the bot's config names by a private
    // address (a model server, embedder or trace collector inside the cluster or on the
    // node) would be cut off by the `except` ranges, so exactly that address and port is
    // allowed as well.
    for (address, port) in private_endpoints(&bot.config) {
        let cidr = match address {
            IpAddr::V4(_) => format!("{address}/32"),
            IpAddr::V6(_) => format!("{address}/128"),
        };
        egress.push(json!({
            "to": [{"ipBlock": {"cidr": cidr}}],
            "ports": [{"port": port, "protocol": "TCP"}],
        }));
    }
    // The chart's shared embedder, by its namespace and pod labels: a Service name is
    // not an address a policy can match, and its ClusterIP is translated away before
    // the policy applies.
    if let Some(embedder) = &bot.shared_embedder {
        let labels: serde_json::Map<String, Value> = SHARED_EMBEDDER_POD_LABELS
            .iter()
            .map(|(key, value)| (key.to_string(), json!(value)))
            .collect();
        egress.push(json!({
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": embedder.namespace}},
                "podSelector": {"matchLabels": labels},
            }],
            "ports": [{"port": embedder.port, "protocol": "TCP"}],
        }));
    }
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

/// The endpoints the rendered config names by a private IP literal (`model.baseUrl`, an
/// OpenAI-compatible embedder's `baseUrl`, the OTLP collector's `endpoint`, the
/// transcription endpoint's `baseUrl`),
/// deduplicated, in order. Host names are not resolved here: a policy matches
/// addresses, and a name's addresses change behind it.
pub fn private_endpoints(config: &BotConfig) -> Vec<(IpAddr, u16)> {
    let mut urls = vec![config.model.base_url.as_str()];
    if let EmbeddingsConfig::Openai { base_url, .. } = &config.memory.embeddings {
        urls.push(base_url);
    }
    if let Some(otlp) = &config.telemetry.otlp {
        urls.push(&otlp.endpoint);
    }
    if let Some(transcription) = &config.media.transcription {
        urls.push(&transcription.base_url);
    }
    let mut endpoints = Vec::new();
    for url in urls {
        let Some((address, port)) = ip_literal(url) else {
            continue;
        };
        if is_private(address)
            && never_opened(address, port).is_none()
            && !endpoints.contains(&(address, port))
        {
            endpoints.push((address, port));
        }
    }
    endpoints
}

/// The address and port of a URL whose host is an IP literal (IPv4-mapped IPv6
/// addresses as IPv4, the form policies match).
fn ip_literal(url: &str) -> Option<(IpAddr, u16)> {
    let url = Url::parse(url).ok()?;
    let address = match url.host()? {
        Host::Ipv4(address) => IpAddr::V4(address),
        Host::Ipv6(address) => address
            .to_ipv4_mapped()
            .map_or(IpAddr::V6(address), IpAddr::V4),
        Host::Domain(_) => return None,
    };
    Some((address, url.port_or_known_default()?))
}

/// Addresses no egress rule ever opens, even when the config names them: the pod's own
/// loopback, link-local ranges and the cloud metadata services (they hand out the
/// node's credentials), the unspecified address, and port 0.
fn never_opened(address: IpAddr, port: u16) -> Option<&'static str> {
    const METADATA: [&str; 2] = ["100.100.100.200", "fd00:ec2::254"];
    if port == 0 {
        Some("port 0")
    } else if address.is_loopback() {
        Some("a loopback address (the pod itself)")
    } else if address.is_unspecified() {
        Some("the unspecified address")
    } else if METADATA
        .iter()
        .any(|metadata| metadata.parse() == Ok(address))
        || matches!(address, IpAddr::V4(v4) if v4.is_link_local())
        || matches!(address, IpAddr::V6(v6) if v6.is_unicast_link_local())
    {
        Some("a link-local or cloud metadata address, which hands out the node's credentials")
    } else {
        None
    }
}

/// Why a bot may not name `url` as an endpoint, if its host is an address no egress
/// rule opens; validation refuses such a spec instead of rendering a bot that cannot
/// reach it.
pub fn refused_endpoint(url: &str) -> Option<String> {
    let (address, port) = ip_literal(url)?;
    never_opened(address, port).map(|why| format!("{address} port {port} is {why}"))
}

/// Whether `address` falls in one of the ranges the internet rule excepts.
fn is_private(address: IpAddr) -> bool {
    let ranges = match address {
        IpAddr::V4(_) => PRIVATE_IPV4_RANGES,
        IpAddr::V6(_) => PRIVATE_IPV6_RANGES,
    };
    ranges.iter().any(|range| {
        let (network, prefix) = range.split_once('/').expect("ranges are CIDRs");
        let prefix: u32 = prefix.parse().expect("ranges are CIDRs");
        match (
            address,
            network.parse::<IpAddr>().expect("ranges are CIDRs"),
        ) {
            (IpAddr::V4(address), IpAddr::V4(network)) => {
                let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
                u32::from(address) & mask == u32::from(network) & mask
            }
            (IpAddr::V6(address), IpAddr::V6(network)) => {
                let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
                u128::from(address) & mask == u128::from(network) & mask
            }
            _ => false,
        }
    })
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
