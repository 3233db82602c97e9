//! What a GraphQL-over-HTTP body asks for, read by a spec-compliant parser
//! (`apollo-parser`): each operation's kind and, for mutations, its root fields after
//! aliases, with fragments at the root followed to their definitions. A body the policy
//! cannot judge — not JSON, a duplicate `query` key, a persisted query (`id`,
//! `documentId`, `extensions.persistedQuery`) or a document that does not parse — is
//! refused, never passed through.
//!
//! Pure.

use std::collections::{BTreeMap, HashSet};

use apollo_parser::{
    Parser,
    cst::{self, CstNode, Definition, Selection},
};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// One executable operation of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    Query,
    /// Its root fields (after aliases, through fragments); `...` for a fragment spread
    /// whose definition is not in the document, which only a `*` rule admits.
    Mutation(Vec<String>),
    Subscription,
}

/// Why a body cannot be judged: it is refused whatever the rules say.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unjudgeable {
    #[error("the GraphQL body is not JSON")]
    NotJson,
    #[error("the GraphQL body repeats a key")]
    RepeatedKey,
    #[error("the GraphQL body is not an object or a batch")]
    NotObjectOrBatch,
    #[error("persisted GraphQL queries cannot be checked")]
    Persisted,
    #[error("the GraphQL body has no query string")]
    NoQuery,
    /// The parser's message.
    #[error("the GraphQL document does not parse: {0}")]
    Unparsable(String),
    #[error("the GraphQL document is not a list of operations")]
    NotOperations,
    #[error("the GraphQL document has no operation")]
    NoOperation,
}

/// A JSON object whose keys are kept in order and refused when repeated: servers
/// disagree on which of two `query` keys wins, so the policy must not guess.
struct UniqueKeys(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = UniqueKeys;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
                let mut entries: Vec<(String, serde_json::Value)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
                    if entries.iter().any(|(seen, _)| *seen == key) {
                        return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
                    }
                    entries.push((key, value));
                }
                Ok(UniqueKeys(entries))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

/// A body: one request object or a batch of them.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Body {
    Batch(Vec<UniqueKeys>),
    Single(UniqueKeys),
}

/// The `query` documents of a body, each request checked for forms the policy cannot
/// judge.
pub fn documents(body: &[u8]) -> Result<Vec<String>, Unjudgeable> {
    // Duplicate keys first, with a message that says so (the untagged enum would hide
    // the reason).
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| Unjudgeable::NotJson)?;
    let requests = match serde_json::from_slice::<Body>(body) {
        Ok(Body::Batch(requests)) => requests,
        Ok(Body::Single(request)) => vec![request],
        Err(_) if value.is_object() || value.is_array() => {
            return Err(Unjudgeable::RepeatedKey);
        }
        Err(_) => return Err(Unjudgeable::NotObjectOrBatch),
    };
    requests
        .into_iter()
        .map(|UniqueKeys(entries)| {
            let entries: BTreeMap<String, serde_json::Value> = entries.into_iter().collect();
            let persisted = ["id", "documentId", "queryId", "hash"]
                .iter()
                .any(|key| entries.contains_key(*key))
                || entries
                    .get("extensions")
                    .is_some_and(|extensions| extensions.get("persistedQuery").is_some());
            if persisted {
                return Err(Unjudgeable::Persisted);
            }
            match entries.get("query") {
                Some(serde_json::Value::String(query)) => Ok(query.clone()),
                _ => Err(Unjudgeable::NoQuery),
            }
        })
        .collect()
}

/// Every executable operation in `document`; type system definitions, parse errors
/// and an empty document are refused.
pub fn operations(document: &str) -> Result<Vec<Operation>, Unjudgeable> {
    let tree = Parser::new(document)
        .recursion_limit(64)
        .token_limit(100_000)
        .parse();
    if let Some(error) = tree.errors().next() {
        return Err(Unjudgeable::Unparsable(error.message().to_owned()));
    }
    let document = tree.document();
    let mut fragments = BTreeMap::new();
    for definition in document.definitions() {
        if let Definition::FragmentDefinition(fragment) = &definition
            && let Some(name) = fragment.fragment_name().and_then(|name| name.name())
        {
            fragments.insert(name.text().to_string(), fragment.clone());
        }
    }
    let mut operations = Vec::new();
    for definition in document.definitions() {
        match definition {
            Definition::OperationDefinition(operation) => {
                let kind = operation
                    .operation_type()
                    .map(|kind| kind.syntax().text().to_string());
                operations.push(match kind.as_deref() {
                    None | Some("query") => Operation::Query,
                    Some("mutation") => {
                        let mut fields = Vec::new();
                        if let Some(selections) = operation.selection_set() {
                            root_fields(&selections, &fragments, &mut HashSet::new(), &mut fields);
                        }
                        Operation::Mutation(fields)
                    }
                    _ => Operation::Subscription,
                });
            }
            Definition::FragmentDefinition(_) => {}
            _ => return Err(Unjudgeable::NotOperations),
        }
    }
    if operations.is_empty() {
        return Err(Unjudgeable::NoOperation);
    }
    Ok(operations)
}

/// The field names at the root of `selections`, following inline fragments and named
/// fragments defined in the document (each once, so a cycle ends).
fn root_fields(
    selections: &cst::SelectionSet,
    fragments: &BTreeMap<String, cst::FragmentDefinition>,
    followed: &mut HashSet<String>,
    fields: &mut Vec<String>,
) {
    for selection in selections.selections() {
        match selection {
            Selection::Field(field) => {
                // The field's name, never its alias: the client chooses aliases.
                let name = field
                    .name()
                    .map_or_else(|| "...".to_owned(), |name| name.text().to_string());
                fields.push(name);
            }
            Selection::InlineFragment(fragment) => match fragment.selection_set() {
                Some(inner) => root_fields(&inner, fragments, followed, fields),
                None => fields.push("...".to_owned()),
            },
            Selection::FragmentSpread(spread) => {
                let name = spread
                    .fragment_name()
                    .and_then(|name| name.name())
                    .map(|name| name.text().to_string());
                let definition = name.as_ref().and_then(|name| fragments.get(name));
                match (
                    name,
                    definition.and_then(|fragment| fragment.selection_set()),
                ) {
                    (Some(name), Some(inner)) => {
                        if followed.insert(name) {
                            root_fields(&inner, fragments, followed, fields);
                        }
                    }
                    _ => fields.push("...".to_owned()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutation_fields(document: &str) -> Vec<String> {
        match operations(document).unwrap().as_slice() {
            [Operation::Mutation(fields)] => fields.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn aliases_fragments_and_inline_fragments_reveal_the_real_root_fields() {
        assert_eq!(
            mutation_fields(
                "mutation { ok: addComment(input: {}) { x } m: mergePullRequest(input: {}) { x } }"
            ),
            ["addComment", "mergePullRequest"]
        );
        assert_eq!(
            mutation_fields(
                "mutation { ...F } fragment F on Mutation { a: mergePullRequest { x } ...G } fragment G on Mutation { ...F deleteRef { x } }"
            ),
            ["mergePullRequest", "deleteRef"]
        );
        assert_eq!(
            mutation_fields(
                "mutation { ... on Mutation { mergePullRequest { x } } ... @include(if: true) { deleteRef { x } } }"
            ),
            ["mergePullRequest", "deleteRef"]
        );
        assert_eq!(mutation_fields("mutation { ...Missing }"), ["..."]);
        assert_eq!(
            operations("{ viewer { login } } subscription { s }").unwrap(),
            [Operation::Query, Operation::Subscription]
        );
    }

    #[test]
    fn bodies_the_policy_cannot_judge_are_refused() {
        for body in [
            &br#"{"query":"{ a }","query":"mutation { deleteRef { x } }"}"#[..],
            br#"[{"query":"{ a }"},{"query":"{ b }","query":"mutation { x }"}]"#,
            br#"{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}}"#,
            br#"{"query":"{ a }","extensions":{"persistedQuery":{"version":1}}}"#,
            br#"{"id":"abc","variables":{}}"#,
            br#"{"documentId":"abc"}"#,
            br#"{"variables":{}}"#,
            br#""query""#,
            b"not json",
        ] {
            assert!(
                documents(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            documents(br#"[{"query":"{ a }"},{"query":"{ b }","operationName":null}]"#).unwrap(),
            ["{ a }", "{ b }"]
        );
        for document in [
            "type Query { x: Int }",
            "mutation { addComment(input: \"unterminated) }",
            "",
            "{",
        ] {
            assert!(operations(document).is_err(), "{document}");
        }
    }
}
