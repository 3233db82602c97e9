//! What travels through the inbox and outbox: the channel-neutral shape of one inbound
//! message and of one reply. Stored as JSON in the queue, so field names are part of
//! the on-disk format.

use saint_config::{ChannelIdentity, ChannelKind};
use serde::{Deserialize, Serialize};

/// One message as a channel received it, normalised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboundMessage {
    /// Channel name (the config's `channels[].name`).
    pub channel: String,
    /// Channel kind.
    pub kind: ChannelKind,
    /// The platform's id for the message (`wamid.…`, a `Message-ID`); unique per channel.
    pub platform_id: String,
    /// The sender, parsed with the same rules the operator rendered the contacts with.
    pub sender: ChannelIdentity,
    /// Whether the platform authenticated the sender. An unauthenticated sender (an
    /// e-mail whose `From:` no DKIM or DMARC check vouches for) is served by the default
    /// role, whatever contact the identity names.
    pub sender_verified: bool,
    /// For a sender the platform did not authenticate, what the message does prove
    /// about where it came from: `dkim:<domain>` when a signature of another domain
    /// verified, `unsigned` when nothing did. Each (sender, origin) is its own session,
    /// so one forger never sees another's conversation, nor the real person's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unverified_origin: Option<String>,
    /// The sender's display name as the platform gave it (never used for identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Text of the message (caption for media).
    pub text: String,
    /// Files to fetch before the turn runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRef>,
    /// When the platform says it was sent (RFC 3339).
    pub sent_at: String,
    /// How a reply joins the conversation (e-mail: subject and references).
    #[serde(default)]
    pub context: ReplyContext,
    /// The group conversation it was said in; `None` for a direct message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Conversation>,
    /// A press of one of the bot's buttons, not something typed: its text is the answer
    /// the button stands for (`approve K7QX2P`, see [`crate::buttons`]). A press is a
    /// decision or nothing; it never starts a turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pressed: bool,
}

impl InboundMessage {
    /// The lane the message waits in: one per group conversation, else one per sender,
    /// on its channel. A lane's messages are answered one at a time, in order.
    pub fn lane(&self) -> String {
        match &self.conversation {
            Some(conversation) => format!("{}\u{0}group\u{0}{}", self.channel, conversation.id),
            None => format!("{}\u{0}{}", self.channel, self.sender),
        }
    }

    /// Why the message cannot be a turn, if it cannot: nothing to answer.
    pub fn unanswerable(&self) -> Option<&'static str> {
        (self.text.trim().is_empty() && self.attachments.is_empty())
            .then_some("empty message: no text and no attachment")
    }
}

/// A group conversation: a group chat, a channel (or a thread in it), a room. It is one
/// session whoever writes in it, and each message's turn runs with its sender's role.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    /// Stable key of the conversation on its channel: the platform's chat, channel or
    /// room id, with the thread appended where a thread is its own conversation
    /// (`C0123/1700000000.000100`).
    pub id: String,
    /// Its name as the platform shows it, if any (for people reading logs and lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// What a reply needs to join the conversation it answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplyContext {
    /// The platform id of the message this answers, for threading or quoting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Subject of the conversation (e-mail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Earlier message ids of the thread, oldest first (e-mail `References`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
    /// Where the reply is posted, when that is not simply the sender: a group chat,
    /// channel or room id, or the platform's id of a direct chat (a Slack `D…` channel,
    /// a Discord DM channel, a Matrix room). `None`: the transport reaches the
    /// recipient's identity directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    /// The thread the reply goes in (Slack `thread_ts`, a Matrix thread root event id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// The code of the approval request this message asks about: where the platform has
    /// buttons, the transport puts Approve and Reject under it (carrying only the code
    /// and the decision; the text still says how to answer by typing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The outbox row being sent, set by the sender (never stored): a transport whose
    /// sends are idempotent by key (Matrix transaction ids) keys on it, so a retry after
    /// a crash is one message and two identical messages are two.
    #[serde(skip)]
    pub outbox_id: Option<i64>,
}

/// A file that came with a message, by the platform's reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentRef {
    /// The platform's media id.
    pub id: String,
    /// `image`, `document`, `audio`, `video`, `sticker`.
    pub kind: String,
    /// MIME type as the platform declared it.
    pub mime_type: String,
    /// File name the sender gave, if any (untrusted: never used as a path as is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
}

impl AttachmentRef {
    /// An attachment whose kind is its MIME type's: `image`, `audio` or `video`, anything
    /// else a `document` (Discord and Slack name no kind of their own).
    pub fn of_mime_type(id: &str, mime_type: String, file_name: Option<String>) -> Self {
        let kind = match mime_type.split('/').next() {
            Some("image") => "image",
            Some("audio") => "audio",
            Some("video") => "video",
            _ => "document",
        };
        Self {
            id: id.to_string(),
            kind: kind.to_string(),
            mime_type,
            file_name,
        }
    }
}

/// One reply or message waiting in the outbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundBody {
    /// Markdown text as the model wrote it; the transport renders and splits it.
    pub text: String,
    /// Files sent after the text, each its own message (a voice note from `tts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<OutboundFile>,
    /// Where it goes in the conversation.
    #[serde(flatten)]
    pub context: ReplyContext,
}

/// A file a reply carries, by its place under the bot's workspace: the row stays small
/// and the file is read when it is sent (after a restart too).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundFile {
    /// Workspace-relative path.
    pub path: String,
    /// MIME type (`audio/ogg`).
    pub mime_type: String,
    /// How the platform should show it.
    pub kind: FileKind,
}

/// How a sent file is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FileKind {
    /// A voice note (Opus in Ogg): WhatsApp's and Telegram's voice messages.
    Voice,
    /// Any other audio file.
    Audio,
}

/// A file as a transport sends it: the bytes, read by the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePayload {
    /// The file's content.
    pub bytes: Vec<u8>,
    /// MIME type (`audio/ogg`).
    pub mime_type: String,
    /// How the platform should show it.
    pub kind: FileKind,
    /// The name it is shown under (`voice-note.ogg`).
    pub file_name: String,
}
