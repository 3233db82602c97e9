//! Benchmark: what keeping each conversation's replies in order costs on the send path.
//! The order is kept where the sender picks rows (`queue::due_outbound`: only each
//! conversation's oldest queued row), so this measures the database part of
//! message → reply — the reply queued (one durable commit), picked by the sender,
//! marked sent (another commit) — with the order ([`Order::PerConversation`]) and
//! without it ([`Order::Unordered`]), on the same durable database (WAL,
//! `synchronous = FULL`, as the agent opens it), in alternating rounds.
//!
//! Two shapes of conversation key, as the channels write them: replies in a chat (Matrix
//! rooms, Slack and Discord channels: `chat` set) and replies to a person (WhatsApp,
//! Telegram direct messages, e-mail: the recipient); each with an idle outbox and with
//! 1,000 rows of 200 conversations put off by a rate limit. Reports medians of one run.
//!
//! Run: `cargo bench -p saint-agent --bench outbox_order`.

use std::time::Instant;

use rusqlite::Connection;
use saint_channels::{
    OutboundBody, ReplyContext,
    queue::{self, Order},
};

const WARMUP: usize = 50;
const MEASURED: usize = 400;
const ROUNDS: usize = 4;
const BACKLOG_ROWS: usize = 1_000;
const BACKLOG_CONVERSATIONS: usize = 200;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

fn body(chat: Option<String>) -> OutboundBody {
    OutboundBody {
        text: "Here is the answer to your question.".to_string(),
        files: Vec::new(),
        context: ReplyContext {
            chat,
            reply_to: Some("$question".to_string()),
            ..ReplyContext::default()
        },
    }
}

fn database(directory: &std::path::Path, backlog: bool, in_chat: bool) -> Connection {
    let connection = saint_agent::session::open_durable(
        &directory.join("transcripts.sqlite3"),
        &[queue::SCHEMA],
    )
    .unwrap();
    if backlog {
        let later = queue::now_ms() + 3_600_000;
        for row in 0..BACKLOG_ROWS {
            let conversation = row % BACKLOG_CONVERSATIONS;
            let (recipient, chat) = key(conversation, in_chat);
            let id = queue::enqueue(&connection, "bench", &recipient, &body(chat), "reply", None)
                .unwrap();
            queue::retry_outbound(&connection, id, later, "429: rate limited").unwrap();
        }
    }
    connection
}

fn key(conversation: usize, in_chat: bool) -> (String, Option<String>) {
    if in_chat {
        (
            "matrix:@ana:acme.example".to_string(),
            Some(format!("!room-{conversation}:acme.example")),
        )
    } else {
        (format!("whatsapp:+38591{conversation:07}"), None)
    }
}

/// One reply through the outbox: queued, picked, sent; milliseconds.
fn one_reply(connection: &mut Connection, order: Order, serial: usize, in_chat: bool) -> f64 {
    let (recipient, chat) = key(BACKLOG_CONVERSATIONS + serial, in_chat);
    let started = Instant::now();
    let transaction = connection.transaction().unwrap();
    let id = queue::enqueue(
        &transaction,
        "bench",
        &recipient,
        &body(chat),
        "reply",
        None,
    )
    .unwrap();
    transaction.commit().unwrap();
    let due = queue::due_outbound_with(connection, "bench", queue::now_ms(), 32, order).unwrap();
    assert!(due.iter().any(|row| row.id == id), "the new reply is due");
    let transaction = connection.transaction().unwrap();
    queue::mark_sent(&transaction, id).unwrap();
    transaction.commit().unwrap();
    started.elapsed().as_secs_f64() * 1000.0
}

fn main() {
    println!(
        "| conversation key | outbox | in order (median ms) | unordered (median ms) | difference |"
    );
    println!("|---|---|---|---|---|");
    for in_chat in [true, false] {
        for backlog in [false, true] {
            let directory = tempfile::tempdir().unwrap();
            let mut connection = database(directory.path(), backlog, in_chat);
            let mut serial = 0;
            let mut samples = [Vec::new(), Vec::new()];
            for _ in 0..WARMUP {
                serial += 1;
                one_reply(&mut connection, Order::PerConversation, serial, in_chat);
            }
            for _ in 0..ROUNDS {
                for (index, order) in [Order::PerConversation, Order::Unordered]
                    .into_iter()
                    .enumerate()
                {
                    for _ in 0..MEASURED / ROUNDS {
                        serial += 1;
                        samples[index].push(one_reply(&mut connection, order, serial, in_chat));
                    }
                }
            }
            let [ordered, unordered] = samples.map(median);
            println!(
                "| {} | {} | {ordered:.3} | {unordered:.3} | {:+.1} % |",
                if in_chat {
                    "chat (Matrix, Slack, Discord)"
                } else {
                    "recipient (WhatsApp, Telegram, e-mail)"
                },
                if backlog {
                    format!("{BACKLOG_ROWS} rows of {BACKLOG_CONVERSATIONS} conversations put off")
                } else {
                    "idle".to_string()
                },
                (ordered / unordered - 1.0) * 100.0
            );
        }
    }
}
