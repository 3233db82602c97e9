//! OAuth 2.0 refresh held by Porter. The command's CLI holds a placeholder refresh
//! token; when it asks the token endpoint for an access token, Porter answers itself
//! with a placeholder access token valid for the command. Upstream requests carrying
//! that placeholder get a real access token, which Porter obtains (and caches until
//! shortly before it expires) with the real refresh token — which never leaves Porter.
//!
//! Talks only to the credential's own token endpoint.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use oauth2::{
    AuthType, ClientId, ClientSecret, RefreshToken, TokenResponse, TokenUrl, basic::BasicClient,
};

use super::{Injector, upstream};
use crate::{keys::Placeholders, registry_store::LoadedEntry};

/// A real access token is refreshed this long before it expires.
const EARLY_REFRESH: Duration = Duration::from_secs(60);

/// Lifetime assumed when the token endpoint names none.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// Real access tokens by credential, refreshed one at a time.
#[derive(Debug, Default)]
pub struct AccessTokens {
    cached: tokio::sync::Mutex<HashMap<String, (String, Instant)>>,
}

/// Failure to obtain an access token: the refresh failed upstream.
#[derive(Debug, thiserror::Error)]
#[error("failed to refresh the OAuth 2.0 access token of {cli}: {detail}")]
pub struct RefreshError {
    pub cli: String,
    pub detail: String,
}

impl AccessTokens {
    /// A real access token for `entry`, from the cache or a fresh refresh.
    pub async fn get(
        &self,
        injector: &Arc<Injector>,
        entry: &LoadedEntry,
    ) -> Result<String, RefreshError> {
        let mut cached = self.cached.lock().await;
        if let Some((token, expires_at)) = cached.get(&entry.name)
            && *expires_at > Instant::now() + EARLY_REFRESH
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = refresh(injector, entry).await?;
        cached.insert(
            entry.name.clone(),
            (token.clone(), Instant::now() + lifetime),
        );
        Ok(token)
    }

    /// Forgets every cached token (the registry changed: a refresh token may have).
    pub async fn clear(&self) {
        self.cached.lock().await.clear();
    }
}

async fn refresh(
    injector: &Arc<Injector>,
    entry: &LoadedEntry,
) -> Result<(String, Duration), RefreshError> {
    let oauth2 = entry
        .oauth2
        .as_ref()
        .expect("only OAuth 2.0 entries refresh");
    let failed = |detail: String| RefreshError {
        cli: entry.name.clone(),
        detail,
    };
    let token_url =
        TokenUrl::new(oauth2.token_url.clone()).map_err(|error| failed(error.to_string()))?;
    let mut client = BasicClient::new(ClientId::new(oauth2.client_id.clone()))
        .set_token_uri(token_url)
        .set_auth_type(AuthType::RequestBody);
    if let Some(secret) = &oauth2.client_secret {
        client = client.set_client_secret(ClientSecret::new(secret.clone()));
    }
    let (host, port) = oauth2.token_host.clone();
    let http = move |request: oauth2::HttpRequest| {
        let injector = injector.clone();
        let (host, port) = (host.clone(), port);
        async move { upstream::send_once(&injector, &host, port, request).await }
    };
    let refresh_token = RefreshToken::new(entry.secret.clone());
    let response = client
        .exchange_refresh_token(&refresh_token)
        .request_async(&http)
        .await
        .map_err(|error| failed(saint_config::ErrorChain(&error).to_string()))?;
    Ok((
        response.access_token().secret().clone(),
        response.expires_in().unwrap_or(DEFAULT_LIFETIME),
    ))
}

/// Porter's own answer at the token endpoint: a placeholder access token for a request
/// that presents this command's placeholder refresh token, `invalid_grant` otherwise.
/// `(status, JSON body)`.
pub fn token_endpoint_answer(
    body: &[u8],
    placeholders: &Placeholders,
    lifetime: Duration,
) -> (u16, serde_json::Value) {
    let form: HashMap<String, String> = url_form(body);
    let refresh_matches = form.get("grant_type").map(String::as_str) == Some("refresh_token")
        && form.get("refresh_token").is_some_and(|presented| {
            use subtle::ConstantTimeEq;
            bool::from(presented.as_bytes().ct_eq(placeholders.secret.as_bytes()))
        });
    match (&placeholders.access, refresh_matches) {
        (Some(access), true) => (
            200,
            serde_json::json!({
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": lifetime.as_secs(),
            }),
        ),
        _ => (
            400,
            serde_json::json!({
                "error": "invalid_grant",
                "error_description": "porter: only a refresh with this command's placeholder refresh token is answered",
            }),
        ),
    }
}

/// Parses `application/x-www-form-urlencoded`; the first value of a key counts (as
/// most servers read it).
fn url_form(body: &[u8]) -> HashMap<String, String> {
    let mut form = HashMap::new();
    for (name, value) in form_urlencoded::parse(body) {
        form.entry(name.into_owned())
            .or_insert_with(|| value.into_owned());
    }
    form
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_endpoint_answers_only_this_commands_refresh_placeholder() {
        let placeholders = Placeholders {
            secret: "porter_ph_refresh".into(),
            access: Some("porter_ph_access".into()),
        };
        let lifetime = Duration::from_secs(300);
        let (status, body) = token_endpoint_answer(
            b"client_id=c&grant_type=refresh_token&refresh_token=porter%5Fph_refresh",
            &placeholders,
            lifetime,
        );
        assert_eq!(status, 200);
        assert_eq!(body["access_token"], "porter_ph_access");
        assert_eq!(body["expires_in"], 300);
        for refused in [
            &b"grant_type=refresh_token&refresh_token=porter_ph_other"[..],
            b"grant_type=authorization_code&code=x",
            b"grant_type=refresh_token",
            b"",
        ] {
            assert_eq!(
                token_endpoint_answer(refused, &placeholders, lifetime).0,
                400
            );
        }
    }
}
