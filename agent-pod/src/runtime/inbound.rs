//! An incoming message: its sender resolved to a caller, an approver's answer decided
//! in code (never by the model), its attachments and voice notes read, then its turn.

use tokio::sync::mpsc::UnboundedSender;

use saint_llm::CancellationToken;

use super::{
    Delivery, Inbound, Runtime, TurnError, TurnEvent, TurnReply, attachments, group,
    turn::{self, Accepted, Destination, TurnInput},
    voice,
};
use crate::{approvals, identity};

/// Handles one inbound message end to end.
pub(super) async fn handle(
    runtime: &Runtime,
    inbound: Inbound,
    events: Option<UnboundedSender<TurnEvent>>,
    cancel: CancellationToken,
) -> Result<TurnReply, TurnError> {
    // Every message sees the newest valid config (a new Contact applies right away).
    let config = runtime.config.current();
    let conversation = inbound.delivery.as_ref().and_then(|delivery| {
        Some((
            delivery.channel.as_str(),
            delivery.conversation.as_ref()?.id.as_str(),
        ))
    });
    let caller = identity::caller_for_message(
        &config,
        &identity::MessageSender {
            identity: &inbound.sender,
            verified: inbound.sender_verified,
            unverified_origin: inbound.unverified_origin.as_deref(),
            conversation,
        },
    )?;
    // A contact's answer to an approval request is decided here, not by the model. A
    // pressed button is such an answer from whoever pressed it, or nothing: a press
    // never reaches the model, and a stranger's is refused (and audited) like any
    // other answer from someone the rule does not name.
    let decision = match approvals::parse_decision(&inbound.text) {
        Some((approve, code)) if caller.known || inbound.pressed => Some(
            runtime
                .approvals()
                .decide(&config, &caller, approve, &code)
                .await,
        ),
        None if inbound.pressed => {
            Some("Not done: that button does not answer a request.".to_string())
        }
        _ => None,
    };
    // A group conversation is one session whoever writes; the role stays the
    // sender's, and the stored message says who wrote it.
    let text = match conversation {
        Some(_) => group::attributed(&caller, &inbound.text),
        None => inbound.text,
    };
    let delivery = inbound.delivery;
    let destination = match &delivery {
        Some(delivery) => Destination::Reply(delivery),
        None => Destination::Caller,
    };
    let accepted = match &delivery {
        Some(Delivery {
            accepted_message_id: Some(id),
            ..
        }) => Accepted::Already(*id),
        Some(Delivery { inbox_id, .. }) => Accepted::Inbox(*inbox_id),
        None => Accepted::Store,
    };
    // A resumed turn's message is stored already, attachments and all.
    let mut attached = match (&accepted, &runtime.options.media) {
        (Accepted::Already(_), _) | (_, None) => Vec::new(),
        (_, Some(extractor)) => {
            let images = saint_tools::policy::tool_allowed(&caller.role, attachments::IMAGE_TOOL);
            attachments::blocks(extractor, &runtime.workspace, &inbound.attachments, images).await
        }
    };
    // Voice notes are heard whoever sent them: they are the person's own words.
    let told = match &accepted {
        Accepted::Already(_) => None,
        _ => {
            let heard = voice::hear(runtime, &config, &caller, &inbound.attachments).await?;
            attached.extend(heard.blocks);
            (!heard.told.is_empty()).then(|| heard.told.join("\n"))
        }
    };
    let input = TurnInput {
        caller: &caller,
        config: &config,
        text,
        accepted,
        destination,
        note: None,
        attached,
        told,
    };
    // An approver's answer is stored and answered without the model.
    if let Some(answer) = decision {
        return turn::answer_directly(runtime, input, answer, events.as_ref()).await;
    }
    let reply = turn::run(runtime, input, events.as_ref(), &cancel).await?;
    Ok(reply)
}
