//! Channels: non-secret settings go into the config; each secret setting becomes an
//! environment variable of the `agent` container, named once and checked for clashes.
//! Pure.

use std::collections::BTreeMap;

use saint_config::{ChannelConfig, ChannelKind};

use super::ValidateError;
use crate::{
    crd::{SecretKeyReference, saintbot::ChannelSpec},
    labels::channel_secret_env,
    saintbot_controller::build::workload::{AGENT_METRICS_PORT, PORTER_METRICS_PORT},
};

/// The rendered channels and the Secret keys the agent container gets.
pub(super) struct RenderedChannels {
    /// Channels as the config lists them.
    pub channels: Vec<ChannelConfig>,
    /// (env var, Secret key), sorted.
    pub secrets: Vec<(String, SecretKeyReference)>,
}

pub(super) fn render_channels(specs: &[ChannelSpec]) -> Result<RenderedChannels, ValidateError> {
    let mut channels = Vec::new();
    let mut secrets = Vec::new();
    let mut seen_env = BTreeMap::new();
    let mut http_port: Option<u16> = None;
    for channel in specs {
        let mut secret_env = BTreeMap::new();
        for (setting, secret) in &channel.secrets {
            let field = format!("spec.channels[{}].secrets.{setting}", channel.name);
            if secret.name.is_empty() || secret.key.is_empty() {
                return Err(ValidateError::InvalidChannel {
                    field,
                    message: "needs a non-empty Secret name and key".to_string(),
                });
            }
            let env = channel_secret_env(&channel.name, setting);
            if let Some(previous) =
                seen_env.insert(env.clone(), format!("{}.{setting}", channel.name))
            {
                return Err(ValidateError::InvalidChannel {
                    field,
                    message: format!("maps to env var {env}, already used by {previous}"),
                });
            }
            secret_env.insert(setting.clone(), env.clone());
            secrets.push((env, secret.clone()));
        }
        // The HTTP port is the pod's: it must not be another listener's, and every HTTP
        // channel must agree on it (the agent serves one HTTP address).
        if channel.kind == ChannelKind::Http
            && let Some(port) = channel.settings.get("port")
        {
            let field = format!("spec.channels[{}].settings.port", channel.name);
            let number = port.trim().parse::<u16>().ok().filter(|port| *port > 0);
            let clash = match number {
                None => Some("is not a port number (1-65535)".to_string()),
                Some(AGENT_METRICS_PORT) => Some(format!(
                    "is {AGENT_METRICS_PORT}, the agent's metrics port; choose another"
                )),
                Some(PORTER_METRICS_PORT) => Some(format!(
                    "is {PORTER_METRICS_PORT}, Porter's metrics port; choose another"
                )),
                Some(number) => match http_port.replace(number) {
                    Some(other) if other != number => Some(format!(
                        "is {number}, but another http channel names {other}: the agent serves \
                         one HTTP port"
                    )),
                    _ => None,
                },
            };
            if let Some(message) = clash {
                return Err(ValidateError::InvalidChannel { field, message });
            }
        }
        channels.push(ChannelConfig {
            name: channel.name.clone(),
            kind: channel.kind,
            settings: channel.settings.clone(),
            secret_env,
        });
    }
    secrets.sort();
    Ok(RenderedChannels { channels, secrets })
}
