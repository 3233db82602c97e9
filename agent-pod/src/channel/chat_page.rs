//! The chat page: talk to the bot as any of its contacts or as a stranger, and see which
//! role, model and tools each message got — the quickest way to understand roles.
//!
//! Plain HTML, CSS and a small script, compiled into the binary and served only when
//! asked for (`saint-agent up`, or `run --chat-page`). The page holds no secret: it
//! reads the HTTP channel's token from its own address fragment (never sent to the
//! server) and calls the same authenticated API as any other client.
//!
//! Replies are rendered from Markdown by the page's own small renderer
//! (`chat_page/markdown.js`), which builds elements and never parses HTML; the strict
//! CSP below stays (no inline script or style). Besides sending, the page reads back
//! the conversation of whom it speaks as (`GET /v1/history`, paged), stops a turn
//! (`POST /v1/messages/{id}/cancel`) and polls `/v1/status`, which also says when an
//! edit of the bot file was refused.
//!
//! The person picker is for one person at their own machine. Where the page is reached
//! from elsewhere (`up` listening past loopback) there is none: each contact gets a
//! token of their own that speaks only as them, and the HTTP channel's token lists no
//! one to speak as.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use saint_config::{BotConfig, ChannelKind};
use saint_llm::{ChatRole, ContentBlock};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    startup::channel_problems,
    state::{Access, ApiError, AppState, authorise, speaks_as_holder},
};
use crate::session::StoredMessage;

/// The peer id the page uses for "a stranger" (an HTTP identity no contact has).
pub const STRANGER_PEER: &str = "chat-page-stranger";

const INDEX_HTML: &str = include_str!("chat_page/index.html");
const APP_JS: &str = include_str!("chat_page/app.js");
const MARKDOWN_JS: &str = include_str!("chat_page/markdown.js");
const STYLE_CSS: &str = include_str!("chat_page/style.css");

// The page loads only its own script and style and talks only to this server.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

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
            "/chat/markdown.js",
            get(|| async { asset(MARKDOWN_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/chat/style.css",
            get(|| async { asset(STYLE_CSS, "text/css; charset=utf-8") }),
        )
}

/// API routes the page reads (authenticated like `/v1/messages`): whom it may speak as,
/// the bot's state, a person's history, and stopping a turn.
pub fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/people", get(people))
        .route("/v1/status", get(status))
        .route("/v1/history", get(history))
        .route("/v1/messages/{id}/cancel", post(cancel))
        .route("/v1/model-check", post(model_check))
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
    /// What the bot's keeper must not miss: an edit of the bot file was refused, it
    /// listens past loopback, declared channels cannot work as configured.
    warnings: Vec<String>,
    /// Whether the page offers a person picker (false: it speaks as the token's holder
    /// only, or as no one).
    picker: bool,
    /// Whether a model endpoint and its key are configured (no message can be answered
    /// without).
    model_ready: bool,
    /// Whether this token may ask for a model check (`POST /v1/model-check`): the
    /// channel's token, which runs the bot, not a person's own link.
    model_check: bool,
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
            // Until the file is fixed: an edit that silently did nothing misleads.
            if let Some(refusal) = state.runtime.config().refused() {
                warnings.insert(
                    0,
                    format!(
                        "the edit to {} was refused; the last good config stays in force \
                     until the file is fixed: {refusal}",
                        state
                            .runtime
                            .config()
                            .path()
                            .file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                    ),
                );
            }
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
        model_check: matches!(access, Access::Channel),
    })
    .into_response())
}

/// The page's "Test model" button: asks the endpoint the bot calls whether it answers,
/// takes the key and serves the model (`model_discovery::check_model`), with the config
/// in force now. For the channel's token only: the answer names the address.
async fn model_check(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !matches!(authorise(&state, &headers)?, Access::Channel) {
        return Err(ApiError::Forbidden(
            "only the bot's own token may check the model".to_string(),
        ));
    }
    let config = state.runtime.config().current();
    let check = match crate::runtime::endpoint_for(&config.model, None, &state.env) {
        Ok(endpoint) => {
            crate::model_discovery::check_model(
                &endpoint,
                &config.model.name,
                &reqwest::Client::new(),
            )
            .await
        }
        Err(error) => crate::model_discovery::ModelCheck {
            ok: false,
            message: format!("model check: {error}"),
        },
    };
    Ok(Json(check).into_response())
}

/// Stops the streaming turn started by message `id`. Someone else's turn is "not
/// found", like one that already ended.
async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Result<Response, ApiError> {
    let access = authorise(&state, &headers)?;
    let turns = state.running.turns();
    match turns.get(&id) {
        Some((token, starter)) if access == Access::Channel || *starter == access => {
            token.cancel();
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Ok((
            StatusCode::NOT_FOUND,
            Json(json!({"error": "no running turn with that id"})),
        )
            .into_response()),
    }
}

/// Query of `GET /v1/history`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HistoryQuery {
    channel: String,
    peer: String,
    /// Messages stored before this id (absent: the newest).
    before: Option<i64>,
    limit: Option<usize>,
}

const HISTORY_PAGE: usize = 40;
const HISTORY_PAGE_MAX: usize = 200;
const HISTORY_PREVIEW_CHARS: usize = 600;

/// A page of the conversation of the person the page speaks as: what they said, what
/// the bot answered and the tools it called in their turns. A person's own link reads
/// only their own.
async fn history(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HistoryQuery>,
) -> Result<Response, ApiError> {
    let access = authorise(&state, &headers)?;
    let channel: ChannelKind = query
        .channel
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("unknown channel {:?}", query.channel)))?;
    speaks_as_holder(&state, &access, channel, &query.peer)?;
    let config = state.runtime.config().current();
    let caller = crate::identity::caller_for(&config, channel, &query.peer)
        .map_err(|error| ApiError::BadRequest(error.to_string()))?;
    let limit = query
        .limit
        .unwrap_or(HISTORY_PAGE)
        .clamp(1, HISTORY_PAGE_MAX);
    let key = caller.session_key.clone();
    let before = query.before;
    // One more than asked: whether an older page exists.
    let mut page = state
        .runtime
        .blocking(move |store| store.page_before(&key, before, limit + 1))
        .await?;
    let more = page.len() > limit;
    if more {
        page.remove(0);
    }
    let oldest = page.first().map(|(message, _)| message.id);
    Ok(Json(json!({
        "items": history_items(&page),
        "more": more,
        "oldest": oldest,
    }))
    .into_response())
}

/// One bubble of the page's history.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct HistoryItem {
    /// `person` or `bot`.
    from: &'static str,
    text: String,
    /// RFC 3339 time of its first message.
    at: String,
    tools: Vec<ToolView>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct ToolView {
    name: String,
    outcome: &'static str,
    arguments: Value,
    preview: String,
    #[serde(skip)]
    id: String,
}

/// Stored messages as the page shows them: a person's words, then one bot bubble for
/// the bot's whole answer (its tool calls, each with its result, and its text).
fn history_items(page: &[(StoredMessage, String)]) -> Vec<HistoryItem> {
    let mut items: Vec<HistoryItem> = Vec::new();
    for (stored, at) in page {
        let blocks = &stored.message.content;
        let text: Vec<&str> = blocks
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        match stored.message.role {
            ChatRole::User if text.is_empty() => {
                // Tool results: they belong to the bot bubble that asked for them.
                let Some(item) = items.last_mut().filter(|item| item.from == "bot") else {
                    continue;
                };
                for block in blocks {
                    if let ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } = block
                        && let Some(tool) =
                            item.tools.iter_mut().find(|tool| tool.id == *tool_use_id)
                    {
                        tool.preview = content.chars().take(HISTORY_PREVIEW_CHARS).collect();
                        if *is_error {
                            tool.outcome = "failed";
                        }
                    }
                }
            }
            ChatRole::User => items.push(HistoryItem {
                from: "person",
                text: text.join("\n\n"),
                at: at.clone(),
                tools: Vec::new(),
            }),
            ChatRole::Assistant => {
                if items.last().is_none_or(|item| item.from != "bot") {
                    items.push(HistoryItem {
                        from: "bot",
                        text: String::new(),
                        at: at.clone(),
                        tools: Vec::new(),
                    });
                }
                let item = items.last_mut().expect("a bot bubble was just ensured");
                for block in blocks {
                    match block {
                        ContentBlock::Text { text } if !text.is_empty() => {
                            if !item.text.is_empty() {
                                item.text.push_str("\n\n");
                            }
                            item.text.push_str(text);
                        }
                        ContentBlock::ToolUse { id, name, input } => item.tools.push(ToolView {
                            name: name.clone(),
                            outcome: "ok",
                            arguments: input.clone(),
                            preview: String::new(),
                            id: id.clone(),
                        }),
                        _ => {}
                    }
                }
            }
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use saint_llm::Message;

    fn stored(id: i64, role: ChatRole, content: Vec<ContentBlock>) -> (StoredMessage, String) {
        (
            StoredMessage {
                id,
                message: Message { role, content },
                identity: "email:ana@acme.example".to_string(),
            },
            format!("2026-01-0{id}T10:00:00Z"),
        )
    }

    #[test]
    fn history_groups_a_tool_loop_into_one_bot_bubble_with_each_result() {
        let page = [
            stored(
                1,
                ChatRole::User,
                vec![ContentBlock::Text {
                    text: "note this".into(),
                }],
            ),
            stored(
                2,
                ChatRole::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "call-1".into(),
                    name: "write".into(),
                    input: json!({"path": "notes.md"}),
                }],
            ),
            stored(
                3,
                ChatRole::User,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "call-1".into(),
                    content: "denied: not yours".into(),
                    is_error: true,
                }],
            ),
            stored(
                4,
                ChatRole::Assistant,
                vec![ContentBlock::Text {
                    text: "I could not.".into(),
                }],
            ),
        ];
        let items = history_items(&page);
        assert_eq!(
            serde_json::to_value(&items).unwrap(),
            json!([
                {"from": "person", "text": "note this", "at": "2026-01-01T10:00:00Z", "tools": []},
                {"from": "bot", "text": "I could not.", "at": "2026-01-02T10:00:00Z", "tools": [
                    {"name": "write", "outcome": "failed", "arguments": {"path": "notes.md"},
                     "preview": "denied: not yours"}
                ]}
            ])
        );
    }

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
