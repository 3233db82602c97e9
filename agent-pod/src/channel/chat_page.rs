//! The chat page: talk to the bot as any of its contacts or as a stranger, and see which
//! role, model and tools each message got — the quickest way to understand roles.
//!
//! Plain HTML, CSS and a small script, compiled into the binary and served only when
//! asked for (`saint-agent up`, or `run --chat-page`). The page holds no secret: it
//! reads the HTTP channel's token from its own address fragment (never sent to the
//! server) and calls the same authenticated API as any other client.
//!
//! The person picker is for one person at their own machine. Where the page is reached
//! from elsewhere (`up` listening past loopback) there is none: each contact gets a
//! token of their own that speaks only as them, and the HTTP channel's token lists no
//! one to speak as.

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};
use saint_config::{BotConfig, ChannelKind};
use serde::Serialize;

use super::{
    http::{Access, ApiError, AppState, authorise, constant_time_equal},
    startup::channel_problems,
};

/// The peer id the page uses for "a stranger" (an HTTP identity no contact has).
pub const STRANGER_PEER: &str = "chat-page-stranger";

const INDEX_HTML: &str = include_str!("chat_page/index.html");
const APP_JS: &str = include_str!("chat_page/app.js");
const STYLE_CSS: &str = include_str!("chat_page/style.css");

// The page loads only its own script and style and talks only to this server.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// What the page shows and whom it may speak as.
#[derive(Clone, Debug, Default)]
pub struct PageSettings {
    /// Start-up lines (`up`: which model, memory on or off, what to set).
    pub notices: Vec<String>,
    /// Lines the person who started the bot must not miss (it listens past loopback).
    pub warnings: Vec<String>,
    /// `Some`: no person picker; each contact speaks through their own token only.
    pub person_tokens: Option<PersonTokens>,
}

/// Each contact's own page token (`up` past loopback).
#[derive(Clone, Default)]
pub struct PersonTokens {
    /// Contact slug and token.
    tokens: Vec<(String, String)>,
}

impl PersonTokens {
    /// Tokens by contact slug.
    pub fn new(tokens: Vec<(String, String)>) -> Self {
        Self { tokens }
    }

    /// Slug and token of each contact.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tokens
            .iter()
            .map(|(slug, token)| (slug.as_str(), token.as_str()))
    }

    /// The contact `presented` is the token of. Every token is compared, so the time
    /// taken says nothing about which one came close.
    pub fn holder(&self, presented: &str) -> Option<&str> {
        self.tokens.iter().fold(None, |found, (slug, token)| {
            if constant_time_equal(presented.as_bytes(), token.as_bytes()) {
                Some(slug.as_str())
            } else {
                found
            }
        })
    }
}

impl std::fmt::Debug for PersonTokens {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slugs: Vec<&str> = self.tokens.iter().map(|(slug, _)| slug.as_str()).collect();
        formatter
            .debug_struct("PersonTokens")
            .field("contacts", &slugs)
            .finish_non_exhaustive()
    }
}

/// Routes of the page itself (`/chat`, its script and style).
pub fn page_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/chat",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/chat/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/chat/style.css",
            get(|| async { asset(STYLE_CSS, "text/css; charset=utf-8") }),
        )
}

/// API routes the page reads (authenticated like `/v1/messages`).
pub fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/people", get(people))
        .route("/v1/status", get(status))
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Someone the page can speak as.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// Display name ("Ana"), or "A stranger".
    pub name: String,
    /// The role the bot gives them.
    pub role: String,
    /// The channel and peer a message is sent as: one of the contact's own identities.
    pub channel: String,
    pub peer: String,
    /// Whether this is a contact (false: the stranger).
    pub known: bool,
    /// The contact's slug (the stranger: empty).
    #[serde(skip)]
    pub slug: String,
}

/// Everyone the page offers: each contact through one of their identities, then a
/// stranger, who gets the default role.
pub fn people_of(config: &BotConfig) -> Vec<Person> {
    let mut people: Vec<Person> = config
        .contacts
        .iter()
        .filter_map(|contact| {
            let identity = contact.identities.first()?;
            Some(Person {
                name: contact.name.clone(),
                role: contact.role.clone(),
                channel: identity.kind().prefix().to_string(),
                peer: identity.peer().to_string(),
                known: true,
                slug: contact.slug.to_string(),
            })
        })
        .collect();
    people.push(Person {
        name: "A stranger".to_string(),
        role: config.default_role.clone(),
        channel: ChannelKind::Http.prefix().to_string(),
        peer: STRANGER_PEER.to_string(),
        known: false,
        slug: String::new(),
    });
    people
}

/// Whom the page offers: everyone (the picker) with the HTTP channel's token on this
/// machine; no one with it where there is no picker; a contact's own token, that
/// contact alone.
async fn people(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let access = authorise(&state, &headers)?;
    let everyone = people_of(&state.runtime.config().current());
    let picker = state
        .chat_page
        .as_ref()
        .is_none_or(|page| page.person_tokens.is_none());
    let offered: Vec<Person> = match access {
        Access::Channel if picker => everyone,
        Access::Channel => Vec::new(),
        Access::Person(slug) => everyone
            .into_iter()
            .filter(|person| person.known && person.slug == slug)
            .collect(),
    };
    Ok(Json(offered).into_response())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    bot: String,
    /// Start-up notices (`up`: which model, memory on or off, what to set).
    notices: Vec<String>,
    /// What the bot's keeper must not miss: it listens past loopback, declared channels
    /// cannot work as configured.
    warnings: Vec<String>,
    /// Whether the page offers a person picker (false: it speaks as the token's holder
    /// only, or as no one).
    picker: bool,
    /// Whether a model endpoint and its key are configured (no message can be answered
    /// without).
    model_ready: bool,
}

/// The bot's state for the page. A contact's own token gets the bot's name and whether
/// it can answer; how the bot is run (files, settings to fix) is for the HTTP
/// channel's token.
async fn status(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let access = authorise(&state, &headers)?;
    let config = state.runtime.config().current();
    let page = state.chat_page.as_deref().cloned().unwrap_or_default();
    let picker = page.person_tokens.is_none();
    let (notices, warnings) = match access {
        Access::Channel => {
            let mut warnings = page.warnings;
            warnings.extend(
                channel_problems(&config, |name| (state.env)(name))
                    .iter()
                    .map(ToString::to_string),
            );
            (page.notices, warnings)
        }
        Access::Person(_) => (Vec::new(), Vec::new()),
    };
    Ok(Json(Status {
        bot: config.bot.name.clone(),
        notices,
        warnings,
        picker,
        model_ready: crate::runtime::endpoint_for(&config.model, None, &state.env).is_ok(),
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contact_is_offered_with_an_identity_that_resolves_to_them_and_a_stranger_last() {
        let config = crate::starter::Starter::embedded().unwrap().bot_config;
        let people = people_of(&config);
        assert_eq!(people.len(), config.contacts.len() + 1);
        for person in &people {
            let caller =
                crate::identity::caller_for(&config, person.channel.parse().unwrap(), &person.peer)
                    .unwrap();
            assert_eq!(caller.role_name, person.role, "{person:?}");
            assert_eq!(caller.known, person.known, "{person:?}");
        }
        let stranger = people.last().unwrap();
        assert!(!stranger.known);
        assert_eq!(stranger.role, config.default_role);
    }
}
