//! `saint-agent ledger`, `outcomes`, `erase` and `export`: a person's records, read
//! from the workspace while the bot runs or not.

use crate::{LedgerArgs, LedgerFormat, OutcomesArgs, PersonArgs};
use std::path::PathBuf;

use saint_agent::session::SessionStore;

pub(crate) fn print_ledger(arguments: &LedgerArgs) -> anyhow::Result<()> {
    let sources =
        saint_agent::ledger::Sources::of_workspace(&arguments.workspace, &arguments.porter_audits);
    let query = saint_agent::ledger::Query {
        contact: arguments.contact.clone(),
        role: arguments.role.clone(),
        trigger: arguments.trigger.clone(),
        since: arguments.since,
        until: arguments.until,
    };
    let ledger = saint_agent::ledger::read(&sources, &query)?;
    if ledger.unreadable_lines > 0 {
        eprintln!(
            "saint-agent: {} log lines were not JSON (a line cut by a crash?) and are left out",
            ledger.unreadable_lines
        );
    }
    let output = std::io::stdout().lock();
    match arguments.format {
        LedgerFormat::Jsonl => {
            let mut writer = std::io::BufWriter::new(output);
            saint_agent::ledger::write_jsonl(&ledger.entries, &mut writer)?;
            std::io::Write::flush(&mut writer)?;
        }
        LedgerFormat::Csv => saint_agent::ledger::write_csv(&ledger.entries, output)?,
    }
    Ok(())
}

pub(crate) fn print_outcomes(arguments: &OutcomesArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let path = arguments
        .workspace
        .join("sessions")
        .join("transcripts.sqlite3");
    anyhow::ensure!(path.exists(), "no transcripts at {}", path.display());
    let store = SessionStore::open(path)?;
    let outcomes = store.queue("read the inbox", |transaction| {
        saint_channels::queue::outcomes(transaction, arguments.after, arguments.limit)
    })?;
    let mut output = std::io::stdout().lock();
    for outcome in outcomes {
        writeln!(output, "{}", serde_json::to_string(&outcome)?)?;
    }
    Ok(())
}

pub(crate) fn erase(arguments: PersonArgs) -> anyhow::Result<()> {
    use saint_agent::erasure;
    let config = saint_agent::config_watch::load_file(&arguments.config)?;
    let _lock = erasure::lock_workspace(&arguments.workspace)?;
    let person = erasure::Person::find(&arguments.workspace, Some(&config), &arguments.contact)?;
    let started = std::time::Instant::now();
    let report = erasure::erase(&arguments.workspace, &person)?;
    println!(
        "erased {} ({} identities) in {} ms",
        person.slug,
        person.identities.len(),
        started.elapsed().as_millis()
    );
    print!("{report}");
    Ok(())
}

pub(crate) fn export(arguments: PersonArgs, output: PathBuf) -> anyhow::Result<()> {
    use saint_agent::erasure;
    let config = saint_agent::config_watch::load_file(&arguments.config)?;
    let _lock = erasure::lock_workspace(&arguments.workspace)?;
    let person = erasure::Person::find(&arguments.workspace, Some(&config), &arguments.contact)?;
    let report = erasure::export::export(&arguments.workspace, &person, &output)?;
    println!(
        "exported {}: {} messages, {} entries to {}",
        person.slug,
        report.messages,
        report.entries.len(),
        output.display()
    );
    Ok(())
}
