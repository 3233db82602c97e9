//! Voice notes and audio files a person sent, as text for the model: each is checked
//! against `media.transcription`'s limits, its worst case reserved in the person's
//! budget at the model's `perAudioMinute` price, sent to the endpoint, charged and
//! metered. The transcript joins the person's message marked as a transcript (it is
//! their own words, with their authority, like their typed text); a file that was not
//! transcribed becomes a line saying why, and a failure is also told to the person
//! with the answer, so the message is never dropped silently.

use std::{path::Path, time::Instant};

use saint_config::{BotConfig, TranscriptionConfig};
use saint_llm::ContentBlock;
use saint_tools::Caller;
use tokio::io::AsyncReadExt;

use super::{InboundAttachment, Runtime, TurnError};
use crate::{
    metering::{self, MediaRecord},
    transcription::{self, Audio, TranscriptionError},
};

/// How much of a file tells whether it is audio.
const HEAD_BYTES: u64 = 64;

/// The service name of usage lines and metrics.
const SERVICE: &str = "transcription";

/// What the audio of a message adds: blocks for the model, and what the person is told
/// before the answer (empty when every file was transcribed).
#[derive(Default)]
pub(super) struct Heard {
    pub(super) blocks: Vec<ContentBlock>,
    pub(super) told: Vec<String>,
}

/// Transcribes the audio among `attachments`, in order; other files are left alone.
pub(super) async fn hear(
    runtime: &Runtime,
    config: &BotConfig,
    caller: &Caller,
    attachments: &[InboundAttachment],
) -> Result<Heard, TurnError> {
    let mut heard = Heard::default();
    for attachment in attachments {
        let path = runtime.workspace.join(&attachment.path);
        if !is_audio_file(&path).await {
            continue;
        }
        let shown = attachment.path.display().to_string();
        let Some(transcription) = &config.media.transcription else {
            heard.blocks.push(ContentBlock::Text {
                text: format!(
                    "\n[voice note {shown}: not transcribed, because transcription is not \
                     configured for this bot; you cannot hear it]"
                ),
            });
            continue;
        };
        match transcribe(runtime, config, transcription, caller, &path).await? {
            Ok((text, seconds)) => heard.blocks.push(ContentBlock::Text {
                // An empty transcript still says so, or the model would see nothing.
                text: format!(
                    "\n[voice note transcript, {shown}{}]\n{}\n[end of voice note transcript]",
                    seconds
                        .map(|seconds| format!(", {seconds:.0} s"))
                        .unwrap_or_default(),
                    if text.is_empty() {
                        "(no speech was heard)"
                    } else {
                        text.as_str()
                    }
                ),
            }),
            Err(error) => {
                heard.blocks.push(ContentBlock::Text {
                    text: format!(
                        "\n[voice note {shown}: not transcribed: {error}. The person is told \
                         so with your answer]"
                    ),
                });
                heard
                    .told
                    .push(format!("(I could not listen to your voice note: {error}.)"));
            }
        }
    }
    Ok(heard)
}

/// One file: read and checked, reserved, sent, charged, metered. The outer error is
/// the store's; the inner one why this file was not transcribed.
async fn transcribe(
    runtime: &Runtime,
    config: &BotConfig,
    transcription: &TranscriptionConfig,
    caller: &Caller,
    path: &Path,
) -> Result<Result<(String, Option<f64>), TranscriptionError>, TurnError> {
    let started = Instant::now();
    let price = config
        .model
        .prices
        .get(&transcription.model)
        .and_then(|price| price.per_audio_minute)
        .unwrap_or(0.0);
    let mut record = MediaRecord {
        service: SERVICE,
        user: &caller.slug,
        person: metering::person_label(caller.known, &caller.slug),
        role: &caller.role_name,
        trigger: caller.trigger.label(),
        model: &transcription.model,
        outcome: "ok",
        audio_seconds: 0.0,
        audio_bytes: 0,
        duration: std::time::Duration::ZERO,
        cost_usd: 0.0,
    };
    let audio = match Audio::read(path, transcription).await {
        Ok(audio) => audio,
        Err(error) => {
            record.outcome = error.outcome();
            record.duration = started.elapsed();
            runtime.metering.record_media(&record).await;
            return Ok(Err(error));
        }
    };
    // A length the container does not tell is reserved at the limit.
    let reserved_seconds = audio
        .seconds
        .unwrap_or(f64::from(transcription.max_seconds));
    let worst_case = reserved_seconds / 60.0 * price;
    let reservation = match (&caller.role.budget, worst_case > 0.0) {
        (Some(budget), true) => {
            let slug = caller.slug.clone();
            let reserved = runtime
                .budgets
                .reserve(
                    &slug,
                    budget,
                    worst_case,
                    jiff::Timestamp::now(),
                    |first, last| {
                        let slug = slug.clone();
                        runtime.blocking(move |store| store.spent_between(&slug, &first, &last))
                    },
                )
                .await?;
            match reserved {
                Ok(reservation) => Some(reservation),
                Err(_) => {
                    runtime.metering.metrics.budget_refusal(&caller.role_name);
                    record.outcome = TranscriptionError::OverBudget.outcome();
                    record.duration = started.elapsed();
                    runtime.metering.record_media(&record).await;
                    return Ok(Err(TranscriptionError::OverBudget));
                }
            }
        }
        _ => None,
    };
    let result = transcription::transcribe(transcription, runtime.model.env(), &audio).await;
    record.duration = started.elapsed();
    record.audio_bytes = audio.bytes.len() as u64;
    let transcript = match result {
        Ok(transcript) => transcript,
        Err(error) => {
            // A failed request costs nothing: dropping the reservation releases it.
            record.outcome = error.outcome();
            runtime.metering.record_media(&record).await;
            return Ok(Err(error));
        }
    };
    // The container's length, else the service's, else what was reserved.
    let seconds = audio
        .seconds
        .or(transcript
            .seconds
            .map(|seconds| seconds.min(reserved_seconds)))
        .unwrap_or(reserved_seconds);
    let cost = seconds / 60.0 * price;
    record.audio_seconds = seconds;
    record.cost_usd = cost;
    if cost > 0.0 {
        let spent_at = jiff::Timestamp::now();
        let (slug, day) = (caller.slug.clone(), metering::spend_day(spent_at));
        let mut reservation = reservation;
        if let Some(reservation) = reservation.as_mut() {
            reservation.set_cost(cost);
        }
        let stored = runtime
            .blocking(move |store| store.add_spend(&slug, &day, cost))
            .await;
        if let Some(reservation) = reservation {
            reservation.settle(cost, spent_at);
        }
        stored?;
    }
    runtime.metering.record_media(&record).await;
    Ok(Ok((transcript.text, Some(seconds))))
}

async fn is_audio_file(path: &Path) -> bool {
    let Ok(file) = tokio::fs::File::open(path).await else {
        return false;
    };
    let mut head = Vec::with_capacity(HEAD_BYTES as usize);
    if file.take(HEAD_BYTES).read_to_end(&mut head).await.is_err() {
        return false;
    }
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy())
        .unwrap_or_default();
    transcription::is_audio(&name, &head)
}
