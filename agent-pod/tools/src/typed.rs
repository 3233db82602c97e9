//! Typed tool inputs: a tool declares its input as a struct deriving `Deserialize` and
//! `JsonSchema`, and the adaptor here makes it the object-safe [`Tool`] the registry
//! holds. The schema the model is offered is generated from that struct (once per
//! input type), and the model's JSON is decoded into it before the tool runs, so the
//! schema and the parsing cannot drift apart.
//!
//! Pure: no I/O. Field doc comments become the descriptions the model reads;
//! `#[serde(alias = "…")]` accepts the other spellings models use (`filePath`,
//! `oldText`) without showing them in the schema.

use std::{any::TypeId, collections::HashMap, sync::LazyLock};

use futures::future::BoxFuture;
use schemars::{JsonSchema, generate::SchemaSettings};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::{Permit, Tool, ToolContext, ToolError, ToolOutput};
use parking_lot::RwLock;

/// A tool with a typed input; every such tool is a [`Tool`].
pub trait TypedTool: Send + Sync + 'static {
    /// What the model sends.
    type Input: DeserializeOwned + JsonSchema + Send + 'static;
    /// The name the model uses (one of `saint_config::KNOWN_TOOLS`).
    const NAME: &'static str;
    /// One paragraph for the model.
    const DESCRIPTION: &'static str;

    /// Runs a decoded call the policy allowed. The permit is already checked against
    /// this tool and the caller; taking it keeps `run` as unreachable without a permit
    /// as [`Tool::call`] is.
    fn run<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: Self::Input,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn description(&self) -> &str {
        T::DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        input_schema::<T::Input>()
    }

    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        // A permit for another tool or another role proves nothing about this call.
        let decoded = permit
            .covers(T::NAME, &context.caller)
            .and_then(|()| decode::<T::Input>(input));
        match decoded {
            Ok(input) => self.run(permit, context, input),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    }
}

/// Decodes a tool input. `null` counts as no fields (models send it for tools without
/// required fields); anything but an object is refused. The error names the field that
/// failed (`offset: invalid type: …`) and never a Rust type.
pub fn decode<T: DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    let input = match input {
        Value::Null => Value::Object(Map::new()),
        object @ Value::Object(_) => object,
        _ => {
            return Err(ToolError::InvalidInput(
                "the input must be a JSON object".to_string(),
            ));
        }
    };
    serde_path_to_error::deserialize(input).map_err(|error| {
        let message = readable(&error.inner().to_string());
        // A missing or unknown field is named by serde's message already; a value of the
        // wrong type or range is named only by its path.
        match error.path().to_string().as_str() {
            _ if message.starts_with("unknown field") => ToolError::InvalidInput(message),
            "." | "" => ToolError::InvalidInput(message),
            path => ToolError::InvalidInput(format!("{path}: {message}")),
        }
    })
}

/// serde's message with Rust integer type names said in words.
fn readable(message: &str) -> String {
    let mut message = message.to_string();
    for rust_type in ["u64", "usize", "u32", "u16", "u8"] {
        message = message.replace(
            &format!("expected {rust_type}"),
            "expected a non-negative integer",
        );
    }
    message.replace("expected a sequence", "expected an array")
}

/// The input schema offered to the model for `T`, generated on first use and cached.
pub fn input_schema<T: JsonSchema + 'static>() -> Value {
    static CACHE: LazyLock<RwLock<HashMap<TypeId, Value>>> = LazyLock::new(Default::default);
    let key = TypeId::of::<T>();
    if let Some(schema) = CACHE.read().get(&key) {
        return schema.clone();
    }
    let schema = generate::<T>();
    CACHE.write().entry(key).or_insert(schema).clone()
}

/// Generates the schema in the shape tool APIs take: one self-contained object schema
/// (`type`, `properties`, `required`), subschemas inline rather than behind `$ref`, no
/// `$schema`, no root title (the struct's name means nothing to the model).
fn generate<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|settings| {
        settings.inline_subschemas = true;
        settings.meta_schema = None;
    });
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Value::Object(root) = &mut schema {
        root.remove("title");
        // The struct's doc comment is for the reader of the code; the tool's
        // description is what the model reads about the whole call.
        root.remove("description");
        root.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        root.entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
    }
    simplify(&mut schema);
    schema
}

/// Optional fields are simply not required: their `null` alternative (`["string",
/// "null"]`) is dropped, and so is `format` on integers (`uint64` is not a format the
/// tool APIs know).
fn simplify(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::Array(types)) = object.get_mut("type") {
                types.retain(|kind| kind != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    object.insert("type".to_string(), only);
                }
            }
            if object.get("type").and_then(Value::as_str) == Some("integer") {
                object.remove("format");
            }
            for value in object.values_mut() {
                simplify(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(simplify),
        _ => {}
    }
}
