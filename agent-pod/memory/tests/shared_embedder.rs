//! One embedder for many bots: the real `saint-embedder` binary serving the real model,
//! two bots' indexes embedding through it at the same time, and what a search does
//! when the embedder is gone (keyword-only, said so — never a failed search).

mod support;

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::Arc,
};

use saint_config::MemoryScope;
use saint_memory::{
    Embedder, IndexOptions, MemoryIndex, OpenAiEmbedder, SearchRequest, default_model_dir,
};
use support::*;

struct Service {
    child: Child,
    base_url: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_service(token: Option<&str>) -> Service {
    // Fails with the fetch instructions when the model is missing (never skipped).
    let _ = model();
    let mut command = Command::new(env!("CARGO_BIN_EXE_saint-embedder"));
    command
        .args(["--listen", "127.0.0.1:0", "--model-dir"])
        .arg(default_model_dir())
        .env_remove("SAINT_EMBEDDER_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped());
    if let Some(token) = token {
        command.env("SAINT_EMBEDDER_TOKEN", token);
    }
    let mut child = command.spawn().expect("failed to start saint-embedder");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let Some(address) = line.trim().strip_prefix("saint-embedder listening http=") else {
        let _ = child.kill();
        panic!("saint-embedder did not report its address: {line:?}");
    };
    Service {
        base_url: format!("http://{address}"),
        child,
    }
}

fn remote(service: &Service, token: Option<&str>) -> Arc<dyn Embedder> {
    Arc::new(
        OpenAiEmbedder::new(
            &service.base_url,
            "all-MiniLM-L6-v2",
            token.map(str::to_string),
            384,
        )
        .unwrap(),
    )
}

fn bot_memory(root: &std::path::Path, topic: &str) {
    write(
        root,
        "memory/shared/payments.md",
        &format!("# Payments\n\nWe pay supplier invoices within 30 days of receipt. {topic}\n"),
    );
    write(
        root,
        "memory/shared/office.md",
        "# Office\n\nThe office opens at 8 and the kitchen is cleaned on Fridays.\n",
    );
}

fn cosine(left: &[f32], right: &[f32]) -> f32 {
    left.iter().zip(right).map(|(a, b)| a * b).sum()
}

#[test]
fn two_bots_embed_through_one_service_and_get_the_local_models_vectors() {
    let service = start_service(None);
    let embedder = remote(&service, None);
    // The service runs the same model: its vectors are the in-process model's.
    let texts = [
        "When do we pay suppliers?",
        "The kitchen is cleaned on Fridays.",
    ];
    let served = embedder.embed(&texts).unwrap();
    let local = model().embed(&texts).unwrap();
    for (served, local) in served.iter().zip(&local) {
        assert!(cosine(served, local) > 0.9999, "vectors differ");
    }

    // Two bots index and search at the same time through the one service.
    let handles: Vec<_> = ["acme", "globex"]
        .into_iter()
        .map(|bot| {
            let embedder = embedder.clone();
            std::thread::spawn(move || {
                let directory = tempfile::tempdir().unwrap();
                bot_memory(directory.path(), &format!("Ask {bot}'s accountant."));
                let index =
                    MemoryIndex::open(IndexOptions::new(directory.path()), embedder).unwrap();
                index.reindex_all().unwrap();
                let scope = scope(&[MemoryScope::Shared], "someone");
                let outcome = index
                    .search_or_keywords(&SearchRequest {
                        query: "how long until suppliers get their money",
                        k: 2,
                        scope: &scope,
                    })
                    .unwrap();
                (bot, outcome)
            })
        })
        .collect();
    for handle in handles {
        let (bot, outcome) = handle.join().unwrap();
        assert_eq!(outcome.keyword_only, None, "{bot}");
        // No query word appears in the payments note: only meaning finds it first.
        assert_eq!(outcome.hits[0].path, "memory/shared/payments.md", "{bot}");
        assert!(
            outcome.hits[0].vector_score > 0.3,
            "{bot}: {:?}",
            outcome.hits[0]
        );
    }
}

#[test]
fn without_the_service_a_search_answers_from_keywords_and_says_so() {
    let directory = tempfile::tempdir().unwrap();
    bot_memory(directory.path(), "");
    let mut service = start_service(None);
    let index =
        MemoryIndex::open(IndexOptions::new(directory.path()), remote(&service, None)).unwrap();
    index.reindex_all().unwrap();
    let scope = scope(&[MemoryScope::Shared], "someone");
    let request = SearchRequest {
        query: "supplier invoices",
        k: 2,
        scope: &scope,
    };
    assert_eq!(
        index.search_or_keywords(&request).unwrap().keyword_only,
        None
    );

    service.child.kill().unwrap();
    service.child.wait().unwrap();
    let outcome = index.search_or_keywords(&request).unwrap();
    let reason = outcome.keyword_only.expect("marked keyword-only");
    assert!(reason.contains("remote endpoint"), "{reason}");
    assert_eq!(outcome.hits[0].path, "memory/shared/payments.md");
    assert!(outcome.hits.iter().all(|hit| hit.vector_score == 0.0));
    // The strict search still reports the failure to callers that want it.
    assert!(index.search(&request).is_err());
}

#[test]
fn a_token_protected_service_refuses_callers_without_it() {
    let service = start_service(Some("s3cret-token"));
    let error = remote(&service, None).embed(&["hello"]).unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");
    let wrong = remote(&service, Some("s3cret-tokeN"))
        .embed(&["hello"])
        .unwrap_err();
    assert!(wrong.to_string().contains("401"), "{wrong}");
    let vectors = remote(&service, Some("s3cret-token"))
        .embed(&["hello"])
        .unwrap();
    assert_eq!(vectors[0].len(), 384);
}

#[test]
fn malformed_and_oversized_requests_are_refused_in_openais_error_shape() {
    let service = start_service(None);
    let client = reqwest::blocking::Client::new();
    let url = format!("{}/v1/embeddings", service.base_url);
    for (body, expected) in [
        ("{not json".to_string(), 400),
        (r#"{"input": []}"#.to_string(), 400),
        (
            r#"{"input": "x", "encoding_format": "base64"}"#.to_string(),
            400,
        ),
        (
            serde_json::json!({"input": vec!["a"; 257]}).to_string(),
            400,
        ),
        (
            serde_json::json!({"input": "x".repeat(5 * 1024 * 1024)}).to_string(),
            413,
        ),
    ] {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), expected);
        if expected == 400 {
            let error: serde_json::Value = response.json().unwrap();
            assert!(error["error"]["message"].is_string(), "{error}");
        }
    }
    // Still serving afterwards.
    assert_eq!(remote(&service, None).embed(&["ok"]).unwrap().len(), 1);
}
