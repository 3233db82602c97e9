//! Turns a role's memory scopes (and an optional narrower filter) into SQL `GLOB`
//! conditions. Pure: builds SQL text and parameters, runs nothing.
//!
//! The condition is placed inside the vector and keyword queries themselves, before
//! their `k`/`LIMIT`, so results outside the scope can never crowd out results inside
//! it and never leave the database. A narrower filter is AND-ed with the role's scope,
//! so whatever the model asks for, it can only shrink what the role may see.

use saint_config::MemoryScope;

/// Most globs a narrower filter may carry; more is a malformed call, not a use case.
const MAX_FILTER_GLOBS: usize = 16;
/// Longest glob a narrower filter may carry.
const MAX_GLOB_LENGTH: usize = 256;

/// Why a narrower filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// Too many globs.
    #[error("failed to apply the path filter: at most {MAX_FILTER_GLOBS} globs")]
    TooManyGlobs,
    /// A glob is empty or too long.
    #[error("failed to apply the path filter: each glob must be 1 to {MAX_GLOB_LENGTH} characters")]
    BadGlob,
}

/// What one asker may see of the memory: workspace-relative path globs in SQLite
/// `GLOB` syntax (`*` also matches `/`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    allowed: Vec<String>,
    narrower: Vec<String>,
}

/// Escapes SQLite `GLOB` metacharacters so a slug only ever matches itself.
pub fn escape_glob_literal(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '*' => escaped.push_str("[*]"),
            '?' => escaped.push_str("[?]"),
            '[' => escaped.push_str("[[]"),
            other => escaped.push(other),
        }
    }
    escaped
}

impl Scope {
    /// The scope of a role for the asker `slug`; `<self>` becomes the
    /// slug, escaped so a slug such as `*` cannot widen it. No scopes: nothing visible.
    pub fn for_role(scopes: &[MemoryScope], slug: &str) -> Self {
        let slug = escape_glob_literal(slug);
        let mut allowed: Vec<String> = Vec::new();
        for scope in scopes {
            for glob in scope.path_globs() {
                let glob = glob.replace("<self>", &slug);
                if !allowed.contains(&glob) {
                    allowed.push(glob);
                }
            }
        }
        Self {
            allowed,
            narrower: Vec::new(),
        }
    }

    /// A scope from explicit globs (tests, tools that know their globs).
    pub fn from_globs(globs: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            allowed: globs.into_iter().map(Into::into).collect(),
            narrower: Vec::new(),
        }
    }

    /// Narrows the scope to paths that also match one of `filter`; an empty filter
    /// changes nothing.
    pub fn narrowed(mut self, filter: &[String]) -> Result<Self, ScopeError> {
        if filter.len() > MAX_FILTER_GLOBS {
            return Err(ScopeError::TooManyGlobs);
        }
        if filter
            .iter()
            .any(|glob| glob.is_empty() || glob.len() > MAX_GLOB_LENGTH)
        {
            return Err(ScopeError::BadGlob);
        }
        self.narrower.extend(filter.iter().cloned());
        Ok(self)
    }

    /// The role's globs.
    pub fn allowed_globs(&self) -> &[String] {
        &self.allowed
    }

    /// Whether the scope can match anything at all.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty()
    }

    /// An SQL boolean expression over `column` and its parameters, in order:
    /// `(column GLOB ? OR …) AND (column GLOB ? OR …)`. An empty role scope is `0`
    /// (false): no scope means nothing, never everything.
    pub fn sql_condition(&self, column: &str) -> (String, Vec<String>) {
        if self.allowed.is_empty() {
            return ("0".to_string(), Vec::new());
        }
        let any_of = |globs: &[String]| {
            let clauses: Vec<String> = globs.iter().map(|_| format!("{column} GLOB ?")).collect();
            format!("({})", clauses.join(" OR "))
        };
        let mut sql = any_of(&self.allowed);
        let mut parameters = self.allowed.clone();
        if !self.narrower.is_empty() {
            sql.push_str(" AND ");
            sql.push_str(&any_of(&self.narrower));
            parameters.extend(self.narrower.iter().cloned());
        }
        (sql, parameters)
    }

    /// When every glob matches exactly one range of paths (a literal path, or a
    /// literal start followed by a single final `*`) and no narrower filter applies:
    /// those ranges, sorted and merged, as `[low, high)` pairs. A scope like this
    /// covers a set of paths exactly when none lies between its ranges, which a few
    /// index seeks can tell. (A literal path `p` is the range `[p, p + "\u{1}")`:
    /// only `p` itself, as paths never contain NUL.)
    pub fn exact_ranges(&self) -> Option<Vec<(String, String)>> {
        if self.allowed.is_empty() || !self.narrower.is_empty() {
            return None;
        }
        let mut ranges = Vec::with_capacity(self.allowed.len());
        for glob in &self.allowed {
            let metacharacters = glob.matches(['*', '?', '[']).count();
            if metacharacters == 0 {
                ranges.push((glob.clone(), format!("{glob}\u{1}")));
            } else if metacharacters == 1 && glob.ends_with('*') {
                ranges.push(glob_prefix_range(glob)?);
            } else {
                return None;
            }
        }
        ranges.sort();
        let mut merged: Vec<(String, String)> = Vec::with_capacity(ranges.len());
        for (low, high) in ranges {
            match merged.last_mut() {
                Some(last) if low <= last.1 => {
                    if high > last.1 {
                        last.1 = high;
                    }
                }
                _ => merged.push((low, high)),
            }
        }
        Some(merged)
    }

    /// [`Scope::sql_condition`] with each role glob preceded by the index range of its
    /// literal start (`column >= ? AND column < ? AND column GLOB ?`), so a query
    /// over an indexed `column` visits only the rows under the scope's directories.
    /// The `GLOB` stays, so the condition is exactly as strict as the plain one.
    pub fn sql_condition_indexed(&self, column: &str) -> (String, Vec<String>) {
        if self.allowed.is_empty() {
            return ("0".to_string(), Vec::new());
        }
        let mut clauses = Vec::with_capacity(self.allowed.len());
        let mut parameters = Vec::new();
        for glob in &self.allowed {
            match glob_prefix_range(glob) {
                Some((low, high)) => {
                    clauses.push(format!(
                        "({column} >= ? AND {column} < ? AND {column} GLOB ?)"
                    ));
                    parameters.extend([low, high, glob.clone()]);
                }
                None => {
                    clauses.push(format!("{column} GLOB ?"));
                    parameters.push(glob.clone());
                }
            }
        }
        let mut sql = format!("({})", clauses.join(" OR "));
        if !self.narrower.is_empty() {
            let narrower: Vec<String> = self
                .narrower
                .iter()
                .map(|_| format!("{column} GLOB ?"))
                .collect();
            sql.push_str(&format!(" AND ({})", narrower.join(" OR ")));
            parameters.extend(self.narrower.iter().cloned());
        }
        (sql, parameters)
    }
}

/// The literal start of a glob (everything before its first metacharacter) and the
/// smallest string greater than every string with that start, so a `GLOB` can be
/// preceded by an index range `column >= low AND column < high`. `None` when the glob
/// starts with a metacharacter or its literal start does not end in an ASCII
/// character below `~` (the bound is made by bumping that last byte).
pub fn glob_prefix_range(glob: &str) -> Option<(String, String)> {
    let end = glob.find(['*', '?', '[']).unwrap_or(glob.len());
    let prefix = &glob[..end];
    let last = *prefix.as_bytes().last()?;
    if !(0x20..0x7e).contains(&last) {
        return None;
    }
    let mut high = prefix[..prefix.len() - 1].to_string();
    high.push(char::from(last + 1));
    Some((prefix.to_string(), high))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn employee_scope_replaces_self_with_the_slug() {
        let scope = Scope::for_role(&[MemoryScope::Shared, MemoryScope::OwnUser], "ana");
        assert_eq!(
            scope.allowed_globs(),
            ["memory/shared/*", "MEMORY.md", "memory/users/ana/*"]
        );
    }

    #[test]
    fn glob_metacharacters_in_a_slug_are_literal() {
        let scope = Scope::for_role(&[MemoryScope::OwnUser], "*");
        assert_eq!(scope.allowed_globs(), ["memory/users/[*]/*"]);
        assert_eq!(escape_glob_literal("a?b[c"), "a[?]b[[]c");
    }

    #[test]
    fn narrower_filter_is_and_ed_with_the_role_scope() {
        let scope = Scope::for_role(&[MemoryScope::Shared], "ana")
            .narrowed(&["memory/**".to_string()])
            .expect("ok");
        let (sql, parameters) = scope.sql_condition("c.path");
        assert_eq!(sql, "(c.path GLOB ? OR c.path GLOB ?) AND (c.path GLOB ?)");
        assert_eq!(parameters, ["memory/shared/*", "MEMORY.md", "memory/**"]);
    }

    #[test]
    fn indexed_condition_keeps_the_glob_behind_a_prefix_range() {
        assert_eq!(
            glob_prefix_range("memory/users/u07/*"),
            Some((
                "memory/users/u07/".to_string(),
                "memory/users/u070".to_string()
            ))
        );
        assert_eq!(
            glob_prefix_range("MEMORY.md"),
            Some(("MEMORY.md".to_string(), "MEMORY.me".to_string()))
        );
        assert_eq!(glob_prefix_range("*.md"), None);
        assert_eq!(glob_prefix_range("memory/é*"), None);
        let scope = Scope::from_globs(["memory/shared/*", "*.md"])
            .narrowed(&["memory/**".to_string()])
            .expect("ok");
        let (sql, parameters) = scope.sql_condition_indexed("p");
        assert_eq!(
            sql,
            "((p >= ? AND p < ? AND p GLOB ?) OR p GLOB ?) AND (p GLOB ?)"
        );
        assert_eq!(
            parameters,
            [
                "memory/shared/",
                "memory/shared0",
                "memory/shared/*",
                "*.md",
                "memory/**"
            ]
        );
    }

    #[test]
    fn exact_ranges_are_merged_and_only_for_simple_globs() {
        let scope = Scope::for_role(
            &[
                MemoryScope::Shared,
                MemoryScope::OwnUser,
                MemoryScope::AllUsers,
            ],
            "ana",
        );
        assert_eq!(
            scope.exact_ranges(),
            Some(vec![
                ("MEMORY.md".to_string(), "MEMORY.md\u{1}".to_string()),
                ("memory/shared/".to_string(), "memory/shared0".to_string()),
                ("memory/users/".to_string(), "memory/users0".to_string()),
            ])
        );
        assert_eq!(Scope::from_globs(["memory/*.md"]).exact_ranges(), None);
        assert_eq!(Scope::from_globs(["memory/[ab]*"]).exact_ranges(), None);
        let narrowed = Scope::from_globs(["memory/*"])
            .narrowed(&["memory/a/*".to_string()])
            .expect("ok");
        assert_eq!(narrowed.exact_ranges(), None);
    }

    #[test]
    fn empty_scope_matches_nothing() {
        let (sql, parameters) = Scope::for_role(&[], "ana").sql_condition("path");
        assert_eq!(sql, "0");
        assert!(parameters.is_empty());
    }

    #[test]
    fn oversized_filters_are_refused() {
        let many: Vec<String> = (0..17).map(|index| format!("memory/{index}/*")).collect();
        assert_eq!(
            Scope::default().narrowed(&many),
            Err(ScopeError::TooManyGlobs)
        );
        assert_eq!(
            Scope::default().narrowed(&[String::new()]),
            Err(ScopeError::BadGlob)
        );
    }
}
