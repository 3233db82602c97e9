//! What the declared channels will and will not do, said once at start: a channel whose
//! settings cannot work, an HTTP channel whose token is missing (every message would be
//! refused with 401). Pure: reads the config and looks variables up; the caller logs.

use std::fmt;

use saint_channels::{SettingsError, open};
use saint_config::{BotConfig, ChannelKind};

/// The HTTP channel's port when its settings name none.
pub const DEFAULT_HTTP_PORT: u16 = 8080;

/// Whether the HTTP channel serves the chat page (`settings.chatPage: "true"`): in a
/// cluster, the page reached through `kubectl port-forward` with the channel's token.
pub fn declared_chat_page(config: &BotConfig) -> bool {
    config
        .channels
        .iter()
        .filter(|channel| channel.kind == ChannelKind::Http)
        .any(|channel| channel.settings.get("chatPage").map(|value| value.trim()) == Some("true"))
}

/// The HTTP channel's `settings.port` is not a port number: it listens on the default.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "http channel {channel:?}: settings.port is {value:?}, not a port number (1-65535): \
     listening on {DEFAULT_HTTP_PORT}"
)]
pub struct BadHttpPort {
    /// The channel's name.
    pub channel: String,
    /// What `settings.port` says, trimmed.
    pub value: String,
}

/// The port the (first) HTTP channel's `settings.port` names, if it names one; an error
/// naming the field when it is not a port number.
pub fn declared_http_port(config: &BotConfig) -> Result<Option<u16>, BadHttpPort> {
    let Some(channel) = config
        .channels
        .iter()
        .find(|channel| channel.kind == ChannelKind::Http)
    else {
        return Ok(None);
    };
    match channel.settings.get("port").map(|port| port.trim()) {
        None | Some("") => Ok(None),
        Some(text) => text
            .parse::<u16>()
            .ok()
            .filter(|port| *port > 0)
            .map(Some)
            .ok_or_else(|| BadHttpPort {
                channel: channel.name.clone(),
                value: text.to_owned(),
            }),
    }
}

/// One problem with the declared channels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelProblem {
    /// No HTTP channel is declared: the HTTP API refuses every message.
    NoHttpChannel,
    /// The HTTP channel names no token variable in `secretEnv.token`.
    TokenNotNamed { name: String },
    /// The HTTP channel's token variable is unset or empty.
    TokenUnset { name: String, variable: String },
    /// A channel's settings or secrets are incomplete or wrong: it is not started.
    Settings(SettingsError),
}

impl fmt::Display for ChannelProblem {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelProblem::NoHttpChannel => write!(
                formatter,
                "no http channel is declared: the HTTP API refuses every message with 401"
            ),
            ChannelProblem::TokenNotNamed { name } => write!(
                formatter,
                "http channel {name:?} names no token variable (secretEnv.token): every \
                 message is refused with 401"
            ),
            ChannelProblem::TokenUnset { name, variable } => write!(
                formatter,
                "http channel {name:?}: its token variable {variable} is unset or empty: \
                 every message is refused with 401 until it is set and the agent restarted"
            ),
            ChannelProblem::Settings(error) => write!(
                formatter,
                "{error}: the channel is not started, its messages are not received"
            ),
        }
    }
}

/// The problems of `config`'s channels, in declaration order.
pub fn channel_problems(
    config: &BotConfig,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<ChannelProblem> {
    let mut problems = Vec::new();
    let mut http_declared = false;
    for channel in &config.channels {
        if channel.kind != ChannelKind::Http {
            if let Err(error) = open::check(channel, &lookup) {
                problems.push(ChannelProblem::Settings(error));
            }
            continue;
        }
        http_declared = true;
        match channel.secret_env.get("token") {
            None => problems.push(ChannelProblem::TokenNotNamed {
                name: channel.name.clone(),
            }),
            Some(variable) if lookup(variable).is_none_or(|value| value.is_empty()) => problems
                .push(ChannelProblem::TokenUnset {
                    name: channel.name.clone(),
                    variable: variable.clone(),
                }),
            Some(_) => {}
        }
    }
    if !http_declared {
        problems.push(ChannelProblem::NoHttpChannel);
    }
    problems
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn config(channels: serde_json::Value) -> BotConfig {
        let mut config: serde_json::Value = serde_json::from_str(include_str!(
            "../../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        config["channels"] = channels;
        serde_json::from_value(config).unwrap()
    }

    #[test]
    fn every_declared_channel_that_cannot_work_is_named_once() {
        let config = config(json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "API_TOKEN"}},
            {"name": "wa", "kind": "whatsapp", "settings": {"phoneNumberId": "1"},
             "secretEnv": {"accessToken": "WA", "appSecret": "WA_SECRET"}},
            {"name": "wa2", "kind": "whatsapp", "settings": {"phoneNumber": "1"}},
            {"name": "tg", "kind": "telegram", "secretEnv": {"botToken": "TG"},
             "settings": {"groupPolicy": "everyone"}},
        ]));
        let set = HashMap::from([("API_TOKEN", "t0k3n"), ("WA", "token"), ("TG", "123:abc")]);
        let problems = channel_problems(&config, |name| set.get(name).map(|v| v.to_string()));
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "channel \"wa\": secrets.appSecret: variable WA_SECRET is unset or empty"
            ),
            "{}",
            lines[0]
        );
        assert!(lines[1].starts_with("channel \"wa2\": settings.phoneNumber is not a setting of whatsapp channels (known: phoneNumberId, apiBaseUrl)"), "{}", lines[1]);
        assert!(
            lines[2].starts_with(
                "channel \"tg\": settings.groupPolicy is \"everyone\"; use open, contacts or disabled"
            ),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn the_http_channels_port_setting_is_read_and_a_bad_one_named() {
        let with = |port: &str| {
            config(json!([
                {"name": "api", "kind": "http", "settings": {"port": port},
                 "secretEnv": {"token": "API_TOKEN"}},
            ]))
        };
        assert_eq!(declared_http_port(&with("8081")), Ok(Some(8081)));
        assert_eq!(
            declared_http_port(&config(json!([{"name": "api", "kind": "http"}]))),
            Ok(None)
        );
        for bad in ["0", "65536", "http", "-1"] {
            let error = declared_http_port(&with(bad)).unwrap_err().to_string();
            assert!(
                error.starts_with("http channel \"api\": settings.port is"),
                "{error}"
            );
        }
    }

    #[test]
    fn an_http_channel_without_its_token_says_every_message_gets_401() {
        let unset = config(json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "API_TOKEN"}},
        ]));
        let empty = HashMap::from([("API_TOKEN", "")]);
        for lookup in [HashMap::new(), empty] {
            let problems = channel_problems(&unset, |name| lookup.get(name).map(|v| v.to_string()));
            assert_eq!(
                problems,
                vec![ChannelProblem::TokenUnset {
                    name: "api".into(),
                    variable: "API_TOKEN".into()
                }]
            );
            assert!(problems[0].to_string().contains("401"));
        }
        let unnamed = config(json!([{"name": "api", "kind": "http"}]));
        assert_eq!(
            channel_problems(&unnamed, |_| None),
            vec![ChannelProblem::TokenNotNamed { name: "api".into() }]
        );
        assert_eq!(
            channel_problems(&config(json!([])), |_| None),
            vec![ChannelProblem::NoHttpChannel]
        );
    }
}
