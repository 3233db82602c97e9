//! The IMAP side: log in, select the mailbox, fetch every message past the saved UID,
//! store it (with the new UID, in one transaction), search again until nothing new
//! came in meanwhile, then wait with IDLE — or poll where the server has none — and
//! repeat. A dropped connection is re-established with backoff; since the position
//! moves only with what was stored, nothing is skipped, and the inbox's unique message
//! ids make a re-fetch harmless.
//!
//! The position is `<UIDVALIDITY>:<last UID>`. On the very first start, and when the
//! UIDVALIDITY changed (the mailbox was rebuilt and every UID means something else),
//! the bot begins with mail that arrives from then on: answering the mailbox's whole
//! history would write to people about mail they sent long ago. New mail is fetched a
//! few messages at a time, so a backlog never sits in memory at once.

use std::{
    path::Path,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use async_imap::{Session, extensions::idle::IdleResponse, types::UnsolicitedResponse};
use futures::TryStreamExt;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::client::TlsStream;

use super::{EmailSettings, Security, Verifier, inbound, verify_sender};
use crate::{
    ChannelState, InboxSink,
    email::auth::SenderCheck,
    reconnect::{Backoff, SessionEnd},
};

/// Longest single IDLE before it is renewed (servers may drop idle clients at 30 min).
const IDLE_RENEW: Duration = Duration::from_secs(25 * 60);
/// Largest message fetched whole; bigger ones are stored as a note.
const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;
/// Messages fetched per request.
const FETCH_BATCH: usize = 8;

/// A plain or TLS connection.
#[derive(Debug)]
pub enum MailStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for MailStream {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MailStream::Plain(stream) => Pin::new(stream).poll_read(context, buffer),
            MailStream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(context, buffer),
        }
    }
}

impl AsyncWrite for MailStream {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            MailStream::Plain(stream) => Pin::new(stream).poll_write(context, data),
            MailStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(context, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MailStream::Plain(stream) => Pin::new(stream).poll_flush(context),
            MailStream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MailStream::Plain(stream) => Pin::new(stream).poll_shutdown(context),
            MailStream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(context),
        }
    }
}

pub(crate) fn tls_connector() -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(certificate);
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn wrap_tls(host: &str, stream: TcpStream) -> Result<MailStream, String> {
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|error| format!("{host:?} is not a TLS server name: {error}"))?;
    let tls = tls_connector()
        .connect(name, stream)
        .await
        .map_err(|error| format!("TLS with {host} failed: {error}"))?;
    Ok(MailStream::Tls(Box::new(tls)))
}

async fn connect(settings: &EmailSettings) -> Result<async_imap::Client<MailStream>, String> {
    let address = format!("{}:{}", settings.imap_host, settings.imap_port);
    let tcp = tokio::time::timeout(Duration::from_secs(20), TcpStream::connect(&address))
        .await
        .map_err(|_| format!("connecting to {address} timed out"))?
        .map_err(|error| format!("cannot connect to {address}: {error}"))?;
    let stream = match settings.imap_security {
        Security::Tls => wrap_tls(&settings.imap_host, tcp).await?,
        Security::None => MailStream::Plain(tcp),
        Security::StartTls => {
            let mut client = async_imap::Client::new(MailStream::Plain(tcp));
            client
                .read_response()
                .await
                .map_err(|error| format!("no IMAP greeting: {error}"))?;
            client
                .run_command_and_check_ok("STARTTLS", None)
                .await
                .map_err(|error| format!("STARTTLS refused: {error}"))?;
            let MailStream::Plain(tcp) = client.into_inner() else {
                unreachable!("the stream was plain until STARTTLS")
            };
            // After STARTTLS there is no second greeting.
            return Ok(async_imap::Client::new(
                wrap_tls(&settings.imap_host, tcp).await?,
            ));
        }
    };
    let mut client = async_imap::Client::new(stream);
    client
        .read_response()
        .await
        .map_err(|error| format!("no IMAP greeting: {error}"))?;
    Ok(client)
}

fn parse_cursor(cursor: Option<&str>) -> Option<(u32, u32)> {
    let (validity, uid) = cursor?.split_once(':')?;
    Some((validity.parse().ok()?, uid.parse().ok()?))
}

/// One IMAP session: logs in, then fetches and waits for mail until something fails.
pub(super) async fn session(
    settings: &EmailSettings,
    verifier: &Verifier,
    sink: &dyn InboxSink,
    workspace: &Path,
    backoff: &mut Backoff,
) -> SessionEnd {
    let mut session = match log_in(settings).await {
        Ok(session) => session,
        Err(end) => return end,
    };
    let mailbox = match session.select(&settings.mailbox).await {
        Ok(mailbox) => mailbox,
        Err(error) => {
            return SessionEnd::failed(format!(
                "imap: cannot select {}: {error}",
                settings.mailbox
            ));
        }
    };
    let idle = match session.capabilities().await {
        Ok(capabilities) => capabilities.has_str("IDLE"),
        Err(error) => return SessionEnd::failed(format!("imap: CAPABILITY failed: {error}")),
    };
    let validity = mailbox.uid_validity.unwrap_or(0);
    let mut last_uid = match last_seen_uid(settings, sink, &mailbox, validity).await {
        Ok(uid) => uid,
        Err(end) => return end,
    };
    sink.report(&settings.channel, ChannelState::Up);
    tracing::info!(channel = %settings.channel, idle, "imap: connected");
    backoff.reset();
    loop {
        // Mail that arrives during a fetch is announced (`* n EXISTS`) in the middle of
        // that fetch's responses, and a server does not announce it again when IDLE
        // starts: IDLE would wait for the *next* mail. So search again until a search
        // finds nothing and no announcement came in meanwhile; only then is IDLE sure
        // to report whatever arrives next.
        loop {
            let fetched = match fetch_new(
                settings,
                verifier,
                sink,
                workspace,
                &mut session,
                validity,
                &mut last_uid,
            )
            .await
            {
                Ok(fetched) => fetched,
                Err(reason) => return SessionEnd::failed(reason),
            };
            let announced = drain_new_mail_notices(&session);
            if fetched == 0 && !announced {
                break;
            }
        }
        session = match wait_for_mail(session, idle, settings).await {
            Ok(session) => session,
            Err(end) => return end,
        };
    }
}

/// Connects and logs in.
async fn log_in(settings: &EmailSettings) -> Result<Session<MailStream>, SessionEnd> {
    let client = match connect(settings).await {
        Ok(client) => client,
        Err(reason) => return Err(SessionEnd::failed(reason)),
    };
    match client.login(&settings.username, &settings.password).await {
        Ok(session) => Ok(session),
        // Only the server's `NO` (or `BAD`) to LOGIN refuses the credentials; a
        // connection lost or garbled during the login is a cut like any other, and the
        // channel reconnects at once instead of reporting refused credentials.
        Err((error @ (async_imap::error::Error::No(_) | async_imap::error::Error::Bad(_)), _)) => {
            Err(SessionEnd::CredentialsRefused(format!(
                "imap: login as {} refused: {error}",
                settings.username
            )))
        }
        Err((error, _)) => Err(SessionEnd::failed(format!(
            "imap: connection lost while logging in as {}: {error}",
            settings.username
        ))),
    }
}

/// The UID of the last message answered: the stored cursor's while the mailbox is the
/// same one (UIDVALIDITY), else the mailbox's newest, stored as the new cursor, so only
/// mail arriving from now on is answered.
async fn last_seen_uid(
    settings: &EmailSettings,
    sink: &dyn InboxSink,
    mailbox: &async_imap::types::Mailbox,
    validity: u32,
) -> Result<u32, SessionEnd> {
    let saved = match sink.cursor(&settings.channel).await {
        Ok(saved) => parse_cursor(saved.as_deref()),
        Err(reason) => return Err(SessionEnd::failed(reason)),
    };
    match saved {
        Some((saved_validity, uid)) if saved_validity == validity => Ok(uid),
        saved => {
            let start = mailbox.uid_next.unwrap_or(1).saturating_sub(1);
            if saved.is_some() {
                tracing::warn!(channel = %settings.channel, from_uid = start + 1,
                    "imap: UIDVALIDITY changed (the mailbox was rebuilt); answering mail that arrives from now on");
            } else {
                tracing::info!(channel = %settings.channel, from_uid = start + 1,
                    "imap: first start; answering mail that arrives from now on");
            }
            if let Err(error) = sink
                .commit(&settings.channel, Vec::new(), format!("{validity}:{start}"))
                .await
            {
                return Err(SessionEnd::failed(error));
            }
            Ok(start)
        }
    }
}

/// Waits for new mail: IDLE where the server has it (renewed every `IDLE_RENEW`), else
/// one poll interval and a NOOP.
async fn wait_for_mail(
    mut session: Session<MailStream>,
    idle: bool,
    settings: &EmailSettings,
) -> Result<Session<MailStream>, SessionEnd> {
    if !idle {
        tokio::time::sleep(settings.poll_interval).await;
        if let Err(error) = session.noop().await {
            return Err(SessionEnd::failed(format!("imap: NOOP failed: {error}")));
        }
        return Ok(session);
    }
    let mut handle = session.idle();
    if let Err(error) = handle.init().await {
        return Err(SessionEnd::failed(format!("imap: IDLE failed: {error}")));
    }
    let (wait, _interrupt) = handle.wait_with_timeout(IDLE_RENEW);
    let response = wait.await;
    match response {
        Ok(IdleResponse::NewData(_) | IdleResponse::Timeout) => {}
        Ok(IdleResponse::ManualInterrupt) => {
            return Err(SessionEnd::failed(
                "imap: the server closed the connection".to_string(),
            ));
        }
        Err(error) => return Err(SessionEnd::failed(format!("imap: IDLE failed: {error}"))),
    }
    match handle.done().await {
        Ok(session) => Ok(session),
        Err(error) => Err(SessionEnd::failed(format!(
            "imap: ending IDLE failed: {error}"
        ))),
    }
}

/// Empties the responses the server sent unasked (they queue up between commands) and
/// says whether one announced new mail. The queue is bounded and drops what does not
/// fit, so the caller also searches again after any fetch that found mail.
fn drain_new_mail_notices(session: &Session<MailStream>) -> bool {
    let mut announced = false;
    while let Ok(response) = session.unsolicited_responses.try_recv() {
        announced |= matches!(
            response,
            UnsolicitedResponse::Exists(_) | UnsolicitedResponse::Recent(_)
        );
    }
    announced
}

/// Stores every message past `last_uid`; returns how many it found.
async fn fetch_new(
    settings: &EmailSettings,
    verifier: &Verifier,
    sink: &dyn InboxSink,
    workspace: &Path,
    session: &mut Session<MailStream>,
    validity: u32,
    last_uid: &mut u32,
) -> Result<usize, String> {
    let mut new: Vec<u32> = session
        .uid_search(format!("UID {}:*", *last_uid + 1))
        .await
        .map_err(|error| format!("imap: SEARCH failed: {error}"))?
        .into_iter()
        // `n:*` names the last message even when it is below `n`.
        .filter(|uid| *uid > *last_uid)
        .collect();
    new.sort_unstable();
    for batch in new.chunks(FETCH_BATCH) {
        let set = batch
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let fetched: Vec<_> = session
            .uid_fetch(set, "(UID BODY.PEEK[])")
            .await
            .map_err(|error| format!("imap: FETCH failed: {error}"))?
            .try_collect()
            .await
            .map_err(|error| format!("imap: FETCH failed: {error}"))?;
        let mut messages: Vec<(u32, Vec<u8>)> = fetched
            .iter()
            .filter_map(|fetch| Some((fetch.uid?, fetch.body().unwrap_or_default().to_vec())))
            .collect();
        messages.sort_by_key(|(uid, _)| *uid);
        drop(fetched);
        store_batch(
            settings, verifier, sink, workspace, validity, last_uid, messages,
        )
        .await?;
    }
    Ok(new.len())
}

async fn store_batch(
    settings: &EmailSettings,
    verifier: &Verifier,
    sink: &dyn InboxSink,
    workspace: &Path,
    validity: u32,
    last_uid: &mut u32,
    messages: Vec<(u32, Vec<u8>)>,
) -> Result<(), String> {
    for (uid, raw) in messages {
        let fallback_id = format!("imap:{validity}:{uid}");
        let stored = if raw.len() > MAX_MESSAGE_BYTES {
            tracing::warn!(channel = %settings.channel, uid, bytes = raw.len(), "imap: message too large; not answered");
            Vec::new()
        } else {
            match inbound::parse_mail(settings, &raw, &fallback_id) {
                Ok(parsed) => vec![prepare(settings, verifier, workspace, &raw, parsed).await?],
                Err(reason) => {
                    tracing::warn!(channel = %settings.channel, uid, %reason, "imap: message skipped");
                    Vec::new()
                }
            }
        };
        sink.commit(&settings.channel, stored, format!("{validity}:{uid}"))
            .await
            .map_err(|error| error.to_string())?;
        *last_uid = uid;
    }
    Ok(())
}

/// Checks the sender and saves the attachments; returns the entry to store.
async fn prepare(
    settings: &EmailSettings,
    verifier: &Verifier,
    workspace: &Path,
    raw: &[u8],
    mut parsed: inbound::ParsedMail,
) -> Result<(crate::InboundMessage, Option<String>), String> {
    let from_domain = parsed
        .message
        .sender
        .peer()
        .rsplit_once('@')
        .map(|(_, domain)| domain.to_string())
        .unwrap_or_default();
    match verify_sender(verifier, raw, &from_domain).await {
        SenderCheck::Verified(how) => {
            tracing::info!(channel = %settings.channel, sender = %parsed.message.sender, %how, "e-mail sender verified");
            parsed.message.sender_verified = true;
        }
        SenderCheck::Unverified(why) => {
            tracing::warn!(channel = %settings.channel, sender = %parsed.message.sender, %why,
                "e-mail sender not verified: handled under the default role");
            parsed.message.unverified_origin = Some("unsigned".to_string());
        }
        SenderCheck::SignedByOther { domain, reason } => {
            tracing::warn!(channel = %settings.channel, sender = %parsed.message.sender, why = %reason,
                "e-mail sender not verified: handled under the default role");
            parsed.message.unverified_origin = Some(format!("dkim:{domain}"));
        }
    }
    for (path, data) in &parsed.attachments {
        let target = workspace.join(path);
        let written = async {
            if let Some(parent) = target.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            let partial = target.with_extension("partial");
            tokio::fs::write(&partial, data).await?;
            tokio::fs::rename(&partial, &target).await
        };
        written
            .await
            .map_err(|error| format!("failed to save attachment {}: {error}", target.display()))?;
    }
    if let Some(reason) = &parsed.ignore {
        tracing::info!(channel = %settings.channel, sender = %parsed.message.sender, %reason, "e-mail not answered: machine-sent");
    }
    Ok((parsed.message, parsed.ignore))
}
