//! Samples a process's resident set size (`VmRSS` in `/proc/<pid>/status`) every
//! 100 ms on its own thread, so a busy async runtime never delays a sample.

use parking_lot::Mutex;
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// How often the sampler reads `/proc`.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// One reading: when, and the resident set in kB.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: Instant,
    pub kilobytes: u64,
}

/// A running sampler; stops when dropped (or when the process is gone).
pub struct RssSampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// `VmRSS` in kB from the text of `/proc/<pid>/status`.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            let path = format!("/proc/{pid}/status");
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // A zombie has no VmRSS line; a reaped process has no file.
                    let Some(kilobytes) = std::fs::read_to_string(&path)
                        .ok()
                        .as_deref()
                        .and_then(parse_vm_rss)
                    else {
                        break;
                    };
                    let sample = Sample {
                        at: Instant::now(),
                        kilobytes,
                    };
                    samples.lock().push(sample);
                    std::thread::sleep(INTERVAL);
                }
            })
        };
        Self {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Resident set sizes (kB) sampled in `[from, to]`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<u64> {
        self.samples
            .lock()
            .iter()
            .filter(|sample| sample.at >= from && sample.at <= to)
            .map(|sample| sample.kilobytes)
            .collect()
    }

    /// The latest sample, if any.
    pub fn latest(&self) -> Option<u64> {
        self.samples.lock().last().map(|sample| sample.kilobytes)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vm_rss_in_kilobytes() {
        let status =
            "Name:\tsaint-operator\nVmPeak:\t  900000 kB\nVmRSS:\t   31244 kB\nVmData:\t 1 kB\n";
        assert_eq!(parse_vm_rss(status), Some(31_244));
    }

    #[test]
    fn a_zombie_without_vm_rss_reads_as_none() {
        assert_eq!(parse_vm_rss("Name:\tx\nState:\tZ (zombie)\n"), None);
    }

    #[test]
    fn samples_this_process() {
        // `started` is taken before the sampler exists, so every sample it takes is at
        // or after `started`; the loop waits for the first one (the event) and gives up
        // after 5 s rather than hanging.
        let started = Instant::now();
        let sampler = RssSampler::start(std::process::id());
        let deadline = started + Duration::from_secs(5);
        while sampler.between(started, Instant::now()).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let samples = sampler.between(started, Instant::now());
        assert!(!samples.is_empty(), "no sample within 5 s");
        assert!(samples.iter().all(|&kilobytes| kilobytes > 0));
        assert!(sampler.latest().is_some_and(|kilobytes| kilobytes > 0));
    }
}
