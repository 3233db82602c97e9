//! One embedder for many bots: the local model behind an OpenAI-compatible
//! `POST /v1/embeddings`, so a cluster loads the model's weights once instead of once
//! per bot. Bots reach it with the `openai` embeddings backend.
//!
//! Requests that arrive together are embedded together: a single worker thread takes
//! the first waiting request, gathers more for a few milliseconds (up to a batch of
//! texts), runs the model once and answers each caller with its own vectors. The model
//! runs on that one thread, so requests never compete for cores with each other.

use std::{
    sync::{Arc, mpsc},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::oneshot;

use crate::embeddings::{Embedder, EmbeddingError};

/// How the service batches and what it accepts.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Most texts embedded in one model run.
    pub max_batch: usize,
    /// How long the first request of a batch waits for others.
    pub batch_window: Duration,
    /// Most texts in one request.
    pub max_inputs: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Bearer token callers must present; `None`: no authentication (loopback or a
    /// NetworkPolicy-fenced Service only).
    pub token: Option<String>,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            max_batch: 64,
            batch_window: Duration::from_millis(3),
            max_inputs: 256,
            max_body_bytes: 4 * 1024 * 1024,
            token: None,
        }
    }
}

type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbeddingError>>;

struct Job {
    texts: Vec<String>,
    reply: Reply,
}

#[derive(Clone)]
struct ServiceState {
    jobs: mpsc::Sender<Job>,
    model: String,
    dimensions: usize,
    options: Arc<ServiceOptions>,
}

/// The router, with its batching worker started on its own thread.
pub fn router(embedder: Arc<dyn Embedder>, options: ServiceOptions) -> Router {
    let (jobs, queue) = mpsc::channel::<Job>();
    let state = ServiceState {
        jobs,
        model: embedder.model_id(),
        dimensions: embedder.dimensions(),
        options: Arc::new(options.clone()),
    };
    std::thread::Builder::new()
        .name("embedder-batches".to_string())
        .spawn(move || {
            // Every request waits on this thread: if it dies, the service cannot answer
            // any more, so the process ends (and is restarted) instead of staying up and
            // failing every call while its probes pass.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_batches(embedder.as_ref(), &queue, &options)
            }));
            if ran.is_err() {
                tracing::error!("the embedding thread panicked; exiting");
                std::process::exit(70);
            }
        })
        .expect("failed to start the embedding thread");
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(state.options.max_body_bytes))
        .with_state(state)
}

/// Takes jobs until every sender is gone: one model run per gathered batch.
fn run_batches(embedder: &dyn Embedder, queue: &mpsc::Receiver<Job>, options: &ServiceOptions) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        let mut texts = batch[0].texts.len();
        let deadline = Instant::now() + options.batch_window;
        while texts < options.max_batch {
            let left = deadline.saturating_duration_since(Instant::now());
            match queue.recv_timeout(left) {
                Ok(job) => {
                    texts += job.texts.len();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        let all: Vec<&str> = batch
            .iter()
            .flat_map(|job| job.texts.iter().map(String::as_str))
            .collect();
        match embedder.embed(&all) {
            Ok(vectors) => {
                let mut vectors = vectors.into_iter();
                for job in batch {
                    let own: Vec<Vec<f32>> = vectors.by_ref().take(job.texts.len()).collect();
                    let _ = job.reply.send(Ok(own));
                }
            }
            Err(error) => {
                let message = error.to_string();
                for job in batch {
                    let _ = job
                        .reply
                        .send(Err(EmbeddingError::Inference(message.clone())));
                }
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct EmbeddingsRequest {
    input: Input,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    encoding_format: Option<String>,
}

/// An error in OpenAI's shape, so any OpenAI client reports it as such.
fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"message": message.into(), "type": kind, "param": null, "code": null}})),
    )
        .into_response()
}

fn authorised(options: &ServiceOptions, headers: &HeaderMap) -> bool {
    let Some(expected) = &options.token else {
        return true;
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    // Same time whatever the first differing byte.
    subtle::ConstantTimeEq::ct_eq(presented.as_bytes(), expected.as_bytes()).into()
}

async fn embeddings(
    State(state): State<ServiceState>,
    headers: HeaderMap,
    body: Result<Json<EmbeddingsRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if !authorised(&state.options, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid bearer token",
        );
    }
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => {
            return error(
                rejection.status(),
                "invalid_request_error",
                rejection.body_text(),
            );
        }
    };
    if let Some(format) = &request.encoding_format
        && format != "float"
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("encoding_format {format:?} is not served: use \"float\""),
        );
    }
    let texts = match request.input {
        Input::One(text) => vec![text],
        Input::Many(texts) => texts,
    };
    if texts.is_empty() || texts.len() > state.options.max_inputs {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("input must hold 1 to {} texts", state.options.max_inputs),
        );
    }
    let count = texts.len();
    let (reply, answer) = oneshot::channel();
    if state.jobs.send(Job { texts, reply }).is_err() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the model has stopped",
        );
    }
    let vectors = match answer.await {
        Ok(Ok(vectors)) if vectors.len() == count => vectors,
        Ok(Ok(_)) | Err(_) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the model returned no vectors",
            );
        }
        Ok(Err(failure)) => {
            tracing::error!(error = %failure, "embedding failed");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "embedding failed",
            );
        }
    };
    let data: Vec<serde_json::Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, embedding)| json!({"object": "embedding", "index": index, "embedding": embedding}))
        .collect();
    Json(json!({
        "object": "list",
        "data": data,
        "model": request.model.unwrap_or_else(|| state.model.clone()),
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }))
    .into_response()
}

async fn models(State(state): State<ServiceState>) -> Response {
    Json(json!({
        "object": "list",
        "data": [{"id": state.model, "object": "model", "owned_by": "saint", "dimensions": state.dimensions}],
    }))
    .into_response()
}
