//! A sandbox pod runs nothing until its network is cut.
//!
//! The bot's sandbox NetworkPolicy allows no traffic at all, but a policy engine
//! enforces it some time after the pod got its address: a command started in that
//! window reaches whatever the pod network reaches (on the end-to-end node, the API
//! server and a server on the node, about a second after the Job was created). So
//! the runner proves the cut before it publishes its socket: it connects to the
//! Kubernetes API server, a destination every pod network routes to, and serves only
//! once that connection fails. A cluster that never enforces the policy gets a
//! runner that never serves, and an error that says why.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use thiserror::Error;
use tokio::net::TcpStream;

/// How long one connection attempt may take; a policy that drops packets answers
/// with silence, one that rejects them answers at once.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(700);
/// Pause between attempts.
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long every attempt must have failed, without one connecting, before the cut
/// counts: one failure may be a lost SYN or an API server between restarts.
pub const CUT_SPAN: Duration = Duration::from_secs(2);
/// How long the runner waits for the policy to take effect before giving up.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// The network was not cut, or could not be checked.
#[derive(Debug, Error)]
pub enum NetworkCutError {
    #[error(
        "the sandbox still reached the Kubernetes API server at {target} after {seconds} s: \
         the cluster does not enforce the bot's sandbox NetworkPolicy (is a NetworkPolicy \
         engine running?); refusing to run commands with network access"
    )]
    StillConnected { target: SocketAddr, seconds: u64 },
    #[error(
        "cannot check that the sandbox's network is cut: {variable} is {value:?} \
         (the kubelet sets KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT in every pod)"
    )]
    NoTarget {
        variable: &'static str,
        value: Option<String>,
    },
}

/// The proof: when the first connection failed, after how many attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkCut {
    /// Attempts made, the failing one included.
    pub attempts: u32,
    /// From the first attempt to the failing one.
    pub waited: Duration,
}

/// The API server's Service address from the pod's environment.
pub fn api_server_from_env(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<SocketAddr, NetworkCutError> {
    let host = lookup("KUBERNETES_SERVICE_HOST");
    let port = lookup("KUBERNETES_SERVICE_PORT");
    let Some(address) = host.as_deref().and_then(|host| host.parse().ok()) else {
        return Err(NetworkCutError::NoTarget {
            variable: "KUBERNETES_SERVICE_HOST",
            value: host,
        });
    };
    let Some(port) = port.as_deref().and_then(|port| port.parse::<u16>().ok()) else {
        return Err(NetworkCutError::NoTarget {
            variable: "KUBERNETES_SERVICE_PORT",
            value: port,
        });
    };
    Ok(SocketAddr::new(address, port))
}

/// Connects to `target` until every attempt for [`CUT_SPAN`] has failed (refused,
/// unreachable or no answer within [`ATTEMPT_TIMEOUT`]); a connection that succeeds
/// starts the span again. Fails once `deadline` has passed without such a span.
pub async fn await_network_cut(
    target: SocketAddr,
    deadline: Duration,
) -> Result<NetworkCut, NetworkCutError> {
    await_cut(target, CUT_SPAN, deadline).await
}

async fn await_cut(
    target: SocketAddr,
    span: Duration,
    deadline: Duration,
) -> Result<NetworkCut, NetworkCutError> {
    let started = Instant::now();
    let mut attempts = 0;
    let mut failing_since: Option<Instant> = None;
    loop {
        attempts += 1;
        let attempt = Instant::now();
        match tokio::time::timeout(ATTEMPT_TIMEOUT, TcpStream::connect(target)).await {
            Ok(Ok(stream)) => {
                drop(stream);
                if failing_since.take().is_some() || attempts == 1 {
                    tracing::info!(%target, "the sandbox still reaches the API server; waiting for its NetworkPolicy");
                }
            }
            Ok(Err(_)) | Err(_) => {
                let since = *failing_since.get_or_insert(attempt);
                if since.elapsed() >= span {
                    return Ok(NetworkCut {
                        attempts,
                        waited: started.elapsed(),
                    });
                }
            }
        }
        if started.elapsed() >= deadline {
            return Err(NetworkCutError::StillConnected {
                target,
                seconds: deadline.as_secs(),
            });
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    };

    use tokio::net::TcpListener;

    use super::*;

    #[tokio::test]
    async fn a_refused_connection_is_the_cut() {
        // Bind, learn the port, close: nothing listens there any more.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        drop(listener);
        let cut = await_cut(target, Duration::from_millis(500), Duration::from_secs(5))
            .await
            .unwrap();
        // Every attempt failed, for the whole span: more than one attempt.
        assert!(cut.attempts >= 3, "{cut:?}");
        assert!(cut.waited >= Duration::from_millis(500), "{cut:?}");
    }

    #[tokio::test]
    async fn a_reachable_server_is_refused_naming_it_once_the_deadline_passes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU32::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while listener.accept().await.is_ok() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        let error = await_cut(
            target,
            Duration::from_millis(500),
            Duration::from_millis(800),
        )
        .await
        .unwrap_err();
        let message = error.to_string();
        assert!(message.contains(&target.to_string()), "{message}");
        assert!(message.contains("does not enforce"), "{message}");
        assert!(accepted.load(Ordering::SeqCst) >= 2, "it retried");
    }

    #[tokio::test]
    async fn the_runner_waits_while_the_policy_is_not_yet_in_effect() {
        // The server answers three connections, then goes away, like a pod whose
        // policy arrives a moment after it started.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..3 {
                let _ = listener.accept().await;
            }
        });
        let cut = await_cut(target, Duration::from_millis(500), Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            cut.attempts >= 6,
            "three connected attempts, then a failing span: {cut:?}"
        );
    }

    #[tokio::test]
    async fn a_single_failure_between_connections_is_not_a_cut() {
        // Reachable, then refused for a moment (the server restarting), then reachable
        // again for good: the runner must never call that a cut.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        drop(listener);
        let restarted = tokio::spawn(async move {
            tokio::time::sleep(RETRY_PAUSE / 2).await;
            let listener = TcpListener::bind(target).await.unwrap();
            loop {
                let _ = listener.accept().await;
            }
        });
        let outcome = await_cut(target, Duration::from_secs(1), Duration::from_secs(2)).await;
        restarted.abort();
        assert!(
            matches!(outcome, Err(NetworkCutError::StillConnected { .. })),
            "{outcome:?}"
        );
    }

    #[test]
    fn the_target_comes_from_the_kubelet_s_variables_and_fails_closed_without_them() {
        let environment = |host: Option<&str>, port: Option<&str>| {
            let (host, port) = (host.map(str::to_owned), port.map(str::to_owned));
            move |name: &str| match name {
                "KUBERNETES_SERVICE_HOST" => host.clone(),
                "KUBERNETES_SERVICE_PORT" => port.clone(),
                _ => None,
            }
        };
        assert_eq!(
            api_server_from_env(environment(Some("10.0.0.1"), Some("443"))).unwrap(),
            "10.0.0.1:443".parse().unwrap()
        );
        assert_eq!(
            api_server_from_env(environment(Some("fd00::1"), Some("6443"))).unwrap(),
            "[fd00::1]:6443".parse().unwrap()
        );
        for (host, port, named) in [
            (None, Some("443"), "KUBERNETES_SERVICE_HOST"),
            (
                Some("kubernetes.default"),
                Some("443"),
                "KUBERNETES_SERVICE_HOST",
            ),
            (Some("10.0.0.1"), None, "KUBERNETES_SERVICE_PORT"),
            (Some("10.0.0.1"), Some("https"), "KUBERNETES_SERVICE_PORT"),
        ] {
            let message = api_server_from_env(environment(host, port))
                .unwrap_err()
                .to_string();
            assert!(message.contains(named), "{message}");
        }
    }
}
