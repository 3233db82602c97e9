//! One model call of a turn through the failover chain: each attempt reserves its worst
//! case in the person's budget and is metered (the attempts counter at once, a
//! `usage.jsonl` line written with the turn's own); retryable failures are retried with jittered backoff until the chain's
//! deadline, a rate-limited key rests while the entry's other keys carry on, an entry
//! that refuses the request or its key cools down, and the next entry follows. A stream
//! cut after text reached the person resumes as a new request continuing that text, and
//! what the person was already sent is never sent again. A call that fails on every
//! entry, and the first answer after one, go to the chain's health report
//! ([`crate::runtime::ChainHealth`]).

use std::{
    borrow::Cow,
    time::{Duration, Instant},
};

use rand::Rng;
use saint_config::UnpricedModels;
use saint_llm::{
    CancellationToken, ChatRequest, ClientOptions, ContentBlock, LlmClient, LlmError, Message,
    StreamEvent,
};
use tokio::sync::mpsc::UnboundedSender;

use super::{Called, Charge, Turn};
use crate::{
    budget::{self, OverBudget, Reservation},
    metering::{self, ModelAttemptRecord},
    runtime::{
        ModelSetupError, TurnError, TurnEvent,
        model::{ChainEntry, ModelChain},
    },
};

/// What an attempt's failure means for the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Try this entry again after a backoff.
    Retry,
    /// Skip to the next entry; this one refused the request or its key and cools down.
    CoolDown,
    /// Skip to the next entry.
    Skip,
}

/// The label of an attempt's outcome in `usage.jsonl` and `saint_llm_attempts_total`.
fn outcome_label(error: &LlmError, after_output: bool) -> &'static str {
    if after_output && error.is_retryable() {
        return "cut";
    }
    match error {
        LlmError::Status { status: 429, .. } => "rate_limited",
        LlmError::Status {
            status: 503 | 529, ..
        } => "overloaded",
        LlmError::Status {
            status: 401 | 403, ..
        } => "unauthorized",
        LlmError::Status { status: 408, .. } | LlmError::Timeout(_) => "timeout",
        LlmError::Status { status, .. } if *status >= 500 || *status == 409 => "server_error",
        LlmError::Status { .. } => "invalid_request",
        LlmError::Transport { .. } => "unreachable",
        LlmError::Incomplete => "cut",
        LlmError::Cancelled => "cancelled",
        LlmError::Provider {
            retryable: true, ..
        } => "overloaded",
        LlmError::Provider { .. } => "provider_error",
        LlmError::Protocol(_) => "protocol_error",
        LlmError::Client(_) => "client_error",
    }
}

fn next_step(error: &LlmError) -> Step {
    match error {
        _ if error.is_retryable() => Step::Retry,
        // 400, 401, 403, 404…: this entry will refuse the next call the same way.
        LlmError::Status { .. } => Step::CoolDown,
        _ => Step::Skip,
    }
}

/// The delay before retry `retry` (1 for the first): exponential from the client's
/// minimum to its ceiling, with jitter over its upper half so callers spread out.
fn backoff(options: &ClientOptions, retry: usize) -> Duration {
    let exponent = retry.saturating_sub(1).min(20) as u32;
    let base = options
        .min_backoff
        .saturating_mul(1 << exponent)
        .min(options.max_backoff);
    let half = base / 2;
    half + half.mul_f64(rand::thread_rng().gen_range(0.0..=1.0))
}

/// The text of one model call the person has been sent, across its attempts.
#[derive(Debug, Default)]
pub(super) struct Shown {
    /// Everything sent to the person so far.
    text: String,
    /// The length of `text` when the current attempt began.
    prior: usize,
    /// What the current attempt streamed.
    raw: String,
    mode: Mode,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Mode {
    /// Everything streamed is new: pass it on.
    #[default]
    Continuing,
    /// A resumed attempt whose text so far could still be a repeat of what was sent.
    Matching,
    /// A resumed attempt that started the answer over: only what goes beyond is new.
    Restarted,
}

impl Shown {
    /// A new attempt begins (resuming when text was already sent).
    pub(super) fn begin_attempt(&mut self) {
        self.prior = self.text.len();
        self.raw.clear();
        self.mode = if self.text.is_empty() {
            Mode::Continuing
        } else {
            Mode::Matching
        };
    }

    /// The attempt streamed `delta`: what of it is new to the person, if anything.
    pub(super) fn push(&mut self, delta: &str) -> Option<String> {
        self.raw.push_str(delta);
        let new = match self.mode {
            Mode::Continuing | Mode::Restarted => {
                self.text.push_str(delta);
                delta.to_string()
            }
            Mode::Matching => {
                let prior = &self.text[..self.prior];
                if prior.starts_with(self.raw.as_str()) {
                    // Still a repeat of what was sent, or the start of one: hold it.
                    return None;
                }
                if self.raw.starts_with(prior) {
                    self.mode = Mode::Restarted;
                    let beyond = self.raw[prior.len()..].to_string();
                    self.text = self.raw.clone();
                    beyond
                } else {
                    // A continuation: the prefill was sent without trailing whitespace,
                    // so the continuation may bring its own.
                    self.mode = Mode::Continuing;
                    let continuation = if self.text.ends_with(char::is_whitespace) {
                        self.raw.trim_start().to_string()
                    } else {
                        self.raw.clone()
                    };
                    self.text.push_str(&continuation);
                    continuation
                }
            }
        };
        (!new.is_empty()).then_some(new)
    }

    /// Whether the current attempt resumes text already sent.
    pub(super) fn resuming(&self) -> bool {
        self.prior > 0
    }

    /// Everything the person was sent.
    pub(super) fn text(&self) -> &str {
        &self.text
    }

    /// The assistant text a resumed request continues from (providers refuse a
    /// prefill ending in whitespace).
    fn prefill(&self) -> &str {
        self.text.trim_end()
    }
}

/// `message` with its text replaced by `text` (tool calls kept after it).
fn with_text(mut message: Message, text: &str) -> Message {
    message
        .content
        .retain(|block| !matches!(block, ContentBlock::Text { .. }));
    if !text.is_empty() {
        message.content.insert(
            0,
            ContentBlock::Text {
                text: text.to_string(),
            },
        );
    }
    message
}

/// An attempt's place in the person's budget.
enum Place {
    /// Held (`None`: the role has no budget).
    Held(Option<Reservation>),
    /// The budget cannot take the attempt's worst case.
    OverBudget,
}

/// One model call as every attempt makes it.
struct CallRequest<'r> {
    /// The primary's request; fallbacks call their own model with it.
    request: &'r ChatRequest,
    prompt_tokens: u64,
    cancel: &'r CancellationToken,
    /// Whether text deltas are sent to the client as they arrive.
    stream_text: bool,
}

/// What one model call carries from attempt to attempt, across the chain's entries.
struct ChainRun {
    deadline: Instant,
    shown: Shown,
    /// Attempts so far, over every entry.
    attempt: u32,
    last_error: Option<LlmError>,
    /// The endpoint of the last attempt, for the person told about trouble.
    last_address: String,
}

impl ChainRun {
    fn start(chain: &ModelChain) -> Self {
        let started = Instant::now();
        Self {
            deadline: started + Duration::from_secs(chain.failover.deadline_seconds),
            shown: Shown::default(),
            attempt: 0,
            last_error: None,
            last_address: String::new(),
        }
    }
}

/// How one entry of the chain ended.
enum EntryEnd {
    /// The call is over: answered, or refused by the budget.
    Called(Called),
    /// The entry gave up with this outcome label; the next entry follows.
    Failed(&'static str),
}

/// An attempt's result, and whether it produced any output before it ended.
struct Attempted {
    result: Result<saint_llm::ChatResponse, LlmError>,
    emitted: bool,
}

/// The request of one attempt: the entry's model, and when an earlier attempt was cut
/// after text reached the person, that text to continue from. The common case borrows
/// the request: a healthy primary costs no copy.
fn attempt_request<'r>(
    request: &'r ChatRequest,
    model: &str,
    shown: &Shown,
) -> Cow<'r, ChatRequest> {
    if model == request.model && !shown.resuming() {
        return Cow::Borrowed(request);
    }
    let mut owned = request.clone();
    owned.model = model.to_string();
    if shown.resuming() {
        owned
            .messages
            .push(Message::assistant_text(shown.prefill()));
    }
    Cow::Owned(owned)
}

/// Makes one attempt, sending the client only text the person has not been sent yet.
async fn stream_attempt(
    client: &LlmClient,
    request: &ChatRequest,
    events: Option<&UnboundedSender<TurnEvent>>,
    shown: &mut Shown,
    call: &CallRequest<'_>,
) -> Attempted {
    let stream_text = call.stream_text;
    let mut emitted = false;
    let result = {
        let emitted = &mut emitted;
        let mut on_event = move |event: StreamEvent| {
            *emitted = true;
            if let StreamEvent::TextDelta(text) = event
                && let Some(new) = shown.push(&text)
                && stream_text
                && let Some(events) = events
            {
                let _ = events.send(TurnEvent::TextDelta(new));
            }
        };
        client
            .complete_once(request, call.cancel, &mut on_event)
            .await
    };
    Attempted { result, emitted }
}

/// A resumed call's answer carries the whole text the person was sent, not only the
/// last attempt's continuation.
fn with_shown_text(response: saint_llm::ChatResponse, shown: &Shown) -> saint_llm::ChatResponse {
    if shown.resuming() {
        saint_llm::ChatResponse {
            message: with_text(response.message, shown.text()),
            ..response
        }
    } else {
        response
    }
}

impl Turn<'_> {
    /// Calls the model for `state`'s caller through the failover chain (see the module
    /// docs). `request.model` is the primary's model (the role's override); fallbacks
    /// call their own. Each attempt first refuses a model `model.prices` does not price
    /// (unless `budget.unpricedModels: allow`) and reserves its worst case —
    /// `prompt_tokens` at the input price plus `max_tokens` at the output price; a
    /// failed attempt releases its reservation. The answer comes with its [`Charge`],
    /// which the caller settles once the cost is stored.
    pub(super) async fn call_model(
        &mut self,
        chain: &ModelChain,
        request: &ChatRequest,
        prompt_tokens: u64,
        cancel: &CancellationToken,
        stream_text: bool,
    ) -> Result<Called, TurnError> {
        let (started, in_attempts) = (Instant::now(), self.model_time);
        let called = self
            .call_chain(chain, request, prompt_tokens, cancel, stream_text)
            .await;
        let attempts = self.model_time.saturating_sub(in_attempts);
        self.failover_time += started.elapsed().saturating_sub(attempts);
        called
    }

    async fn call_chain(
        &mut self,
        chain: &ModelChain,
        request: &ChatRequest,
        prompt_tokens: u64,
        cancel: &CancellationToken,
        stream_text: bool,
    ) -> Result<Called, TurnError> {
        let call = CallRequest {
            request,
            prompt_tokens,
            cancel,
            stream_text,
        };
        let mut run = ChainRun::start(chain);
        self.model_calls += 1;
        // Each entry left, its model and how its last attempt ended: for the chain's
        // health report when every entry fails (no allocation while one answers).
        let mut failed: Vec<(String, String, &'static str)> = Vec::new();
        for index in chain.order() {
            let entry = &chain.entries[index];
            let model = if index == 0 {
                request.model.as_str()
            } else {
                entry.model.as_str()
            };
            match self.try_entry(chain, entry, model, &call, &mut run).await? {
                EntryEnd::Called(called) => return Ok(called),
                EntryEnd::Failed(outcome) => {
                    failed.push((entry.label.clone(), model.to_string(), outcome));
                }
            }
        }
        let error = run.last_error.unwrap_or(LlmError::Incomplete);
        tracing::error!(attempts = run.attempt, %error, "every model of the failover chain failed");
        self.runtime.chain_health.whole_chain_failed(&failed);
        self.emit(TurnEvent::ModelTrouble {
            address: run.last_address,
            error: error.to_string(),
            retry_in: None,
        });
        Err(error.into())
    }

    /// Attempts one entry of the chain, its keys in turn, until it answers, gives up, or
    /// the next attempt would start past the chain's deadline.
    async fn try_entry(
        &mut self,
        chain: &ModelChain,
        entry: &ChainEntry,
        model: &str,
        call: &CallRequest<'_>,
        run: &mut ChainRun,
    ) -> Result<EntryEnd, TurnError> {
        let mut retries = 0;
        // Left before any attempt: every key rests past the deadline.
        let mut outcome = "rate_limited";
        loop {
            let (key, rest) = entry.pick_key(chain.now());
            let client = entry.client(key);
            run.last_address = client.endpoint().url();
            if !rest.is_zero() {
                // Every key of this entry rests after a rate limit.
                if Instant::now() + rest > run.deadline {
                    break;
                }
                self.pause(
                    &run.last_address,
                    run.last_error.as_ref(),
                    rest,
                    call.cancel,
                )
                .await?;
            }
            run.attempt += 1;
            let reservation = match self
                .reserve_attempt(model, call.prompt_tokens, call.request.max_tokens)
                .await?
            {
                Place::Held(reservation) => reservation,
                Place::OverBudget => return Ok(EntryEnd::Called(Called::OverBudget)),
            };
            run.shown.begin_attempt();
            let attempt_request = attempt_request(call.request, model, &run.shown);
            let attempt_started = Instant::now();
            let attempted =
                stream_attempt(client, &attempt_request, self.events, &mut run.shown, call).await;
            let duration = attempt_started.elapsed();
            self.model_time += duration;
            let error = match attempted.result {
                Ok(response) => {
                    self.entry_answered(entry, model);
                    let response = with_shown_text(response, &run.shown);
                    return Ok(EntryEnd::Called(self.answered(
                        model,
                        &entry.label,
                        run.attempt,
                        duration,
                        response,
                        reservation,
                    )));
                }
                Err(error) => error,
            };
            // A failed attempt releases its reservation.
            drop(reservation);
            let label = outcome_label(&error, attempted.emitted);
            outcome = label;
            self.record_attempt(
                model,
                &entry.label,
                run.attempt,
                label,
                duration,
                Default::default(),
            );
            if matches!(error, LlmError::Cancelled) {
                return Err(error.into());
            }
            tracing::warn!(entry = %entry.label, model, attempt = run.attempt, outcome = label, %error, "model attempt failed");
            let delay = self.after_failure(chain, entry, key, &error, label, &mut retries);
            run.last_error = Some(error);
            let Some(delay) = delay else {
                break;
            };
            if Instant::now() + delay > run.deadline {
                break;
            }
            if !delay.is_zero() {
                self.pause(
                    &run.last_address,
                    run.last_error.as_ref(),
                    delay,
                    call.cancel,
                )
                .await?;
            }
        }
        Ok(EntryEnd::Failed(outcome))
    }

    /// An entry answered: it is healthy again, for the chain and its metrics.
    fn entry_answered(&self, entry: &ChainEntry, model: &str) {
        entry.answered();
        self.runtime.chain_health.answered(&entry.label, model);
        self.runtime
            .metering
            .metrics
            .llm_entry_health(&entry.label, &entry.model, true);
    }

    /// What a failed attempt means for its entry: cooled down, skipped, or retried after
    /// the returned delay (`None`: the entry gives up). A rate-limited key rests for what
    /// the server asked while the entry's other keys may go at once.
    fn after_failure(
        &self,
        chain: &ModelChain,
        entry: &ChainEntry,
        key: usize,
        error: &LlmError,
        label: &str,
        retries: &mut usize,
    ) -> Option<Duration> {
        let cool_down = Duration::from_secs(chain.failover.cool_down_seconds);
        let now = chain.now();
        let step = next_step(error);
        if step == Step::CoolDown {
            entry.cool_down(now + cool_down, format!("{label}: {error}"));
            self.runtime
                .metering
                .metrics
                .llm_entry_health(&entry.label, &entry.model, false);
        }
        if step != Step::Retry {
            return None;
        }
        *retries += 1;
        if *retries > chain.options.max_retries {
            return None;
        }
        let delay = if let LlmError::Status { status: 429, .. } = error {
            // The key rests for what the server asked; another key of the entry
            // may go at once (the next `pick_key` says how long to wait).
            let rest = error
                .retry_after()
                .unwrap_or_else(|| backoff(&chain.options, *retries))
                .min(chain.options.max_retry_after);
            entry.limited(key, now, now + rest);
            Duration::ZERO
        } else {
            let wait = backoff(&chain.options, *retries);
            error.retry_after().map_or(wait, |after| {
                after.min(chain.options.max_retry_after).max(wait)
            })
        };
        Some(delay)
    }

    /// Tells whoever waits that the next attempt follows in `delay`, then waits.
    async fn pause(
        &self,
        address: &str,
        error: Option<&LlmError>,
        delay: Duration,
        cancel: &CancellationToken,
    ) -> Result<(), TurnError> {
        self.emit(TurnEvent::ModelTrouble {
            address: address.to_string(),
            error: error.map_or_else(
                || "every key is rate limited".to_string(),
                ToString::to_string,
            ),
            retry_in: Some(delay),
        });
        tokio::select! {
            _ = cancel.cancelled() => Err(LlmError::Cancelled.into()),
            _ = tokio::time::sleep(delay) => Ok(()),
        }
    }

    /// Refuses an unpriced model (unless allowed) and reserves the attempt's worst case.
    async fn reserve_attempt(
        &self,
        model: &str,
        prompt_tokens: u64,
        max_tokens: u32,
    ) -> Result<Place, TurnError> {
        let price = match self.config.model.prices.get(model) {
            Some(price) => Some(price),
            None if self.config.budget.unpriced_models == UnpricedModels::Allow => None,
            None => return Err(ModelSetupError::Unpriced(model.to_string()).into()),
        };
        let Some(role_budget) = &self.caller.role.budget else {
            return Ok(Place::Held(None));
        };
        let worst_case = price.map_or(0.0, |price| {
            budget::worst_case_usd(price, prompt_tokens, max_tokens)
        });
        let reserved = self
            .runtime
            .budgets
            .reserve(
                &self.caller.slug,
                role_budget,
                worst_case,
                jiff::Timestamp::now(),
                |first, last| {
                    let slug = self.caller.slug.clone();
                    self.runtime
                        .blocking(move |store| store.spent_between(&slug, &first, &last))
                },
            )
            .await?;
        Ok(match reserved {
            Ok(reservation) => Place::Held(Some(reservation)),
            Err(OverBudget) => Place::OverBudget,
        })
    }

    /// Counts and meters the attempt that answered.
    #[allow(clippy::too_many_arguments)]
    fn answered(
        &mut self,
        model: &str,
        entry: &str,
        attempt: u32,
        duration: Duration,
        response: saint_llm::ChatResponse,
        mut reservation: Option<Reservation>,
    ) -> Called {
        self.usage = self.usage + response.usage;
        // An unpriced model gets here only when allowed: it counts as free.
        let cost = metering::cost_usd(&self.config.model, model, response.usage).unwrap_or(0.0);
        if let Some(reservation) = &mut reservation {
            reservation.set_cost(cost);
        }
        self.spent += cost;
        self.runtime.metering.metrics.model_call(
            metering::ModelCall {
                model,
                role: &self.caller.role_name,
                person: metering::person_label(self.caller.known, &self.caller.slug),
                trigger: self.caller.trigger.label(),
            },
            response.usage,
            cost,
            duration,
        );
        self.record_attempt(
            model,
            entry,
            attempt,
            "ok",
            duration,
            (response.usage, cost),
        );
        Called::Answered(response, Charge { cost, reservation })
    }

    /// Counts an attempt now; its `usage.jsonl` line is written with the turn's.
    #[allow(clippy::too_many_arguments)]
    fn record_attempt(
        &mut self,
        model: &str,
        entry: &str,
        attempt: u32,
        outcome: &str,
        duration: Duration,
        (usage, cost_usd): (saint_llm::Usage, f64),
    ) {
        self.runtime.metering.metrics.llm_attempt(model, outcome);
        let line = metering::attempt_line(
            &ModelAttemptRecord {
                user: &self.caller.slug,
                role: &self.caller.role_name,
                trigger: self.caller.trigger.label(),
                model,
                entry,
                attempt,
                outcome,
                duration,
                usage,
                cost_usd,
            },
            jiff::Timestamp::now(),
        );
        self.attempt_lines.push_str(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(shown: &mut Shown, deltas: &[&str]) -> String {
        shown.begin_attempt();
        deltas
            .iter()
            .filter_map(|delta| shown.push(delta))
            .collect()
    }

    #[test]
    fn a_continuation_after_a_cut_is_sent_once_without_doubled_space() {
        let mut shown = Shown::default();
        assert_eq!(
            stream(&mut shown, &["First ", "sentence. "]),
            "First sentence. "
        );
        assert_eq!(shown.prefill(), "First sentence.");
        assert_eq!(
            stream(&mut shown, &[" Second", " sentence."]),
            "Second sentence."
        );
        assert_eq!(shown.text(), "First sentence. Second sentence.");
    }

    #[test]
    fn an_answer_started_over_after_a_cut_sends_only_what_is_new() {
        let mut shown = Shown::default();
        assert_eq!(
            stream(&mut shown, &["First sentence. "]),
            "First sentence. "
        );
        assert_eq!(
            stream(&mut shown, &["First ", "sentence. Sec", "ond sentence."]),
            "Second sentence."
        );
        assert_eq!(shown.text(), "First sentence. Second sentence.");
    }

    #[test]
    fn classification_separates_retry_cool_down_and_cut() {
        let status = |status| LlmError::Status {
            status,
            retry_after: None,
            body: String::new(),
        };
        assert_eq!(next_step(&status(529)), Step::Retry);
        assert_eq!(next_step(&status(429)), Step::Retry);
        assert_eq!(next_step(&status(401)), Step::CoolDown);
        assert_eq!(next_step(&status(400)), Step::CoolDown);
        assert_eq!(next_step(&LlmError::Protocol("x".into())), Step::Skip);
        assert_eq!(outcome_label(&status(529), false), "overloaded");
        assert_eq!(outcome_label(&LlmError::Incomplete, true), "cut");
        assert_eq!(outcome_label(&status(403), false), "unauthorized");
    }

    #[test]
    fn backoff_grows_to_its_ceiling_with_jitter_below_it() {
        let options = ClientOptions {
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(400),
            ..ClientOptions::default()
        };
        for retry in 1..8 {
            let delay = backoff(&options, retry);
            let base = (100u64 << (retry - 1)).min(400);
            assert!(
                delay >= Duration::from_millis(base / 2) && delay <= Duration::from_millis(base),
                "retry {retry}: {delay:?}"
            );
        }
    }
}
