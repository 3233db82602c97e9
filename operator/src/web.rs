//! The operator's HTTP endpoints: `/healthz` (process alive), `/readyz` (connected to the
//! API server), `/metrics` (Prometheus text). No Kubernetes access of its own.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};

use crate::metrics::Metrics;

/// What the endpoints read.
#[derive(Clone)]
pub struct WebState {
    /// Shared with the controller.
    pub metrics: Arc<Metrics>,
    /// Set once the operator has reached the API server; never cleared.
    pub ready: Arc<AtomicBool>,
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<WebState>) -> impl IntoResponse {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(State(state): State<WebState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

/// The router; tests call it with `oneshot` without a server.
pub fn app(state: WebState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt;

    use super::*;

    async fn get_text(app: Router, path: &str) -> (StatusCode, String) {
        let response = app
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readyz_follows_the_ready_flag_and_healthz_is_always_ok() {
        let state = WebState {
            metrics: Arc::new(Metrics::default()),
            ready: Arc::new(AtomicBool::new(false)),
        };
        assert_eq!(
            get_text(app(state.clone()), "/healthz").await.0,
            StatusCode::OK
        );
        assert_eq!(
            get_text(app(state.clone()), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        state.ready.store(true, Ordering::Relaxed);
        assert_eq!(get_text(app(state), "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_expose_reconciles_errors_duration_and_bots() {
        let metrics = Arc::new(Metrics::default());
        metrics.reconciles.inc();
        metrics.record_error("Apply");
        metrics.duration.observe(0.2);
        metrics.record_readiness("acme/my-bot".into(), true);
        metrics.record_readiness("acme/other-bot".into(), false);
        let state = WebState {
            metrics,
            ready: Arc::new(AtomicBool::new(true)),
        };
        let (status, text) = get_text(app(state), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("saint_operator_reconciles_total 1"), "{text}");
        assert!(
            text.contains("saint_operator_reconcile_errors_total{reason=\"Apply\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("saint_operator_reconcile_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("saint_operator_bots{ready=\"true\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("saint_operator_bots{ready=\"false\"} 1"),
            "{text}"
        );
    }
}
