//! The extraction child: limits itself, then reads one file and answers. Parsers of
//! hostile formats run here, so whatever they do costs at most these limits and
//! cannot touch the agent's memory.

use std::{
    io::{Read, Write},
    panic::{self, AssertUnwindSafe},
    process::ExitCode,
};

use nix::sys::resource::{Resource, setrlimit};

use crate::{
    documents::{self, DocumentKind},
    image_prep,
    job::{Answer, ChildLimits, Job, Refusal, Reply, Task},
};

/// The job arrives on stdin; a larger one is not from the parent.
const MAX_JOB_BYTES: u64 = 64 * 1024;

/// Entry point for a binary's subcommand (`saint-agent extract-document`,
/// `saint-media-extract`). Exit 0 with a reply, refusals included; non-zero only
/// when the job itself could not be read or the reply not written.
pub fn child_main() -> ExitCode {
    let mut input = String::new();
    if let Err(error) = std::io::stdin()
        .take(MAX_JOB_BYTES)
        .read_to_string(&mut input)
    {
        eprintln!("failed to read the extraction job: {error}");
        return ExitCode::from(2);
    }
    let job: Job = match serde_json::from_str(&input) {
        Ok(job) => job,
        Err(error) => {
            eprintln!("failed to parse the extraction job: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = limit_self(&job.limits) {
        eprintln!("failed to set the extraction limits: {error}");
        return ExitCode::from(2);
    }
    // A parser that panics on malformed input is a refusal, not a crash report.
    panic::set_hook(Box::new(|_| {}));
    let answer = panic::catch_unwind(AssertUnwindSafe(|| run(&job))).unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<&str>()
            .map(|reason| (*reason).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let reason = Refusal::ParserPanicked(reason);
        match job.task {
            Task::Document { .. } => Answer::Document {
                result: Err(reason),
            },
            Task::Image { .. } => Answer::Image {
                result: Err(reason),
            },
        }
    });
    let reply = Reply {
        answer,
        peak_memory_kib: peak_memory_kib(),
    };
    let mut stdout = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut stdout, &reply)
        .map_err(std::io::Error::from)
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("failed to write the extraction reply: {error}");
            ExitCode::from(3)
        }
    }
}

/// Limits set by the child on itself, before the file is opened: the parent cannot
/// set them between fork and exec without `unsafe` (`pre_exec`), and setting them
/// here first is just as early for what matters, the parsing.
fn limit_self(limits: &ChildLimits) -> nix::Result<()> {
    setrlimit(
        Resource::RLIMIT_AS,
        limits.address_space_bytes,
        limits.address_space_bytes,
    )?;
    // The soft limit sends SIGXCPU, the hard one a second later SIGKILL.
    setrlimit(
        Resource::RLIMIT_CPU,
        limits.cpu_seconds,
        limits.cpu_seconds + 1,
    )?;
    // The child writes no file (its stdout is a pipe, which this does not limit).
    setrlimit(Resource::RLIMIT_FSIZE, 0, 0)?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
    Ok(())
}

fn run(job: &Job) -> Answer {
    match &job.task {
        Task::Document { file_name, caps } => Answer::Document {
            result: read(job, caps.max_input_bytes).and_then(|bytes| {
                let kind = DocumentKind::detect(file_name, &bytes).ok_or(Refusal::NotADocument)?;
                Ok(documents::extract(kind, &bytes, caps)?)
            }),
        },
        Task::Image { limits } => Answer::Image {
            result: read(job, limits.max_input_bytes)
                .and_then(|bytes| Ok(image_prep::prepare_image(&bytes, limits)?)),
        },
    }
}

/// Reads at most one byte past `limit`, so an endless file costs nothing extra.
fn read(job: &Job, limit: usize) -> Result<Vec<u8>, Refusal> {
    let file = std::fs::File::open(&job.path).map_err(|error| Refusal::Open {
        path: job.path.clone(),
        reason: error.to_string(),
    })?;
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| Refusal::Read {
            path: job.path.clone(),
            reason: error.to_string(),
        })?;
    if bytes.len() > limit {
        return Err(Refusal::OverLimit { limit });
    }
    Ok(bytes)
}

/// `VmHWM` of `/proc/self/status`, in KiB: this process's peak since its exec.
fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
