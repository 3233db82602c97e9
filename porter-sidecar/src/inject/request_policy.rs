//! Which requests a role may make through the injecting proxy: methods and paths, and
//! for GraphQL endpoints whether the body holds only queries and admitted mutations.
//!
//! Pure: compiled from the registry entry, asked per request.

use std::collections::BTreeMap;

use globset::{GlobBuilder, GlobMatcher};
use porter_protocol::registry::{GraphqlRule, RequestRule};

use super::graphql::{self, Operation, Unjudgeable};

/// The role rules that apply to every role.
const ANY_ROLE: &str = "*";

/// A compiled `requests` map.
#[derive(Clone, Debug, Default)]
pub struct RequestPolicy {
    /// No rules at all: any request to an allowed host.
    open: bool,
    by_role: BTreeMap<String, Vec<Rule>>,
}

#[derive(Clone, Debug)]
struct Rule {
    methods: Vec<String>,
    paths: Vec<PathPattern>,
    graphql: Option<GraphqlRule>,
}

/// Why a `requests` map does not compile: a role's path pattern is not a glob.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{role}: path {path:?}")]
    Path {
        role: String,
        path: String,
        #[source]
        source: globset::Error,
    },
}

/// Why a GraphQL body is refused: a form the policy cannot judge, or an operation no
/// rule admits. The text is what the proxy answers and logs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphqlRefusal {
    #[error(transparent)]
    Unjudgeable(#[from] Unjudgeable),
    #[error("GraphQL queries are not allowed")]
    Query,
    /// The mutation's root fields.
    #[error("GraphQL mutation {} is not allowed", .0.join(", "))]
    Mutation(Vec<String>),
    #[error("GraphQL subscriptions are not allowed")]
    Subscription,
}

/// What the method and path alone decide.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadDecision {
    Allowed,
    /// Only GraphQL rules match: the body decides (see [`RequestPolicy::check_graphql`]).
    NeedsBody(Vec<GraphqlRule>),
    Refused(String),
}

impl RequestPolicy {
    /// Compiles a `requests` map; an invalid path pattern is refused with its text.
    pub fn compile(requests: &BTreeMap<String, Vec<RequestRule>>) -> Result<Self, PolicyError> {
        let mut by_role = BTreeMap::new();
        for (role, rules) in requests {
            let mut compiled = Vec::new();
            for rule in rules {
                compiled.push(Rule {
                    methods: rule.methods.clone(),
                    paths: rule
                        .paths
                        .iter()
                        .map(|path| {
                            PathPattern::new(path, false).map_err(|source| PolicyError::Path {
                                role: role.clone(),
                                path: path.clone(),
                                source,
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    graphql: rule.graphql.clone(),
                });
            }
            by_role.insert(role.clone(), compiled);
        }
        Ok(Self {
            open: requests.is_empty(),
            by_role,
        })
    }

    /// Decides by method and path; `role` is the caller's (none: only `*` rules apply).
    pub fn check_head(&self, role: Option<&str>, method: &str, path: &str) -> HeadDecision {
        if let Some(reason) = ambiguous_path(path) {
            return HeadDecision::Refused(reason.to_owned());
        }
        if self.open {
            return HeadDecision::Allowed;
        }
        let role_rules = role.and_then(|role| self.by_role.get(role));
        let shared_rules = self.by_role.get(ANY_ROLE);
        let mut graphql = Vec::new();
        for rule in role_rules.into_iter().chain(shared_rules).flatten() {
            let method_matches = rule
                .methods
                .iter()
                .any(|allowed| allowed == "*" || allowed == method);
            if !method_matches || !rule.paths.iter().any(|pattern| pattern.matches(path)) {
                continue;
            }
            match &rule.graphql {
                None => return HeadDecision::Allowed,
                // A GraphQL rule reads a JSON body; GET with the query in the URL is not it.
                Some(rule) if method == "POST" => graphql.push(rule.clone()),
                Some(_) => {}
            }
        }
        if graphql.is_empty() {
            HeadDecision::Refused(format!(
                "role {} may not {method} {path}",
                role.unwrap_or("(none)")
            ))
        } else {
            HeadDecision::NeedsBody(graphql)
        }
    }

    /// Decides a GraphQL request by its JSON body: every operation in it must be
    /// admitted by one of `rules`.
    pub fn check_graphql(rules: &[GraphqlRule], body: &[u8]) -> Result<(), GraphqlRefusal> {
        let documents = graphql::documents(body)?;
        for document in &documents {
            for operation in graphql::operations(document)? {
                let admitted = rules.iter().any(|rule| match &operation {
                    Operation::Query => rule.queries,
                    Operation::Mutation(fields) => {
                        !fields.is_empty()
                            && fields.iter().all(|field| {
                                rule.mutations
                                    .iter()
                                    .any(|allowed| allowed == "*" || allowed == field)
                            })
                    }
                    Operation::Subscription => false,
                });
                if !admitted {
                    return Err(match operation {
                        Operation::Query => GraphqlRefusal::Query,
                        Operation::Mutation(fields) => GraphqlRefusal::Mutation(fields),
                        Operation::Subscription => GraphqlRefusal::Subscription,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Paths an upstream could read differently from the pattern match: dot segments,
/// empty segments, encoded slashes, dots or backslashes.
fn ambiguous_path(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') {
        return Some("the path must start with /");
    }
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "\\"]
        .iter()
        .any(|needle| lower.contains(needle))
    {
        return Some("encoded dots, slashes and backslashes are refused in paths");
    }
    let segments: Vec<&str> = path[1..].split('/').collect();
    let inner = &segments[..segments.len().saturating_sub(1)];
    if segments
        .iter()
        .any(|segment| *segment == "." || *segment == "..")
        || inner.iter().any(|segment| segment.is_empty())
    {
        return Some("dot and empty segments are refused in paths");
    }
    None
}

/// A path pattern (`globset`, with `*` kept within one segment): `*` matches within
/// a segment, a `**` segment any number of segments, including none at the end
/// (`/repos/*/*/pulls/**` also matches `/repos/o/r/pulls`).
#[derive(Clone, Debug)]
pub(crate) struct PathPattern {
    matchers: Vec<GlobMatcher>,
}

impl PathPattern {
    /// Compiles `pattern`; `case_insensitive` for holds, which must match whatever an
    /// upstream may read as the same path.
    /// The error names neither the pattern nor its field: the caller knows both.
    pub(crate) fn new(pattern: &str, case_insensitive: bool) -> Result<Self, globset::Error> {
        let mut globs = vec![pattern.to_owned()];
        if let Some(parent) = pattern.strip_suffix("/**") {
            globs.push(if parent.is_empty() {
                "/".to_owned()
            } else {
                parent.to_owned()
            });
        }
        let matchers = globs
            .iter()
            .map(|text| {
                GlobBuilder::new(text)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .case_insensitive(case_insensitive)
                    .build()
                    .map(|glob| glob.compile_matcher())
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { matchers })
    }

    pub(crate) fn matches(&self, path: &str) -> bool {
        self.matchers.iter().any(|matcher| matcher.is_match(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(methods: &[&str], paths: &[&str], graphql: Option<GraphqlRule>) -> RequestRule {
        RequestRule {
            methods: methods.iter().map(|method| (*method).to_owned()).collect(),
            paths: paths.iter().map(|path| (*path).to_owned()).collect(),
            graphql,
        }
    }

    fn acme_policy() -> RequestPolicy {
        RequestPolicy::compile(&BTreeMap::from([
            (
                "employee".to_owned(),
                vec![
                    rule(&["GET"], &["/repos/*/*/pulls", "/repos/*/*/pulls/**"], None),
                    rule(
                        &["POST"],
                        &["/graphql"],
                        Some(GraphqlRule {
                            queries: true,
                            mutations: vec!["addComment".into()],
                        }),
                    ),
                ],
            ),
            ("owner".to_owned(), vec![rule(&["*"], &["/**"], None)]),
        ]))
        .unwrap()
    }

    #[test]
    fn methods_and_paths_are_checked_per_role() {
        let policy = acme_policy();
        let employee = Some("employee");
        assert_eq!(
            policy.check_head(employee, "GET", "/repos/acme/app/pulls"),
            HeadDecision::Allowed
        );
        assert_eq!(
            policy.check_head(employee, "GET", "/repos/acme/app/pulls/7/files"),
            HeadDecision::Allowed
        );
        assert!(matches!(
            policy.check_head(employee, "PUT", "/repos/acme/app/pulls/7/merge"),
            HeadDecision::Refused(_)
        ));
        assert!(matches!(
            policy.check_head(employee, "GET", "/repos/acme/app/issues"),
            HeadDecision::Refused(_)
        ));
        assert!(matches!(
            policy.check_head(Some("stranger"), "GET", "/repos/acme/app/pulls"),
            HeadDecision::Refused(_)
        ));
        assert_eq!(
            policy.check_head(Some("owner"), "PUT", "/repos/acme/app/pulls/7/merge"),
            HeadDecision::Allowed
        );
    }

    #[test]
    fn ambiguous_paths_are_refused_even_when_a_pattern_would_match() {
        let policy = acme_policy();
        for path in [
            "/repos/acme/app/pulls/../../../user",
            "/repos/acme/app/pulls/%2e%2e/x",
            "/repos/acme/app/pulls/7%2Fmerge",
            "/repos//acme/app/pulls",
        ] {
            assert!(
                matches!(
                    policy.check_head(Some("owner"), "GET", path),
                    HeadDecision::Refused(_)
                ),
                "{path}"
            );
        }
    }

    #[test]
    fn graphql_queries_pass_and_only_listed_mutations_do() {
        let HeadDecision::NeedsBody(rules) =
            acme_policy().check_head(Some("employee"), "POST", "/graphql")
        else {
            panic!("a GraphQL rule needs the body");
        };
        let body = |query: &str| serde_json::json!({ "query": query }).to_string();
        let check = |query: &str| RequestPolicy::check_graphql(&rules, body(query).as_bytes());
        assert_eq!(
            check(
                "query PullRequestList($owner: String!) { repository(owner: $owner, name: \"x\") { id } }"
            ),
            Ok(())
        );
        assert_eq!(check("{ viewer { login } }"), Ok(()));
        assert_eq!(
            check(
                "mutation { addComment(input: {subjectId: \"1\", body: \"}\"}) { clientMutationId } }"
            ),
            Ok(())
        );
        let refused = [
            "mutation PullRequestMerge($input: MergePullRequestInput!) { mergePullRequest(input: $input) { clientMutationId } }",
            // An alias does not hide the field, nor does a harmless first field.
            "mutation { ok: addComment(input: {}) { x } m: mergePullRequest(input: {}) { x } }",
            // A query first and a mutation after it, picked by operationName.
            "query Q { viewer { login } } mutation M { deleteRef(input: {}) { x } }",
            "mutation { ...F } fragment F on Mutation { mergePullRequest(input: {}) { x } }",
            "subscription { x }",
            "type Query { x: Int }",
            "mutation { addComment(input: \"unterminated) }",
        ];
        for query in refused {
            assert!(check(query).is_err(), "{query}");
        }
        assert!(RequestPolicy::check_graphql(&rules, b"not json").is_err());
        let batch =
            serde_json::json!([{ "query": "{ a }" }, { "query": "mutation { deleteRef { x } }" }]);
        assert!(RequestPolicy::check_graphql(&rules, batch.to_string().as_bytes()).is_err());
    }

    #[test]
    fn star_rules_apply_to_every_role_and_to_callers_without_one() {
        let policy = RequestPolicy::compile(&BTreeMap::from([(
            "*".to_owned(),
            vec![rule(&["GET"], &["/user"], None)],
        )]))
        .unwrap();
        assert_eq!(
            policy.check_head(None, "GET", "/user"),
            HeadDecision::Allowed
        );
        assert_eq!(
            policy.check_head(Some("employee"), "GET", "/user"),
            HeadDecision::Allowed
        );
        assert!(matches!(
            policy.check_head(Some("owner"), "DELETE", "/user"),
            HeadDecision::Refused(_)
        ));
    }

    #[test]
    fn no_rules_means_any_request_and_a_graphql_rule_never_admits_get() {
        let open = RequestPolicy::compile(&BTreeMap::new()).unwrap();
        let bad = RequestPolicy::compile(&BTreeMap::from([(
            "employee".to_owned(),
            vec![rule(&["GET"], &["/repos/[o"], None)],
        )]));
        assert!(
            saint_config::ErrorChain(&bad.unwrap_err())
                .to_string()
                .starts_with("employee: path \"/repos/[o\": ")
        );
        assert_eq!(open.check_head(None, "DELETE", "/x"), HeadDecision::Allowed);
        assert!(matches!(
            acme_policy().check_head(Some("employee"), "GET", "/graphql"),
            HeadDecision::Refused(_)
        ));
    }
}
