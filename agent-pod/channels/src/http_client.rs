//! The HTTP plumbing every platform's client shares, written once: how a request that
//! got no answer is reported (never with its URL: Telegram's holds the bot token), how a
//! platform's wait is read from a header, and how an attachment is downloaded under a
//! byte cap. Each platform keeps what is its own: its endpoints, its error bodies and
//! their classification. How long a connection waits before it reconnects is
//! [`crate::reconnect`]'s.

use std::time::Duration;

use futures::StreamExt;
use http::{HeaderMap, header::AsHeaderName};
use saint_config::ErrorChain;

use crate::{message::AttachmentRef, transport::SendError};

/// Why `what` (`"telegram: bot api"`, `"slack: file download"`) got no answer, with the
/// causes (`connection refused`) but without the request's URL, which may carry a
/// token.
pub fn unreachable_reason(what: &str, error: reqwest::Error) -> String {
    format!("{what} unreachable: {}", ErrorChain(&error.without_url()))
}

/// A request that got no answer: try again later ([`unreachable_reason`]).
pub fn unreachable(what: &str, error: reqwest::Error) -> SendError {
    SendError::Retry {
        reason: unreachable_reason(what, error),
        after: None,
    }
}

/// The wait in header `name`, in seconds, whole or decimal (Discord's
/// `X-RateLimit-Reset-After` is `1.5`). An HTTP date, a negative or a non-finite
/// number is no wait.
pub fn header_seconds(headers: &HeaderMap, name: impl AsHeaderName) -> Option<Duration> {
    headers
        .get(name)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
}

/// The platform's `Retry-After`, if it gave one in seconds.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    header_seconds(headers, http::header::RETRY_AFTER)
}

/// What a capped download is of, for its refusal: `"<platform>: <kind> is <size>
/// bytes, over the <cap>-byte limit"`.
pub struct Download<'a> {
    /// The platform, as its errors start (`"matrix"`).
    pub platform: &'a str,
    /// What the file is (`image`, `audio`: the attachment's kind).
    pub kind: &'a str,
    /// The most bytes accepted.
    pub max_bytes: u64,
}

impl<'a> Download<'a> {
    /// The download of `attachment` from `platform`, refusing more than `max_bytes`.
    pub fn of(platform: &'a str, attachment: &'a AttachmentRef, max_bytes: u64) -> Self {
        Self {
            platform,
            kind: &attachment.kind,
            max_bytes,
        }
    }

    /// The refusal of a file of `size` bytes: permanent, the same file stays too big.
    pub fn too_big(&self, size: u64) -> SendError {
        SendError::Permanent {
            reason: format!(
                "{}: {} is {size} bytes, over the {}-byte limit",
                self.platform, self.kind, self.max_bytes
            ),
        }
    }

    /// Reads a successful `response`'s body, refusing more than `max_bytes`: the
    /// declared length first, then what actually arrives (the declared length is the
    /// server's word, and may be absent or wrong). A body cut off is unreachable.
    pub async fn read(&self, response: reqwest::Response) -> Result<Vec<u8>, SendError> {
        if let Some(size) = response
            .content_length()
            .filter(|size| *size > self.max_bytes)
        {
            return Err(self.too_big(size));
        }
        let mut stream = response.bytes_stream();
        let mut data = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|error| {
                unreachable(&format!("{}: {} download", self.platform, self.kind), error)
            })?;
            let size = (data.len() + chunk.len()) as u64;
            if size > self.max_bytes {
                return Err(self.too_big(size));
            }
            data.extend_from_slice(&chunk);
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_read_in_whole_or_decimal_seconds_and_nothing_else() {
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::RETRY_AFTER, value.parse().unwrap());
            headers
        };
        assert_eq!(retry_after(&headers("7")), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after(&headers(" 1.5 ")),
            Some(Duration::from_millis(1500))
        );
        for refused in [
            "-1",
            "NaN",
            "inf",
            "1e400",
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "",
        ] {
            assert_eq!(retry_after(&headers(refused)), None, "{refused:?}");
        }
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn an_unreachable_server_is_reported_without_the_token_in_its_url() {
        // A port nothing listens on: bind, note the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let error = reqwest::Client::new()
            .get(format!(
                "http://127.0.0.1:{port}/bot123456:SECRET-TOKEN/getMe"
            ))
            .send()
            .await
            .unwrap_err();
        let reason = unreachable_reason("telegram: bot api", error);
        assert!(
            reason.starts_with("telegram: bot api unreachable: "),
            "{reason}"
        );
        assert!(!reason.contains("SECRET-TOKEN"), "{reason}");
        assert!(!reason.contains("127.0.0.1"), "{reason}");
    }

    #[tokio::test]
    async fn a_download_is_cut_at_its_cap_whatever_length_it_declares() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A server that declares 10 bytes and sends 4,096 (a lying Content-Length is
        // what a hostile host would send; HTTP/1.1 without a length streams to close).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for declared in [Some(10_000u64), None] {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await.unwrap();
                let head = match declared {
                    Some(length) => format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n"),
                    None => "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_string(),
                };
                socket.write_all(head.as_bytes()).await.unwrap();
                let _ = socket.write_all(&[b'x'; 4096]).await;
                let _ = socket.shutdown().await;
            }
        });
        let download = Download {
            platform: "matrix",
            kind: "audio",
            max_bytes: 1000,
        };
        for expected in ["10000 bytes", "over the 1000-byte limit"] {
            let response = reqwest::get(format!("http://{address}/file"))
                .await
                .unwrap();
            let refused = download.read(response).await.unwrap_err();
            let SendError::Permanent { reason } = refused else {
                panic!("not permanent: {refused:?}");
            };
            assert!(reason.starts_with("matrix: audio is "), "{reason}");
            assert!(reason.contains(expected), "{reason}");
        }
    }
}
