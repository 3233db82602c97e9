//! Reading a channel's settings from the rendered config: every key is either used or
//! refused, required ones are named when missing, and secrets are read from the
//! environment variables the operator named (never from the config itself). Which keys
//! each channel kind takes is the contract's list, `saint_config::channel_settings`.

use std::collections::{BTreeMap, BTreeSet};

use saint_config::ChannelConfig;

/// Why a channel's settings cannot be used. Each message names the channel and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("channel {channel:?}: settings.{key} is required")]
    MissingSetting { channel: String, key: &'static str },
    #[error(
        "channel {channel:?}: settings.{key} is not a setting of {kind} channels (known: {known})"
    )]
    UnknownSetting {
        channel: String,
        kind: &'static str,
        key: String,
        known: String,
    },
    #[error(
        "channel {channel:?}: secrets.{key} is not a secret of {kind} channels (known: {known})"
    )]
    UnknownSecret {
        channel: String,
        kind: &'static str,
        key: String,
        known: String,
    },
    #[error("channel {channel:?}: settings.{key} {problem}")]
    InvalidSetting {
        channel: String,
        key: &'static str,
        problem: String,
    },
    #[error("channel {channel:?}: secrets.{key} is required")]
    SecretNotNamed { channel: String, key: &'static str },
    #[error("channel {channel:?}: secrets.{key}: variable {variable} is unset or empty")]
    SecretUnset {
        channel: String,
        key: &'static str,
        variable: String,
    },
}

/// A channel's settings being read; checks unknown keys on creation.
pub struct SettingsReader<'a> {
    channel: &'a ChannelConfig,
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> SettingsReader<'a> {
    /// Refuses keys outside `settings` and `secrets` for a channel of `kind`.
    pub fn new(
        channel: &'a ChannelConfig,
        kind: &'static str,
        settings: &[&str],
        secrets: &[&str],
        lookup: &'a dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        if let Some(key) = first_unknown(&channel.settings, settings) {
            return Err(SettingsError::UnknownSetting {
                channel: channel.name.clone(),
                kind,
                key: key.clone(),
                known: settings.join(", "),
            });
        }
        if let Some(key) = first_unknown(&channel.secret_env, secrets) {
            return Err(SettingsError::UnknownSecret {
                channel: channel.name.clone(),
                kind,
                key: key.clone(),
                known: secrets.join(", "),
            });
        }
        Ok(Self { channel, lookup })
    }

    /// The channel's name.
    pub fn channel(&self) -> &str {
        &self.channel.name
    }

    /// An optional setting.
    pub fn optional(&self, key: &'static str) -> Option<&'a str> {
        self.channel
            .settings
            .get(key)
            .map(String::as_str)
            .filter(|value| !value.trim().is_empty())
    }

    /// A required setting.
    pub fn required(&self, key: &'static str) -> Result<&'a str, SettingsError> {
        self.optional(key)
            .ok_or_else(|| SettingsError::MissingSetting {
                channel: self.channel.name.clone(),
                key,
            })
    }

    /// An http(s) URL setting, trimmed and without a trailing `/`; `default` when it is
    /// left out, required when there is no default.
    pub fn http_url(
        &self,
        key: &'static str,
        default: Option<&'static str>,
    ) -> Result<String, SettingsError> {
        let raw = match default {
            Some(default) => self.optional(key).unwrap_or(default),
            None => self.required(key)?,
        };
        let url = raw.trim().trim_end_matches('/').to_string();
        let parsed = reqwest::Url::parse(&url)
            .map_err(|error| self.invalid(key, format!("is not a URL: {error}")))?;
        if !matches!(parsed.scheme(), "https" | "http") || parsed.host().is_none() {
            return Err(self.invalid(key, "must be an http(s) URL"));
        }
        Ok(url)
    }

    /// An invalid value of `key`.
    pub fn invalid(&self, key: &'static str, problem: impl Into<String>) -> SettingsError {
        SettingsError::InvalidSetting {
            channel: self.channel.name.clone(),
            key,
            problem: problem.into(),
        }
    }

    /// A required secret's value, from the variable the config names.
    pub fn secret(&self, key: &'static str) -> Result<String, SettingsError> {
        let variable =
            self.channel
                .secret_env
                .get(key)
                .ok_or_else(|| SettingsError::SecretNotNamed {
                    channel: self.channel.name.clone(),
                    key,
                })?;
        (self.lookup)(variable)
            .filter(|value| !value.is_empty())
            .ok_or_else(|| SettingsError::SecretUnset {
                channel: self.channel.name.clone(),
                key,
                variable: variable.clone(),
            })
    }
}

/// The first key of `present` (in key order) that is not `known`.
fn first_unknown<'a>(present: &'a BTreeMap<String, String>, known: &[&str]) -> Option<&'a String> {
    let known: BTreeSet<&str> = known.iter().copied().collect();
    present.keys().find(|key| !known.contains(key.as_str()))
}
