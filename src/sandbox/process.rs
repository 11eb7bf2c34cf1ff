//! A run's processes: its process group, killed whole; its CPU time, summed over the group where
//! no cgroup counts it; and the reaping of what it leaves behind, by the bot as their subreaper.

use std::io;
use std::time::{Duration, Instant};

/// Kills a run's whole process group when dropped: at the end of a run, and when the run's
/// future is dropped half-way (the bot shutting down, a cancelled command).
pub(super) struct GroupKiller(pub(super) Option<libc::pid_t>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // SAFETY: a signal to the run's own process group, which `setsid` made; only the
            // run's user is in it.
            unsafe { libc::killpg(group, libc::SIGKILL) };
        }
    }
}

/// The kernel's clock ticks a second, the unit of CPU times in `/proc`.
pub(super) fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// The CPU time of the processes of `group` (a run's), in clock ticks: each one's own and its
/// ended children's. A run cannot leave its group (seccomp refuses setsid and setpgid).
pub(super) fn group_cpu_ticks(group: libc::pid_t) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        total += cpu_ticks_in_group(&stat, group);
    }
    total
}

/// One `/proc/<pid>/stat`'s user and system times, its own and its waited-for children's, if the
/// process is in `group`; else 0.
pub(super) fn cpu_ticks_in_group(stat: &str, group: libc::pid_t) -> u64 {
    // "pid (comm) state ppid pgrp …": the command name may hold anything, the last ")" ends it;
    // after it, field n of proc(5) is at n - 3.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.get(2).and_then(|f| f.parse::<libc::pid_t>().ok()) != Some(group) {
        return 0;
    }
    fields.get(11..15).map_or(0, |times| {
        times.iter().filter_map(|t| t.parse::<u64>().ok()).sum()
    })
}

/// Makes this process the reaper of its runs' orphans (a background process whose parent has
/// ended), so that it can wait for them to be gone; otherwise they would go to init, which reaps
/// when it likes, or to nobody when the bot is init in a container.
pub(super) fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sets a flag of this process; no pointers.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    });
}

/// Kills and reaps every process of a run's group until none is left, for at most `within`;
/// whether the group is gone.
pub(super) fn reap_group(group: libc::pid_t, within: Duration) -> bool {
    let started = Instant::now();
    loop {
        // SAFETY: plain system calls on the run's own process group; no status is read.
        unsafe {
            while libc::waitpid(-group, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
            if libc::kill(-group, 0) != 0 {
                return true;
            }
            libc::killpg(group, libc::SIGKILL);
        }
        if started.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A child's output, or an error once `wait` has passed (the child is then killed).
pub(super) fn wait_with_timeout(
    mut child: std::process::Child,
    wait: Duration,
) -> io::Result<std::process::Output> {
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return child.wait_with_output();
        }
        if started.elapsed() > wait {
            // SAFETY: a signal to the child's own process group, which `setsid` made.
            unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer in {} s", wait.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_cpu_time_is_its_processes_and_their_ended_childrens() {
        // utime 150, stime 30, cutime 7, cstime 3; the command name holds a ") " of its own.
        let stat = "4242 (a) b) R 4200 4100 4100 0 -1 4194560 1 0 0 0 150 30 7 3 20 0 1 0 9 1 1";
        assert_eq!(cpu_ticks_in_group(stat, 4100), 190);
        assert_eq!(cpu_ticks_in_group(stat, 4200), 0, "another group's");
        assert_eq!(cpu_ticks_in_group("garbage", 4100), 0);
    }
}
