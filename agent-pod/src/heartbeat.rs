//! The heartbeat. (Being written.)

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::{clock::Clock, runtime::Runtime};

/// Runs the bot's heartbeat until `stop`.
pub async fn run(
    _runtime: Arc<Runtime>,
    _clock: Arc<Clock>,
    stop: CancellationToken,
    _abort: CancellationToken,
) {
    stop.cancelled().await;
}
