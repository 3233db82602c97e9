//! Watches the memory files for changes made by anyone but the agent (an operator
//! editing the volume, a sync job) and re-indexes what changed, debounced, on its own
//! thread. Calls only `MemoryIndex::reindex_paths` / `reindex_all`.

use std::{
    collections::BTreeSet,
    path::PathBuf,
    sync::{Arc, mpsc},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use saint_config::ErrorChain;

use crate::{index::MemoryIndex, memory_paths::MEMORY_DIRECTORY};

/// Why the watcher could not start.
#[derive(Debug, thiserror::Error)]
#[error("failed to watch the memory files")]
pub struct WatchError(#[from] notify::Error);

enum Message {
    Changed(Vec<PathBuf>),
    Rescan,
    Stop,
}

/// A running watcher; dropping it stops the thread.
pub struct MemoryWatcher {
    sender: mpsc::Sender<Message>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MemoryWatcher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("MemoryWatcher")
            .finish_non_exhaustive()
    }
}

impl Drop for MemoryWatcher {
    fn drop(&mut self) {
        let _ = self.sender.send(Message::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts watching `MEMORY.md` and `memory/` of the index's workspace. Changes are
/// collected until `debounce` passes without new ones (at most 10 × `debounce`), then
/// re-indexed together; an event queue overflow triggers a full reindex.
pub fn watch(index: Arc<MemoryIndex>, debounce: Duration) -> Result<MemoryWatcher, WatchError> {
    let (sender, receiver) = mpsc::channel();
    let event_sender = sender.clone();
    let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
        if let Some(message) = message_for(result) {
            let _ = event_sender.send(message);
        }
    })?;
    let workspace = index.workspace().to_path_buf();
    let memory_directory = workspace.join(MEMORY_DIRECTORY);
    // The root non-recursively (MEMORY.md, memory/ appearing); memory/ recursively.
    watcher.watch(&workspace, RecursiveMode::NonRecursive)?;
    if memory_directory.is_dir() {
        watcher.watch(&memory_directory, RecursiveMode::Recursive)?;
    }
    let thread = std::thread::Builder::new()
        .name("memory-watcher".to_string())
        .spawn(move || run(index, watcher, receiver, memory_directory, debounce))
        .map_err(|error| WatchError(notify::Error::io(error)))?;
    Ok(MemoryWatcher {
        sender,
        thread: Some(thread),
    })
}

/// What an event asks of the watcher thread. Reads (`Access`: a file or directory
/// opened, read or closed unwritten) change nothing and are dropped: the indexer's own
/// reads, and re-watching `memory/` (which lists it), would otherwise come back as
/// events and keep the thread re-watching and re-scanning in a loop.
fn message_for(result: notify::Result<notify::Event>) -> Option<Message> {
    match result {
        Ok(event) if event.need_rescan() => Some(Message::Rescan),
        Ok(event) if matches!(event.kind, notify::EventKind::Access(_)) => None,
        Ok(event) => Some(Message::Changed(event.paths)),
        // The backend lost track (e.g. inotify overflow): only a full scan is safe.
        Err(_) => Some(Message::Rescan),
    }
}

fn run(
    index: Arc<MemoryIndex>,
    mut watcher: RecommendedWatcher,
    receiver: mpsc::Receiver<Message>,
    memory_directory: PathBuf,
    debounce: Duration,
) {
    let mut pending: BTreeSet<PathBuf> = BTreeSet::new();
    let mut rescan = false;
    let mut first_pending: Option<Instant> = None;
    loop {
        let message = if first_pending.is_none() {
            receiver
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            receiver.recv_timeout(debounce)
        };
        let quiet = matches!(message, Err(mpsc::RecvTimeoutError::Timeout));
        match message {
            Ok(Message::Changed(paths)) => {
                for path in paths {
                    if path == memory_directory && memory_directory.is_dir() {
                        // memory/ was (re)created: watch inside it too.
                        if let Err(error) =
                            watcher.watch(&memory_directory, RecursiveMode::Recursive)
                        {
                            tracing::warn!(%error, "failed to watch the memory directory");
                        }
                    }
                    pending.insert(path);
                }
                first_pending.get_or_insert_with(Instant::now);
            }
            Ok(Message::Rescan) => {
                rescan = true;
                first_pending.get_or_insert_with(Instant::now);
            }
            Ok(Message::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let Some(since) = first_pending else { continue };
        if quiet || since.elapsed() >= debounce * 10 {
            let result = if rescan {
                index.reindex_all().map(|_| ())
            } else {
                let paths: Vec<PathBuf> = std::mem::take(&mut pending).into_iter().collect();
                index.reindex_paths(&paths).map(|_| ())
            };
            if let Err(error) = result {
                tracing::warn!(error = %ErrorChain(&error), "failed to reindex changed memory files");
            }
            pending.clear();
            rescan = false;
            first_pending = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use notify::{
        Event, EventKind,
        event::{AccessKind, AccessMode, CreateKind, Flag, ModifyKind, RemoveKind},
    };

    use super::*;

    fn event(kind: EventKind) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(PathBuf::from("/w/memory")))
    }

    #[test]
    fn reads_are_dropped_and_changes_and_overflows_are_not() {
        // Writes also arrive as Modify events, so a close after writing adds nothing.
        for read in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Access(AccessKind::Read),
        ] {
            assert!(message_for(event(read)).is_none(), "{read:?}");
        }
        for change in [
            EventKind::Create(CreateKind::Folder),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Remove(RemoveKind::File),
        ] {
            assert!(
                matches!(message_for(event(change)), Some(Message::Changed(paths)) if paths == [PathBuf::from("/w/memory")]),
                "{change:?}"
            );
        }
        let overflow = Ok(Event::new(EventKind::Other).set_flag(Flag::Rescan));
        assert!(matches!(message_for(overflow), Some(Message::Rescan)));
        assert!(matches!(
            message_for(Err(notify::Error::generic("lost"))),
            Some(Message::Rescan)
        ));
    }
}
