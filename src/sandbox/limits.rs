//! What bounds a run (`Limits`, from `[sandbox]`) and how it ended (`Ran`), with the limit that
//! ended it in words.

use std::time::Duration;

use super::cgroup::{Bounds, Usage};
use super::rundir::Changes;
use crate::config::SandboxConfig;

/// The limits of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub cpu_secs: u64,
    pub wall: Duration,
    /// The run's memory: its cgroup's bound, else divided among its processes as address space.
    pub memory_bytes: u64,
    pub processes: u64,
    pub file_bytes: u64,
    pub open_files: u64,
    /// Output kept of each stream; the rest is counted and dropped.
    pub output_bytes: usize,
    /// Output read before the run is stopped: more is a flood, not a result.
    pub output_flood_bytes: u64,
    /// Bytes the run's directory may hold before the run is stopped.
    pub disk_bytes: u64,
    /// Cores' worth of CPU the run may use at once, where it has a cgroup.
    pub cpus: u64,
}

impl Limits {
    /// Each process's address space where the run has no cgroup: its memory divided among the
    /// processes it may have, so that together they stay within it.
    pub fn memory_per_process(&self) -> u64 {
        self.memory_bytes / self.processes.max(1)
    }

    pub fn from_config(config: &SandboxConfig) -> Limits {
        Limits {
            cpu_secs: config.cpu_secs.max(1),
            wall: Duration::from_secs(config.wall_secs.max(1)),
            memory_bytes: config.memory_mb.max(16) << 20,
            processes: config.processes.max(1),
            file_bytes: config.file_mb.max(1) << 20,
            open_files: config.open_files.max(16),
            output_bytes: (config.output_kb.max(1) << 10) as usize,
            output_flood_bytes: (config.output_kb.max(1) << 10) * 256,
            disk_bytes: config.disk_mb.max(1) << 20,
            cpus: config.cpus.max(1),
        }
    }

    /// What a run's cgroup bounds: its processes and its monitor (outside its PID namespace, but
    /// in its cgroup from the start).
    pub(super) fn bounds(&self) -> Bounds {
        Bounds {
            memory_bytes: self.memory_bytes,
            processes: self.processes + 1,
            cpu_cores: self.cpus,
        }
    }
}

/// Why a run was stopped from outside, if it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    WallClock,
    /// Its processes together used the run's CPU time.
    CpuTime,
    /// Its processes together passed the run's memory, and the kernel killed one of them.
    Memory,
    OutputFlood,
    DiskFull,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stopped: Option<Stopped>,
    pub stdout: String,
    pub stderr: String,
    /// Output bytes read beyond what was kept, both streams together.
    pub output_dropped: u64,
    pub changes: Changes,
    pub elapsed: Duration,
    /// What the kernel measured of the run, where it had a cgroup.
    pub usage: Option<Usage>,
}

impl Ran {
    pub fn succeeded(&self) -> bool {
        self.code == Some(0) && self.stopped.is_none()
    }

    /// Which limit ended the run, in words, if one did.
    pub fn limit_hit(&self, limits: &Limits) -> Option<String> {
        match (self.stopped, self.signal) {
            (Some(Stopped::WallClock), _) => Some(format!(
                "it ran for {} s, the time limit, and was stopped",
                limits.wall.as_secs()
            )),
            (Some(Stopped::CpuTime), _) => Some(format!(
                "its processes used {} s of CPU time together, the limit, and were stopped",
                limits.cpu_secs
            )),
            (Some(Stopped::Memory), _) => Some(format!(
                "its processes together passed {} MiB of memory, the limit, and it was stopped",
                limits.memory_bytes >> 20
            )),
            (Some(Stopped::OutputFlood), _) => Some(format!(
                "it wrote more than {} bytes of output and was stopped",
                limits.output_flood_bytes
            )),
            (Some(Stopped::DiskFull), _) => Some(format!(
                "its files passed {} bytes (or could no longer be measured) and it was stopped",
                limits.disk_bytes
            )),
            (None, Some(libc::SIGXCPU)) => Some(format!(
                "it used {} s of CPU time, the limit, and was stopped",
                limits.cpu_secs
            )),
            (None, Some(libc::SIGXFSZ)) => Some(format!(
                "it wrote a file past {} bytes, the limit",
                limits.file_bytes
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_is_divided_among_the_processes() {
        let limits = Limits::from_config(&SandboxConfig {
            memory_mb: 1024,
            processes: 32,
            ..SandboxConfig::default()
        });
        assert_eq!(limits.memory_per_process(), 32 << 20);
        assert!(limits.memory_per_process() * limits.processes <= limits.memory_bytes);
    }
}
