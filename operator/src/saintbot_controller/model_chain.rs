//! The SaintBot's `ModelAvailable` condition from its agent's latest model-chain report
//! ([`crate::cache::chain_reports`]): False, reason `ChainFailing`, while the agent
//! running now reports that a call failed on every model of its failover chain and none
//! has answered since; True, reason `NoChainFailure`, otherwise. A failing report counts
//! only while it is current: about this very SaintBot (its uid), repeated within
//! [`REPORT_LIFETIME`] (the agent repeats it every ten minutes), and made by the agent
//! that runs now — its pod not gone or going, its `agent` container started before the
//! report (a new pod or a restarted container has a fresh chain, which has failed
//! nobody yet). Pure but for [`crate::cache::child_state::rollout::agent_pods`], listed
//! only for a failing report.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::{cache::chain_reports::ChainReport, status::Reason};

/// How long a failing report counts without being repeated (the agent repeats it every
/// ten minutes while no model answers).
pub const REPORT_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// How soon a bot whose chain is reported failing is looked at again: nothing wakes it
/// when its pod is replaced, and the new agent has nothing to report until it fails.
pub const RECHECK: Duration = Duration::from_secs(60);

/// The name of the bot pod's agent container (`build/workload.rs`).
const AGENT_CONTAINER: &str = "agent";

/// Whether `report` may say the chain fails now, so that the bot's pods must be read to
/// tell: a failing report about the SaintBot with `bot_uid`, within its lifetime.
pub fn needs_pods(report: Option<&ChainReport>, bot_uid: &str, now: jiff::Timestamp) -> bool {
    report.is_some_and(|report| {
        report.failing && *report.bot_uid == *bot_uid && within_lifetime(report, now)
    })
}

fn within_lifetime(report: &ChainReport, now: jiff::Timestamp) -> bool {
    now.duration_since(report.at).unsigned_abs() <= REPORT_LIFETIME || report.at > now
}

/// Whether the agent that made `report` still runs among `pods`: its pod is there and not
/// being deleted, and its `agent` container runs since before the report. A report
/// naming no pod is taken as the running agent's.
fn made_by_the_running_agent(report: &ChainReport, pods: &[Pod]) -> bool {
    if report.instance.is_empty() {
        return true;
    }
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| pod.metadata.name.as_deref() == Some(&*report.instance))
        .filter_map(|pod| pod.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .filter(|container| container.name == AGENT_CONTAINER)
        .filter_map(|container| {
            container
                .state
                .as_ref()?
                .running
                .as_ref()?
                .started_at
                .as_ref()
        })
        .any(|started| started.0 <= report.at)
}

/// `ModelAvailable`'s reason and message for the SaintBot with `bot_uid`, from its latest
/// `report` and, for a failing one, its agent `pods` (`None`: they could not be read; the
/// report is taken as current). Pure.
pub fn model_available(
    report: Option<&ChainReport>,
    bot_uid: &str,
    pods: Option<&[Pod]>,
    now: jiff::Timestamp,
) -> (Reason, String) {
    let healthy = |message: String| (Reason::NoChainFailure, message);
    let Some(report) = report.filter(|report| *report.bot_uid == *bot_uid) else {
        return healthy("the bot's agent has not reported every model of its chain failing".into());
    };
    if !report.failing {
        return healthy(format!("the bot's agent reports: {}", report.note));
    }
    if !within_lifetime(report, now) {
        return healthy(format!(
            "the last report of every model failing ({}) was not repeated for {} minutes",
            report.at,
            REPORT_LIFETIME.as_secs() / 60
        ));
    }
    if pods.is_some_and(|pods| !made_by_the_running_agent(report, pods)) {
        return healthy(format!(
            "the last report of every model failing came from an agent that no longer runs \
             (pod {}, {}); the running one has not failed on every model",
            report.instance, report.at
        ));
    }
    // Not the report's time: its repeats would rewrite the status every ten minutes
    // (the condition's lastTransitionTime says since when).
    let by = if report.instance.is_empty() {
        String::new()
    } else {
        format!(" (reported by the agent of pod {})", report.instance)
    };
    (Reason::ChainFailing, format!("{}{by}", report.note))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Event;
    use serde_json::json;

    use super::*;
    use crate::cache::chain_reports::{MODEL_CHAIN_FAILING, MODEL_CHAIN_RECOVERED, report_of};

    const NOTE: &str = "every model of the failover chain failed a call: \
        primary claude-sonnet-4-5 (unauthorized), fallback-1 gpt-4.1 (overloaded)";

    fn report(reason: &str, at: &str, instance: &str) -> ChainReport {
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": "my-bot.1", "namespace": "acme"},
            "involvedObject": {"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                "name": "my-bot", "namespace": "acme", "uid": "u1"},
            "reason": reason, "message": NOTE, "eventTime": at,
            "reportingComponent": "saint-agent", "reportingInstance": instance,
        }))
        .unwrap();
        report_of(&event).unwrap().1
    }

    /// A bot pod whose agent container runs since `started` (`None`: it waits).
    fn pod(name: &str, started: Option<&str>, deleted: bool) -> Pod {
        let state = match started {
            Some(started) => json!({"running": {"startedAt": started}}),
            None => json!({"waiting": {"reason": "CrashLoopBackOff"}}),
        };
        let mut metadata = json!({"name": name});
        if deleted {
            metadata["deletionTimestamp"] = json!("2026-01-01T10:30:00Z");
        }
        serde_json::from_value(
            json!({"metadata": metadata, "status": {"containerStatuses": [
                {"name": "porter", "image": "p", "imageID": "", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T09:00:00Z"}}},
                {"name": "agent", "image": "a", "imageID": "", "ready": true, "restartCount": 0,
                    "state": state},
            ]}}),
        )
        .unwrap()
    }

    fn time(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_current_failing_report_of_the_running_agent_makes_the_model_unavailable() {
        let now = time("2026-01-01T10:10:00Z");
        let failing = report(MODEL_CHAIN_FAILING, "2026-01-01T10:00:00Z", "my-bot-a");
        let running = [pod("my-bot-a", Some("2026-01-01T09:00:00Z"), false)];
        assert!(needs_pods(Some(&failing), "u1", now));
        let (reason, message) = model_available(Some(&failing), "u1", Some(&running), now);
        assert_eq!(reason, Reason::ChainFailing);
        assert_eq!(
            message,
            format!("{NOTE} (reported by the agent of pod my-bot-a)")
        );
        // Repeated: the same words, so the status is not written again.
        let repeated = report(MODEL_CHAIN_FAILING, "2026-01-01T10:09:00Z", "my-bot-a");
        assert_eq!(
            model_available(Some(&repeated), "u1", Some(&running), now).1,
            message
        );
        // Pods that could not be read: the report stands.
        assert_eq!(
            model_available(Some(&failing), "u1", None, now).0,
            Reason::ChainFailing
        );
    }

    #[test]
    fn a_report_of_an_agent_gone_stale_or_recovered_or_about_another_bot_leaves_it_available() {
        let now = time("2026-01-01T10:10:00Z");
        let failing = report(MODEL_CHAIN_FAILING, "2026-01-01T10:00:00Z", "my-bot-a");
        let cases: Vec<(&str, Vec<Pod>, &str)> = vec![
            (
                "the pod was replaced",
                vec![pod("my-bot-b", Some("2026-01-01T10:05:00Z"), false)],
                "no longer runs",
            ),
            (
                "the pod is going",
                vec![pod("my-bot-a", Some("2026-01-01T09:00:00Z"), true)],
                "no longer runs",
            ),
            (
                "the container restarted since",
                vec![pod("my-bot-a", Some("2026-01-01T10:01:00Z"), false)],
                "no longer runs",
            ),
            (
                "the container waits",
                vec![pod("my-bot-a", None, false)],
                "no longer runs",
            ),
        ];
        for (what, pods, says) in cases {
            let (reason, message) = model_available(Some(&failing), "u1", Some(&pods), now);
            assert_eq!(reason, Reason::NoChainFailure, "{what}");
            assert!(message.contains(says), "{what}: {message}");
        }
        let stale = time("2026-01-01T10:31:00Z");
        assert!(!needs_pods(Some(&failing), "u1", stale));
        let (reason, message) = model_available(Some(&failing), "u1", None, stale);
        assert_eq!(reason, Reason::NoChainFailure);
        assert!(
            message.contains("was not repeated for 30 minutes"),
            "{message}"
        );

        let recovered = report(MODEL_CHAIN_RECOVERED, "2026-01-01T10:06:00Z", "my-bot-a");
        assert!(!needs_pods(Some(&recovered), "u1", now));
        let (reason, message) = model_available(Some(&recovered), "u1", None, now);
        assert_eq!(reason, Reason::NoChainFailure);
        assert_eq!(message, format!("the bot's agent reports: {NOTE}"));

        // A SaintBot deleted and made again under the same name has a new uid.
        assert!(!needs_pods(Some(&failing), "u2", now));
        assert_eq!(
            model_available(Some(&failing), "u2", None, now),
            (
                Reason::NoChainFailure,
                "the bot's agent has not reported every model of its chain failing".to_string()
            )
        );
        assert_eq!(
            model_available(None, "u1", None, now).0,
            Reason::NoChainFailure
        );
    }
}
