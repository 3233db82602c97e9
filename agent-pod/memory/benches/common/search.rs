//! Search measurements both memory benchmarks take of an index: hybrid latency over
//! all paths and under a 5% scope, and the vector side against sqlite-vec's exact KNN
//! (its time, and its recall@10 for stored vectors and for the caller's queries).

use std::{
    path::Path,
    time::{Duration, Instant},
};

use saint_config::MemoryScope;
use saint_memory::{MemoryIndex, Scope, SearchRequest};

/// The user directory whose files are the 5% scope.
pub const SCOPED_USER: &str = "u07";

pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

pub fn percentile(samples: &mut [Duration], fraction: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 * fraction) as usize).min(samples.len() - 1)]
}

pub fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

pub fn database_bytes(database: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .map(|suffix| {
            let mut path = database.as_os_str().to_owned();
            path.push(suffix);
            std::fs::metadata(path)
                .map(|metadata| metadata.len())
                .unwrap_or(0)
        })
        .sum()
}

/// Every path, and the 5% of them under `memory/users/u07/`.
pub fn scopes() -> (Scope, Scope) {
    let everything = Scope::for_role(
        &[
            MemoryScope::Shared,
            MemoryScope::Private,
            MemoryScope::Daily,
            MemoryScope::OwnUser,
            MemoryScope::AllUsers,
        ],
        "u00",
    );
    (
        everything,
        Scope::for_role(&[MemoryScope::OwnUser], SCOPED_USER),
    )
}

/// Hybrid search latency at k = 10: `(p50, p95, mean hits)` over `queries` (text and
/// its vector), after one untimed warm-up query. Scoped hits must stay in the scope.
pub fn hybrid_latency(
    index: &MemoryIndex,
    scope: &Scope,
    scoped: bool,
    queries: &[(String, Vec<f32>)],
) -> (Duration, Duration, usize) {
    let mut samples = Vec::with_capacity(queries.len());
    let mut hits_total = 0;
    let search = |text: &str, vector: &[f32]| {
        index
            .search_by_vector(
                &SearchRequest {
                    query: text,
                    k: 10,
                    scope,
                },
                vector,
            )
            .expect("search")
    };
    search(&queries[0].0, &queries[0].1);
    for (text, vector) in queries {
        let started = Instant::now();
        let hits = search(text, vector);
        samples.push(started.elapsed());
        hits_total += hits.len();
        if scoped {
            let prefix = format!("memory/users/{SCOPED_USER}/");
            assert!(
                hits.iter().all(|hit| hit.path.starts_with(&prefix)),
                "filter leaked"
            );
        }
    }
    (
        median(&mut samples),
        percentile(&mut samples, 0.95),
        hits_total / queries.len(),
    )
}

/// Queries for the recall measurement.
pub const RECALL_QUERIES: usize = 20;

/// The search's vector side (quantised scan + exact rescoring) against sqlite-vec's
/// exact cosine KNN over the same vectors (`chunks_vec`), for stored vectors (spread
/// evenly over the rowids) and for the caller's `queries`: mean recall@10 of each, and
/// the median time of each side over `queries` (k = 40, what a k = 10 search asks of
/// it).
pub struct VectorSide {
    pub recall_stored: f64,
    pub recall_queries: f64,
    pub ours: Duration,
    pub vec0: Duration,
}

pub fn vector_side(
    index: &MemoryIndex,
    database: &Path,
    scope: &Scope,
    queries: &[Vec<f32>],
) -> VectorSide {
    let connection =
        rusqlite::Connection::open_with_flags(database, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open for recall");
    let count: i64 = connection
        .query_row("SELECT max(rowid) FROM chunks_vec", [], |row| row.get(0))
        .expect("count");
    let mut stored_queries = Vec::with_capacity(RECALL_QUERIES);
    for step in 0..RECALL_QUERIES as i64 {
        let rowid = 1 + step * count / RECALL_QUERIES as i64;
        let blob: Option<Vec<u8>> = connection
            .query_row(
                "SELECT embedding FROM chunks_vec WHERE rowid = ?1",
                [rowid],
                |row| row.get(0),
            )
            .ok();
        if let Some(blob) = blob {
            stored_queries.push(
                blob.chunks_exact(4)
                    .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                    .collect::<Vec<f32>>(),
            );
        }
    }
    let exact = |query: &[f32], k: usize| -> Vec<i64> {
        let blob: Vec<u8> = query.iter().flat_map(|value| value.to_le_bytes()).collect();
        let mut statement = connection
            .prepare_cached(
                "SELECT rowid FROM chunks_vec WHERE embedding MATCH ?1 AND k = ?2 ORDER BY distance",
            )
            .expect("prepare");
        statement
            .query_map(rusqlite::params![blob, k as i64], |row| row.get(0))
            .expect("knn")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let recall = |queries: &[Vec<f32>]| -> f64 {
        let mut total = 0.0;
        for query in queries {
            let reference = exact(query, 10);
            let ours: Vec<i64> = index
                .nearest_chunks(query, 10, scope)
                .expect("nearest")
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            let found = reference.iter().filter(|id| ours.contains(id)).count();
            total += found as f64 / reference.len().max(1) as f64;
        }
        total / queries.len() as f64
    };
    let mut ours_samples: Vec<Duration> = Vec::new();
    let mut vec0_samples: Vec<Duration> = Vec::new();
    for query in queries {
        let started = Instant::now();
        index.nearest_chunks(query, 40, scope).expect("nearest");
        ours_samples.push(started.elapsed());
        let started = Instant::now();
        exact(query, 40);
        vec0_samples.push(started.elapsed());
    }
    VectorSide {
        recall_stored: recall(&stored_queries),
        recall_queries: recall(queries),
        ours: median(&mut ours_samples),
        vec0: median(&mut vec0_samples),
    }
}
