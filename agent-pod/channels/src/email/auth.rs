//! Whether the `From:` address of a message is the sender's: an aligned DKIM signature
//! that verifies against the key its domain publishes in DNS, or — when the channel
//! names the receiving server (`authservId`) — that server's own
//! `Authentication-Results` saying DMARC or aligned DKIM passed. Anything else is
//! unverified and served by the default role.
//!
//! Only the topmost `Authentication-Results` header counts: it is the one the receiving
//! server added last; one further down could have been written by the sender.

use mail_auth::{
    AuthenticatedMessage, DkimResult, MessageAuthenticator,
    hickory_resolver::{
        config::{NameServerConfig, ResolverConfig, ResolverOpts},
        net::NetError,
    },
};

use super::EmailSettings;

/// The outcome of the sender check, with the reason for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SenderCheck {
    /// The `From:` domain vouched for the message.
    Verified(String),
    /// Nothing vouched for it.
    Unverified(String),
    /// A signature of another domain verified: the mail does come from `domain`, only
    /// not from the `From:` address's.
    SignedByOther { domain: String, reason: String },
}

/// The DNS resolver for DKIM checks could not be built.
#[derive(Debug, thiserror::Error)]
#[error("failed to set up DNS for DKIM checks")]
pub struct VerifierError {
    #[source]
    source: NetError,
}

/// Checks senders for one channel.
pub struct Verifier {
    authenticator: MessageAuthenticator,
    authserv_id: Option<String>,
}

impl Verifier {
    /// A verifier using the channel's DNS server, or the system's.
    pub fn new(settings: &EmailSettings) -> Result<Self, VerifierError> {
        let authenticator = match settings.dns_server {
            Some(server) => {
                let mut name_server = NameServerConfig::udp(server.ip());
                for connection in &mut name_server.connections {
                    connection.port = server.port();
                }
                MessageAuthenticator::new(
                    ResolverConfig::from_name_servers(vec![name_server]),
                    ResolverOpts::default(),
                )
            }
            None => MessageAuthenticator::new_system_conf(),
        }
        .map_err(|source| VerifierError { source })?;
        Ok(Self {
            authenticator,
            authserv_id: settings.authserv_id.clone(),
        })
    }
}

/// Whether `domain` (a signature's `d=`) is aligned with the `From:` domain: the same,
/// or a parent of it (relaxed alignment).
fn aligned(signing: &str, from_domain: &str) -> bool {
    let signing = signing.trim_end_matches('.').to_lowercase();
    let from_domain = from_domain.to_lowercase();
    // A bare TLD is no organisation: `d=com` never vouches for `x.com`.
    signing.contains('.')
        && (from_domain == signing || from_domain.ends_with(&format!(".{signing}")))
}

/// Checks `raw`'s `From:` domain `from_domain`.
pub async fn verify_sender(verifier: &Verifier, raw: &[u8], from_domain: &str) -> SenderCheck {
    // Exactly one From: (as RFC 5322 requires). With two, the one the bot reads and the
    // one a signature covers could differ: a mail signed for one colleague could carry
    // another's address on top.
    let from_headers = mail_parser::MessageParser::default()
        .parse(raw)
        .map_or(0, |message| {
            message
                .headers_raw()
                .filter(|(name, _)| name.eq_ignore_ascii_case("From"))
                .count()
        });
    if from_headers != 1 {
        return SenderCheck::Unverified(format!(
            "{from_headers} From: headers; exactly one is accepted"
        ));
    }
    if let Some(check) = trusted_results(verifier, raw, from_domain) {
        return check;
    }
    let Some(message) = AuthenticatedMessage::parse(raw) else {
        return SenderCheck::Unverified("message could not be parsed for DKIM".to_string());
    };
    let outputs = verifier.authenticator.verify_dkim(&message).await;
    if outputs.is_empty() {
        return SenderCheck::Unverified("no DKIM signature".to_string());
    }
    let mut seen = Vec::new();
    let mut other_signer = None;
    for output in &outputs {
        let domain = output
            .signature()
            .map(|signature| signature.d.clone())
            .unwrap_or_default();
        match output.result() {
            DkimResult::Pass if aligned(&domain, from_domain) => {
                return SenderCheck::Verified(format!("DKIM pass, d={domain}"));
            }
            DkimResult::Pass => {
                seen.push(format!(
                    "DKIM pass for d={domain}, not aligned with {from_domain}"
                ));
                other_signer.get_or_insert_with(|| domain.trim_end_matches('.').to_lowercase());
            }
            other => seen.push(format!("DKIM {other:?} for d={domain}")),
        }
    }
    match other_signer {
        Some(domain) => SenderCheck::SignedByOther {
            domain,
            reason: seen.join("; "),
        },
        None => SenderCheck::Unverified(seen.join("; ")),
    }
}

/// The trusted server's verdict, if the channel names one and it is the topmost
/// `Authentication-Results`.
fn trusted_results(verifier: &Verifier, raw: &[u8], from_domain: &str) -> Option<SenderCheck> {
    let trusted = verifier.authserv_id.as_deref()?;
    let message = mail_parser::MessageParser::default().parse(raw)?;
    let (_, value) = message
        .headers_raw()
        .find(|(name, _)| name.eq_ignore_ascii_case("Authentication-Results"))?;
    let value = value.replace(['\r', '\n'], " ");
    let mut parts = value.split(';');
    let authserv = parts.next()?.split_whitespace().next()?.to_lowercase();
    if authserv != trusted {
        return None;
    }
    for result in parts {
        let words: Vec<String> = result.split_whitespace().map(str::to_lowercase).collect();
        let Some(method) = words.first() else {
            continue;
        };
        if method == "dmarc=pass" {
            let header_from = words
                .iter()
                .find_map(|word| word.strip_prefix("header.from="));
            if header_from.is_none_or(|domain| domain == from_domain.to_lowercase()) {
                return Some(SenderCheck::Verified(format!("{trusted}: dmarc=pass")));
            }
        }
        if method == "dkim=pass"
            && let Some(domain) = words.iter().find_map(|word| word.strip_prefix("header.d="))
            && aligned(domain, from_domain)
        {
            return Some(SenderCheck::Verified(format!(
                "{trusted}: dkim=pass header.d={domain}"
            )));
        }
    }
    Some(SenderCheck::Unverified(format!(
        "{trusted}'s Authentication-Results show no DMARC or aligned DKIM pass"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier(authserv_id: Option<&str>) -> Verifier {
        // DNS is never asked in these cases: a loopback port nobody serves.
        let channel: saint_config::ChannelConfig = serde_json::from_value(serde_json::json!({
            "name": "mail", "kind": "email",
            "settings": {"address": "saint@acme.example", "imapHost": "h", "smtpHost": "h",
                         "dnsServer": "127.0.0.1:9"},
            "secretEnv": {"password": "P"},
        }))
        .unwrap();
        let mut settings = EmailSettings::read(&channel, &|_| Some("pw".to_string())).unwrap();
        settings.authserv_id = authserv_id.map(str::to_string);
        Verifier::new(&settings).unwrap()
    }

    fn check(verifier: &Verifier, headers: &str) -> Option<SenderCheck> {
        let raw = format!("{headers}From: ana@acme.example\r\nSubject: x\r\n\r\nbody\r\n");
        trusted_results(verifier, raw.as_bytes(), "acme.example")
    }

    #[tokio::test]
    async fn a_second_from_header_is_never_verified() {
        // Even the trusted server's dmarc=pass does not vouch for a mail with two From:.
        let trusted = verifier(Some("mx.acme.example"));
        let raw = "Authentication-Results: mx.acme.example; dmarc=pass header.from=acme.example\r\n\
                   From: ana@acme.example\r\nFrom: ivan@acme.example\r\nSubject: x\r\n\r\nbody\r\n";
        assert_eq!(
            verify_sender(&trusted, raw.as_bytes(), "acme.example").await,
            SenderCheck::Unverified("2 From: headers; exactly one is accepted".to_string())
        );
        let single = raw.replace("From: ivan@acme.example\r\n", "");
        assert!(matches!(
            verify_sender(&trusted, single.as_bytes(), "acme.example").await,
            SenderCheck::Verified(_)
        ));
    }

    #[test]
    fn only_the_trusted_servers_topmost_results_count() {
        let trusted = verifier(Some("mx.acme.example"));
        assert!(matches!(
            check(
                &trusted,
                "Authentication-Results: mx.acme.example; spf=pass smtp.mailfrom=acme.example;\r\n dmarc=pass header.from=acme.example\r\n"
            ),
            Some(SenderCheck::Verified(_))
        ));
        assert!(matches!(
            check(
                &trusted,
                "Authentication-Results: mx.acme.example; dkim=pass header.d=acme.example\r\n"
            ),
            Some(SenderCheck::Verified(_))
        ));
        // Failing or misaligned results from the trusted server: unverified.
        for header in [
            "Authentication-Results: mx.acme.example; dmarc=fail header.from=acme.example\r\n",
            "Authentication-Results: mx.acme.example; dkim=pass header.d=evil.example\r\n",
            "Authentication-Results: mx.acme.example; dmarc=pass header.from=evil.example\r\n",
        ] {
            assert!(
                matches!(check(&trusted, header), Some(SenderCheck::Unverified(_))),
                "{header}"
            );
        }
        // A header the sender wrote under the trusted name, below another server's:
        // the topmost is not the trusted server's, so the results are not used at all.
        assert_eq!(
            check(
                &trusted,
                "Authentication-Results: relay.other.example; none\r\nAuthentication-Results: mx.acme.example; dmarc=pass\r\n"
            ),
            None
        );
        // No trusted server configured: headers are ignored (DKIM decides).
        assert_eq!(
            check(
                &verifier(None),
                "Authentication-Results: mx.acme.example; dmarc=pass\r\n"
            ),
            None
        );
    }

    #[test]
    fn alignment_is_relaxed_but_not_loose() {
        assert!(aligned("acme.example", "acme.example"));
        assert!(aligned("acme.example", "mail.acme.example"));
        assert!(aligned("ACME.example.", "acme.example"));
        assert!(!aligned("evil.example", "acme.example"));
        assert!(!aligned("me.example", "acme.example"));
        assert!(!aligned("example", "acme.example"));
        assert!(!aligned("mail.acme.example", "acme.example"));
    }
}
