//! Signals a command's whole process group, so background jobs and grandchildren die
//! with the command instead of outliving it.
//!
//! Touches only the process group it was created for.

use rustix::process::{Pid, Signal, kill_process_group};

/// A command's process group (its leader's pid, since commands start a new group).
/// Dropping it kills the group, so every early return still cleans up.
#[derive(Debug)]
pub struct ProcessGroup {
    leader: Option<Pid>,
}

impl ProcessGroup {
    /// Tracks the group led by `leader` (the child started with `process_group(0)`).
    pub fn new(leader: u32) -> Self {
        Self {
            leader: i32::try_from(leader).ok().and_then(Pid::from_raw),
        }
    }

    /// The group id, for the runner's list of live groups.
    pub fn id(&self) -> Option<i32> {
        self.leader.map(Pid::as_raw_nonzero).map(|id| id.get())
    }

    /// Sends `signal` to every process in the group; a group that is already gone is fine.
    pub fn signal(&self, signal: Signal) {
        if let Some(leader) = self.leader {
            // ESRCH (no such group) just means everything already exited.
            let _ = kill_process_group(leader, signal);
        }
    }

    /// SIGKILL to the whole group.
    pub fn kill(&self) {
        self.signal(Signal::KILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Kills a group by id (used at shutdown for groups still running).
pub fn kill_group_id(id: i32) {
    if let Some(pid) = Pid::from_raw(id) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}
