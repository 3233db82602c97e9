//! The bot's Service `<bot>`: the agent's HTTP channel and webhooks, and its metrics. Pure.

use k8s_openapi::{
    api::core::v1::{Service, ServicePort, ServiceSpec},
    apimachinery::pkg::util::intstr::IntOrString,
};

use super::{
    child_metadata,
    workload::{AGENT_METRICS_PORT, agent_http_port},
};
use crate::{labels::agent_selector, saintbot_controller::validate::ValidatedSaintBot};

fn port(name: &str, number: u16) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port: i32::from(number),
        target_port: Some(IntOrString::String(name.to_string())),
        protocol: Some("TCP".to_string()),
        ..ServicePort::default()
    }
}

/// `<bot>`, ClusterIP, selecting the bot pod.
pub fn service(bot: &ValidatedSaintBot) -> Service {
    Service {
        metadata: child_metadata(bot, bot.name.clone(), "agent"),
        spec: Some(ServiceSpec {
            selector: Some(agent_selector(&bot.name)),
            ports: Some(vec![
                port("http", agent_http_port(bot)),
                port("metrics", AGENT_METRICS_PORT),
            ]),
            type_: Some("ClusterIP".to_string()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
