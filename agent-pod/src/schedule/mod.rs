//! Scheduled jobs: the `cron` tool and the loop that runs due jobs as their creators.
//! (Skeleton: the helper building #19 item 1 owns this module.)

use std::{path::Path, sync::Arc};

use saint_tools::Tool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{channel::hub::ChannelHub, clock::Clock, runtime::Runtime, session::SessionStore};

/// The job store, the `cron` tool over it, and the scheduler loop.
pub struct Schedule {
    wake: Arc<Notify>,
}

impl Schedule {
    /// Opens the job store of the bot whose workspace is `workspace`.
    pub fn open(
        _workspace: &Path,
        _store: Arc<SessionStore>,
        _hub: Arc<ChannelHub>,
    ) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            wake: Arc::new(Notify::new()),
        }))
    }

    /// The `cron` tool.
    pub fn tool(self: &Arc<Self>) -> Option<Arc<dyn Tool>> {
        None
    }

    /// Runs due jobs until `stop` (the bot is draining), then waits for the runs in
    /// progress; `abort` cancels those (the drain deadline passed).
    pub async fn run(
        self: Arc<Self>,
        _runtime: Arc<Runtime>,
        _clock: Arc<Clock>,
        stop: CancellationToken,
        _abort: CancellationToken,
    ) {
        let _ = &self.wake;
        stop.cancelled().await;
    }
}
