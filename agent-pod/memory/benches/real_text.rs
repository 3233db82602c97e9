//! Memory on real text (run with `cargo bench -p saint-memory --bench real_text`):
//! the corpus of Debian's Python and Perl documentation (see `real_text/corpus.rs`),
//! embedded once with the real model and cached under `~/.cache/saint/corpus/`.
//!
//! `-- --prepare` only builds the cache (about an hour on two cores the first time).

#[path = "real_text/corpus.rs"]
mod corpus;

use saint_memory::{LocalMiniLm, default_model_dir};

fn main() {
    if std::env::args().any(|argument| argument == "--list") {
        return;
    }
    let model = LocalMiniLm::load(&default_model_dir())
        .expect("the embedding model (agent-pod/memory/fetch-model.sh)");
    let corpus = corpus::load_or_prepare(&model);
    eprintln!(
        "corpus: {} sections, {} queries in {}",
        corpus.sections.len(),
        corpus.queries.len(),
        corpus.directory.display()
    );
    if std::env::args().any(|argument| argument == "--prepare") {
        return;
    }
}
