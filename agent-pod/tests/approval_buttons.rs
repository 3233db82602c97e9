//! Approval buttons end to end, with the real agent binary and the scripted model: the
//! owner is asked with Approve and Reject buttons where the platform has them, and a
//! press is exactly a typed answer from the presser — the stored call runs once when
//! the approver presses Approve; a second press, a press by someone the rule does not
//! name (a manager, a stranger, the requester) and a forged button are refused or
//! dropped, audited, and never reach the model. Ivan (employee) asks; Ana (owner)
//! decides; Marko (manager) receives.

mod common;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::slack::{
    Posted, ScriptedSlack, block_actions, event_callback, message_event, signed_headers,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// An employee's messages need the owner's yes.
fn with_approvals(config: &mut Value) {
    config["roles"]["employee"]["approvals"] = json!([
        {"tools": ["message"], "approvers": {"roles": ["owner"]}, "timeoutSeconds": 600},
    ]);
}

/// The audit's events, in order, with who caused each.
fn audit(workspace: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(workspace.join("logs/approvals.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            (
                line["event"].as_str().unwrap().to_string(),
                line["by"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

mod slack {
    use super::*;

    const BOT_TOKEN: &str = "xoxb-1111-2222-buttons-test";
    const APP_TOKEN: &str = "xapp-1-A0SAINT-3333-buttons-test";
    const SIGNING_SECRET: &str = "buttons-signing-secret-0123456789";
    const IVAN: &str = "U024BK3";
    const ANA: &str = "U0ANA0001";
    const MARKO: &str = "U0MARKO01";
    const STRANGER: &str = "U0STRANGE";
    // The direct channels the scripted `conversations.open` names (D + the user id's
    // tail), where the bot writes first.
    const IVAN_DM: &str = "D024BK3";
    const ANA_DM: &str = "D0ANA0001";
    const MARKO_DM: &str = "D0MARKO01";
    const STRANGER_DM: &str = "D0STRANGE";

    struct Bot {
        llm: ScriptedLlm,
        slack: ScriptedSlack,
        _directory: tempfile::TempDir,
        workspace: PathBuf,
        agent: AgentProcess,
        /// Events API mode (signed webhook requests) rather than Socket Mode.
        events: bool,
    }

    impl Bot {
        async fn start() -> Self {
            Self::start_in(false).await
        }

        async fn start_in(events: bool) -> Self {
            let llm = ScriptedLlm::start().await.unwrap();
            let slack = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
            let directory = tempfile::tempdir().unwrap();
            let workspace = directory.path().join("workspace");
            std::fs::create_dir_all(&workspace).unwrap();
            seed_workspace(&workspace);
            let config_path = directory.path().join("bot-config.json");
            let mut config = test_config(&llm.base_url());
            let slack_channel = if events {
                json!({"name": "slack", "kind": "slack",
                 "settings": {"apiBaseUrl": slack.api_url(), "mode": "events"},
                 "secretEnv": {"botToken": "SLACK_BOT_TOKEN", "signingSecret": "SLACK_SIGNING_SECRET"}})
            } else {
                json!({"name": "slack", "kind": "slack",
                 "settings": {"apiBaseUrl": slack.api_url()},
                 "secretEnv": {"botToken": "SLACK_BOT_TOKEN", "appToken": "SLACK_APP_TOKEN"}})
            };
            config["channels"] = json!([
                {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
                slack_channel,
            ]);
            add_identity(&mut config, "ana", &format!("slack:{ANA}"));
            add_identity(&mut config, "marko", &format!("slack:{MARKO}"));
            with_approvals(&mut config);
            write_config(&config_path, &config);
            let agent = spawn_agent(
                &config_path,
                &workspace,
                &[
                    ("SLACK_BOT_TOKEN", BOT_TOKEN),
                    ("SLACK_APP_TOKEN", APP_TOKEN),
                    ("SLACK_SIGNING_SECRET", SIGNING_SECRET),
                ],
            );
            assert!(
                events || slack.wait_for_connections(1, WAIT).await,
                "the agent never opened a socket; slack saw {:#?}",
                slack.requests()
            );
            Self {
                llm,
                slack,
                _directory: directory,
                workspace,
                agent,
                events,
            }
        }

        /// Posts `body` to the Slack webhook as `content_type`, signed now with
        /// `secret`; returns the status.
        async fn post_signed(&self, body: String, content_type: &str, secret: &str) -> u16 {
            let mut headers =
                signed_headers(secret, jiff::Timestamp::now().as_second(), body.as_bytes());
            headers.insert("content-type", content_type.parse().unwrap());
            reqwest::Client::new()
                .post(format!("{}/channels/slack/webhook", self.agent.http))
                .headers(headers)
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }

        /// Delivers `event` as the channel's mode takes it: on the socket, or as a
        /// signed Events API request.
        async fn deliver_event(&self, event: Value) {
            if self.events {
                let body = event_callback(event).to_string();
                let status = self
                    .post_signed(body, "application/json", SIGNING_SECRET)
                    .await;
                assert_eq!(status, 200);
            } else {
                self.slack.push_event(event);
            }
        }

        /// `user` presses `action_id` (carrying `value`) under the posted message `ts`,
        /// as the Interactivity request URL receives it: a form with the JSON payload,
        /// signed with `secret`; returns the status.
        async fn press_by_form(
            &self,
            ts: &str,
            user: &str,
            action_id: &str,
            value: &str,
            secret: &str,
        ) -> u16 {
            let payload = block_actions(ANA_DM, ts, user, action_id, value).to_string();
            let body = reqwest::Url::parse_with_params("http://form/", [("payload", payload)])
                .unwrap()
                .query()
                .unwrap()
                .to_string();
            self.post_signed(body, "application/x-www-form-urlencoded", secret)
                .await
        }

        fn posted_in(&self, channel: &str) -> Vec<Posted> {
            self.slack
                .posted()
                .into_iter()
                .filter(|posted| posted.channel == channel)
                .collect()
        }

        /// Waits (polling the recorder, bounded) until `channel` got `count` messages.
        async fn wait_for_posted_in(&self, channel: &str, count: usize) -> Vec<Posted> {
            let deadline = Instant::now() + WAIT;
            loop {
                let posted = self.posted_in(channel);
                if posted.len() >= count {
                    return posted;
                }
                assert!(
                    Instant::now() < deadline,
                    "{channel} never got message {count}; all posts: {:#?}",
                    self.slack.posted()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        async fn wait_for_ack(&self, envelope: &str) {
            assert!(
                self.slack.wait_for_ack(envelope, WAIT).await,
                "envelope {envelope} was never acknowledged"
            );
        }

        /// Ivan asks the bot to tell Marko `text`; returns the request Ana was sent with
        /// its code.
        async fn ivan_asks(&self, text: &str, ana_before: usize) -> (Posted, String) {
            self.llm.push(Reply::tool_call(
                "message",
                json!({"to": "marko", "text": text}),
            ));
            self.llm.push(Reply::text("I asked for approval."));
            self.deliver_event(message_event(
                IVAN_DM,
                "im",
                IVAN,
                &format!("1700000{ana_before:03}.000100"),
                "please tell Marko",
            ))
            .await;
            let ask = self.wait_for_posted_in(ANA_DM, ana_before + 1).await[ana_before].clone();
            let code = ask
                .text
                .split("approve ")
                .nth(1)
                .and_then(|rest| rest.get(..6))
                .unwrap_or_else(|| panic!("no code in {ask:?}"))
                .to_string();
            (ask, code)
        }

        /// `user` presses a button of their own making in their direct channel (a forged
        /// or copied press: Slack vouches for the presser, not for the value).
        fn press_as(&self, user: &str, channel: &str, action_id: &str, value: &str) -> String {
            self.slack.push_payload(
                "interactive",
                block_actions(channel, "1700009000.000001", user, action_id, value),
            )
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_approves_with_a_button_and_the_stored_message_runs_once() {
        let bot = Bot::start().await;
        let (ask, code) = bot.ivan_asks("The build is green.", 0).await;
        // The request shows the arguments and the code, with two buttons carrying the
        // code and the decision only.
        assert!(
            ask.text.contains("Ivan (employee) asks to use message"),
            "{ask:?}"
        );
        assert!(ask.text.contains("The build is green."), "{ask:?}");
        assert!(ask.text.contains(&format!("approve {code}")), "{ask:?}");
        assert_eq!(
            ask.buttons(),
            [
                (
                    "approval.approve".to_string(),
                    "Approve".to_string(),
                    format!("approve:{code}")
                ),
                (
                    "approval.reject".to_string(),
                    "Reject".to_string(),
                    format!("reject:{code}")
                ),
            ]
        );
        // Ivan's own answer ("I asked for approval.") has no buttons.
        let to_ivan = bot.wait_for_posted_in(IVAN_DM, 1).await;
        assert_eq!(to_ivan[0].blocks, None);
        assert!(bot.posted_in(MARKO_DM).is_empty());

        // Presses by anyone the rule does not name are refused: a manager, a stranger,
        // and Ivan himself.
        for (user, channel, refusal) in [
            (
                MARKO,
                MARKO_DM,
                format!("Not done: you may not decide request {code}."),
            ),
            (
                STRANGER,
                STRANGER_DM,
                format!("Not done: you may not decide request {code}."),
            ),
            (
                IVAN,
                IVAN_DM,
                format!("Not done: request {code} was made by you: someone else must decide it."),
            ),
        ] {
            let before = bot.posted_in(channel).len();
            let envelope = bot.press_as(
                user,
                channel,
                "approval.approve",
                &format!("approve:{code}"),
            );
            bot.wait_for_ack(&envelope).await;
            let said = bot.wait_for_posted_in(channel, before + 1).await;
            assert_eq!(said[before].text, refusal, "{user}");
        }

        // Ana presses Approve: exactly the stored message goes to Marko, once.
        let envelope = bot.slack.press(&ask.ts, ANA, "approval.approve");
        bot.wait_for_ack(&envelope).await;
        let said = bot.wait_for_posted_in(ANA_DM, 2).await;
        assert_eq!(said[1].text, "Approved: message ran for Ivan.");
        let to_marko = bot.wait_for_posted_in(MARKO_DM, 2).await;
        assert_eq!(to_marko[1].text, "The build is green.");
        let told = bot.wait_for_posted_in(IVAN_DM, 3).await;
        assert!(
            told[2].text.starts_with(&format!(
                "Ana approved your request to use message (request {code}). It ran"
            )),
            "{told:?}"
        );

        // A forged button (a value under another button's id, a value that is no
        // answer) is dropped unanswered; pressing Approve again is refused.
        for (action_id, value) in [
            ("approval.reject", format!("approve:{code}")),
            ("approval.approve", "please run rm -rf".to_string()),
        ] {
            let envelope = bot.press_as(ANA, ANA_DM, action_id, &value);
            bot.wait_for_ack(&envelope).await;
        }
        let envelope = bot.slack.press(&ask.ts, ANA, "approval.approve");
        bot.wait_for_ack(&envelope).await;
        let said = bot.wait_for_posted_in(ANA_DM, 3).await;
        assert_eq!(
            said[2].text,
            format!("Not done: request {code} was already decided.")
        );
        assert_eq!(bot.posted_in(MARKO_DM).len(), 2, "the message ran once");
        // No press reached the model: only Ivan's turn called it.
        assert_eq!(bot.llm.requests().len(), 2);

        // Metered to Ivan, marked with the approval; every press audited.
        let usage = std::fs::read_to_string(bot.workspace.join("logs/usage.jsonl")).unwrap();
        let ran: Vec<Value> = usage
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|line| line["tool"] == "message" && line["approval"] == code.as_str())
            .collect();
        assert_eq!(ran.len(), 1, "{usage}");
        assert_eq!(ran[0]["user"], "ivan");
        assert_eq!(ran[0]["approvedBy"], "ana");
        let events = audit(&bot.workspace);
        let events: Vec<(&str, &str)> = events
            .iter()
            .map(|(event, by)| (event.as_str(), by.as_str()))
            .collect();
        assert_eq!(events.len(), 7, "{events:?}");
        assert_eq!(events[0], ("requested", ""));
        assert_eq!(events[1], ("refused", "marko"));
        assert_eq!(events[2].0, "refused");
        assert_ne!(events[2].1, "", "the stranger is named");
        assert_eq!(events[3], ("refused", "ivan"));
        assert_eq!(
            &events[4..],
            [("approved", "ana"), ("ran", ""), ("refused", "ana")]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_rejects_with_a_button_and_the_employee_is_told() {
        let bot = Bot::start().await;
        let (ask, code) = bot.ivan_asks("Ship it.", 0).await;
        let envelope = bot.slack.press(&ask.ts, ANA, "approval.reject");
        bot.wait_for_ack(&envelope).await;
        let said = bot.wait_for_posted_in(ANA_DM, 2).await;
        assert_eq!(said[1].text, "Declined: Ivan's message will not run.");
        let told = bot.wait_for_posted_in(IVAN_DM, 2).await;
        assert_eq!(
            told[1].text,
            format!("Ana declined your request to use message (request {code}); it was not run.")
        );
        // Approve after Reject is a second answer.
        let envelope = bot.slack.press(&ask.ts, ANA, "approval.approve");
        bot.wait_for_ack(&envelope).await;
        let said = bot.wait_for_posted_in(ANA_DM, 3).await;
        assert_eq!(
            said[2].text,
            format!("Not done: request {code} was already decided.")
        );
        assert!(
            bot.posted_in(MARKO_DM).is_empty(),
            "nothing was sent to Marko"
        );
        assert_eq!(bot.llm.requests().len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_events_mode_a_press_comes_to_the_webhook_as_a_signed_form() {
        let bot = Bot::start_in(true).await;
        let (ask, code) = bot.ivan_asks("The build is green.", 0).await;
        assert_eq!(ask.buttons().len(), 2);
        let approve = format!("approve:{code}");
        // A form not signed with the app's secret is refused and changes nothing.
        let forged = bot
            .press_by_form(&ask.ts, ANA, "approval.approve", &approve, "not-the-secret")
            .await;
        assert_eq!(forged, 401);
        let status = bot
            .press_by_form(&ask.ts, ANA, "approval.approve", &approve, SIGNING_SECRET)
            .await;
        assert_eq!(status, 200);
        let said = bot.wait_for_posted_in(ANA_DM, 2).await;
        assert_eq!(said[1].text, "Approved: message ran for Ivan.");
        let to_marko = bot.wait_for_posted_in(MARKO_DM, 1).await;
        assert_eq!(to_marko[0].text, "The build is green.");
        let events = audit(&bot.workspace);
        assert_eq!(events[1], ("approved".to_string(), "ana".to_string()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn approving_a_request_whose_stored_arguments_were_altered_is_refused() {
        let bot = Bot::start().await;
        let (ask, code) = bot.ivan_asks("The build is green.", 0).await;
        // Someone with the disk rewrites the stored call after Ana was asked.
        let database =
            rusqlite::Connection::open(bot.workspace.join("sessions/approvals.sqlite3")).unwrap();
        let changed = database
            .execute(
                "UPDATE approvals SET input = ?1 WHERE code = ?2",
                rusqlite::params![
                    json!({"to": "marko", "text": "Wire the money."}).to_string(),
                    code
                ],
            )
            .unwrap();
        assert_eq!(changed, 1);
        let envelope = bot.slack.press(&ask.ts, ANA, "approval.approve");
        bot.wait_for_ack(&envelope).await;
        let said = bot.wait_for_posted_in(ANA_DM, 2).await;
        assert_eq!(
            said[1].text,
            format!("Not done: the arguments of request {code} changed after it was made.")
        );
        assert!(bot.posted_in(MARKO_DM).is_empty(), "nothing was sent");
        let events = audit(&bot.workspace);
        assert_eq!(events[1], ("refused".to_string(), "ana".to_string()));
    }
}

mod telegram {
    use saint_scripted::telegram::{self as scripted, Person, ScriptedTelegram};

    use super::*;

    const BOT_TOKEN: &str = "7700000003:AAF-approval-buttons-test";
    const ANA: &str = "111111111";
    const MARKO: &str = "222222222";

    fn person(id: &str, name: &str) -> Person {
        Person::new(id.parse().unwrap(), name)
    }

    struct Bot {
        llm: ScriptedLlm,
        telegram: ScriptedTelegram,
        _directory: tempfile::TempDir,
        workspace: PathBuf,
        _agent: AgentProcess,
    }

    impl Bot {
        async fn start() -> Self {
            let llm = ScriptedLlm::start().await.unwrap();
            let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
            let directory = tempfile::tempdir().unwrap();
            let workspace = directory.path().join("workspace");
            std::fs::create_dir_all(&workspace).unwrap();
            seed_workspace(&workspace);
            let config_path = directory.path().join("bot-config.json");
            let mut config = test_config(&llm.base_url());
            config["channels"] = json!([
                {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
                {"name": "telegram", "kind": "telegram",
                 "settings": {"apiBaseUrl": telegram.base_url()},
                 "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
            ]);
            add_identity(&mut config, "ana", &format!("telegram:{ANA}"));
            with_approvals(&mut config);
            write_config(&config_path, &config);
            let agent = spawn_agent(&config_path, &workspace, &[("TG_BOT_TOKEN", BOT_TOKEN)]);
            Self {
                llm,
                telegram,
                _directory: directory,
                workspace,
                _agent: agent,
            }
        }

        /// Messages sent to `chat`, as Telegram answered them.
        fn sent_to(&self, chat: &str) -> Vec<Value> {
            self.telegram
                .messages()
                .into_iter()
                .filter(|message| message["chat"]["id"].as_i64() == chat.parse().ok())
                .collect()
        }

        /// Waits (polling the recorder, bounded) until `chat` got `count` messages.
        async fn wait_for_sent_to(&self, chat: &str, count: usize) -> Vec<Value> {
            let deadline = Instant::now() + WAIT;
            loop {
                let sent = self.sent_to(chat);
                if sent.len() >= count {
                    return sent;
                }
                assert!(
                    Instant::now() < deadline,
                    "chat {chat} never got message {count}; all sent: {:#?}",
                    self.telegram.messages()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        /// Waits until the press `id` was acknowledged with `answerCallbackQuery`.
        async fn wait_for_answered(&self, id: &str) {
            let answered = self
                .telegram
                .wait_for_requests(WAIT, |requests| {
                    requests.iter().any(|request| {
                        request.method == "answerCallbackQuery"
                            && request.body["callback_query_id"] == id
                            && request.status == 200
                    })
                })
                .await;
            assert!(answered, "press {id} was never answered");
        }
    }

    fn text(message: &Value) -> &str {
        message["text"].as_str().unwrap_or_default()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_approves_with_an_inline_button_and_the_stored_message_runs_once() {
        let bot = Bot::start().await;
        let (ana, ivan, marko) = (
            person(ANA, "Ana"),
            person(IVAN_TELEGRAM, "Ivan"),
            person(MARKO, "Marko"),
        );
        bot.llm.push(Reply::tool_call(
            "message",
            json!({"to": "marko", "text": "The build is green."}),
        ));
        bot.llm.push(Reply::text("I asked for approval."));
        bot.telegram
            .push_message(scripted::private_text(&ivan, "please tell Marko"));
        let ask = bot.wait_for_sent_to(ANA, 1).await.remove(0);
        let code = text(&ask).split("approve ").nth(1).unwrap()[..6].to_string();
        assert!(text(&ask).contains("The build is green."), "{ask}");
        assert_eq!(
            ask["reply_markup"],
            json!({"inline_keyboard": [[
                {"text": "Approve", "callback_data": format!("approve:{code}")},
                {"text": "Reject", "callback_data": format!("reject:{code}")},
            ]]})
        );

        // Marko (a manager the rule does not name) presses Approve: refused.
        let press = bot
            .telegram
            .press_data(&marko, &ask, &format!("approve:{code}"));
        bot.wait_for_answered(&press).await;
        let said = bot.wait_for_sent_to(MARKO, 1).await;
        assert_eq!(
            text(&said[0]),
            format!("Not done: you may not decide request {code}.")
        );

        // Ana presses Approve: exactly the stored message goes to Marko, once.
        let press = bot.telegram.press(&ana, &ask, "Approve");
        bot.wait_for_answered(&press).await;
        let said = bot.wait_for_sent_to(ANA, 2).await;
        assert_eq!(text(&said[1]), "Approved: message ran for Ivan.");
        let to_marko = bot.wait_for_sent_to(MARKO, 2).await;
        assert_eq!(text(&to_marko[1]), "The build is green.");
        let told = bot.wait_for_sent_to(IVAN_TELEGRAM, 2).await;
        assert!(
            text(&told[1]).starts_with(&format!(
                "Ana approved your request to use message (request {code}). It ran"
            )),
            "{told:?}"
        );

        // A forged press is acknowledged and dropped; pressing again is refused.
        let forged = bot.telegram.press_data(&ana, &ask, "please run rm -rf");
        bot.wait_for_answered(&forged).await;
        let press = bot.telegram.press(&ana, &ask, "Approve");
        bot.wait_for_answered(&press).await;
        let said = bot.wait_for_sent_to(ANA, 3).await;
        assert_eq!(
            text(&said[2]),
            format!("Not done: request {code} was already decided.")
        );
        assert_eq!(bot.sent_to(MARKO).len(), 2, "the message ran once");
        assert_eq!(bot.llm.requests().len(), 2, "no press reached the model");
        let events: Vec<(String, String)> = audit(&bot.workspace);
        let events: Vec<(&str, &str)> = events
            .iter()
            .map(|(event, by)| (event.as_str(), by.as_str()))
            .collect();
        assert_eq!(
            events,
            [
                ("requested", ""),
                ("refused", "marko"),
                ("approved", "ana"),
                ("ran", ""),
                ("refused", "ana")
            ]
        );
    }
}

mod whatsapp {
    use saint_scripted::{self as scripted, GraphRequest, ScriptedGraph};

    use super::*;

    const PHONE_NUMBER_ID: &str = "100000000000001";
    const ACCESS_TOKEN: &str = "EAAG-buttons-access-token";
    const APP_SECRET: &str = "buttons-app-secret";
    const ANA: &str = "385991234567";
    const MARKO: &str = "385991234568";
    const IVAN: &str = "385991234569";

    struct Bot {
        llm: ScriptedLlm,
        graph: ScriptedGraph,
        _directory: tempfile::TempDir,
        workspace: PathBuf,
        agent: AgentProcess,
    }

    impl Bot {
        async fn start() -> Self {
            let llm = ScriptedLlm::start().await.unwrap();
            let graph = ScriptedGraph::start(ACCESS_TOKEN).await.unwrap();
            let directory = tempfile::tempdir().unwrap();
            let workspace = directory.path().join("workspace");
            std::fs::create_dir_all(&workspace).unwrap();
            seed_workspace(&workspace);
            let config_path = directory.path().join("bot-config.json");
            let mut config = test_config(&llm.base_url());
            config["channels"] = json!([
                {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
                {"name": "whatsapp", "kind": "whatsapp",
                 "settings": {"phoneNumberId": PHONE_NUMBER_ID, "apiBaseUrl": graph.base_url()},
                 "secretEnv": {"accessToken": "WA_ACCESS_TOKEN", "appSecret": "WA_APP_SECRET",
                               "verifyToken": "WA_VERIFY_TOKEN"}},
            ]);
            add_identity(&mut config, "ivan", &format!("whatsapp:+{IVAN}"));
            with_approvals(&mut config);
            write_config(&config_path, &config);
            let agent = spawn_agent(
                &config_path,
                &workspace,
                &[
                    ("WA_ACCESS_TOKEN", ACCESS_TOKEN),
                    ("WA_APP_SECRET", APP_SECRET),
                    ("WA_VERIFY_TOKEN", "buttons-verify-token"),
                ],
            );
            Self {
                llm,
                graph,
                _directory: directory,
                workspace,
                agent,
            }
        }

        /// Posts `payload` to the webhook, signed as Meta signs it.
        async fn deliver(&self, payload: &Value) {
            let body = serde_json::to_vec(payload).unwrap();
            let status = reqwest::Client::new()
                .post(format!("{}/channels/whatsapp/webhook", self.agent.http))
                .header("content-type", "application/json")
                .header(
                    "x-hub-signature-256",
                    scripted::signature(APP_SECRET, &body),
                )
                .body(body)
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200);
        }

        /// Sends the platform accepted to `to`, in order.
        fn sent_to(&self, to: &str) -> Vec<GraphRequest> {
            self.graph
                .requests()
                .into_iter()
                .filter(|request| request.body["delivered"] == true && request.to() == Some(to))
                .collect()
        }

        async fn wait_for_sent_to(&self, to: &str, count: usize) -> Vec<GraphRequest> {
            let deadline = Instant::now() + WAIT;
            loop {
                let sent = self.sent_to(to);
                if sent.len() >= count {
                    return sent;
                }
                assert!(
                    Instant::now() < deadline,
                    "{to} never got message {count}; all requests: {:#?}",
                    self.graph.requests()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        /// `from` presses the reply button `id` of the bot's message `answered`.
        async fn press(&self, from: &str, press_id: &str, answered: &str, id: &str) {
            self.deliver(&scripted::button_reply_delivery(
                PHONE_NUMBER_ID,
                from,
                press_id,
                answered,
                id,
                "Approve",
            ))
            .await;
        }
    }

    fn text(request: &GraphRequest) -> String {
        request
            .sent_text()
            .or_else(|| request.interactive_text())
            .unwrap_or_default()
            .to_string()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_approves_with_a_reply_button_and_the_stored_message_runs_once() {
        let bot = Bot::start().await;
        // Marko writes first: the bot may write to him within the day.
        bot.llm.push(Reply::text("Hello Marko."));
        bot.deliver(&scripted::text_delivery(
            PHONE_NUMBER_ID,
            MARKO,
            "wamid.MARKO1",
            "hi",
        ))
        .await;
        bot.wait_for_sent_to(MARKO, 1).await;

        bot.llm.push(Reply::tool_call(
            "message",
            json!({"to": "marko", "text": "The build is green."}),
        ));
        bot.llm.push(Reply::text("I asked for approval."));
        bot.deliver(&scripted::text_delivery(
            PHONE_NUMBER_ID,
            IVAN,
            "wamid.IVAN1",
            "please tell Marko",
        ))
        .await;
        let ask = bot.wait_for_sent_to(ANA, 1).await.remove(0);
        let code = text(&ask).split("approve ").nth(1).unwrap()[..6].to_string();
        assert!(text(&ask).contains("The build is green."), "{ask:?}");
        assert_eq!(
            ask.reply_buttons(),
            [
                (format!("approve:{code}"), "Approve".to_string()),
                (format!("reject:{code}"), "Reject".to_string()),
            ]
        );
        let asked = ask.message_id().unwrap().to_string();

        // Marko (a manager the rule does not name) presses Approve: refused.
        bot.press(MARKO, "wamid.PRESS1", &asked, &format!("approve:{code}"))
            .await;
        let said = bot.wait_for_sent_to(MARKO, 2).await;
        assert_eq!(
            text(&said[1]),
            format!("Not done: you may not decide request {code}.")
        );

        // Ana presses Approve: exactly the stored message goes to Marko, once.
        bot.press(ANA, "wamid.PRESS2", &asked, &format!("approve:{code}"))
            .await;
        let said = bot.wait_for_sent_to(ANA, 2).await;
        assert_eq!(text(&said[1]), "Approved: message ran for Ivan.");
        let to_marko = bot.wait_for_sent_to(MARKO, 3).await;
        assert_eq!(text(&to_marko[2]), "The build is green.");

        // A forged button is dropped; pressing again is refused.
        bot.press(ANA, "wamid.PRESS3", &asked, "approve:K7QX2P;rm -rf")
            .await;
        bot.press(ANA, "wamid.PRESS4", &asked, &format!("approve:{code}"))
            .await;
        let said = bot.wait_for_sent_to(ANA, 3).await;
        assert_eq!(
            text(&said[2]),
            format!("Not done: request {code} was already decided.")
        );
        assert_eq!(bot.sent_to(MARKO).len(), 3, "the message ran once");
        assert_eq!(bot.llm.requests().len(), 3, "no press reached the model");
        let events: Vec<String> = audit(&bot.workspace)
            .into_iter()
            .map(|(event, by)| format!("{event} {by}"))
            .collect();
        assert_eq!(
            events,
            [
                "requested ",
                "refused marko",
                "approved ana",
                "ran ",
                "refused ana"
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_too_long_for_a_button_message_goes_as_text_then_a_short_one() {
        let bot = Bot::start().await;
        let long = format!("Release notes: {}", "all green. ".repeat(100));
        bot.llm.push(Reply::tool_call(
            "message",
            json!({"to": "marko", "text": long}),
        ));
        bot.llm.push(Reply::text("I asked for approval."));
        bot.deliver(&scripted::text_delivery(
            PHONE_NUMBER_ID,
            IVAN,
            "wamid.IVAN1",
            "please tell Marko",
        ))
        .await;
        let sent = bot.wait_for_sent_to(ANA, 2).await;
        let ask = sent[0].sent_text().expect("the request as text");
        assert!(ask.contains(long.trim_end()), "{ask}");
        let code = ask.split("approve ").nth(1).unwrap()[..6].to_string();
        assert_eq!(
            sent[1].interactive_text(),
            Some(format!("Request {code}: approve or reject?").as_str())
        );
        assert_eq!(
            sent[1].reply_buttons(),
            [
                (format!("approve:{code}"), "Approve".to_string()),
                (format!("reject:{code}"), "Reject".to_string()),
            ]
        );
    }
}

mod discord {
    use saint_scripted::discord::{Posted, ScriptedDiscord, direct_message};

    use super::*;

    const BOT_TOKEN: &str = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.G1a2b3.buttons-test-token";
    const ANA: &str = "80351110224678912";
    const IVAN: &str = "80351110224678913";
    const MARKO: &str = "80351110224678914";
    const IVAN_DM: &str = "1200000000000000002";
    // A DM channel Marko has with the bot, where he forges a press.
    const MARKO_DM: &str = "1200000000000000003";

    struct Bot {
        llm: ScriptedLlm,
        discord: ScriptedDiscord,
        _agent: AgentProcess,
        workspace: PathBuf,
        _directory: tempfile::TempDir,
    }

    impl Bot {
        async fn start() -> Self {
            let llm = ScriptedLlm::start().await.unwrap();
            let discord = ScriptedDiscord::start(BOT_TOKEN, Duration::from_millis(500))
                .await
                .unwrap();
            let directory = tempfile::tempdir().unwrap();
            let workspace = directory.path().join("workspace");
            std::fs::create_dir_all(&workspace).unwrap();
            seed_workspace(&workspace);
            let config_path = directory.path().join("bot-config.json");
            let mut config = test_config(&llm.base_url());
            config["channels"] = json!([
                {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
                {"name": "discord", "kind": "discord",
                 "settings": {"apiBaseUrl": discord.api_base_url()},
                 "secretEnv": {"botToken": "DISCORD_BOT_TOKEN"}},
            ]);
            // Ana is reached by her Discord user id (the fixture's handle reaches nobody).
            let ana = json!([format!("discord:{ANA}"), "email:ana@acme.example"]);
            for contact in config["contacts"].as_array_mut().unwrap() {
                if contact["slug"] == "ana" {
                    contact["identities"] = ana.clone();
                }
            }
            config["identityLinks"]["ana"] = ana;
            add_identity(&mut config, "ivan", &format!("discord:{IVAN}"));
            add_identity(&mut config, "marko", &format!("discord:{MARKO}"));
            with_approvals(&mut config);
            write_config(&config_path, &config);
            let agent = spawn_agent(
                &config_path,
                &workspace,
                &[("DISCORD_BOT_TOKEN", BOT_TOKEN)],
            );
            assert!(
                discord
                    .wait_until(WAIT, |discord| discord.connected())
                    .await,
                "the agent never identified; gateway saw {:?}",
                discord.gateway_log()
            );
            Self {
                llm,
                discord,
                _agent: agent,
                workspace,
                _directory: directory,
            }
        }

        /// Waits until a post satisfies `wanted`; returns it. `what` names the event.
        async fn wait_for_post(&self, what: &str, wanted: impl Fn(&Posted) -> bool) -> Posted {
            self.discord
                .wait_until(WAIT, |discord| discord.posted().iter().any(&wanted))
                .await;
            let found = self.discord.posted().into_iter().find(&wanted);
            found.unwrap_or_else(|| {
                panic!(
                    "never posted: {what}; all posts: {:#?}",
                    self.discord.posted()
                )
            })
        }

        /// Waits until the interaction `id` was answered (its callback taken).
        async fn wait_for_acknowledged(&self, id: &str) {
            let path = format!("/api/v10/interactions/{id}/");
            let answered = self
                .discord
                .wait_until(WAIT, |discord| {
                    discord.requests().iter().any(|request| {
                        request.path.starts_with(&path)
                            && request.status == 204
                            && request.body == json!({"type": 6})
                    })
                })
                .await;
            assert!(answered, "interaction {id} was never acknowledged");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_approves_with_a_button_and_the_stored_message_runs_once() {
        let bot = Bot::start().await;
        bot.llm.push(Reply::tool_call(
            "message",
            json!({"to": "marko", "text": "The build is green."}),
        ));
        bot.llm.push(Reply::text("I asked for approval."));
        bot.discord.dispatch_message(direct_message(
            "1300000000000000100",
            IVAN_DM,
            IVAN,
            "please tell Marko",
        ));
        let ask = bot
            .wait_for_post("the request to Ana", |posted| {
                posted.content().contains("asks to use message")
            })
            .await;
        let code = ask.content().split("approve ").nth(1).unwrap()[..6].to_string();
        assert_eq!(
            ask.body["components"],
            json!([{"type": 1, "components": [
                {"type": 2, "style": 3, "label": "Approve", "custom_id": format!("approve:{code}")},
                {"type": 2, "style": 4, "label": "Reject", "custom_id": format!("reject:{code}")},
            ]}])
        );

        // Marko (a manager the rule does not name) presses Approve: refused.
        let marko_dm = Posted {
            channel_id: MARKO_DM.to_string(),
            ..ask.clone()
        };
        let press = bot
            .discord
            .press(&marko_dm, MARKO, &format!("approve:{code}"));
        bot.wait_for_acknowledged(&press).await;
        let refusal = format!("Not done: you may not decide request {code}.");
        bot.wait_for_post("the refusal to Marko", |posted| {
            posted.channel_id == MARKO_DM && posted.content() == refusal
        })
        .await;

        // Ana presses Approve: exactly the stored message goes to Marko, once.
        let press = bot.discord.press(&ask, ANA, &format!("approve:{code}"));
        bot.wait_for_acknowledged(&press).await;
        bot.wait_for_post("Ana's approval answered", |posted| {
            posted.channel_id == ask.channel_id
                && posted.content() == "Approved: message ran for Ivan."
        })
        .await;
        bot.wait_for_post("the message to Marko", |posted| {
            posted.content() == "The build is green."
        })
        .await;

        // A forged press is acknowledged and dropped; pressing again is refused.
        let forged = bot.discord.press_any(&ask, ANA, "approve:K7QX2P;drop");
        bot.wait_for_acknowledged(&forged).await;
        let press = bot.discord.press(&ask, ANA, &format!("approve:{code}"));
        bot.wait_for_acknowledged(&press).await;
        let replay = format!("Not done: request {code} was already decided.");
        bot.wait_for_post("the replay refused", |posted| {
            posted.channel_id == ask.channel_id && posted.content() == replay
        })
        .await;
        let to_marko = bot
            .discord
            .posted()
            .into_iter()
            .filter(|posted| posted.content() == "The build is green.")
            .count();
        assert_eq!(to_marko, 1, "the message ran once");
        assert_eq!(bot.llm.requests().len(), 2, "no press reached the model");
        let events: Vec<String> = audit(&bot.workspace)
            .into_iter()
            .map(|(event, by)| format!("{event} {by}"))
            .collect();
        assert_eq!(
            events,
            [
                "requested ",
                "refused marko",
                "approved ana",
                "ran ",
                "refused ana"
            ]
        );
    }
}
