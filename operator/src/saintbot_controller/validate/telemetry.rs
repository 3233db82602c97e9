//! `spec.telemetry`: where the bot's traces go. The collector's URL goes into the config;
//! each header's value is a Secret key that reaches only the `agent` container, as an
//! environment variable the config names (`headersEnv`). Pure.

use std::collections::BTreeMap;

use saint_config::{OtlpConfig, TelemetryConfig};
use url::Url;

use super::ValidateError;
use crate::{
    crd::{
        SecretKeyReference,
        saintbot::{MAX_OTLP_BATCH_DELAY_MILLIS, TelemetrySpec},
    },
    saintbot_controller::build::network_policy::refused_endpoint,
};

/// Prefix of the agent container's variables holding the OTLP headers' values:
/// `SAINT_OTLP_HEADER_0`, `SAINT_OTLP_HEADER_1`, … in `headers` order.
pub const OTLP_HEADER_ENV_PREFIX: &str = "SAINT_OTLP_HEADER_";

/// Batch delay when `batchDelayMillis` is absent: the agent's own default.
pub use saint_config::DEFAULT_OTLP_BATCH_DELAY_MILLIS;

/// `spec.telemetry` rendered: the config's section, and the header Secrets as
/// (env var, Secret key), in `headers` order (agent container only).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RenderedTelemetry {
    pub config: TelemetryConfig,
    pub secrets: Vec<(String, SecretKeyReference)>,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ValidateError {
    ValidateError::InvalidSetting {
        field: field.into(),
        message: message.into(),
    }
}

/// An HTTP header name: an RFC 9110 token.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

/// Renders `spec.telemetry`, re-checking what CEL checks (the CRD may be installed
/// without validation) and what it cannot: a header name twice in another case, and an
/// endpoint no egress rule ever opens (as for `model.baseUrl`).
pub(super) fn render_telemetry(
    spec: Option<&TelemetrySpec>,
) -> Result<RenderedTelemetry, ValidateError> {
    let Some(otlp) = spec.and_then(|telemetry| telemetry.otlp.as_ref()) else {
        return Ok(RenderedTelemetry::default());
    };
    let field = "spec.telemetry.otlp.endpoint";
    let url = Url::parse(&otlp.endpoint)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
        .ok_or_else(|| {
            invalid(
                field,
                format!(
                    "{:?} must be an http:// or https:// URL with a host",
                    otlp.endpoint
                ),
            )
        })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            field,
            "must not carry credentials in the URL (it is in the bot's ConfigMap): send them \
             in a header from a Secret (spec.telemetry.otlp.headers)",
        ));
    }
    if let Some(why) = refused_endpoint(&otlp.endpoint) {
        return Err(invalid(field, format!("bot pods never reach {why}")));
    }
    if url.scheme() == "http" && !otlp.headers.is_empty() && otlp.allow_insecure.is_none() {
        return Err(invalid(
            field,
            "is plain http://: the headers' values would cross the network in clear text; use \
             https://, or set spec.telemetry.otlp.allowInsecure to say why clear text is \
             acceptable here",
        ));
    }
    let mut headers_env = BTreeMap::new();
    let mut secrets = Vec::with_capacity(otlp.headers.len());
    for (index, header) in otlp.headers.iter().enumerate() {
        let field = format!("spec.telemetry.otlp.headers[{index}]");
        if !is_header_name(&header.name) {
            return Err(invalid(
                format!("{field}.name"),
                format!("{:?} is not an HTTP header name", header.name),
            ));
        }
        if let Some(earlier) = otlp.headers[..index]
            .iter()
            .find(|earlier| earlier.name.eq_ignore_ascii_case(&header.name))
        {
            return Err(invalid(
                format!("{field}.name"),
                format!(
                    "{:?} is the header {:?} again (header names ignore case)",
                    header.name, earlier.name
                ),
            ));
        }
        if header.secret_key_ref.name.is_empty() || header.secret_key_ref.key.is_empty() {
            return Err(invalid(
                format!("{field}.secretKeyRef"),
                "must name both a Secret (name) and a key in it (key)",
            ));
        }
        let env = format!("{OTLP_HEADER_ENV_PREFIX}{index}");
        headers_env.insert(header.name.clone(), env.clone());
        secrets.push((env, header.secret_key_ref.clone()));
    }
    let batch_delay_millis = otlp
        .batch_delay_millis
        .unwrap_or(DEFAULT_OTLP_BATCH_DELAY_MILLIS);
    if !(1..=MAX_OTLP_BATCH_DELAY_MILLIS).contains(&batch_delay_millis) {
        return Err(invalid(
            "spec.telemetry.otlp.batchDelayMillis",
            format!("{batch_delay_millis} is outside 1 to {MAX_OTLP_BATCH_DELAY_MILLIS}"),
        ));
    }
    Ok(RenderedTelemetry {
        config: TelemetryConfig {
            otlp: Some(OtlpConfig {
                endpoint: otlp.endpoint.clone(),
                headers_env,
                batch_delay_millis,
            }),
        },
        secrets,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn render(otlp: Value) -> Result<RenderedTelemetry, String> {
        let spec: TelemetrySpec = serde_json::from_value(json!({"otlp": otlp})).unwrap();
        render_telemetry(Some(&spec)).map_err(|error| error.to_string())
    }

    #[test]
    fn no_telemetry_renders_nothing() {
        assert_eq!(
            render_telemetry(None).unwrap(),
            RenderedTelemetry::default()
        );
        assert_eq!(
            render_telemetry(Some(&TelemetrySpec::default())).unwrap(),
            RenderedTelemetry::default()
        );
    }

    #[test]
    fn headers_become_agent_variables_from_their_secrets() {
        let rendered = render(json!({
            "endpoint": "https://otel.acme.example",
            "headers": [
                {"name": "Authorization", "secretKeyRef": {"name": "otel", "key": "authorization"}},
                {"name": "X-Scope-OrgID", "secretKeyRef": {"name": "otel", "key": "tenant"}},
            ],
            "batchDelayMillis": 2000,
        }))
        .unwrap();
        assert_eq!(
            rendered.config.otlp,
            Some(OtlpConfig {
                endpoint: "https://otel.acme.example".into(),
                headers_env: BTreeMap::from([
                    ("Authorization".into(), "SAINT_OTLP_HEADER_0".into()),
                    ("X-Scope-OrgID".into(), "SAINT_OTLP_HEADER_1".into()),
                ]),
                batch_delay_millis: 2000,
            })
        );
        let secrets: Vec<(&str, &str, &str)> = rendered
            .secrets
            .iter()
            .map(|(env, secret)| (env.as_str(), secret.name.as_str(), secret.key.as_str()))
            .collect();
        assert_eq!(
            secrets,
            [
                ("SAINT_OTLP_HEADER_0", "otel", "authorization"),
                ("SAINT_OTLP_HEADER_1", "otel", "tenant")
            ]
        );
        // Without a batch delay, the agent's default.
        let plain = render(json!({"endpoint": "http://10.0.12.7:4318"})).unwrap();
        assert_eq!(plain.config.otlp.unwrap().batch_delay_millis, 5_000);
    }

    #[test]
    fn each_mistake_is_refused_naming_the_field() {
        let header =
            |name: &str| json!({"name": name, "secretKeyRef": {"name": "otel", "key": "k"}});
        for (otlp, expected) in [
            (
                json!({"endpoint": "otel:4318"}),
                "spec.telemetry.otlp.endpoint: \"otel:4318\" must be an http:// or https:// URL",
            ),
            (
                json!({"endpoint": "grpc://otel.acme.example:4317"}),
                "spec.telemetry.otlp.endpoint: \"grpc://",
            ),
            (
                json!({"endpoint": "https://user:secret@otel.acme.example"}),
                "spec.telemetry.otlp.endpoint: must not carry credentials",
            ),
            (
                json!({"endpoint": "http://169.254.169.254/"}),
                "spec.telemetry.otlp.endpoint: bot pods never reach 169.254.169.254 port 80",
            ),
            (
                json!({"endpoint": "http://127.0.0.1:4318"}),
                "spec.telemetry.otlp.endpoint: bot pods never reach 127.0.0.1 port 4318",
            ),
            (
                json!({"endpoint": "http://otel.monitoring:4318", "headers": [header("Authorization")]}),
                "spec.telemetry.otlp.endpoint: is plain http://",
            ),
            (
                json!({"endpoint": "https://otel.acme.example", "headers": [header("X Token")]}),
                "spec.telemetry.otlp.headers[0].name: \"X Token\" is not an HTTP header name",
            ),
            (
                json!({"endpoint": "https://otel.acme.example",
                    "headers": [header("Authorization"), header("authorization")]}),
                "spec.telemetry.otlp.headers[1].name: \"authorization\" is the header \"Authorization\" again",
            ),
            (
                json!({"endpoint": "https://otel.acme.example",
                    "headers": [{"name": "Authorization", "secretKeyRef": {"name": "otel", "key": ""}}]}),
                "spec.telemetry.otlp.headers[0].secretKeyRef: must name both",
            ),
            (
                json!({"endpoint": "https://otel.acme.example", "batchDelayMillis": 0}),
                "spec.telemetry.otlp.batchDelayMillis: 0 is outside 1 to 60000",
            ),
        ] {
            let message = render(otlp.clone()).expect_err(&otlp.to_string());
            assert!(message.contains(expected), "{otlp}: {message}");
        }
        // Plain http:// with headers is a decision written down.
        render(
            json!({"endpoint": "http://otel.monitoring:4318", "headers": [header("Authorization")],
            "allowInsecure": "collector on the node, token scoped to this bot"}),
        )
        .expect("allowInsecure admits it");
    }
}
