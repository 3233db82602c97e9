//! The agent's entry point: `start` builds everything from the bot config, indexes in
//! the background, and refuses to run without its model.

mod support;

use saint_config::{EmbeddingsConfig, MemoryConfig};
use saint_memory::{Scope, SearchRequest, StartError, default_model_dir, start};

#[test]
fn start_indexes_the_workspace_in_the_background() {
    // Fail clearly (naming fetch-model.sh) if the model is absent.
    support::model();
    let workspace = tempfile::tempdir().expect("tempdir");
    support::company_memory(workspace.path());
    let config = MemoryConfig {
        enabled: true,
        embeddings: EmbeddingsConfig::Local {
            weights: saint_config::ModelWeights::F32,
            model_dir: default_model_dir().display().to_string(),
        },
    };
    let memory = start(workspace.path(), &config).expect("start");
    memory.initial_reindex.join().expect("reindex thread");
    let scope = Scope::for_role(&support::employee_scopes(), "ana");
    let hits = memory
        .index
        .search(&SearchRequest {
            query: "INV-2024-0044",
            k: 1,
            scope: &scope,
        })
        .expect("search");
    assert_eq!(hits[0].path, "memory/shared/billing/inv-2024-0044.md");
    assert!(
        workspace
            .path()
            .join(".saint/memory/index.sqlite")
            .is_file()
    );
}

#[test]
fn start_without_the_model_fails_with_a_clear_error() {
    let workspace = tempfile::tempdir().expect("tempdir");
    let missing = workspace.path().join("no-model-here");
    let config = MemoryConfig {
        enabled: true,
        embeddings: EmbeddingsConfig::Local {
            weights: saint_config::ModelWeights::F32,
            model_dir: missing.display().to_string(),
        },
    };
    let error = start(workspace.path(), &config).expect_err("must refuse to start");
    assert!(matches!(error, StartError::Embedding(_)), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("model.safetensors") && message.contains("fetch-model.sh"),
        "{message}"
    );
}

#[test]
fn start_with_an_unset_api_key_variable_fails() {
    let workspace = tempfile::tempdir().expect("tempdir");
    let config = MemoryConfig {
        enabled: true,
        embeddings: EmbeddingsConfig::Openai {
            base_url: "http://127.0.0.1:9/v1".to_string(),
            model: "text-embedding-3-small".to_string(),
            api_key_env: Some("SAINT_TEST_EMBEDDINGS_KEY_THAT_IS_NOT_SET".to_string()),
            dimensions: 1536,
        },
    };
    let error = start(workspace.path(), &config).expect_err("must refuse to start");
    assert!(
        error
            .to_string()
            .contains("SAINT_TEST_EMBEDDINGS_KEY_THAT_IS_NOT_SET"),
        "{error}"
    );
}
