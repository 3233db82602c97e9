//! The channels' long-running tasks: the dispatcher, one sender per channel, the
//! dead-letter notices and each connection's poller, started together and stopped in
//! shutdown's order. Above the hub and the tasks it starts, so none of them imports it.

use std::sync::Arc;

use futures::future::BoxFuture;
use saint_channels::{InboundMessage, InboxError, InboxSink, queue, transport::ChannelState};
use saint_config::ChannelIdentity;

use super::hub::{ChannelHub, NotAnswered, over_reply_limit, store_inbound, withdraw_inbound};

/// The inbox as the polling channels (e-mail) see it.
struct HubSink(Arc<ChannelHub>);

impl InboxSink for HubSink {
    fn cursor<'a>(&'a self, channel: &'a str) -> BoxFuture<'a, Result<Option<String>, InboxError>> {
        Box::pin(async move {
            let store = self.0.store.clone();
            let channel = channel.to_string();
            tokio::task::spawn_blocking(move || {
                store.queue("read a channel's position", |transaction| {
                    queue::cursor(transaction, &channel)
                })
            })
            .await
            .map_err(|_| InboxError::TaskFailed)?
            .map_err(InboxError::storage)
        })
    }

    fn commit<'a>(
        &'a self,
        channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), InboxError>> {
        self.commit_with_withdrawals(channel, messages, Vec::new(), cursor)
    }

    fn commit_with_withdrawals<'a>(
        &'a self,
        channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        withdrawn: Vec<String>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), InboxError>> {
        Box::pin(async move {
            let store = self.0.store.clone();
            let name = channel.to_string();
            // Every channel keeps the same rules as the webhooks: nothing to answer, or a
            // sender over their rate, is recorded and not answered.
            let messages: Vec<_> = messages
                .into_iter()
                .map(|(message, ignore)| {
                    let decision = ignore
                        .map(NotAnswered::Ignored)
                        .or_else(|| self.0.not_to_answer(&message));
                    let lane = self.0.lane_of(&message);
                    (message, lane, decision)
                })
                .collect();
            let reply_limit = self
                .0
                .channel(channel)
                .and_then(|served| served.transport.reply_limit())
                .filter(|_| self.0.guards.loop_guard());
            let forget = withdrawn.clone();
            let new = tokio::task::spawn_blocking(move || {
                store.queue("store inbound messages", |transaction| {
                    let mut new = 0;
                    for (message, lane, decision) in &messages {
                        // Counted in this transaction, so one batch cannot pass the limit.
                        let decision = match (decision, reply_limit) {
                            (None, Some(limit)) => over_reply_limit(transaction, message, limit)?
                                .map(NotAnswered::Ignored),
                            (decision, _) => decision.clone(),
                        };
                        new += usize::from(store_inbound(
                            transaction,
                            message,
                            lane,
                            decision.as_ref(),
                        )?);
                    }
                    if withdraw_inbound(transaction, &name, &withdrawn)? {
                        // Before the commit: a turn that reads the transcript from now on
                        // reads it whole, after the change.
                        store.note_rewrite();
                    }
                    queue::set_cursor(transaction, &name, &cursor)?;
                    Ok(new)
                })
            })
            .await
            .map_err(|_| InboxError::TaskFailed)?
            .map_err(InboxError::storage)?;
            self.0.forget_attachments(channel, &forget);
            for _ in 0..new {
                self.0.metering.metrics.channel_message(channel, "in");
            }
            // A refusal notice waits in the outbox.
            if let Some(served) = self.0.channel(channel) {
                served.outbox_ready.notify_one();
            }
            if new > 0 {
                self.0.inbox_ready.notify_one();
            }
            Ok(())
        })
    }

    fn report(&self, channel: &str, state: ChannelState) {
        if let Some(served) = self.0.channel(channel) {
            self.0.set_state(served, state);
        }
    }

    fn is_contact(&self, identity: &ChannelIdentity) -> bool {
        self.0.is_contact(identity)
    }
}

/// Why `message` is not answered when its sender already had `limit`'s worth of answers
/// in the window (a loop with another robot, most likely), if so.
/// Starts the dispatcher (until `stop_dispatch`: shutdown stops taking new turns first)
/// and one sender per channel (until `stop_senders`, after running turns drained, so
/// their replies still go out). Returns the tasks.
pub fn start_workers(
    hub: &Arc<ChannelHub>,
    runtime: Arc<crate::runtime::Runtime>,
    turns: tokio_util::task::TaskTracker,
    abort_turns: tokio_util::sync::CancellationToken,
    stop_dispatch: tokio_util::sync::CancellationToken,
    stop_senders: tokio_util::sync::CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![tokio::spawn(super::dispatch::run(
        hub.clone(),
        runtime,
        turns,
        abort_turns,
        stop_dispatch.clone(),
    ))];
    // Connections stop taking messages when draining starts, with the dispatcher.
    let (stop_pollers, pollers_stopped) = tokio::sync::watch::channel(false);
    tasks.push(tokio::spawn(async move {
        stop_dispatch.cancelled().await;
        let _ = stop_pollers.send(true);
    }));
    let sink: Arc<dyn InboxSink> = Arc::new(HubSink(hub.clone()));
    // Dead letters are told to the owners while replies can still go out.
    tasks.push(tokio::spawn(super::dead_letters::run(
        hub.clone(),
        stop_senders.clone(),
    )));
    for channel in hub.channels() {
        tracing::info!(channel = %channel.name, kind = channel.kind.prefix(), "channel started");
        tasks.push(tokio::spawn(super::sender::run(
            hub.clone(),
            channel.clone(),
            stop_senders.clone(),
        )));
        if let Some(connection) = &channel.connection {
            tasks.push(tokio::spawn(
                connection
                    .clone()
                    .run(sink.clone(), pollers_stopped.clone()),
            ));
        }
    }
    tasks
}
