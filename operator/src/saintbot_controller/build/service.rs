//! The bot's Service `<bot>`: HTTP channel and webhooks on 8080, metrics on 9090. Pure.

use k8s_openapi::{
    api::core::v1::{Service, ServicePort, ServiceSpec},
    apimachinery::pkg::util::intstr::IntOrString,
};

use super::child_metadata;
use crate::{labels::agent_selector, saintbot_controller::validate::ValidatedSaintBot};

fn port(name: &str, number: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port: number,
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
            ports: Some(vec![port("http", 8080), port("metrics", 9090)]),
            type_: Some("ClusterIP".to_string()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
