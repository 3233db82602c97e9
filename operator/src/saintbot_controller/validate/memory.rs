//! `spec.memory` → the rendered memory config: the image's local model (f32 or int16), the
//! chart's shared embedder, or no memory at all.

use saint_config::{EmbeddingsConfig, MemoryConfig, ModelWeights};

use super::ValidateError;
use crate::{
    crd::saintbot::{EmbedderChoice, MemorySpec},
    settings::SharedEmbedder,
};

/// The length of the shared embedder's vectors.
const SHARED_EMBEDDER_DIMENSIONS: u32 = 384;

/// The memory config for `spec`; `shared` is the operator's shared embedder, if the
/// chart deployed one.
pub(super) fn render_memory(
    spec: &MemorySpec,
    shared: Option<&SharedEmbedder>,
) -> Result<MemoryConfig, ValidateError> {
    if spec.enabled == Some(false) {
        return Ok(MemoryConfig {
            enabled: false,
            ..MemoryConfig::default()
        });
    }
    let embeddings = match spec.embedder.unwrap_or_default() {
        EmbedderChoice::Local => match EmbeddingsConfig::default() {
            EmbeddingsConfig::Local { model_dir, .. } => EmbeddingsConfig::Local {
                model_dir,
                weights: spec.weights.unwrap_or(ModelWeights::F32),
            },
            other @ EmbeddingsConfig::Openai { .. } => other,
        },
        EmbedderChoice::Shared => {
            if spec.weights.is_some() {
                return Err(ValidateError::InvalidSetting {
                    field: "spec.memory.weights".to_string(),
                    message: "it applies to the local model only; with memory.embedder: shared \
                              the shared embedder's own setting decides"
                        .to_string(),
                });
            }
            let shared = shared.ok_or_else(|| ValidateError::InvalidSetting {
                field: "spec.memory.embedder".to_string(),
                message: "shared needs the chart's shared embedder, and this operator runs \
                          without one (install the chart with embedder.enabled=true, or use \
                          embedder: local)"
                    .to_string(),
            })?;
            EmbeddingsConfig::Openai {
                base_url: shared.url(),
                model: shared.model().to_string(),
                api_key_env: None,
                dimensions: SHARED_EMBEDDER_DIMENSIONS,
            }
        }
    };
    Ok(MemoryConfig {
        enabled: true,
        embeddings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: serde_json::Value) -> MemorySpec {
        serde_json::from_value(value).expect("a memory spec")
    }

    fn shared() -> SharedEmbedder {
        SharedEmbedder::parse("saint-system/saint-embedder:8090").expect("parses")
    }

    #[test]
    fn absent_memory_is_the_local_f32_model_as_before() {
        let rendered = render_memory(&spec(serde_json::json!({})), Some(&shared())).unwrap();
        assert_eq!(rendered, MemoryConfig::default());
    }

    #[test]
    fn each_setting_renders_what_it_says() {
        let off = render_memory(&spec(serde_json::json!({"enabled": false})), None).unwrap();
        assert!(!off.enabled);
        let int16 = render_memory(&spec(serde_json::json!({"weights": "int16"})), None).unwrap();
        assert!(matches!(
            int16.embeddings,
            EmbeddingsConfig::Local {
                weights: ModelWeights::Int16,
                ..
            }
        ));
        let through = render_memory(
            &spec(serde_json::json!({"embedder": "shared"})),
            Some(&shared()),
        )
        .unwrap();
        assert_eq!(
            through.embeddings,
            EmbeddingsConfig::Openai {
                base_url: "http://saint-embedder.saint-system.svc:8090".to_string(),
                model: "all-MiniLM-L6-v2".to_string(),
                api_key_env: None,
                dimensions: 384,
            }
        );
    }

    #[test]
    fn the_shared_embedders_weights_are_part_of_the_model_name_bots_record() {
        let int16 = SharedEmbedder {
            weights: ModelWeights::Int16,
            ..shared()
        };
        let rendered = render_memory(
            &spec(serde_json::json!({"embedder": "shared"})),
            Some(&int16),
        )
        .unwrap();
        let EmbeddingsConfig::Openai { model, .. } = rendered.embeddings else {
            panic!("not the shared embedder");
        };
        assert_eq!(model, "all-MiniLM-L6-v2-int16");
    }

    #[test]
    fn shared_without_a_shared_embedder_or_with_weights_is_refused_naming_the_field() {
        let error = render_memory(&spec(serde_json::json!({"embedder": "shared"})), None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("spec.memory.embedder") && error.contains("embedder.enabled=true"),
            "{error}"
        );
        let error = render_memory(
            &spec(serde_json::json!({"embedder": "shared", "weights": "int16"})),
            Some(&shared()),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("spec.memory.weights"), "{error}");
    }
}
