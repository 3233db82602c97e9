//! The ledger: what the bot did for each person and what it cost, read from the logs
//! the runtime and Porter already append — model attempts and tool calls from
//! `logs/usage.jsonl`, approvals from `logs/approvals.jsonl`, Porter's request
//! decisions from its audit log — as one list,
//! oldest first, filtered by person, role, trigger and time.
//!
//! Costs are the model attempts' (the same amounts `saint_llm_cost_usd_total` counts),
//! so a person's ledger sums to their metric. Turn summary lines are left out (their
//! cost is their attempts'). Porter's and approval lines carry no trigger: a query by
//! trigger leaves them out. Pure reading: nothing is written, and a bot may run meanwhile.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
};

use serde::Serialize;
use serde_json::Value;

/// One thing the bot did.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub ts: String,
    /// `model`, `tool`, `transcription`, `approval` or `porter`.
    pub kind: &'static str,
    pub contact: String,
    pub role: String,
    /// What started the turn (empty for Porter's lines).
    pub trigger: String,
    /// The model, the tool, or `METHOD host/path` for Porter.
    pub what: String,
    /// `ok`, the failure's label, or Porter's decision.
    pub outcome: String,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// Which entries to keep; empty fields keep everything.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub contact: Option<String>,
    pub role: Option<String>,
    pub trigger: Option<String>,
    pub since: Option<jiff::Timestamp>,
    pub until: Option<jiff::Timestamp>,
}

impl Query {
    fn keeps(&self, entry: &Entry) -> bool {
        let time = entry.ts.parse::<jiff::Timestamp>().ok();
        self.contact.as_ref().is_none_or(|c| *c == entry.contact)
            && self.role.as_ref().is_none_or(|r| *r == entry.role)
            && self.trigger.as_ref().is_none_or(|t| *t == entry.trigger)
            && self
                .since
                .is_none_or(|since| time.is_some_and(|time| time >= since))
            && self
                .until
                .is_none_or(|until| time.is_some_and(|time| time < until))
    }
}

/// Why the ledger could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write the ledger")]
    Write(#[source] std::io::Error),
    #[error("failed to write the ledger as CSV")]
    Csv(#[source] csv::Error),
}

/// What was read, with the lines that were not entries of any kind (a line cut by a
/// crash, say), counted rather than fatal.
#[derive(Debug, Default)]
pub struct Ledger {
    pub entries: Vec<Entry>,
    pub unreadable_lines: usize,
}

/// The logs a ledger is read from.
#[derive(Clone, Debug)]
pub struct Sources {
    /// `logs/usage.jsonl`.
    pub usage: PathBuf,
    /// `logs/approvals.jsonl`.
    pub approvals: PathBuf,
    /// Porter's audit logs.
    pub porter_audits: Vec<PathBuf>,
}

impl Sources {
    /// The logs of `workspace` (with Porter's audit log where a pod keeps it), plus
    /// `porter_audits`.
    pub fn of_workspace(workspace: &Path, porter_audits: &[PathBuf]) -> Self {
        let logs = workspace.join("logs");
        let mut audits = vec![logs.join("porter.jsonl")];
        audits.extend(porter_audits.iter().cloned());
        Self {
            usage: logs.join("usage.jsonl"),
            approvals: logs.join("approvals.jsonl"),
            porter_audits: audits,
        }
    }
}

type Parse = fn(&Value) -> Option<Entry>;

/// The entries of `sources` that `query` keeps, oldest first. A log that does not
/// exist yet has no entries.
pub fn read(sources: &Sources, query: &Query) -> Result<Ledger, LedgerError> {
    let mut ledger = Ledger::default();
    let logs = [
        (sources.usage.as_path(), usage_entry as Parse),
        (sources.approvals.as_path(), approval_entry as Parse),
    ];
    for (path, parse) in logs.into_iter().chain(
        sources
            .porter_audits
            .iter()
            .map(|path| (path.as_path(), porter_entry as Parse)),
    ) {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(LedgerError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        for line in BufReader::new(file).lines() {
            let line = line.map_err(|source| LedgerError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            match serde_json::from_str::<Value>(&line) {
                Ok(value) => {
                    if let Some(entry) = parse(&value).filter(|entry| query.keeps(entry)) {
                        ledger.entries.push(entry);
                    }
                }
                Err(_) if line.trim().is_empty() => {}
                Err(_) => ledger.unreadable_lines += 1,
            }
        }
    }
    // RFC 3339 UTC stamps of one form sort as time does.
    ledger.entries.sort_by(|a, b| a.ts.cmp(&b.ts));
    Ok(ledger)
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

/// A model attempt, tool call or transcription of the usage log; turn lines are
/// summaries, not entries.
fn usage_entry(line: &Value) -> Option<Entry> {
    let base = |kind, what: String| Entry {
        ts: text(line, "ts"),
        kind,
        contact: text(line, "user"),
        role: text(line, "role"),
        trigger: text(line, "trigger"),
        what,
        outcome: text(line, "outcome"),
        input_tokens: line["inputTokens"].as_u64(),
        output_tokens: line["outputTokens"].as_u64(),
        cost_usd: line["costUsd"].as_f64(),
    };
    if line.get("attempt").is_some() {
        Some(base("model", text(line, "model")))
    } else if line.get("tool").is_some() {
        Some(base("tool", text(line, "tool")))
    } else {
        // A voice note sent for transcription: its model, outcome and cost.
        line["transcription"].as_str().map(|outcome| Entry {
            outcome: outcome.to_string(),
            ..base("transcription", text(line, "model"))
        })
    }
}

/// An approval event: asked, decided, refused, expired, ran (`what` names the tool and
/// the request, `outcome` the event and who decided).
fn approval_entry(line: &Value) -> Option<Entry> {
    let event = line["event"].as_str()?;
    let outcome = match line["by"].as_str() {
        Some(by) => format!("{event} by {by}"),
        None => event.to_string(),
    };
    Some(Entry {
        ts: text(line, "ts"),
        kind: "approval",
        contact: text(line, "requester"),
        role: text(line, "role"),
        trigger: String::new(),
        what: format!(
            "{} (request {}){}",
            text(line, "tool"),
            text(line, "code"),
            porter_requests(line)
        ),
        outcome,
        input_tokens: None,
        output_tokens: None,
        cost_usd: None,
    })
}

/// The Porter requests an approval waits for, as ` for PUT api.github.com/…, …`.
fn porter_requests(line: &Value) -> String {
    let Some(requests) = line["porter"].as_array().filter(|list| !list.is_empty()) else {
        return String::new();
    };
    let named: Vec<String> = requests
        .iter()
        .map(|request| {
            format!(
                "{} {}{}",
                text(request, "method"),
                text(request, "host"),
                text(request, "path")
            )
        })
        .collect();
    format!(" for {}", named.join(", "))
}

/// A request decision of Porter's audit log (key grants are not requests); one let
/// through by an approval's one-time grant names the approval.
fn porter_entry(line: &Value) -> Option<Entry> {
    (line["kind"] == "request").then(|| Entry {
        ts: text(line, "ts"),
        kind: "porter",
        contact: text(line, "contact"),
        role: text(line, "role"),
        trigger: String::new(),
        what: format!(
            "{} {}{}",
            text(line, "method"),
            text(line, "host"),
            text(line, "path")
        ),
        outcome: match line["approval"].as_str() {
            Some(code) => format!("{} by approval {code}", text(line, "decision")),
            None => text(line, "decision"),
        },
        input_tokens: None,
        output_tokens: None,
        cost_usd: None,
    })
}

/// One JSON object a line.
pub fn write_jsonl(entries: &[Entry], output: &mut impl std::io::Write) -> Result<(), LedgerError> {
    for entry in entries {
        let line = serde_json::to_string(entry).expect("entries serialise");
        writeln!(output, "{line}").map_err(LedgerError::Write)?;
    }
    Ok(())
}

/// A header row, then one row an entry (empty cells for absent numbers).
pub fn write_csv(entries: &[Entry], output: impl std::io::Write) -> Result<(), LedgerError> {
    let mut writer = csv::Writer::from_writer(output);
    for entry in entries {
        writer.serialize(entry).map_err(LedgerError::Csv)?;
    }
    writer.flush().map_err(LedgerError::Write)
}

/// The sum of the entries' costs.
pub fn total_cost(entries: &[Entry]) -> f64 {
    entries.iter().filter_map(|entry| entry.cost_usd).sum()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn usage_and_porter_lines_become_one_filtered_timeline() {
        let directory = tempfile::tempdir().unwrap();
        let usage = directory.path().join("usage.jsonl");
        std::fs::write(
            &usage,
            concat!(
                r#"{"ts":"2026-01-02T10:00:02Z","user":"ana","role":"owner","trigger":"message","model":"m","entry":"primary","attempt":1,"outcome":"ok","inputTokens":10,"outputTokens":5,"costUsd":0.25}"#, "\n",
                r#"{"ts":"2026-01-02T10:00:03Z","user":"ana","role":"owner","tool":"read","outcome":"ok","trigger":"message","durationMs":3}"#, "\n",
                r#"{"ts":"2026-01-02T10:00:04Z","user":"ana","role":"owner","trigger":"message","turn":"answered","costUsd":0.25}"#, "\n",
                r#"{"ts":"2026-01-02T11:00:00Z","user":"ivan","role":"employee","trigger":"cron","model":"m","entry":"primary","attempt":1,"outcome":"ok","costUsd":0.5}"#, "\n",
                "{\"ts\":\"2026-01-02T11:00:0", "\n",
            ),
        )
        .unwrap();
        let audit = directory.path().join("porter.jsonl");
        std::fs::write(
            &audit,
            concat!(
                r#"{"ts":"2026-01-02T10:00:01Z","kind":"request","session":"s","contact":"ana","role":"owner","cli":"gh","host":"api.github.com","method":"GET","path":"/user","decision":"allowed"}"#, "\n",
                r#"{"ts":"2026-01-02T10:00:01Z","kind":"key","contact":"ana"}"#, "\n",
            ),
        )
        .unwrap();
        let sources = Sources {
            usage: usage.clone(),
            approvals: directory.path().join("approvals.jsonl"),
            porter_audits: vec![audit.clone()],
        };
        std::fs::write(
            &sources.approvals,
            concat!(r#"{"ts":"2026-01-02T10:00:05Z","event":"approved","code":"K7QX2P","requester":"ana","role":"owner","tool":"message","digest":"d","by":"marko"}"#, "
"),
        )
        .unwrap();
        let all = read(&sources, &Query::default()).unwrap();
        let kinds: Vec<&str> = all.entries.iter().map(|entry| entry.kind).collect();
        assert_eq!(kinds, ["porter", "model", "tool", "approval", "model"]);
        assert_eq!(all.entries[3].what, "message (request K7QX2P)");
        assert_eq!(all.entries[3].outcome, "approved by marko");
        assert_eq!(all.unreadable_lines, 1);
        assert_eq!(all.entries[0].what, "GET api.github.com/user");

        let ana = Query {
            contact: Some("ana".to_string()),
            ..Query::default()
        };
        let entries = read(&sources, &ana).unwrap().entries;
        assert_eq!(entries.len(), 4);
        assert_eq!(total_cost(&entries), 0.25);
        let cron = Query {
            trigger: Some("cron".to_string()),
            since: Some("2026-01-02T10:30:00Z".parse().unwrap()),
            ..Query::default()
        };
        let entries = read(&sources, &cron).unwrap().entries;
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].contact, "ivan");

        let mut csv = Vec::new();
        write_csv(&all.entries, &mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        assert!(
            csv.starts_with(
                "ts,kind,contact,role,trigger,what,outcome,inputTokens,outputTokens,costUsd\n"
            ),
            "{csv}"
        );
        assert_eq!(csv.lines().count(), 6);
        assert!(
            csv.contains("2026-01-02T10:00:02Z,model,ana,owner,message,m,ok,10,5,0.25"),
            "{csv}"
        );
    }

    #[test]
    fn porter_requests_held_for_an_approval_and_let_through_by_it_are_named() {
        let held = json!({"ts": "t", "event": "requested", "code": "K7QX2P", "requester": "ivan",
            "role": "employee", "tool": "exec", "digest": "d",
            "porter": [{"cli": "gh", "host": "api.github.com", "method": "PUT",
                        "path": "/repos/o/r/pulls/1/merge"}]});
        let entry = approval_entry(&held).unwrap();
        assert_eq!(
            entry.what,
            "exec (request K7QX2P) for PUT api.github.com/repos/o/r/pulls/1/merge"
        );
        let granted = json!({"ts": "t", "kind": "request", "contact": "ivan", "role": "employee",
            "cli": "gh", "host": "api.github.com", "method": "PUT",
            "path": "/repos/o/r/pulls/1/merge", "decision": "allowed", "approval": "K7QX2P"});
        assert_eq!(
            porter_entry(&granted).unwrap().outcome,
            "allowed by approval K7QX2P"
        );
        let refused = json!({"kind": "request", "decision": "held"});
        assert_eq!(porter_entry(&refused).unwrap().outcome, "held");
    }

    #[test]
    fn a_missing_log_has_no_entries() {
        let directory = tempfile::tempdir().unwrap();
        let ledger = read(
            &Sources::of_workspace(directory.path(), &[]),
            &Query::default(),
        )
        .unwrap();
        assert!(ledger.entries.is_empty());
    }
}
