//! Which requests a role may make through the injecting proxy: methods and paths, and
//! for GraphQL endpoints whether the body holds only queries and admitted mutations.
//!
//! Pure: compiled from the registry entry, asked per request.

use std::collections::BTreeMap;

use porter_protocol::registry::{GraphqlRule, RequestRule};

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

/// What the method and path alone decide.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadDecision {
    Allowed,
    /// Only GraphQL rules match: the body decides (see [`RequestPolicy::check_graphql`]).
    NeedsBody(Vec<GraphqlRule>),
    Refused(String),
}

impl RequestPolicy {
    pub fn compile(requests: &BTreeMap<String, Vec<RequestRule>>) -> Self {
        let by_role = requests
            .iter()
            .map(|(role, rules)| {
                let rules = rules
                    .iter()
                    .map(|rule| Rule {
                        methods: rule.methods.clone(),
                        paths: rule
                            .paths
                            .iter()
                            .map(|path| PathPattern::new(path))
                            .collect(),
                        graphql: rule.graphql.clone(),
                    })
                    .collect();
                (role.clone(), rules)
            })
            .collect();
        Self {
            open: requests.is_empty(),
            by_role,
        }
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
    pub fn check_graphql(rules: &[GraphqlRule], body: &[u8]) -> Result<(), String> {
        let documents = graphql_documents(body)?;
        for document in &documents {
            for operation in parse_operations(document)? {
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
                        Operation::Query => "GraphQL queries are not allowed".to_owned(),
                        Operation::Mutation(fields) => {
                            format!("GraphQL mutation {} is not allowed", fields.join(", "))
                        }
                        Operation::Subscription => {
                            "GraphQL subscriptions are not allowed".to_owned()
                        }
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

/// A path pattern: `*` within one segment, a `**` segment for any number of segments.
#[derive(Clone, Debug)]
struct PathPattern {
    segments: Vec<String>,
}

impl PathPattern {
    fn new(pattern: &str) -> Self {
        Self {
            segments: pattern
                .trim_start_matches('/')
                .split('/')
                .map(str::to_owned)
                .collect(),
        }
    }

    fn matches(&self, path: &str) -> bool {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match_segments(&self.segments, &segments)
    }
}

fn match_segments(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| match_segments(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((segment, path_rest)) => {
                match_glob(first.as_bytes(), segment.as_bytes()) && match_segments(rest, path_rest)
            }
            None => false,
        },
    }
}

/// `*` matches any run of bytes (within a segment); everything else literally.
fn match_glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| match_glob(rest, &text[skip..])),
        Some((byte, rest)) => text.first() == Some(byte) && match_glob(rest, &text[1..]),
    }
}

/// The `query` strings of a GraphQL-over-HTTP body (one request or a batch).
fn graphql_documents(body: &[u8]) -> Result<Vec<String>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "the GraphQL body is not JSON".to_owned())?;
    let requests = match value {
        serde_json::Value::Array(requests) => requests,
        single => vec![single],
    };
    requests
        .into_iter()
        .map(|request| match request.get("query") {
            Some(serde_json::Value::String(query)) => Ok(query.clone()),
            _ => Err("the GraphQL body has no query string".to_owned()),
        })
        .collect()
}

/// One executable operation of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Operation {
    Query,
    /// Its root fields (after aliases); `...` for a fragment at the root, which only a
    /// `*` rule admits.
    Mutation(Vec<String>),
    Subscription,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Name(String),
    Punctuator(char),
    Spread,
    Value,
}

fn tokenize(document: &str) -> Result<Vec<Token>, String> {
    let bytes = document.as_bytes();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        match byte {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => index += 1,
            0xEF if bytes[index..].starts_with("\u{feff}".as_bytes()) => index += 3,
            b'#' => {
                while index < bytes.len() && bytes[index] != b'\n' && bytes[index] != b'\r' {
                    index += 1;
                }
            }
            b'"' if bytes[index..].starts_with(b"\"\"\"") => {
                index += 3;
                loop {
                    if index >= bytes.len() {
                        return Err("unterminated GraphQL block string".into());
                    }
                    if bytes[index..].starts_with(b"\\\"\"\"") {
                        index += 4;
                    } else if bytes[index..].starts_with(b"\"\"\"") {
                        index += 3;
                        break;
                    } else {
                        index += 1;
                    }
                }
                tokens.push(Token::Value);
            }
            b'"' => {
                index += 1;
                loop {
                    match bytes.get(index) {
                        None | Some(b'\n' | b'\r') => {
                            return Err("unterminated GraphQL string".into());
                        }
                        Some(b'\\') => index += 2,
                        Some(b'"') => {
                            index += 1;
                            break;
                        }
                        Some(_) => index += 1,
                    }
                }
                tokens.push(Token::Value);
            }
            b'.' if bytes[index..].starts_with(b"...") => {
                index += 3;
                tokens.push(Token::Spread);
            }
            b'_' | b'a'..=b'z' | b'A'..=b'Z' => {
                let start = index;
                while index < bytes.len()
                    && (bytes[index] == b'_' || bytes[index].is_ascii_alphanumeric())
                {
                    index += 1;
                }
                tokens.push(Token::Name(document[start..index].to_owned()));
            }
            b'-' | b'0'..=b'9' => {
                index += 1;
                while index < bytes.len()
                    && (bytes[index].is_ascii_alphanumeric()
                        || matches!(bytes[index], b'.' | b'+' | b'-'))
                {
                    index += 1;
                }
                tokens.push(Token::Value);
            }
            b'{' | b'}' | b'(' | b')' | b'[' | b']' | b':' | b'!' | b'$' | b'@' | b'=' | b'|'
            | b'&' => {
                tokens.push(Token::Punctuator(char::from(byte)));
                index += 1;
            }
            other => {
                return Err(format!(
                    "unexpected character {:?} in GraphQL",
                    char::from(other)
                ));
            }
        }
    }
    Ok(tokens)
}

/// Index just past the group that opens at `start` (`(`, `[` or `{`).
fn skip_group(tokens: &[Token], start: usize) -> Result<usize, String> {
    let mut depth = 0_usize;
    for (index, token) in tokens.iter().enumerate().skip(start) {
        match token {
            Token::Punctuator('{' | '(' | '[') => depth += 1,
            Token::Punctuator('}' | ')' | ']') => {
                depth = depth.checked_sub(1).ok_or("unbalanced GraphQL")?;
                if depth == 0 {
                    return Ok(index + 1);
                }
            }
            _ => {}
        }
    }
    Err("unbalanced GraphQL".into())
}

/// Skips directives (`@name(arguments)`) from `index`.
fn skip_directives(tokens: &[Token], mut index: usize) -> Result<usize, String> {
    while tokens.get(index) == Some(&Token::Punctuator('@')) {
        index += 2;
        if tokens.get(index) == Some(&Token::Punctuator('(')) {
            index = skip_group(tokens, index)?;
        }
    }
    Ok(index)
}

/// The root field names of the selection set opening at `start`.
fn root_fields(tokens: &[Token], start: usize) -> Result<(Vec<String>, usize), String> {
    let end = skip_group(tokens, start)?;
    let mut fields = Vec::new();
    let mut index = start + 1;
    while index < end - 1 {
        match &tokens[index] {
            Token::Spread => {
                fields.push("...".to_owned());
                index += 1;
                // `... on Type`, `...Name` or a bare `...`: then directives and maybe a set.
                while let Some(Token::Name(_)) = tokens.get(index) {
                    index += 1;
                }
                index = skip_directives(tokens, index)?;
                if tokens.get(index) == Some(&Token::Punctuator('{')) {
                    index = skip_group(tokens, index)?;
                }
            }
            Token::Name(first) => {
                let mut field = first.clone();
                index += 1;
                if tokens.get(index) == Some(&Token::Punctuator(':')) {
                    match tokens.get(index + 1) {
                        Some(Token::Name(name)) => field = name.clone(),
                        _ => return Err("malformed GraphQL alias".into()),
                    }
                    index += 2;
                }
                if tokens.get(index) == Some(&Token::Punctuator('(')) {
                    index = skip_group(tokens, index)?;
                }
                index = skip_directives(tokens, index)?;
                if tokens.get(index) == Some(&Token::Punctuator('{')) {
                    index = skip_group(tokens, index)?;
                }
                fields.push(field);
            }
            _ => return Err("malformed GraphQL selection".into()),
        }
    }
    Ok((fields, end))
}

/// Every executable operation in a document; anything but operations and fragments
/// (type system definitions) is refused.
fn parse_operations(document: &str) -> Result<Vec<Operation>, String> {
    let tokens = tokenize(document)?;
    let mut operations = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        let kind = match &tokens[index] {
            Token::Punctuator('{') => "query",
            Token::Name(name) if name == "fragment" => {
                // fragment Name on Type @directives { ... }
                let open = tokens[index..]
                    .iter()
                    .position(|token| *token == Token::Punctuator('{'))
                    .ok_or("malformed GraphQL fragment")?;
                index = skip_group(&tokens, index + open)?;
                continue;
            }
            Token::Name(name) if matches!(name.as_str(), "query" | "mutation" | "subscription") => {
                index += 1;
                if let Some(Token::Name(_)) = tokens.get(index) {
                    index += 1;
                }
                if tokens.get(index) == Some(&Token::Punctuator('(')) {
                    index = skip_group(&tokens, index)?;
                }
                index = skip_directives(&tokens, index)?;
                name.as_str()
            }
            _ => return Err("the GraphQL document is not a list of operations".into()),
        };
        if tokens.get(index) != Some(&Token::Punctuator('{')) {
            return Err("malformed GraphQL operation".into());
        }
        let (fields, end) = root_fields(&tokens, index)?;
        operations.push(match kind {
            "query" => Operation::Query,
            "mutation" => Operation::Mutation(fields),
            _ => Operation::Subscription,
        });
        index = end;
    }
    if operations.is_empty() {
        return Err("the GraphQL document has no operation".into());
    }
    Ok(operations)
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
        )]));
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
        let open = RequestPolicy::compile(&BTreeMap::new());
        assert_eq!(open.check_head(None, "DELETE", "/x"), HeadDecision::Allowed);
        assert!(matches!(
            acme_policy().check_head(Some("employee"), "GET", "/graphql"),
            HeadDecision::Refused(_)
        ));
    }
}
