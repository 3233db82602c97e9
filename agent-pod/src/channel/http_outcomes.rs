//! An outcome row for every message of the HTTP channel (`POST /v1/messages`, the chat
//! page): the HTTP channel answers in the request and keeps no inbox row of its own, so
//! what became of each message — `answered`, `refused` with the reason the client was
//! given, `ignored` (an empty message), `failed` (the model down) — is written to the
//! inbox table with its final outcome, where `saint-agent outcomes` lists it beside the
//! other channels' messages. A request that is not authenticated, or whose body is not
//! a message, is no message of anyone's and gets no row.
//!
//! Group-committed before the reply: each row is handed to a writer task that commits
//! whatever waits in one transaction, and the request is answered once its row is
//! committed. So the HTTP channel adds no commit of its own per message under load
//! (rows that arrive during a commit share the next one), and a client that got its
//! answer has its row: a `kill -9` can only lose the row of a request whose client got
//! no answer, and sends it again. The row carries the time the request arrived and the
//! person's stored message id, never the text (that is in the transcript).

use std::sync::{
    Arc, OnceLock,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use saint_channels::queue::{self, Handled};
use saint_config::ErrorChain;
use tokio::sync::{mpsc, oneshot};

use crate::session::SessionStore;

/// Most rows in one commit.
const MOST_PER_COMMIT: usize = 512;

enum Command {
    /// A row, and who waits for its commit.
    Row(Handled, oneshot::Sender<()>),
    Flush(oneshot::Sender<()>),
}

/// The HTTP channel's outcome rows, and their writer (started with the first row).
pub struct HttpOutcomes {
    writer: OnceLock<mpsc::UnboundedSender<Command>>,
    /// Tells rows of one process apart when they arrive in the same millisecond.
    serial: AtomicU64,
    /// Off only for a benchmark measuring what the rows cost.
    recording: AtomicBool,
}

impl Default for HttpOutcomes {
    fn default() -> Self {
        Self {
            writer: OnceLock::new(),
            serial: AtomicU64::new(0),
            recording: AtomicBool::new(true),
        }
    }
}

impl HttpOutcomes {
    /// A platform id for a message that arrived at `received_at` (Unix milliseconds):
    /// the HTTP channel has none of its own.
    pub fn platform_id(&self, received_at: i64) -> String {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        format!("http-{received_at}-{serial}")
    }

    /// Hands `row` to the writer (started on first use, on the current runtime) and
    /// waits until it is committed (or the commit failed, which the writer logs).
    pub async fn record(&self, store: &Arc<SessionStore>, row: Handled) {
        if !self.recording.load(Ordering::Relaxed) {
            return;
        }
        let writer = self.writer.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            tokio::spawn(write(store.clone(), receiver));
            sender
        });
        let (done, committed) = oneshot::channel();
        if writer.send(Command::Row(row, done)).is_err() {
            tracing::error!("the HTTP outcome writer stopped; an outcome row is lost");
            return;
        }
        let _ = committed.await;
    }

    /// Waits until every row handed over so far is committed.
    pub async fn flush(&self) {
        let Some(writer) = self.writer.get() else {
            return;
        };
        let (done, written) = oneshot::channel();
        if writer.send(Command::Flush(done)).is_ok() {
            let _ = written.await;
        }
    }

    /// **Benchmarks only**: whether rows are written at all, so
    /// `benches/channel_guards.rs` can measure the HTTP channel with and without them.
    #[doc(hidden)]
    pub fn set_recording_for_benchmarks(&self, on: bool) {
        self.recording.store(on, Ordering::Relaxed);
    }
}

async fn write(store: Arc<SessionStore>, mut commands: mpsc::UnboundedReceiver<Command>) {
    while let Some(first) = commands.recv().await {
        // Whatever waits now (rows that arrived during the last commit) shares one.
        let (mut rows, mut waiting) = (Vec::new(), Vec::new());
        let mut next = Some(first);
        while let Some(command) = next.take() {
            match command {
                Command::Row(row, done) => {
                    rows.push(row);
                    waiting.push(done);
                }
                Command::Flush(done) => waiting.push(done),
            }
            if rows.len() < MOST_PER_COMMIT {
                next = commands.try_recv().ok();
            }
        }
        if !rows.is_empty() {
            let store = store.clone();
            let count = rows.len();
            let written = tokio::task::spawn_blocking(move || {
                store.queue("record the HTTP channel's outcomes", |transaction| {
                    queue::record_handled(transaction, &rows)
                })
            })
            .await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::error!(error = %ErrorChain(&error), rows = count, "failed to record the HTTP channel's outcomes")
                }
                Err(_) => tracing::error!(rows = count, "the HTTP outcome task failed"),
            }
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
}
