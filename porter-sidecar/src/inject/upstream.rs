//! Connections from Porter to a credential's real host: TCP (or the test override),
//! TLS verified against the system roots (plus the extra CAs for tests and mirrors),
//! HTTP/1.1.
//!
//! Opens connections only to the host it is given; callers decide which hosts.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::{
    TlsConnector,
    rustls::pki_types::{InvalidDnsNameError, ServerName},
};

use super::Injector;

/// How long the upstream has for its connection and handshakes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest response Porter reads whole (OAuth 2.0 token responses).
const MAX_READ_BODY: usize = 1 << 20;

/// Why an upstream gave no answer, for the audit log and the `502` the command sees.
/// Each names the host; the underlying error is part of the text (not a `source`, so
/// it is printed once).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("failed to connect to {host}: {error}")]
    Connect { host: String, error: std::io::Error },
    #[error("failed to connect to {host}: timed out")]
    ConnectTimedOut { host: String },
    #[error("failed to name {host}: {error}")]
    Name {
        host: String,
        error: InvalidDnsNameError,
    },
    #[error("failed to verify TLS of {host}: {error}")]
    Tls { host: String, error: std::io::Error },
    #[error("failed to speak HTTP to {host}: {error}")]
    Handshake { host: String, error: hyper::Error },
    /// The request or its response failed on an open connection.
    #[error("upstream {host}: {error}")]
    Exchange {
        host: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("upstream {host}: timed out")]
    TimedOut { host: String },
}

/// Connects to `host:port` and speaks HTTP/1.1 over verified TLS.
pub async fn connect<B>(
    injector: &Injector,
    host: &str,
    port: u16,
) -> Result<SendRequest<B>, UpstreamError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let host_name = || host.to_owned();
    let connecting = async {
        let stream = match injector.upstream_overrides.get(host) {
            Some(address) => TcpStream::connect(address).await,
            None => TcpStream::connect((host, port)).await,
        }
        .map_err(|error| UpstreamError::Connect {
            host: host_name(),
            error,
        })?;
        let _ = stream.set_nodelay(true);
        let server_name =
            ServerName::try_from(host.to_owned()).map_err(|error| UpstreamError::Name {
                host: host_name(),
                error,
            })?;
        let tls = TlsConnector::from(injector.upstream_tls.clone())
            .connect(server_name, stream)
            .await
            .map_err(|error| UpstreamError::Tls {
                host: host_name(),
                error,
            })?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|error| UpstreamError::Handshake {
                host: host_name(),
                error,
            })?;
        tokio::spawn(connection);
        Ok(sender)
    };
    tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| UpstreamError::ConnectTimedOut { host: host_name() })?
}

/// Sends one request on a fresh connection and reads the whole (bounded) response.
pub async fn send_once(
    injector: &Injector,
    host: &str,
    port: u16,
    request: http::Request<Vec<u8>>,
) -> Result<http::Response<Vec<u8>>, UpstreamError> {
    let mut sender = connect::<Full<Bytes>>(injector, host, port).await?;
    let (parts, body) = request.into_parts();
    let request = http::Request::from_parts(parts, Full::new(Bytes::from(body)));
    let exchange = async {
        let response =
            sender
                .send_request(request)
                .await
                .map_err(|error| UpstreamError::Exchange {
                    host: host.to_owned(),
                    error: error.into(),
                })?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_READ_BODY)
            .collect()
            .await
            .map_err(|error| UpstreamError::Exchange {
                host: host.to_owned(),
                error,
            })?
            .to_bytes()
            .to_vec();
        Ok(http::Response::from_parts(parts, body))
    };
    tokio::time::timeout(CONNECT_TIMEOUT * 3, exchange)
        .await
        .map_err(|_| UpstreamError::TimedOut {
            host: host.to_owned(),
        })?
}
