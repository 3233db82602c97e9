//! A loopback TCP port whose connections are relayed byte for byte to Porter's proxy
//! socket on the shared volume: the sandbox's only way out (the address commands'
//! `HTTPS_PROXY` names, served by the runner), and how the agent's MCP client reaches
//! Porter (HTTP clients speak to proxies over TCP). The relay reads nothing and adds nothing: the command's
//! own `CONNECT` carries its key, and Porter decides.
//!
//! Listens only on the loopback address it is given; connects only to the one socket.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use tokio::net::{TcpListener, TcpStream, UnixStream};

/// Most relayed connections at once (each is a tunnel at Porter, which has its own
/// limits; this one only bounds the runner's descriptors).
const MAX_CONNECTIONS: usize = 256;

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("the relay address {0} is not a loopback address")]
    NotLoopback(SocketAddr),
    #[error("failed to listen on {address} for the relay to Porter")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Binds the relay's listener (before the runner reports ready).
pub async fn bind(address: SocketAddr) -> Result<TcpListener, RelayError> {
    if !address.ip().is_loopback() {
        return Err(RelayError::NotLoopback(address));
    }
    TcpListener::bind(address)
        .await
        .map_err(|source| RelayError::Bind { address, source })
}

/// Relays every accepted connection to `porter_socket` until the task is dropped.
pub async fn serve(listener: TcpListener, porter_socket: PathBuf) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors: the next accept may succeed once one closes.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let porter_socket = porter_socket.clone();
        tokio::spawn(async move {
            relay(stream, &porter_socket).await;
            drop(permit);
        });
    }
}

async fn relay(mut stream: TcpStream, porter_socket: &Path) {
    let _ = stream.set_nodelay(true);
    let mut porter = match UnixStream::connect(porter_socket).await {
        Ok(porter) => porter,
        Err(error) => {
            // What the command's client prints: a proxy that answers 502 with a reason.
            let message = format!(
                "porter is not reachable at {}: {error}\n",
                porter_socket.display()
            );
            let response = format!(
                "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{message}",
                message.len()
            );
            let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, response.as_bytes()).await;
            return;
        }
    };
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut porter).await;
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn bytes_pass_both_ways_and_a_missing_porter_is_a_502() {
        let directory = tempfile::tempdir().unwrap();
        let socket = directory.path().join("proxy.sock");
        let porter = tokio::net::UnixListener::bind(&socket).unwrap();
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, socket.clone()));
        let echo = tokio::spawn(async move {
            let (mut stream, _) = porter.accept().await.unwrap();
            let mut buffer = [0_u8; 5];
            stream.read_exact(&mut buffer).await.unwrap();
            stream.write_all(&buffer).await.unwrap();
        });
        let mut client = TcpStream::connect(address).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let mut answer = [0_u8; 5];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"hello");
        echo.await.unwrap();

        std::fs::remove_file(&socket).unwrap();
        let mut client = TcpStream::connect(address).await.unwrap();
        let mut text = String::new();
        client.read_to_string(&mut text).await.unwrap();
        assert!(text.starts_with("HTTP/1.1 502"), "{text}");
        assert!(bind("10.0.0.1:3128".parse().unwrap()).await.is_err());
    }
}
