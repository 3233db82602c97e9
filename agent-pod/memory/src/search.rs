//! Hybrid search: vector KNN (vec0) and keyword search (FTS5 bm25), each filtered by
//! the asker's scope inside its SQL, merged as 0.7 × vector + 0.3 × keyword.
//! Read-only: runs on pooled read connections, never on the writer.
//!
//! Scores, all in [0, 1]:
//! - vector similarity = clamp(cosine similarity, 0, 1), computed exactly from the
//!   stored float vectors;
//! - keyword score = relevance / best relevance among this query's keyword candidates,
//!   where relevance = −bm25 (FTS5's bm25 is lower-is-better); so the best keyword hit
//!   scores 1 and a chunk without the query's words 0;
//! - hybrid = 0.7 × vector similarity + 0.3 × keyword score.
//!
//! Candidates are the top `4k` (at least 20) of each list:
//! - vector list: the chunks in scope whose quantised codes (`file_vectors`, see
//!   `vector_codes`) score best — the best `4 ×` the pool, at least 200 — rescored by
//!   exact cosine similarity from their float vectors in the vec0 table, best first,
//!   until the quantised scores fall more than [`RESCORE_MARGIN`] below the pool's
//!   weakest exact one; the scan visits every chunk in scope, and the quantisation
//!   error (~1e-3) is far below the gaps it would have to bridge, so the list is the
//!   exact top list in practice (the benchmark reports its recall against
//!   sqlite-vec's exact KNN);
//! - keyword list: FTS5 bm25 matches of the query's words, the commonest left out
//!   when they would make FTS5 rank more than [`KEYWORD_MATCH_BUDGET`] chunks; run on
//!   a second connection alongside the vector scan when one is at hand.
//!
//! Both are limited to the scope inside their SQL, before any top-k: the vector scan
//! reads only the `file_vectors` rows whose `path` matches the scope's GLOBs, and the
//! FTS query keeps only rowids `IN` the ids of chunks whose path matches (before its
//! `LIMIT`); a scope that covers every indexed file (checked on `files` in the same
//! read transaction) skips the condition, as it would filter nothing. A keyword
//! candidate that was not among the vector candidates gets its exact vector
//! similarity computed, so no score is guessed.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params_from_iter, types::Value};

use crate::{
    database::{self, cosine_similarity},
    index::{IndexError, MemoryIndex, sqlite},
    scope::Scope,
    vector_codes::{QueryCode, TopScores},
};

/// Weight of vector similarity in the hybrid score.
pub const VECTOR_WEIGHT: f32 = 0.7;
/// Weight of the keyword score in the hybrid score.
pub const KEYWORD_WEIGHT: f32 = 0.3;
/// Longest snippet returned per hit, in characters.
pub const SNIPPET_CHARS: usize = 700;
/// Largest `k` a search may ask for.
pub const MAX_RESULTS: usize = 50;
/// Vector pre-selection size (by quantised score) per exactly rescored candidate.
pub const PRESELECT_FACTOR: usize = 4;
/// Smallest vector pre-selection.
pub const MIN_PRESELECT: usize = 200;
/// How far below the weakest exactly rescored similarity a quantised score may lie
/// and still be rescored: ten times the quantisation error of 384-dimension codes
/// (about 1e-3, tested below 3e-3 in `vector_codes`).
pub const RESCORE_MARGIN: f32 = 0.01;
/// Most query words passed to FTS5.
const MAX_QUERY_TERMS: usize = 32;
/// Most chunks the keyword side asks FTS5 to rank, estimated from the query words'
/// document counts (see [`selective_fts_query`]). FTS5 scores every match (bm25
/// reads each one's length) before it can keep the best, so this bounds the keyword
/// side however large the memory.
pub const KEYWORD_MATCH_BUDGET: i64 = 4_000;

/// One search.
#[derive(Clone, Debug)]
pub struct SearchRequest<'a> {
    /// What to look for.
    pub query: &'a str,
    /// How many hits at most (clamped to 1..=[`MAX_RESULTS`]).
    pub k: usize,
    /// What the asker may see (role scope, possibly narrowed).
    pub scope: &'a Scope,
}

/// Hits, and whether they come from keywords alone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchOutcome {
    pub hits: Vec<SearchHit>,
    /// Why the semantic half was skipped (the embedder's error), if it was.
    pub keyword_only: Option<String>,
}

/// One hit.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchHit {
    /// Workspace-relative path.
    pub path: String,
    /// First line of the chunk (1-based).
    pub start_line: usize,
    /// Last line of the chunk (inclusive).
    pub end_line: usize,
    /// Hybrid score in [0, 1].
    pub score: f32,
    /// Vector similarity in [0, 1].
    pub vector_score: f32,
    /// Keyword score in [0, 1].
    pub keyword_score: f32,
    /// The chunk text, cut to [`SNIPPET_CHARS`].
    pub snippet: String,
}

/// English function words left out of keyword queries when the query has other words:
/// nearly every chunk contains them, so matching them makes FTS5 score most of the
/// index (the cost grows with it) while bm25 gives them almost no weight.
const STOPWORDS: &[&str] = &[
    "a", "am", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could", "did",
    "do", "does", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "if", "in",
    "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "should", "that", "the",
    "their", "them", "then", "there", "these", "they", "this", "to", "us", "was", "we", "were",
    "what", "when", "where", "which", "who", "will", "with", "would", "you", "your",
];

/// Builds an FTS5 query matching any of the query's words; each word is quoted so
/// FTS5 syntax in the query (`NEAR`, `*`, `-`, quotes) is taken literally. Function
/// words ([`STOPWORDS`]) are dropped unless the query has nothing else.
pub fn fts_query(query: &str) -> Option<String> {
    let words = query_words(query);
    (!words.is_empty()).then(|| match_any(words.iter()))
}

/// The query's distinct lowercased words, function words dropped unless nothing else
/// is left, at most [`MAX_QUERY_TERMS`].
fn query_words(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    let mut function_words: Vec<String> = Vec::new();
    for word in query.split(|character: char| !character.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        // Written in capitals (`IT`, `WHO`, `US`) a function word is an acronym.
        let acronym = word.len() > 1 && word.chars().all(|c| c.is_ascii_uppercase());
        let word = word.to_lowercase();
        let list = if STOPWORDS.contains(&word.as_str()) && !acronym {
            &mut function_words
        } else {
            &mut terms
        };
        if !list.contains(&word) && list.len() < MAX_QUERY_TERMS {
            list.push(word);
        }
    }
    if terms.is_empty() {
        function_words
    } else {
        terms
    }
}

/// `"a" OR "b" OR …`.
fn match_any<'a>(words: impl Iterator<Item = &'a String>) -> String {
    words
        .map(|word| format!("\"{word}\""))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The FTS5 query the keyword side runs: [`fts_query`]'s words, minus the most common
/// ones when together they would make FTS5 rank more than `budget` chunks
/// ([`KEYWORD_MATCH_BUDGET`] in searches). Words are kept rarest first while their
/// document counts fit the budget (the rarest counted word always), so a query mixing
/// a rare word with words found in half the memory ranks the few hundred chunks with
/// the rare word instead of scoring tens of thousands; the dropped words are the ones
/// bm25 weighs least. Words the index has never seen match nothing and are left out;
/// words with characters FTS5's tokenizer may fold differently (non-ASCII) are always
/// kept. `None` when nothing can match.
fn selective_fts_query(
    connection: &Connection,
    query: &str,
    budget: i64,
) -> Result<Option<String>, IndexError> {
    let words = query_words(query);
    if words.len() < 2 {
        return Ok((!words.is_empty()).then(|| match_any(words.iter())));
    }
    let mut statement = connection
        .prepare_cached("SELECT doc FROM chunks_fts_vocab WHERE term = ?1")
        .map_err(sqlite("count keyword matches"))?;
    let mut always = Vec::new();
    let mut counted = Vec::new();
    for word in words {
        if word
            .chars()
            .all(|character| character.is_ascii_alphanumeric())
        {
            let documents: i64 = statement
                .query_row([&word], |row| row.get(0))
                .optional()
                .map_err(sqlite("count keyword matches"))?
                .unwrap_or(0);
            if documents > 0 {
                counted.push((documents, word));
            }
        } else {
            always.push(word);
        }
    }
    counted.sort();
    let mut budget_used = 0;
    let mut kept = always;
    for (rank, (documents, word)) in counted.into_iter().enumerate() {
        if rank == 0 || budget_used + documents <= budget {
            budget_used += documents;
            kept.push(word);
        }
    }
    Ok((!kept.is_empty()).then(|| match_any(kept.iter())))
}

fn snippet(text: &str) -> String {
    if text.chars().count() <= SNIPPET_CHARS {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(SNIPPET_CHARS - 1).collect();
    cut.push('…');
    cut
}

struct Candidate {
    vector_score: Option<f32>,
    keyword_relevance: f32,
}

impl MemoryIndex {
    /// Finds the chunks best matching `request.query` within `request.scope`.
    pub fn search(&self, request: &SearchRequest<'_>) -> Result<Vec<SearchHit>, IndexError> {
        let k = request.k.clamp(1, MAX_RESULTS);
        if request.scope.is_empty() || request.query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let query_vector = self
            .embedder
            .embed(&[request.query])?
            .into_iter()
            .next()
            .ok_or_else(|| {
                crate::embeddings::EmbeddingError::Inference("no vector for the query".to_string())
            })?;
        self.search_on_readers(request.query, Some(&query_vector), k, request.scope)
    }

    /// [`MemoryIndex::search`], but when a remote embedder cannot be reached the query is
    /// answered from keywords alone and the outcome says so (a search is never failed
    /// for want of the semantic half).
    pub fn search_or_keywords(
        &self,
        request: &SearchRequest<'_>,
    ) -> Result<SearchOutcome, IndexError> {
        let k = request.k.clamp(1, MAX_RESULTS);
        if request.scope.is_empty() || request.query.trim().is_empty() {
            return Ok(SearchOutcome::default());
        }
        let (query_vector, keyword_only) = match self.embedder.embed(&[request.query]) {
            Ok(vectors) => (vectors.into_iter().next(), None),
            Err(error @ crate::embeddings::EmbeddingError::Remote(_)) => {
                tracing::warn!(%error, "embedder unreachable: keyword-only memory search");
                (None, Some(error.to_string()))
            }
            Err(error) => return Err(error.into()),
        };
        if query_vector.is_none() && keyword_only.is_none() {
            return Err(crate::embeddings::EmbeddingError::Inference(
                "no vector for the query".to_string(),
            )
            .into());
        }
        let hits =
            self.search_on_readers(request.query, query_vector.as_deref(), k, request.scope)?;
        Ok(SearchOutcome { hits, keyword_only })
    }

    /// [`MemoryIndex::search`] for a caller that already has the query's vector
    /// (embedded in a batch, cached, or measured separately as in the benchmark).
    pub fn search_by_vector(
        &self,
        request: &SearchRequest<'_>,
        query_vector: &[f32],
    ) -> Result<Vec<SearchHit>, IndexError> {
        let k = request.k.clamp(1, MAX_RESULTS);
        if request.scope.is_empty() || request.query.trim().is_empty() {
            return Ok(Vec::new());
        }
        if query_vector.len() != self.embedder.dimensions() {
            return Err(crate::embeddings::EmbeddingError::WrongDimensions {
                expected: self.embedder.dimensions(),
                actual: query_vector.len(),
            }
            .into());
        }
        self.search_on_readers(request.query, Some(query_vector), k, request.scope)
    }

    /// [`search_with_vector`] on a pooled reader, with a second one (for the keyword
    /// side and half the code scan) when there is a vector side to share.
    fn search_on_readers(
        &self,
        query: &str,
        query_vector: Option<&[f32]>,
        k: usize,
        scope: &Scope,
    ) -> Result<Vec<SearchHit>, IndexError> {
        let reader = self.reader()?;
        let mut helper = match query_vector {
            Some(_) => Some(self.reader()?),
            None => None,
        };
        search_with_vector(
            &reader,
            helper.as_deref_mut(),
            query,
            query_vector,
            k,
            scope,
        )
    }

    /// The vector side of a search alone: chunk ids and cosine similarities of the
    /// `count` chunks in `scope` nearest to `query_vector`, best first, found the way
    /// searches find them (quantised scan, exact rescoring). For benchmarks (recall
    /// against sqlite-vec's exact KNN) and diagnostics.
    pub fn nearest_chunks(
        &self,
        query_vector: &[f32],
        count: usize,
        scope: &Scope,
    ) -> Result<Vec<(i64, f32)>, IndexError> {
        let reader = self.reader()?;
        let snapshot = reader
            .unchecked_transaction()
            .map_err(sqlite("begin a search"))?;
        let filter = Filter::for_scope(&reader, scope)?;
        let nearest = nearest_vectors(&reader, query_vector, count, &filter)?;
        drop(snapshot);
        Ok(nearest)
    }

    /// Whether `relative` is inside `scope`, decided by SQLite's own `GLOB` so it
    /// agrees exactly with what searches filter.
    pub fn is_in_scope(&self, scope: &Scope, relative: &str) -> Result<bool, IndexError> {
        let (condition, globs) = scope.sql_condition("candidate.path");
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM (SELECT ?1 AS path) AS candidate WHERE {condition})"
        );
        let mut parameters = vec![Value::Text(relative.to_string())];
        parameters.extend(globs.into_iter().map(Value::Text));
        let sql = renumber(&sql, 2);
        let reader = self.reader()?;
        reader
            .query_row(&sql, params_from_iter(parameters), |row| row.get(0))
            .map_err(sqlite("check the scope"))
    }
}

/// Replaces the anonymous `?` placeholders of a scope condition with numbered ones
/// starting at `first`, so they can follow numbered parameters in the same statement.
fn renumber(sql: &str, first: usize) -> String {
    let mut result = String::with_capacity(sql.len() + 16);
    let mut next = first;
    let mut characters = sql.chars().peekable();
    while let Some(character) = characters.next() {
        if character == '?' && !characters.peek().is_some_and(char::is_ascii_digit) {
            result.push_str(&format!("?{next}"));
            next += 1;
        } else {
            result.push(character);
        }
    }
    result
}

/// The search itself, given the query's vector; public within the crate so the
/// benchmark path and tests share it with [`MemoryIndex::search`].
///
/// With a `helper` connection the keyword side runs on it, on a second thread, while
/// this thread scans the vectors: the halves are independent and about equally long
/// at 100k chunks. The helper's result is used only if it read the same snapshot
/// (the same [`database::generation`]); otherwise, or without a helper, the keyword
/// side runs here after the vector side.
pub(crate) fn search_with_vector(
    connection: &Connection,
    helper: Option<&mut Connection>,
    query: &str,
    query_vector: Option<&[f32]>,
    k: usize,
    scope: &Scope,
) -> Result<Vec<SearchHit>, IndexError> {
    let pool = (k * 4).max(20);
    // One read snapshot for the coverage check, both halves and the final reads, so a
    // file indexed in between cannot slip past a check made on an older state.
    let snapshot = connection
        .unchecked_transaction()
        .map_err(sqlite("begin a search"))?;
    let generation = database::generation(connection).map_err(sqlite("begin a search"))?;
    let filter = Filter::for_scope(connection, scope)?;
    let match_expression = selective_fts_query(connection, query, KEYWORD_MATCH_BUDGET)?;

    let (nearest, keyword) = search_halves(
        connection,
        helper,
        query_vector,
        generation,
        match_expression.as_deref(),
        pool,
        &filter,
    )?;
    let scored = fuse(connection, query_vector, nearest, keyword, k)?;
    let hits = read_hits(connection, scored)?;
    drop(snapshot);
    Ok(hits)
}

/// Chunk ids with one side's score: vector similarity or keyword relevance.
type Ranked = Vec<(i64, f32)>;

/// The vector side (ids and similarities of the `pool` nearest) and the keyword side
/// (ids and relevances), on the helper's thread and this one when there is a helper.
fn search_halves(
    connection: &Connection,
    helper: Option<&mut Connection>,
    query_vector: Option<&[f32]>,
    generation: Option<i64>,
    match_expression: Option<&str>,
    pool: usize,
    filter: &Filter,
) -> Result<(Ranked, Ranked), IndexError> {
    let halves = match (query_vector, helper, generation) {
        (Some(query_vector), Some(helper), Some(generation)) => {
            // The helper takes the keyword side and the upper half (by rowid) of the
            // code scan.
            let code = QueryCode::new(query_vector);
            let preselect = preselect_size(pool);
            // A scope's rows are found through the path index and are few: only a
            // scan of everything is shared.
            let split = if filter.covers_everything {
                rowid_split(connection)?
            } else {
                i64::MAX
            };
            let (mine, theirs) = std::thread::scope(|threads| {
                let theirs = threads.spawn(|| {
                    helper_share(
                        helper,
                        generation,
                        match_expression,
                        pool,
                        filter,
                        (&code, preselect, split..i64::MAX),
                    )
                });
                let mine = preselect_codes(connection, &code, preselect, filter, i64::MIN..split);
                let theirs = theirs
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (mine, theirs)
            });
            let mut top = mine?;
            let keyword = match theirs? {
                Some(share) => {
                    top.merge(share.codes);
                    share.keyword
                }
                None => {
                    top.merge(preselect_codes(
                        connection,
                        &code,
                        preselect,
                        filter,
                        split..i64::MAX,
                    )?);
                    keyword_candidates_for(connection, match_expression, pool, filter)?
                }
            };
            (rescore(connection, query_vector, pool, top)?, keyword)
        }
        _ => (
            match query_vector {
                Some(query_vector) => nearest_vectors(connection, query_vector, pool, filter)?,
                None => Vec::new(),
            },
            keyword_candidates_for(connection, match_expression, pool, filter)?,
        ),
    };
    Ok(halves)
}

/// Hybrid scores of the candidates, best first, `k` at most: each side normalised
/// (keyword relevance by the best one), weighted [`VECTOR_WEIGHT`] and
/// [`KEYWORD_WEIGHT`]. Returns (id, score, vector score, keyword score).
fn fuse(
    connection: &Connection,
    query_vector: Option<&[f32]>,
    nearest: Ranked,
    keyword: Ranked,
    k: usize,
) -> Result<Vec<(i64, f32, f32, f32)>, IndexError> {
    let mut candidates: HashMap<i64, Candidate> = HashMap::new();
    for (id, similarity) in nearest {
        candidates.insert(
            id,
            Candidate {
                vector_score: Some(similarity),
                keyword_relevance: 0.0,
            },
        );
    }
    let mut best_relevance = 0.0_f32;
    for (id, relevance) in keyword {
        best_relevance = best_relevance.max(relevance);
        candidates
            .entry(id)
            .or_insert(Candidate {
                vector_score: None,
                keyword_relevance: 0.0,
            })
            .keyword_relevance = relevance;
    }

    // Exact vector similarity for keyword-only candidates.
    if let Some(query_vector) = query_vector {
        for (id, candidate) in candidates
            .iter_mut()
            .filter(|(_, candidate)| candidate.vector_score.is_none())
        {
            candidate.vector_score = Some(exact_similarity(connection, query_vector, *id)?);
        }
    }

    let mut scored: Vec<(i64, f32, f32, f32)> = candidates
        .into_iter()
        .map(|(id, candidate)| {
            let vector_score = candidate.vector_score.unwrap_or(0.0).clamp(0.0, 1.0);
            let keyword_score = if best_relevance > 0.0 {
                candidate.keyword_relevance / best_relevance
            } else {
                0.0
            };
            (
                id,
                VECTOR_WEIGHT * vector_score + KEYWORD_WEIGHT * keyword_score,
                vector_score,
                keyword_score,
            )
        })
        .collect();
    scored.sort_by(|left, right| right.1.total_cmp(&left.1).then(left.0.cmp(&right.0)));
    scored.truncate(k);

    Ok(scored)
}

/// The chunks of `scored`, in its order, read in the search's snapshot; an id without
/// a row is skipped.
fn read_hits(
    connection: &Connection,
    scored: Vec<(i64, f32, f32, f32)>,
) -> Result<Vec<SearchHit>, IndexError> {
    let mut statement = connection
        .prepare_cached("SELECT path, start_line, end_line, text FROM chunks WHERE id = ?1")
        .map_err(sqlite("read chunks"))?;
    let mut hits = Vec::with_capacity(scored.len());
    for (id, score, vector_score, keyword_score) in scored {
        let row = statement
            .query_row([id], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, String>(3)?,
                ))
            })
            .optional()
            .map_err(sqlite("read chunks"))?;
        let Some((path, start_line, end_line, text)) = row else {
            continue;
        };
        hits.push(SearchHit {
            path,
            start_line: start_line as usize,
            end_line: end_line as usize,
            score,
            vector_score,
            keyword_score,
            snippet: snippet(&text),
        });
    }
    Ok(hits)
}

/// Which chunks a search may see: all (`covers_everything`), or those whose `path`
/// matches `condition` with `globs` bound to its placeholders.
struct Filter {
    covers_everything: bool,
    condition: String,
    globs: Vec<String>,
}

impl Filter {
    /// `scope` in the caller's read transaction: one condition over a column named
    /// `path` (both `file_vectors` and `chunks` have one, each with an index for the
    /// condition's prefix ranges), skipped when the scope covers every indexed file.
    fn for_scope(connection: &Connection, scope: &Scope) -> Result<Self, IndexError> {
        if covers_every_file(connection, scope)? {
            return Ok(Self {
                covers_everything: true,
                condition: "1".to_string(),
                globs: Vec::new(),
            });
        }
        let (condition, globs) = scope.sql_condition_indexed("path");
        Ok(Self {
            covers_everything: false,
            condition,
            globs,
        })
    }
}

/// What the helper connection computes for a search: the keyword candidates and the
/// best quantised scores of its share of the code scan.
struct HelperShare {
    keyword: Vec<(i64, f32)>,
    codes: TopScores,
}

/// The helper's part of a search, in a read transaction of its own, if that
/// transaction sees `generation` (the main connection's snapshot); `None` if the
/// database changed in between, and the main connection does it all.
fn helper_share(
    helper: &mut Connection,
    generation: i64,
    match_expression: Option<&str>,
    pool: usize,
    filter: &Filter,
    (code, preselect, rowids): (&QueryCode, usize, std::ops::Range<i64>),
) -> Result<Option<HelperShare>, IndexError> {
    let snapshot = helper
        .unchecked_transaction()
        .map_err(sqlite("begin a search"))?;
    if database::generation(&snapshot).map_err(sqlite("begin a search"))? != Some(generation) {
        return Ok(None);
    }
    let keyword = keyword_candidates_for(&snapshot, match_expression, pool, filter)?;
    let codes = preselect_codes(&snapshot, code, preselect, filter, rowids)?;
    Ok(Some(HelperShare { keyword, codes }))
}

/// [`keyword_candidates`], or none without a match expression.
fn keyword_candidates_for(
    connection: &Connection,
    match_expression: Option<&str>,
    pool: usize,
    filter: &Filter,
) -> Result<Vec<(i64, f32)>, IndexError> {
    match match_expression {
        Some(match_expression) => keyword_candidates(connection, match_expression, pool, filter),
        None => Ok(Vec::new()),
    }
}

/// The keyword side: the `pool` chunks in scope that FTS5 ranks best for
/// `match_expression`, with their relevance (−bm25, as bm25 is lower-is-better).
/// The scope is part of the WHERE clause, applied before LIMIT. The unary `+` keeps
/// SQLite from handing the id list to FTS5 as rowid lookups (one posting-list probe
/// per id, slow); instead each match is checked against it.
fn keyword_candidates(
    connection: &Connection,
    match_expression: &str,
    pool: usize,
    filter: &Filter,
) -> Result<Vec<(i64, f32)>, IndexError> {
    let keyword_sql = if filter.covers_everything {
        "SELECT rowid, bm25(chunks_fts) AS score FROM chunks_fts
         WHERE chunks_fts MATCH ?1
         ORDER BY score LIMIT ?2"
            .to_string()
    } else {
        renumber(
            &format!(
                "SELECT rowid, bm25(chunks_fts) AS score FROM chunks_fts
                 WHERE chunks_fts MATCH ?1
                   AND +rowid IN (SELECT id FROM chunks WHERE {})
                 ORDER BY score LIMIT ?2",
                filter.condition
            ),
            3,
        )
    };
    let mut parameters = vec![
        Value::Text(match_expression.to_string()),
        Value::Integer(pool as i64),
    ];
    parameters.extend(filter.globs.iter().cloned().map(Value::Text));
    let mut statement = connection
        .prepare_cached(&keyword_sql)
        .map_err(sqlite("search keywords"))?;
    let rows = statement
        .query_map(params_from_iter(parameters), |row| {
            // One bm25 call per row (ordering by the selected column reuses it).
            Ok((row.get::<_, i64>(0)?, row.get::<_, f64>(1)?))
        })
        .map_err(sqlite("search keywords"))?;
    rows.map(|row| {
        row.map(|(id, score)| (id, (-score as f32).max(0.0)))
            .map_err(sqlite("search keywords"))
    })
    .collect()
}

/// The vector side of a search: the `pool` chunks in `filter` nearest to
/// `query_vector` by cosine similarity, best first.
fn nearest_vectors(
    connection: &Connection,
    query_vector: &[f32],
    pool: usize,
    filter: &Filter,
) -> Result<Vec<(i64, f32)>, IndexError> {
    let code = QueryCode::new(query_vector);
    let top = preselect_codes(
        connection,
        &code,
        preselect_size(pool),
        filter,
        i64::MIN..i64::MAX,
    )?;
    rescore(connection, query_vector, pool, top)
}

/// How many chunks the quantised scan keeps for a vector list of `pool`.
fn preselect_size(pool: usize) -> usize {
    (pool * PRESELECT_FACTOR).max(MIN_PRESELECT)
}

/// A `file_vectors` rowid halfway between the first and the last, splitting the
/// scan in two about equal shares.
fn rowid_split(connection: &Connection) -> Result<i64, IndexError> {
    let (first, last): (Option<i64>, Option<i64>) = connection
        .query_row(
            "SELECT min(rowid), max(rowid) FROM file_vectors",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(sqlite("scan vectors"))?;
    Ok(match (first, last) {
        (Some(first), Some(last)) => first + (last - first) / 2 + 1,
        _ => i64::MAX,
    })
}

/// Pre-selection: every chunk in `filter` whose file's `file_vectors` row has a
/// rowid in `rowids`, scored by its quantised code, keeping the best `preselect`. The
/// scope is the WHERE clause of the scan itself, so rows outside it are never read.
fn preselect_codes(
    connection: &Connection,
    code: &QueryCode,
    preselect: usize,
    filter: &Filter,
    rowids: std::ops::Range<i64>,
) -> Result<TopScores, IndexError> {
    if rowids.is_empty() {
        return Ok(TopScores::new(preselect));
    }
    // The rowid range only when it is a share: on its own it would tempt SQLite to
    // scan the table by rowid instead of seeking the scope's paths in their index.
    let mut conditions = Vec::new();
    let mut parameters = Vec::new();
    if rowids != (i64::MIN..i64::MAX) {
        conditions.push("rowid >= ? AND rowid < ?");
        parameters.extend([Value::Integer(rowids.start), Value::Integer(rowids.end)]);
    }
    if !filter.covers_everything {
        conditions.push(filter.condition.as_str());
        parameters.extend(filter.globs.iter().cloned().map(Value::Text));
    }
    let scan_sql = if conditions.is_empty() {
        "SELECT chunk_ids, codes FROM file_vectors".to_string()
    } else {
        format!(
            "SELECT chunk_ids, codes FROM file_vectors WHERE {}",
            conditions.join(" AND ")
        )
    };
    let mut top = TopScores::new(preselect);
    let mut statement = connection
        .prepare_cached(&scan_sql)
        .map_err(sqlite("scan vectors"))?;
    let mut rows = statement
        .query(params_from_iter(parameters))
        .map_err(sqlite("scan vectors"))?;
    while let Some(row) = rows.next().map_err(sqlite("scan vectors"))? {
        let ids = row
            .get_ref(0)
            .and_then(|value| value.as_blob().map_err(Into::into))
            .map_err(sqlite("scan vectors"))?;
        let codes = row
            .get_ref(1)
            .and_then(|value| value.as_blob().map_err(Into::into))
            .map_err(sqlite("scan vectors"))?;
        top.scan_file(code, ids, codes)?;
    }
    Ok(top)
}

/// Rescoring: exact cosine similarity from the float vectors of record, best
/// quantised score first, keeping the best `pool`. Once `pool` chunks are rescored,
/// a candidate whose quantised score trails the weakest kept exact one by more than
/// [`RESCORE_MARGIN`] cannot enter the list (its exact score is within the
/// quantisation error of the quantised one), and neither can any after it.
fn rescore(
    connection: &Connection,
    query_vector: &[f32],
    pool: usize,
    top: TopScores,
) -> Result<Vec<(i64, f32)>, IndexError> {
    let mut exact = TopScores::new(pool);
    for (id, quantised) in top.into_scored() {
        if exact
            .weakest_when_full()
            .is_some_and(|weakest| quantised + RESCORE_MARGIN < weakest)
        {
            break;
        }
        exact.offer_score(id, exact_similarity(connection, query_vector, id)?);
    }
    Ok(exact.into_scored())
}

/// Cosine similarity of the query and chunk `id`'s float vector, in [-1, 1] (uncut,
/// so the vector list is ordered by true similarity even below 0); 0 for a chunk
/// without a vector.
fn exact_similarity(
    connection: &Connection,
    query_vector: &[f32],
    id: i64,
) -> Result<f32, IndexError> {
    let mut statement = connection
        .prepare_cached("SELECT embedding FROM chunks_vec WHERE rowid = ?1")
        .map_err(sqlite("score vectors"))?;
    let blob: Option<Vec<u8>> = statement
        .query_row([id], |row| row.get(0))
        .optional()
        .map_err(sqlite("score vectors"))?;
    Ok(blob
        .and_then(|blob| cosine_similarity(query_vector, &blob))
        .unwrap_or(0.0))
}

/// Whether every indexed file lies inside `scope`, so the scope filters nothing and
/// the queries may skip it. Reads `files`, which the indexer writes in the same
/// transaction as the file's chunks, so no chunk has a path missing from it.
fn covers_every_file(connection: &Connection, scope: &Scope) -> Result<bool, IndexError> {
    if let Some(ranges) = scope.exact_ranges() {
        // Each glob is exactly its range: covered when no file lies outside them,
        // i.e. before the first, between two, or after the last (index seeks on the
        // primary key instead of a GLOB per file).
        let mut gaps = Vec::with_capacity(ranges.len() + 1);
        let mut parameters = Vec::with_capacity(ranges.len() * 2);
        let mut previous_high: Option<String> = None;
        for (low, high) in ranges {
            match previous_high.take() {
                None => gaps.push("path < ?".to_string()),
                Some(high) => {
                    gaps.push("(path >= ? AND path < ?)".to_string());
                    parameters.push(high);
                }
            }
            parameters.push(low);
            previous_high = Some(high);
        }
        gaps.push("path >= ?".to_string());
        parameters.extend(previous_high);
        let sql = gaps
            .iter()
            .map(|gap| format!("NOT EXISTS (SELECT 1 FROM files WHERE {gap})"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let mut statement = connection
            .prepare_cached(&format!("SELECT {sql}"))
            .map_err(sqlite("check the scope"))?;
        return statement
            .query_row(params_from_iter(parameters), |row| row.get(0))
            .map_err(sqlite("check the scope"));
    }
    let (condition, globs) = scope.sql_condition("c.path");
    let sql = format!("SELECT NOT EXISTS (SELECT 1 FROM files AS c WHERE NOT ({condition}))");
    let mut statement = connection
        .prepare_cached(&sql)
        .map_err(sqlite("check the scope"))?;
    statement
        .query_row(params_from_iter(globs), |row| row.get(0))
        .map_err(sqlite("check the scope"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes chunks with given vectors straight into a fresh database.
    fn database_with<V: AsRef<[f32]>>(
        chunks: &[(&str, &str, V)],
    ) -> (tempfile::TempDir, Connection) {
        let directory = tempfile::tempdir().expect("tempdir");
        let dimensions = chunks
            .first()
            .map_or(4, |(_, _, vector)| vector.as_ref().len());
        let connection = crate::database::open_writer(
            &directory.path().join("index.sqlite"),
            "test",
            dimensions,
        )
        .expect("open");
        for (path, text, vector) in chunks {
            connection
                .execute(
                    "INSERT INTO chunks (path, start_line, end_line, hash, text) VALUES (?1, 1, 1, '', ?2)",
                    rusqlite::params![path, text],
                )
                .expect("chunk");
            let id = connection.last_insert_rowid();
            // Like the indexer: every chunk's path is a recorded file.
            connection
                .execute(
                    "INSERT OR IGNORE INTO files (path, hash, mtime, size, chunk_count) VALUES (?1, '', 0, 0, 1)",
                    [path],
                )
                .expect("file");
            connection
                .execute(
                    "INSERT INTO chunks_fts (rowid, text) VALUES (?1, ?2)",
                    rusqlite::params![id, text],
                )
                .expect("fts");
            connection
                .execute(
                    "INSERT INTO chunks_vec (rowid, embedding) VALUES (?1, ?2)",
                    rusqlite::params![id, crate::database::vector_to_blob(vector.as_ref())],
                )
                .expect("vector");
        }
        // Like the indexer: one row of codes per file, its chunks in id order.
        let mut by_path: std::collections::BTreeMap<&str, Vec<(i64, &[f32])>> = Default::default();
        for (index, (path, _, vector)) in chunks.iter().enumerate() {
            by_path
                .entry(path)
                .or_default()
                .push((index as i64 + 1, vector.as_ref()));
        }
        for (path, file_chunks) in by_path {
            let (ids, codes) = crate::vector_codes::encode_file(&file_chunks);
            connection
                .execute(
                    "INSERT INTO file_vectors (path, chunk_ids, codes) VALUES (?1, ?2, ?3)",
                    rusqlite::params![path, ids, codes],
                )
                .expect("codes");
        }
        (directory, connection)
    }

    /// 60 chunks under `memory/private/` with `private_text` and vector e1, then 3
    /// under `memory/shared/` with "shop hours" and vector (0.6, 0.8, 0, 0).
    fn private_crowd_and_three_shared(private_text: &str) -> (tempfile::TempDir, Connection) {
        let mut chunks: Vec<(String, &str, [f32; 4])> = (0..60)
            .map(|index| {
                (
                    format!("memory/private/p{index}.md"),
                    private_text,
                    [1.0, 0.0, 0.0, 0.0],
                )
            })
            .collect();
        chunks.extend((0..3).map(|index| {
            (
                format!("memory/shared/s{index}.md"),
                "shop hours",
                [0.6, 0.8, 0.0, 0.0],
            )
        }));
        let borrowed: Vec<(&str, &str, [f32; 4])> = chunks
            .iter()
            .map(|(path, text, vector)| (path.as_str(), *text, *vector))
            .collect();
        database_with(&borrowed)
    }

    #[test]
    fn the_vector_side_filters_before_choosing_the_nearest() {
        // 60 out-of-scope chunks identical to the query vector, 3 in-scope ones far
        // from it, and no query word in any text: only the vector side can find the
        // in-scope chunks, and only if the scope is applied before its top-k.
        let (_directory, connection) = private_crowd_and_three_shared("secret plan");
        let scope = Scope::from_globs(["memory/shared/*"]);
        let hits = search_with_vector(
            &connection,
            None,
            "unrelated words",
            Some(&[1.0, 0.0, 0.0, 0.0]),
            3,
            &scope,
        )
        .expect("search");
        let paths: Vec<&str> = hits.iter().map(|hit| hit.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "memory/shared/s0.md",
                "memory/shared/s1.md",
                "memory/shared/s2.md"
            ]
        );
        for hit in &hits {
            assert!((hit.vector_score - 0.6).abs() < 1e-5, "{hit:?}");
            assert_eq!(hit.keyword_score, 0.0);
            assert!((hit.score - 0.7 * 0.6).abs() < 1e-5);
        }
        // The keyword side likewise: out of scope, "hours hours" outranks every in-scope
        // "shop hours" by bm25, 60 times over; the in-scope chunks still get their
        // keyword score (1.0 = best in-scope relevance), so the filter came first.
        let (_directory, connection) = private_crowd_and_three_shared("hours hours");
        let hits = search_with_vector(
            &connection,
            None,
            "hours",
            Some(&[0.0, 0.0, 0.0, 1.0]),
            3,
            &scope,
        )
        .expect("search");
        assert_eq!(hits.len(), 3);
        assert!(
            hits.iter()
                .all(|hit| hit.path.starts_with("memory/shared/") && hit.keyword_score == 1.0),
            "{hits:?}"
        );
    }

    /// Deterministic pseudo-random vectors: half noise, half drawn towards one of a
    /// few "topics", so there are both real neighbourhoods and near-ties.
    fn test_vectors(count: usize, dimensions: usize) -> Vec<Vec<f32>> {
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let topics: Vec<Vec<f32>> = (0..8)
            .map(|_| (0..dimensions).map(|_| next()).collect())
            .collect();
        (0..count)
            .map(|index| {
                let topic = &topics[index % topics.len()];
                let pull = if index % 2 == 0 { 0.0 } else { 0.8 };
                (0..dimensions).map(|d| next() + pull * topic[d]).collect()
            })
            .collect()
    }

    #[test]
    fn the_vector_side_finds_what_sqlite_vec_exact_knn_finds() {
        // 3,000 chunks, far more than the pre-selection (200 for k = 10), so the
        // quantised scan decides which chunks reach exact rescoring; its top 10 must
        // be sqlite-vec's exact cosine KNN, unscoped and scoped.
        let vectors = test_vectors(3000, 96);
        let paths: Vec<String> = (0..vectors.len())
            .map(|index| {
                let area = if index % 3 == 0 { "a" } else { "b" };
                format!("memory/{area}/f{:03}.md", index / 10)
            })
            .collect();
        let chunks: Vec<(&str, &str, &[f32])> = paths
            .iter()
            .zip(&vectors)
            .map(|(path, vector)| (path.as_str(), "text", vector.as_slice()))
            .collect();
        let (_directory, connection) = database_with(&chunks);
        let exact = |query: &[f32], scoped: bool| -> Vec<i64> {
            let sql = if scoped {
                "SELECT rowid FROM chunks_vec WHERE embedding MATCH ?1 AND k = 10
                   AND rowid IN (SELECT id FROM chunks WHERE path GLOB 'memory/a/*')
                 ORDER BY distance"
            } else {
                "SELECT rowid FROM chunks_vec WHERE embedding MATCH ?1 AND k = 10 ORDER BY distance"
            };
            let mut statement = connection.prepare(sql).expect("prepare");
            statement
                .query_map([crate::database::vector_to_blob(query)], |row| row.get(0))
                .expect("knn")
                .collect::<Result<_, _>>()
                .expect("rows")
        };
        let scope = Scope::from_globs(["memory/a/*"]);
        let (condition, globs) = scope.sql_condition_indexed("path");
        let queries = test_vectors(3020, 96).split_off(3000);
        for (number, query) in queries
            .iter()
            .chain(vectors.iter().step_by(150))
            .enumerate()
        {
            let ours: Vec<i64> = nearest_vectors(
                &connection,
                query,
                10,
                &Filter {
                    covers_everything: true,
                    condition: "1".to_string(),
                    globs: Vec::new(),
                },
            )
            .expect("scan")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
            assert_eq!(ours, exact(query, false), "query {number}, unscoped");
            let ours: Vec<i64> = nearest_vectors(
                &connection,
                query,
                10,
                &Filter {
                    covers_everything: false,
                    condition: condition.clone(),
                    globs: globs.clone(),
                },
            )
            .expect("scan")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
            assert!(
                ours.iter().all(|id| (id - 1) % 3 == 0),
                "{ours:?} left the scope"
            );
            assert_eq!(ours, exact(query, true), "query {number}, scoped");
        }
    }

    #[test]
    fn coverage_by_ranges_agrees_with_the_glob_scan() {
        let (_directory, connection) = database_with(&[
            ("MEMORY.md", "a", [1.0, 0.0, 0.0, 0.0]),
            ("memory/daily/d.md", "b", [1.0, 0.0, 0.0, 0.0]),
            ("memory/shared/s.md", "c", [1.0, 0.0, 0.0, 0.0]),
        ]);
        let cases: [(&[&str], bool); 5] = [
            (&["memory/shared/*", "MEMORY.md"], false),
            (&["memory/shared/*", "MEMORY.md", "memory/daily/*"], true),
            (&["memory/*", "MEMORY.md"], true),
            (&["memory/*"], false),
            (&["MEMORY.m", "memory/*"], false),
        ];
        for (globs, expected) in cases {
            let scope = Scope::from_globs(globs.iter().copied());
            assert!(scope.exact_ranges().is_some());
            assert_eq!(
                covers_every_file(&connection, &scope).expect("ranges"),
                expected,
                "{globs:?}"
            );
            // A narrower filter matching everything forces the GLOB scan.
            let scanned = scope.narrowed(&["*".to_string()]).expect("narrowed");
            assert_eq!(
                covers_every_file(&connection, &scanned).expect("scan"),
                expected,
                "{globs:?}"
            );
        }
    }

    /// 400 chunks over 40 files in two areas, texts drawn from a small vocabulary so
    /// keyword queries match many chunks with different bm25 ranks.
    fn keyword_and_vector_crowd() -> (tempfile::TempDir, Connection) {
        let words = [
            "deploy", "cluster", "invoice", "backup", "rotate", "key", "staging", "alert",
        ];
        let vectors = test_vectors(400, 16);
        let rows: Vec<(String, String)> = (0..400)
            .map(|index| {
                let area = if index % 4 == 0 { "shared" } else { "private" };
                let text = (0..=(index % 5))
                    .map(|word| words[(index * 7 + word * 3) % words.len()])
                    .collect::<Vec<_>>()
                    .join(" ");
                (format!("memory/{area}/f{:02}.md", index / 10), text)
            })
            .collect();
        let chunks: Vec<(&str, &str, &[f32])> = rows
            .iter()
            .zip(&vectors)
            .map(|((path, text), vector)| (path.as_str(), text.as_str(), vector.as_slice()))
            .collect();
        database_with(&chunks)
    }

    #[test]
    fn a_helper_connection_gives_the_same_hits_as_one_connection() {
        let (directory, connection) = keyword_and_vector_crowd();
        let mut helper =
            crate::database::open_reader(&directory.path().join("index.sqlite")).expect("reader");
        let queries = test_vectors(412, 16).split_off(400);
        let scopes = [
            Scope::from_globs(["memory/*"]),
            Scope::from_globs(["memory/shared/*"]),
        ];
        for (number, vector) in queries.iter().enumerate() {
            for scope in &scopes {
                for text in ["deploy key", "invoice backup rotate", "nothing matches"] {
                    let alone =
                        search_with_vector(&connection, None, text, Some(vector), 10, scope)
                            .expect("one connection");
                    let helped = search_with_vector(
                        &connection,
                        Some(&mut helper),
                        text,
                        Some(vector),
                        10,
                        scope,
                    )
                    .expect("with a helper");
                    assert_eq!(helped, alone, "query {number}, {text:?}, {scope:?}");
                    assert_eq!(alone.len(), 10);
                }
            }
        }
        // The keyword side did contribute: some hit has a keyword score.
        let hits = search_with_vector(
            &connection,
            Some(&mut helper),
            "deploy",
            Some(&queries[0]),
            10,
            &scopes[0],
        )
        .expect("search");
        assert!(hits.iter().any(|hit| hit.keyword_score > 0.0), "{hits:?}");
    }

    #[test]
    fn a_helper_on_another_snapshot_is_not_used() {
        let (directory, writer) = keyword_and_vector_crowd();
        let database = directory.path().join("index.sqlite");
        let main = crate::database::open_reader(&database).expect("reader");
        let mut helper = crate::database::open_reader(&database).expect("reader");
        let filter = Filter {
            covers_everything: true,
            condition: "1".to_string(),
            globs: Vec::new(),
        };
        let expression = fts_query("deploy cluster").expect("terms");

        let snapshot = main.unchecked_transaction().expect("begin");
        let generation = crate::database::generation(&main)
            .expect("read")
            .expect("a generation");
        let before = keyword_candidates(&main, &expression, 20, &filter).expect("keywords");
        let code = QueryCode::new(&test_vectors(1, 16)[0]);
        let share = |helper: &mut Connection| {
            helper_share(
                helper,
                generation,
                Some(&expression),
                20,
                &filter,
                (&code, 200, i64::MIN..i64::MAX),
            )
            .expect("helper")
        };
        let same = share(&mut helper).expect("same snapshot");
        assert_eq!(same.keyword, before);
        assert_eq!(
            same.codes.into_scored().len(),
            200,
            "the helper scanned its share"
        );
        // A chunk that would now rank first is committed while `main` still reads the
        // old state: the helper sees the new generation and declines.
        writer
            .execute(
                "INSERT INTO chunks (path, start_line, end_line, hash, text)
                 VALUES ('memory/shared/new.md', 1, 1, '', 'deploy cluster deploy cluster')",
                [],
            )
            .expect("insert");
        writer
            .execute(
                "INSERT INTO chunks_fts (rowid, text) VALUES (last_insert_rowid(), 'deploy cluster deploy cluster')",
                [],
            )
            .expect("fts");
        assert!(share(&mut helper).is_none(), "newer snapshot");
        assert_eq!(
            keyword_candidates(&main, &expression, 20, &filter).expect("keywords"),
            before,
            "main still reads its own snapshot"
        );
        drop(snapshot);
        let after = keyword_candidates(&main, &expression, 20, &filter).expect("keywords");
        assert_ne!(
            after, before,
            "the new chunk is visible once main reads again"
        );
    }

    #[test]
    fn every_change_to_the_chunks_moves_the_generation() {
        let (_directory, connection) = database_with(&[("memory/a.md", "a", [1.0_f32, 0.0])]);
        let generation = || {
            crate::database::generation(&connection)
                .expect("read")
                .expect("a generation")
        };
        let mut seen = vec![generation()];
        for change in [
            "INSERT INTO chunks (path, start_line, end_line, hash, text) VALUES ('memory/b.md', 1, 1, '', 'b')",
            "UPDATE chunks SET text = 'b2' WHERE path = 'memory/b.md'",
            "DELETE FROM chunks WHERE path = 'memory/b.md'",
        ] {
            connection.execute(change, []).expect(change);
            let now = generation();
            assert!(
                !seen.contains(&now),
                "{change}: generation {now} seen before"
            );
            seen.push(now);
        }
    }

    #[test]
    fn hybrid_score_weights_vector_and_keyword_seventy_thirty() {
        let (_directory, connection) = database_with(&[
            (
                "memory/shared/a.md",
                "invoice 42 paid",
                [1.0, 0.0, 0.0, 0.0],
            ),
            ("memory/shared/b.md", "weather report", [0.0, 1.0, 0.0, 0.0]),
        ]);
        let scope = Scope::from_globs(["memory/*"]);
        let hits = search_with_vector(
            &connection,
            None,
            "invoice",
            Some(&[0.0, 1.0, 0.0, 0.0]),
            2,
            &scope,
        )
        .expect("search");
        // b: vector 1, keyword 0 → 0.7; a: vector 0, keyword 1 → 0.3.
        assert_eq!(hits[0].path, "memory/shared/b.md");
        assert!((hits[0].score - 0.7).abs() < 1e-5, "{hits:?}");
        assert_eq!(hits[1].path, "memory/shared/a.md");
        assert!((hits[1].score - 0.3).abs() < 1e-5, "{hits:?}");
    }

    #[test]
    fn the_commonest_words_are_left_out_beyond_the_budget() {
        // "report" in 60 chunks, "quarterly" in 6 (3 of them with "report"), "café"
        // (indexed as "cafe") in 2.
        let mut chunks: Vec<(String, String)> = (0..60)
            .map(|index| (format!("memory/r{index}.md"), "weekly report".to_string()))
            .collect();
        for index in 0..3 {
            chunks.push((
                format!("memory/q{index}.md"),
                "quarterly numbers".to_string(),
            ));
            chunks[index].1 = "quarterly report".to_string();
        }
        chunks.push(("memory/c0.md".to_string(), "Café opening".to_string()));
        chunks.push(("memory/c1.md".to_string(), "cafe menu".to_string()));
        let borrowed: Vec<(&str, &str, [f32; 2])> = chunks
            .iter()
            .map(|(path, text)| (path.as_str(), text.as_str(), [1.0, 0.0]))
            .collect();
        let (_directory, connection) = database_with(&borrowed);
        let selective = |query: &str, budget: i64| {
            selective_fts_query(&connection, query, budget).expect("vocabulary")
        };
        // Within the budget every word stays; beyond it the commonest goes first.
        assert_eq!(
            selective("quarterly report", 100).as_deref(),
            Some(r#""quarterly" OR "report""#)
        );
        assert_eq!(
            selective("report quarterly", 20).as_deref(),
            Some(r#""quarterly""#)
        );
        // The rarest word stays even when it alone is over the budget.
        assert_eq!(
            selective("report weekly", 10).as_deref(),
            Some(r#""weekly""#)
        );
        // Words the index has never seen match nothing and are left out.
        assert_eq!(
            selective("zeppelin quarterly", 100).as_deref(),
            Some(r#""quarterly""#)
        );
        assert_eq!(selective("zeppelin airship", 100), None);
        // A non-ASCII word is kept whatever its count: FTS5 folds it to "cafe".
        assert_eq!(
            selective("café report", 10).as_deref(),
            Some(r#""café" OR "report""#)
        );
        // A single word is never looked up.
        assert_eq!(selective("zeppelin", 1).as_deref(), Some(r#""zeppelin""#));

        // In a search the rare word's chunks are the keyword candidates and rank first.
        let hits = search_with_vector(
            &connection,
            None,
            "quarterly report",
            Some(&[0.0, 1.0]),
            6,
            &Scope::from_globs(["memory/*"]),
        )
        .expect("search");
        assert!(hits.iter().all(|hit| hit.keyword_score > 0.0), "{hits:?}");
        assert!(hits[..3].iter().all(|hit| hit.path.starts_with("memory/r")));
    }

    #[test]
    fn fts_query_quotes_words_and_drops_syntax() {
        assert_eq!(
            fts_query("Invoice INV-2024-0042?").as_deref(),
            Some(r#""invoice" OR "inv" OR "2024" OR "0042""#)
        );
        assert_eq!(fts_query("NEAR(\"a\" *)").as_deref(), Some(r#""near""#));
        assert_eq!(fts_query(" -- "), None);
    }

    #[test]
    fn function_words_are_dropped_unless_nothing_else_is_left() {
        assert_eq!(
            fts_query("Where is the deploy key of The staging cluster?").as_deref(),
            Some(r#""deploy" OR "key" OR "staging" OR "cluster""#)
        );
        assert_eq!(
            fts_query("who is it").as_deref(),
            Some(r#""who" OR "is" OR "it""#)
        );
        assert_eq!(
            fts_query("the WHO guidelines for IT").as_deref(),
            Some(r#""who" OR "guidelines" OR "it""#)
        );
    }

    #[test]
    fn renumber_follows_existing_parameters() {
        assert_eq!(
            renumber("a = ?1 AND (p GLOB ? OR p GLOB ?)", 2),
            "a = ?1 AND (p GLOB ?2 OR p GLOB ?3)"
        );
    }

    #[test]
    fn snippets_are_cut_on_character_boundaries() {
        let long = "é".repeat(SNIPPET_CHARS + 10);
        let cut = snippet(&long);
        assert_eq!(cut.chars().count(), SNIPPET_CHARS);
        assert!(cut.ends_with('…'));
    }
}
