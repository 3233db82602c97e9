//! One turn of the conversation (see the module docs of `runtime`).

mod failover;

use std::{
    ops::ControlFlow,
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::FutureExt;
use saint_config::{BotConfig, SessionKey, mcp};
use saint_llm::{CancellationToken, ChatRequest, ChatRole, ContentBlock, Message, ToolSpec, Usage};
use serde_json::Map;
use tokio::sync::mpsc::UnboundedSender;
use tracing::Instrument;

use saint_channels::{FileKind, OutboundBody, OutboundFile, ReplyContext, queue};

use super::{
    Delivery, Recipient, Runtime, TurnError, TurnEvent, TurnOutcome, TurnReply, attachments,
    compaction, group, model::ModelChain, session_cache::SessionCache,
};
use saint_tools::{
    Caller, ToolContext, ToolError, Trigger,
    policy::{self, PermittedTool},
    skills::SkillCatalog,
    untrusted,
};

use crate::{
    approvals,
    budget::Reservation,
    metering::{self, ToolCallRecord},
    prompt::{self, PromptInputs},
    session::{StoredMessage, Transcript, repair_tool_pairing},
    telemetry,
};

/// What an over-budget person is told. Polite, and reveals nothing about costs or models.
pub const OVER_BUDGET_REPLY: &str = "Sorry, I can't take on more requests for you right now. Please try again later, or ask the team for help.";

/// What the person is told when the tool loop hits its cap.
pub const ITERATION_CAP_REPLY: &str = "Sorry, that took more steps than I'm allowed for one message. Could you break it into smaller requests?";

/// `answer` after what the person is told first, if anything.
fn told_then(told: Option<&str>, answer: &str) -> String {
    match told {
        Some(told) => format!("{told}\n\n{answer}"),
        None => answer.to_string(),
    }
}

/// Cuts a tool result to `limit` characters with a note saying so.
pub fn cap_tool_result(content: String, limit: usize) -> String {
    let total = content.chars().count();
    if total <= limit {
        return content;
    }
    let mut kept: String = content.chars().take(limit).collect();
    kept.push_str(&format!(
        "\n[truncated: showing {limit} of {total} characters]"
    ));
    kept
}

/// The `chat` span of one model call (through the whole failover chain): the model
/// asked for and the provider; tokens recorded by [`record_chat`].
fn chat_span(config: &BotConfig, request: &ChatRequest) -> tracing::Span {
    tracing::info_span!(
        target: telemetry::TARGET,
        "chat",
        otel.name = %format_args!("chat {}", request.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = telemetry::provider_name(config.model.provider),
        gen_ai.request.model = %request.model,
        gen_ai.request.max_tokens = request.max_tokens,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

fn record_chat(span: &tracing::Span, called: &Result<Called, TurnError>) {
    match called {
        Ok(Called::Answered(response, _)) => {
            span.record("gen_ai.usage.input_tokens", response.usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", response.usage.output_tokens);
            span.record(
                "gen_ai.response.finish_reasons",
                tracing::field::debug(&response.stop_reason),
            );
        }
        Ok(Called::OverBudget) => {
            span.record("error.type", "over_budget");
        }
        Err(_) => {
            span.record("error.type", "model_failed");
        }
    }
}

fn tool_specs(tools: &[PermittedTool]) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|tool| ToolSpec {
            name: mcp::model_tool_name(tool.name()).into_owned(),
            description: tool.description().to_string(),
            input_schema: tool.input_schema(),
        })
        .collect()
}

/// What the channel queue records with a stored message.
pub(super) enum QueueStep {
    None,
    /// The person's message of this inbox row.
    Accept(i64),
    /// The answer: queue it as the reply and mark the inbox row answered.
    Reply(Box<(Delivery, OutboundBody)>),
    /// The answer of work nobody is waiting on live: queue it to each recipient (with
    /// what the message asks of them, e.g. an approval's buttons).
    Send(Box<(Vec<Recipient>, OutboundBody)>),
}

impl QueueStep {
    /// Records the step in `transaction`, which stores the message `message_id`
    /// (`origin` labels what started the work; `identity` is the caller's).
    pub(super) fn record(
        self,
        transaction: &rusqlite::Connection,
        message_id: i64,
        origin: &str,
        identity: &str,
    ) -> rusqlite::Result<()> {
        match self {
            QueueStep::None => Ok(()),
            QueueStep::Accept(inbox_id) => queue::mark_accepted(transaction, inbox_id, message_id),
            QueueStep::Send(send) => {
                let (recipients, body) = *send;
                for recipient in &recipients {
                    queue::enqueue(
                        transaction,
                        &recipient.channel,
                        &recipient.identity,
                        &body,
                        origin,
                        None,
                    )?;
                }
                Ok(())
            }
            QueueStep::Reply(reply) => {
                let (delivery, body) = *reply;
                queue::queue_reply(
                    transaction,
                    delivery.inbox_id,
                    &delivery.channel,
                    identity,
                    &body,
                )
                .map(drop)
            }
        }
    }

    /// What storing the final answer `text`, with the voice notes `files` the turn's
    /// tools made, also queues.
    pub(super) fn answer(
        destination: &Destination<'_>,
        text: &str,
        files: &[OutboundFile],
    ) -> Self {
        match destination {
            Destination::Caller => QueueStep::None,
            Destination::Reply(delivery) => QueueStep::Reply(Box::new((
                (*delivery).clone(),
                OutboundBody {
                    text: text.to_string(),
                    files: files.to_vec(),
                    context: delivery.context.clone(),
                },
            ))),
            Destination::Send { to, quiet } => {
                let silent =
                    text.trim().is_empty() || quiet.is_some_and(|quiet| text.trim() == quiet);
                if silent || to.is_empty() {
                    QueueStep::None
                } else {
                    QueueStep::Send(Box::new((
                        to.to_vec(),
                        OutboundBody {
                            text: text.to_string(),
                            files: files.to_vec(),
                            context: ReplyContext::default(),
                        },
                    )))
                }
            }
        }
    }
}

/// Where a turn's final answer goes besides the transcript.
pub(super) enum Destination<'a> {
    /// Back to whoever called (the HTTP API streams it).
    Caller,
    /// The reply to a channel message, through its channel's outbox.
    Reply(&'a Delivery),
    /// To these people through their channels' outboxes; an empty answer or one equal
    /// to `quiet` (nothing to report) is not sent.
    Send {
        to: &'a [Recipient],
        quiet: Option<&'a str>,
    },
}

/// One turn in progress: who it is for, where its answer goes, and what it has used so
/// far. A turn is [`Turn::prepare`]d (its message stored), [`Turn::iterate`]d (model
/// calls and tool calls until an answer) and [`Turn::finish`]ed (the answer stored and
/// metered).
pub(super) struct Turn<'a> {
    runtime: &'a Runtime,
    caller: &'a Caller,
    config: &'a Arc<BotConfig>,
    destination: Destination<'a>,
    /// Said to the model after the system prompt (what started a background turn).
    note: Option<&'a str>,
    events: Option<&'a UnboundedSender<TurnEvent>>,
    usage: Usage,
    model_calls: u32,
    model_time: Duration,
    /// Time in model calls outside their attempts (the failover chain's own work and
    /// its waits).
    failover_time: Duration,
    /// The `usage.jsonl` lines of this turn's model attempts, written with its own line
    /// (one write per turn, off the model calls' path).
    attempt_lines: String,
    /// What this turn's model calls cost, in USD.
    spent: f64,
    /// The id of the message that started this turn.
    first_message_id: i64,
    /// Said to the person before the answer.
    told: Option<String>,
    /// Voice notes the turn's tools made (`tts`), sent with its answer.
    files: Vec<OutboundFile>,
}

/// Runs one turn for `input.caller` in their session: stores the message, loops model
/// and tools, stores and queues the answer, meters it. Traced as one `invoke_agent`
/// span (who, in which role, what it cost; never what was said).
pub(super) async fn run(
    runtime: &Runtime,
    input: TurnInput<'_>,
    events: Option<&UnboundedSender<TurnEvent>>,
    cancel: &CancellationToken,
) -> Result<TurnReply, TurnError> {
    let caller = input.caller;
    let bot = input.config.bot.name.as_str();
    let span = tracing::info_span!(
        target: telemetry::TARGET,
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {bot}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = bot,
        saint.bot = bot,
        saint.contact = metering::person_label(caller.known, &caller.slug),
        saint.role = %caller.role_name,
        saint.trigger = caller.trigger.label(),
        saint.outcome = tracing::field::Empty,
        saint.model_calls = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    let reply = run_in_session(runtime, input, events, cancel)
        .instrument(span.clone())
        .await;
    match &reply {
        Ok(reply) => {
            span.record("saint.outcome", reply.outcome.label());
            span.record("saint.model_calls", reply.model_calls);
            span.record("gen_ai.usage.input_tokens", reply.usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", reply.usage.output_tokens);
        }
        Err(_) => {
            span.record("saint.outcome", "error");
            span.record("error.type", "turn_failed");
        }
    }
    reply
}

/// The turn's three steps, under its session's lock: one turn at a time per session.
async fn run_in_session(
    runtime: &Runtime,
    input: TurnInput<'_>,
    events: Option<&UnboundedSender<TurnEvent>>,
    cancel: &CancellationToken,
) -> Result<TurnReply, TurnError> {
    let lock = runtime.session_lock(&input.caller.session_key);
    let mut session = lock.lock().await;
    let mut turn = Turn::prepare(runtime, input, events).await?;
    let end = turn.iterate(&mut session, cancel).await;
    turn.finish(end).await
}

/// Stores the message of `input` and `answer` in the caller's session and queues the
/// answer as the reply, without a model call (an approver's decision is answered so).
pub(super) async fn answer_directly(
    runtime: &Runtime,
    input: TurnInput<'_>,
    answer: String,
    events: Option<&UnboundedSender<TurnEvent>>,
) -> Result<TurnReply, TurnError> {
    let TurnInput {
        caller,
        text,
        accepted,
        destination,
        attached,
        ..
    } = input;
    let lock = runtime.session_lock(&caller.session_key);
    let _session = lock.lock().await;
    let message_id = store_message(runtime, caller, accepted, text, attached).await?;
    if let Some(events) = events {
        let _ = events.send(TurnEvent::Accepted {
            message_id,
            session_key: caller.session_key.clone(),
        });
        let _ = events.send(TurnEvent::TextDelta(answer.clone()));
    }
    let step = QueueStep::answer(&destination, &answer, &[]);
    runtime
        .persist_then(caller, Message::assistant_text(answer.clone()), None, step)
        .await?;
    Ok(TurnReply {
        text: answer,
        session_key: caller.session_key.clone(),
        message_id,
        outcome: TurnOutcome::Answered,
        usage: Usage::default(),
        model_calls: 0,
        model_time: Duration::ZERO,
        failover_time: Duration::ZERO,
    })
}

/// Stores the turn's first message, unless an earlier attempt did: its id. A channel
/// message's inbox row is marked accepted in the same transaction, so a restart resumes
/// the turn instead of storing the message twice.
async fn store_message(
    runtime: &Runtime,
    caller: &Caller,
    accepted: Accepted,
    text: String,
    attached: Vec<ContentBlock>,
) -> Result<i64, TurnError> {
    match accepted {
        Accepted::Already(id) => Ok(id),
        Accepted::Inbox(inbox_id) => {
            runtime
                .persist_then(
                    caller,
                    attachments::user_message(text, attached),
                    None,
                    QueueStep::Accept(inbox_id),
                )
                .await
        }
        Accepted::Store => {
            runtime
                .persist(caller, attachments::user_message(text, attached))
                .await
        }
    }
}

impl<'a> Turn<'a> {
    /// Stores the turn's message (acknowledged only once it is durable) and starts the
    /// turn's accounts.
    async fn prepare(
        runtime: &'a Runtime,
        input: TurnInput<'a>,
        events: Option<&'a UnboundedSender<TurnEvent>>,
    ) -> Result<Self, TurnError> {
        let TurnInput {
            caller,
            config,
            text,
            accepted,
            destination,
            note,
            attached,
            told,
        } = input;
        let message_id = store_message(runtime, caller, accepted, text, attached).await?;
        let turn = Turn {
            runtime,
            caller,
            config,
            destination,
            note,
            events,
            usage: Usage::default(),
            model_calls: 0,
            model_time: Duration::ZERO,
            failover_time: Duration::ZERO,
            attempt_lines: String::new(),
            spent: 0.0,
            first_message_id: message_id,
            told,
            files: Vec::new(),
        };
        turn.emit(TurnEvent::Accepted {
            message_id,
            session_key: caller.session_key.clone(),
        });
        Ok(turn)
    }
}

impl Turn<'_> {
    fn emit(&self, event: TurnEvent) {
        if let Some(events) = self.events {
            // A closed receiver means the client left; the turn still completes.
            let _ = events.send(event);
        }
    }

    /// Ends the turn as `end` says: a text the model did not write is stored (and
    /// queued where the work reports), and the turn is metered.
    async fn finish(self, end: Result<LoopEnd, TurnError>) -> Result<TurnReply, TurnError> {
        let caller = self.caller;
        let (outcome, text) = match end {
            Ok(LoopEnd::Answer(text)) => (TurnOutcome::Answered, text),
            Ok(LoopEnd::OverBudget) => {
                self.runtime
                    .metering
                    .metrics
                    .budget_refusal(&caller.role_name);
                (TurnOutcome::OverBudget, OVER_BUDGET_REPLY.to_string())
            }
            Ok(LoopEnd::IterationCap) => {
                (TurnOutcome::IterationCap, ITERATION_CAP_REPLY.to_string())
            }
            Ok(LoopEnd::AuthorityChanged(reason)) => {
                tracing::warn!(person = %caller.slug, role = %caller.role_name, %reason, "turn stopped: authority changed");
                (
                    TurnOutcome::AuthorityChanged,
                    authority_changed_reply(&reason),
                )
            }
            Err(error) => {
                self.record("error").await;
                return Err(error);
            }
        };
        if outcome != TurnOutcome::Answered {
            // The model did not produce this text; store it so the transcript shows it
            // (and queue it as the reply, for a channel message; work nobody waits on
            // live is not sent a refusal: its owner hears about the budget once).
            // A stop for changed authority is told to whoever the work reports to (a
            // job's or heartbeat's recipients too): the work they expect will not come.
            let step = match &self.destination {
                Destination::Send { .. } if outcome != TurnOutcome::AuthorityChanged => {
                    QueueStep::None
                }
                destination => QueueStep::answer(
                    destination,
                    &told_then(self.told.as_deref(), &text),
                    &self.files,
                ),
            };
            self.runtime
                .persist_then(caller, Message::assistant_text(text.clone()), None, step)
                .await?;
            self.emit(TurnEvent::TextDelta(text.clone()));
        }
        self.record(outcome.label()).await;
        Ok(TurnReply {
            text: told_then(self.told.as_deref(), &text),
            session_key: caller.session_key.clone(),
            message_id: self.first_message_id,
            outcome,
            usage: self.usage,
            model_calls: self.model_calls,
            model_time: self.model_time,
            failover_time: self.failover_time,
        })
    }

    async fn iterate(
        &mut self,
        session: &mut SessionCache,
        cancel: &CancellationToken,
    ) -> Result<LoopEnd, TurnError> {
        let setup = self.setup().await?;
        let (mut transcript, isolated) = self.transcript(session).await?;
        let end = 'turn: {
            for _ in 0..self.runtime.options.max_iterations {
                if let ControlFlow::Break(end) = self.round(&setup, &mut transcript, cancel).await?
                {
                    break 'turn end;
                }
            }
            LoopEnd::IterationCap
        };
        // Everything in the transcript is stored: the next turn of this session starts from it
        // (an isolated turn's is only part of its session: the next reads the store).
        if !isolated {
            session.keep(transcript);
        }
        Ok(end)
    }

    async fn record(&self, outcome: &str) {
        self.runtime
            .metering
            .record_turn_after(
                &self.attempt_lines,
                &metering::TurnRecord {
                    user: &self.caller.slug,
                    role: &self.caller.role_name,
                    trigger: self.caller.trigger.label(),
                    outcome,
                    model_calls: self.model_calls,
                    usage: self.usage,
                    cost_usd: self.spent,
                },
            )
            .await;
    }

    /// The system prompt, built off the async workers: it reads the workspace's prompt
    /// files.
    async fn system_prompt(
        &self,
        tool_names: Vec<&'static str>,
        skills: Option<Arc<SkillCatalog>>,
    ) -> Result<String, TurnError> {
        let (caller, config, workspace) = (
            self.caller.clone(),
            self.config.clone(),
            self.runtime.workspace.clone(),
        );
        tokio::task::spawn_blocking(move || {
            prompt::system_prompt(&PromptInputs {
                caller: &caller,
                config: &config,
                workspace: &workspace,
                tool_names: &tool_names,
                skills: skills.as_deref(),
            })
        })
        .await
        .map_err(|_| TurnError::Join)
    }

    /// Why the caller's authority changed since the turn began, if it did: a cheap
    /// pointer check while the config is the one the turn started with, the caller
    /// resolved again against the current config otherwise.
    fn authority_changed(&self) -> Option<String> {
        let now = self.runtime.config().current();
        if Arc::ptr_eq(&now, self.config) {
            return None;
        }
        crate::identity::authority_changed(&now, self.caller)
    }

    /// The tools the caller may use this turn, said to the client, and the prompt and
    /// model chain every round of the turn uses.
    async fn setup(&mut self) -> Result<LoopSetup, TurnError> {
        let caller = self.caller;
        let config = self.config.clone();
        let model_name = caller
            .role
            .model
            .clone()
            .unwrap_or_else(|| config.model.name.clone());
        let (visible, skills) = self.visible_tools().await;
        let tool_names: Vec<&'static str> = visible.iter().map(|tool| tool.name()).collect();
        self.emit(TurnEvent::Caller {
            contact: caller.known.then(|| caller.display_name.clone()),
            role: caller.role_name.clone(),
            model: model_name.clone(),
            tools: tool_names.iter().map(|name| name.to_string()).collect(),
        });
        let mut base_prompt = self.system_prompt(tool_names, skills).await?;
        if let Some(note) = self.note {
            base_prompt.push_str("\n\n");
            base_prompt.push_str(note);
        }
        let specs = tool_specs(&visible);
        let chain = self.runtime.model.chain(&config.model)?;
        let context = ToolContext {
            caller: caller.clone(),
            workspace: self.runtime.workspace.clone(),
            config: config.clone(),
        };
        Ok(LoopSetup {
            model_name,
            visible,
            base_prompt,
            specs,
            chain,
            context,
        })
    }

    /// The tools offered to the caller this turn, and the skills read for them (for the
    /// prompt's listing), if `skill` may be offered.
    async fn visible_tools(&self) -> (Vec<PermittedTool>, Option<Arc<SkillCatalog>>) {
        let (caller, config) = (self.caller, self.config);
        // The policy is asked once per turn: each tool comes with the permit it is
        // called with, and a tool the role may not use is neither offered nor callable.
        let mut visible = policy::permitted_tools(
            caller,
            self.runtime.tools.all(),
            self.runtime.sandbox_available,
        );
        // `tts` is offered only while the bot has a speech engine it can use
        // (`media.speech`; a local one installed).
        if !crate::tts_tool::offered(config) {
            visible.retain(|tool| tool.name() != crate::tts_tool::TTS_TOOL);
        }
        // `skill` is offered only when some skill the role allows is installed; the
        // skills are read once per turn, for this check and the prompt's listing.
        let skills = if visible.iter().any(|tool| tool.name() == policy::SKILL_TOOL) {
            let (workspace, skill_config) = (self.runtime.workspace.clone(), config.clone());
            tokio::task::spawn_blocking(move || SkillCatalog::load(&workspace, &skill_config))
                .await
                .ok()
                .map(Arc::new)
        } else {
            None
        };
        let any_skill = skills
            .as_ref()
            .is_some_and(|catalog| catalog.allows_any(&caller.role.skills));
        (policy::without_idle_skill_tool(visible, any_skill), skills)
    }

    /// The session's transcript as this turn may see it, and whether the turn is
    /// isolated (sees only its own messages).
    async fn transcript(
        &self,
        session: &mut SessionCache,
    ) -> Result<(Transcript, bool), TurnError> {
        let caller = self.caller;
        let mut transcript = session
            .transcript(self.runtime, &caller.session_key)
            .await?;
        if SessionKey::is_conversation(&caller.session_key) {
            // Another member's tool output never enters this member's turn.
            transcript.messages = group::said_only(transcript.messages);
        }
        // A scheduled job's run and a heartbeat see only their own turn: what an earlier
        // run read (a web page, an e-mail) never steers a later one as the bot's own
        // words. Their sessions keep every run for the people who may read them.
        let isolated = matches!(caller.trigger, Trigger::Cron | Trigger::Heartbeat);
        if isolated {
            transcript.summary.clear();
            transcript
                .messages
                .retain(|stored| stored.id >= self.first_message_id);
        }
        Ok((transcript, isolated))
    }

    /// One round of the tool loop: a model call, its answer stored, and the tools it
    /// called run and their results stored. Breaks with how the turn ends.
    async fn round(
        &mut self,
        setup: &LoopSetup,
        transcript: &mut Transcript,
        cancel: &CancellationToken,
    ) -> Result<ControlFlow<LoopEnd>, TurnError> {
        let caller = self.caller;
        // Authority is read at the moment of use: before every model call.
        if let Some(reason) = self.authority_changed() {
            return Ok(ControlFlow::Break(LoopEnd::AuthorityChanged(reason)));
        }
        // Every model call reserves its worst case in the person's budget first
        // (`call_model`): a long tool loop, or their other turns and sub-agents
        // running at the same time, may use up what is left.
        let Some(next) = self.next_request(setup, transcript, cancel).await? else {
            return Ok(ControlFlow::Break(LoopEnd::OverBudget));
        };
        let chat = chat_span(self.config, &next.request);
        let called = self
            .call_model(
                &setup.chain,
                &next.request,
                next.prompt_tokens,
                cancel,
                true,
            )
            .instrument(chat.clone())
            .await;
        record_chat(&chat, &called);
        let Called::Answered(response, charge) = called? else {
            return Ok(ControlFlow::Break(LoopEnd::OverBudget));
        };
        let message = response.message;
        self.store_answer(&message, charge, transcript).await?;
        let calls: Vec<ToolCall> = message
            .tool_uses()
            .map(|(id, name, input)| ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                input: input.clone(),
            })
            .collect();
        if calls.is_empty() {
            return Ok(ControlFlow::Break(LoopEnd::Answer(message.text())));
        }
        let ToolRound { results, stopped } = self.run_tool_calls(setup, calls).await?;
        let message = Message {
            role: ChatRole::User,
            content: results,
        };
        let id = self.runtime.persist(caller, message.clone()).await?;
        transcript.messages.push(StoredMessage {
            id,
            message,
            identity: caller.identity.clone(),
        });
        if let Some(reason) = stopped {
            return Ok(ControlFlow::Break(LoopEnd::AuthorityChanged(reason)));
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The request for the next model call. Past the compaction threshold the older
    /// history is summarised first; `None` when the person's budget cannot pay for that.
    async fn next_request(
        &mut self,
        setup: &LoopSetup,
        transcript: &mut Transcript,
        cancel: &CancellationToken,
    ) -> Result<Option<NextRequest>, TurnError> {
        let config = self.config;
        let request = |transcript: &Transcript| {
            chat_request(
                &setup.model_name,
                &setup.base_prompt,
                &transcript.summary,
                &transcript.messages,
                &setup.specs,
                config,
            )
        };
        let mut next = NextRequest::of(request(transcript));
        let threshold =
            (f64::from(config.model.context_window) * self.runtime.options.compaction_ratio) as u64;
        if next.prompt_tokens > threshold
            && let Some(cut) = compaction::split_point(
                &transcript.messages,
                self.runtime.options.keep_recent_messages,
            )
        {
            let Some(compacted) = self
                .compact(
                    &setup.chain,
                    &setup.model_name,
                    &transcript.summary,
                    &transcript.messages[..cut],
                    cancel,
                )
                .await?
            else {
                return Ok(None);
            };
            transcript.summary = compacted;
            transcript.messages.drain(..cut);
            next = NextRequest::of(request(transcript));
        }
        Ok(Some(next))
    }

    /// Stores the model's message with its cost and settles its charge. The final answer
    /// of a channel message is queued as its reply in the transaction that stores it.
    async fn store_answer(
        &self,
        message: &Message,
        charge: Charge,
        transcript: &mut Transcript,
    ) -> Result<(), TurnError> {
        let caller = self.caller;
        let step = if message.tool_uses().next().is_none() {
            QueueStep::answer(
                &self.destination,
                &told_then(self.told.as_deref(), &message.text()),
                &self.files,
            )
        } else {
            QueueStep::None
        };
        let spent_at = jiff::Timestamp::now();
        let stored = self
            .runtime
            .persist_then(caller, message.clone(), Some((charge.cost, spent_at)), step)
            .await;
        charge.settle(spent_at);
        let id = stored?;
        transcript.messages.push(StoredMessage {
            id,
            message: message.clone(),
            identity: caller.identity.clone(),
        });
        Ok(())
    }

    /// Runs one round's tool calls in order. Authority is read again before each: once
    /// it changed, the rest are answered as not run, so the transcript stays whole.
    async fn run_tool_calls(
        &mut self,
        setup: &LoopSetup,
        calls: Vec<ToolCall>,
    ) -> Result<ToolRound, TurnError> {
        let mut results = Vec::with_capacity(calls.len());
        let mut images = Vec::new();
        let mut stopped = None;
        for call in calls {
            // ...and before every tool call: a call the caller may no longer
            // make is answered as not run, so the transcript stays whole.
            if stopped.is_none() {
                stopped = self.authority_changed();
            }
            let reply = match &stopped {
                Some(reason) => ToolReply::failed(format!("not run: {reason}")),
                None => self.answer_tool_call(setup, call.name, call.input).await?,
            };
            let mut content = reply.content;
            if let Some(audio) = reply.audio {
                self.keep_voice_note(audio, &mut content).await;
            }
            results.push(ContentBlock::ToolResult {
                tool_use_id: call.id,
                content,
                is_error: reply.is_error,
            });
            images.extend(reply.image);
        }
        // Images a tool gave go after every result of the round: a user message
        // answering tool calls starts with their results.
        results.extend(images);
        Ok(ToolRound { results, stopped })
    }

    /// Runs one tool call, or asks for approval first when the role's rules say so.
    async fn answer_tool_call(
        &mut self,
        setup: &LoopSetup,
        name: String,
        input: serde_json::Value,
    ) -> Result<ToolReply, TurnError> {
        // The model names tools as it saw them (`docs__search`);
        // prices, metering and usage use the real name.
        let tool = setup
            .visible
            .iter()
            .find(|tool| mcp::model_tool_name(tool.name()) == name);
        let name = tool.map_or(name, |tool| tool.name().to_string());
        // A call the role's approval rules name waits for someone
        // else's yes instead of running now.
        match tool.and_then(|_| approvals::rule_for(&self.caller.role, &name, &input)) {
            Some(rule) => {
                let (content, is_error) = self
                    .runtime
                    .approvals()
                    .ask(self.caller, self.config, rule, &name, &input, &[])
                    .await;
                Ok(ToolReply {
                    content,
                    is_error,
                    image: None,
                    audio: None,
                })
            }
            None => {
                self.run_priced_tool(&setup.context, tool, &name, input)
                    .await
            }
        }
    }

    /// Sends a tool's voice note with the turn's answer; where the conversation carries
    /// text only, deletes it and says so in the tool's result.
    async fn keep_voice_note(&mut self, audio: saint_tools::ToolAudio, content: &mut String) {
        if matches!(self.destination, Destination::Caller) {
            // The HTTP API streams text only: say so rather than drop it
            // in silence, and keep no file nobody will send.
            let _ = tokio::fs::remove_file(self.runtime.workspace.join(&audio.path)).await;
            content.push_str(
                "\n(this conversation carries text only: the voice note \
                 cannot be sent here)",
            );
        } else {
            self.files.push(OutboundFile {
                path: audio.path,
                mime_type: audio.mime_type,
                kind: FileKind::Voice,
            });
        }
    }

    /// The summary of `previous` and `older`, stored; `None` when the person's budget
    /// cannot take the summarising call.
    async fn compact(
        &mut self,
        chain: &ModelChain,
        model: &str,
        previous: &str,
        older: &[StoredMessage],
        cancel: &CancellationToken,
    ) -> Result<Option<String>, TurnError> {
        let request = compaction::summary_request(
            model,
            previous,
            older,
            self.config.model.max_output_tokens,
        );
        let prompt_tokens = compaction::estimate_tokens(&request);
        let Called::Answered(response, charge) = self
            .call_model(chain, &request, prompt_tokens, cancel, false)
            .await?
        else {
            return Ok(None);
        };
        let spent_at = jiff::Timestamp::now();
        let cost = charge.cost;
        let stored = if cost > 0.0 {
            let (slug, day) = (self.caller.slug.clone(), metering::spend_day(spent_at));
            self.runtime
                .blocking(move |store| store.add_spend(&slug, &day, cost))
                .await
                .map(drop)
        } else {
            Ok(())
        };
        charge.settle(spent_at);
        stored?;
        let summary = response.message.text();
        let through = older.last().map(|stored| stored.id).unwrap_or_default();
        let (key, stored_summary) = (self.caller.session_key.clone(), summary.clone());
        self.runtime
            .blocking(move |store| store.compact(&key, through, &stored_summary))
            .await?;
        tracing::info!(session = %self.caller.session_key, through, "compacted session");
        Ok(Some(summary))
    }

    /// Runs a tool; one `budget.toolPrices` prices first reserves its price in the
    /// caller's budget (refused when it does not fit, like a model call) and is charged
    /// only when it succeeds.
    async fn run_priced_tool(
        &mut self,
        context: &ToolContext,
        tool: Option<&PermittedTool>,
        name: &str,
        input: serde_json::Value,
    ) -> Result<ToolReply, TurnError> {
        // Speech is priced per character on top of any per-call price.
        let speech = (name == crate::tts_tool::TTS_TOOL)
            .then(|| self.config.media.speech.as_ref())
            .flatten()
            .and_then(|speech| {
                speech.price(
                    &self.config.model.prices,
                    crate::tts_tool::characters(&input),
                )
            });
        let price = match (self.config.budget.tool_prices.get(name).copied(), speech) {
            (None, None) => None,
            (call, speech) => Some(call.unwrap_or_default() + speech.unwrap_or_default()),
        };
        let (Some(price), Some(role_budget), Some(_)) = (price, &self.caller.role.budget, tool)
        else {
            return Ok(self.run_tool(context, tool, name, input).await);
        };
        let slug = self.caller.slug.clone();
        let reserved = self
            .runtime
            .budgets
            .reserve(
                &slug,
                role_budget,
                price,
                jiff::Timestamp::now(),
                |first, last| {
                    let slug = slug.clone();
                    self.runtime
                        .blocking(move |store| store.spent_between(&slug, &first, &last))
                },
            )
            .await?;
        let Ok(mut reservation) = reserved else {
            self.runtime
                .metering
                .metrics
                .budget_refusal(&self.caller.role_name);
            return Ok(ToolReply::failed(format!(
                "not run: {name} costs {price} USD a call, and your budget cannot take it"
            )));
        };
        let reply = self.run_tool(context, tool, name, input).await;
        if reply.is_error {
            // A failed call costs nothing: dropping the reservation releases it.
            return Ok(reply);
        }
        reservation.set_cost(price);
        let spent_at = jiff::Timestamp::now();
        let day = metering::spend_day(spent_at);
        let stored = self
            .runtime
            .blocking(move |store| store.add_spend(&slug, &day, price))
            .await;
        reservation.settle(price, spent_at);
        stored?;
        self.spent += price;
        Ok(reply)
    }

    async fn run_tool(
        &self,
        context: &ToolContext,
        tool: Option<&PermittedTool>,
        name: &str,
        input: serde_json::Value,
    ) -> ToolReply {
        let started = Instant::now();
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            "execute_tool",
            otel.name = %format_args!("execute_tool {name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = name,
            error.type = tracing::field::Empty,
        );
        let result = match tool {
            // A name the role cannot see is refused like any other denial.
            None => Err(ToolError::Denied(format!(
                "the tool {name:?} is not available"
            ))),
            Some(tool) => {
                let call = AssertUnwindSafe(tool.call(context, input.clone()))
                    .catch_unwind()
                    .instrument(span.clone());
                match tokio::time::timeout(self.runtime.options.tool_timeout, call).await {
                    Err(_) => Err(ToolError::Timeout(
                        self.runtime.options.tool_timeout.as_secs(),
                    )),
                    Ok(Err(_)) => {
                        tracing::error!(tool = name, "tool panicked");
                        Err(ToolError::Failed(
                            "the tool failed unexpectedly".to_string(),
                        ))
                    }
                    Ok(Ok(result)) => result,
                }
            }
        };
        let duration = started.elapsed();
        let empty = Map::new();
        let (content, is_error, outcome, extra) = match &result {
            Ok(output) => {
                let mut content = cap_tool_result(
                    output.content.clone(),
                    self.runtime.options.max_tool_result_chars,
                );
                // Untrusted tools wrap their output in markers; a cut must not drop the
                // closing one, or the rest of the context would read as external content.
                if output.untrusted && !content.ends_with(untrusted::END_MARKER) {
                    content.push('\n');
                    content.push_str(untrusted::END_MARKER);
                }
                (content, false, "ok", &output.metering)
            }
            Err(error) => (error.to_string(), true, error.outcome(), &empty),
        };
        if is_error {
            span.record("error.type", outcome);
        }
        self.runtime
            .metering
            .record_tool_call(&ToolCallRecord {
                user: &self.caller.slug,
                role: &self.caller.role_name,
                tool: name,
                input: &input,
                duration,
                outcome,
                extra,
                trigger: self.caller.trigger.label(),
            })
            .await;
        // A command whose requests through Porter were held asks for their approval.
        let mut content = content;
        if let Ok(output) = &result {
            content.push_str(
                &self
                    .runtime
                    .approvals()
                    .ask_porter(self.caller, self.config, name, &input, &output.metering)
                    .await,
            );
        }
        self.emit(TurnEvent::ToolCall {
            name: name.to_string(),
            outcome: outcome.to_string(),
            arguments: input,
            preview: content.chars().take(TOOL_PREVIEW_CHARS).collect(),
        });
        let (image, audio) = match result {
            Ok(output) => (output.image, output.audio),
            Err(_) => (None, None),
        };
        let image = image.map(|image| ContentBlock::Image {
            media_type: image.media_type,
            data: image.base64,
        });
        ToolReply {
            content,
            is_error,
            image,
            audio,
        }
    }
}

/// The request of a model call: the system prompt with the summary, and the history.
fn chat_request(
    model: &str,
    base_prompt: &str,
    summary: &str,
    history: &[StoredMessage],
    specs: &[ToolSpec],
    config: &BotConfig,
) -> ChatRequest {
    let system = if summary.is_empty() {
        base_prompt.to_string()
    } else {
        format!("{base_prompt}\n\n## Summary of the earlier conversation\n\n{summary}")
    };
    let messages = repair_tool_pairing(
        history
            .iter()
            .map(|stored| stored.message.clone())
            .collect(),
    );
    ChatRequest {
        model: model.to_string(),
        system,
        messages,
        tools: specs.to_vec(),
        max_tokens: config.model.max_output_tokens,
    }
}

/// What one tool call gives the model: the result text, whether the call failed, and
/// an image to look at (the `image` tool), sent after the results of the round.
pub(super) struct ToolReply {
    content: String,
    is_error: bool,
    image: Option<ContentBlock>,
    /// A voice note for the person (`tts`), sent with the turn's answer.
    audio: Option<saint_tools::ToolAudio>,
}

impl ToolReply {
    fn failed(content: String) -> Self {
        Self {
            content,
            is_error: true,
            image: None,
            audio: None,
        }
    }
}

/// How much of a tool's result a streaming client is shown.
const TOOL_PREVIEW_CHARS: usize = 600;

/// How the turn's first message is stored.
pub(super) enum Accepted {
    /// Stored by an earlier attempt as this id (a turn resumed after a restart).
    Already(i64),
    /// Store it and mark this inbox row accepted in the same transaction.
    Inbox(i64),
    /// Store it.
    Store,
}

/// What [`Runtime::turn`] runs.
pub(super) struct TurnInput<'a> {
    pub(super) caller: &'a Caller,
    pub(super) config: &'a Arc<BotConfig>,
    /// The message that starts the turn.
    pub(super) text: String,
    pub(super) accepted: Accepted,
    pub(super) destination: Destination<'a>,
    pub(super) note: Option<&'a str>,
    /// What the message's attachments show the model beyond their notes in `text`.
    pub(super) attached: Vec<ContentBlock>,
    /// Said to the person before the answer (a voice note that could not be heard).
    pub(super) told: Option<String>,
}

/// What every round of a turn's tool loop works with, settled before the first.
struct LoopSetup {
    model_name: String,
    /// The tools the caller may use, each with its permit.
    visible: Vec<PermittedTool>,
    /// The system prompt with the turn's note.
    base_prompt: String,
    specs: Vec<ToolSpec>,
    chain: Arc<ModelChain>,
    context: ToolContext,
}

/// A model call's request and its estimated prompt size, which the budget reserves.
struct NextRequest {
    request: ChatRequest,
    prompt_tokens: u64,
}

impl NextRequest {
    fn of(request: ChatRequest) -> Self {
        let prompt_tokens = compaction::estimate_tokens(&request);
        Self {
            request,
            prompt_tokens,
        }
    }
}

/// A tool call as the model asked for it.
struct ToolCall {
    id: String,
    name: String,
    input: serde_json::Value,
}

/// The results of one round's tool calls, and why the rest were not run, if the
/// caller's authority changed on the way.
struct ToolRound {
    results: Vec<ContentBlock>,
    stopped: Option<String>,
}

enum LoopEnd {
    Answer(String),
    OverBudget,
    IterationCap,
    /// Why the caller's authority changed.
    AuthorityChanged(String),
}

/// What a turn stopped by a change of authority answers.
fn authority_changed_reply(reason: &str) -> String {
    format!(
        "I stopped this work: {reason} while it ran, and what it was doing may no longer be \
         allowed. Ask again if you still need it."
    )
}

/// What [`Runtime::call_model`] came to.
enum Called {
    /// The model answered; the charge holds the call's place in the person's budget
    /// until its cost is stored.
    Answered(saint_llm::ChatResponse, Charge),
    /// The person's budget cannot take the call's worst case: it was not made.
    OverBudget,
}

/// A model call's cost and its reservation in the person's budget (none for a role
/// without a budget).
struct Charge {
    cost: f64,
    reservation: Option<Reservation>,
}

impl Charge {
    /// Settles the reservation to the cost, stored as spent at `spent_at`.
    fn settle(self, spent_at: jiff::Timestamp) {
        if let Some(reservation) = self.reservation {
            reservation.settle(self.cost, spent_at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_are_capped_with_a_note() {
        assert_eq!(cap_tool_result("short".into(), 10), "short");
        let capped = cap_tool_result("é".repeat(50), 10);
        assert!(capped.starts_with(&"é".repeat(10)));
        assert!(capped.ends_with("[truncated: showing 10 of 50 characters]"));
    }
}
