//! Who runs are, and how many are under way: when the bot is root, each run becomes a user of
//! the operator's range (`sandbox.run_as_uid`, `run_as_uids` of them), one per run under way, held
//! by a lock file for as long as the run lasts so that no other bot on the host takes it
//! meanwhile; otherwise runs are only counted.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::confine::Identity;
use crate::locks::LockRecovered;

/// Where the bots of a host take their runs' users: one lock file per user id.
pub const UID_LOCKS: &str = "/run/autothread/run-uids";

/// The users runs become, and the runs under way.
#[derive(Debug)]
pub struct UserSlots {
    range: Option<UidRange>,
    max_runs: usize,
    state: Mutex<State>,
}

/// The operator's range of run users, and where their locks are.
#[derive(Debug, Clone)]
pub struct UidRange {
    pub first_uid: u32,
    pub first_gid: u32,
    pub count: u32,
    pub locks: PathBuf,
}

#[derive(Debug, Default)]
struct State {
    runs: usize,
    /// Offsets in the range of the users this bot's runs hold.
    taken: BTreeSet<u32>,
    /// Where the search for a free user starts: users are taken in turn, so the one a run just
    /// gave back is the last to be taken again.
    next: u32,
}

/// Why no run can start now.
#[derive(Debug)]
pub enum NoSlot {
    /// This bot's runs are at `sandbox.concurrent_runs`.
    Busy(usize),
    /// Every user of the range is held, by this bot's runs or another bot's.
    RangeTaken { first_uid: u32, count: u32 },
    /// A user's lock file could not be made.
    Lock { path: PathBuf, error: io::Error },
}

impl std::fmt::Display for NoSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoSlot::Busy(runs) => write!(
                f,
                "{runs} runs are under way, the most at once (sandbox.concurrent_runs); try again when one has ended"
            ),
            NoSlot::RangeTaken { first_uid, count } => write!(
                f,
                "every run user from {first_uid} ({count}, sandbox.run_as_uids) is taken by a run of this bot or of another on this host; try again when one has ended"
            ),
            NoSlot::Lock { path, error } => write!(
                f,
                "the run user's lock {} could not be made: {error}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for NoSlot {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NoSlot::Lock { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A run under way, with its user if it has one; given back when dropped.
#[derive(Debug)]
pub struct UserSlot<'s> {
    slots: &'s UserSlots,
    /// The user's offset in the range and its lock, held until the slot is dropped.
    user: Option<(u32, File)>,
}

impl UserSlots {
    /// `range` when runs become users (the bot is root), `None` when they only are counted.
    pub fn new(range: Option<UidRange>, max_runs: usize) -> Self {
        UserSlots {
            range: range.filter(|r| r.count > 0),
            max_runs: max_runs.max(1),
            state: Mutex::new(State::default()),
        }
    }

    pub fn take(&self) -> Result<UserSlot<'_>, NoSlot> {
        let mut state = self.state.lock_recovered();
        if state.runs >= self.max_runs {
            return Err(NoSlot::Busy(self.max_runs));
        }
        let Some(range) = &self.range else {
            state.runs += 1;
            return Ok(UserSlot {
                slots: self,
                user: None,
            });
        };
        for step in 0..range.count {
            let offset = (state.next + step) % range.count;
            if state.taken.contains(&offset) {
                continue;
            }
            let uid = range.first_uid + offset;
            let path = range.locks.join(format!("uid-{uid}.lock"));
            match lock(&range.locks, &path) {
                Ok(Some(file)) => {
                    state.taken.insert(offset);
                    state.next = offset + 1;
                    state.runs += 1;
                    return Ok(UserSlot {
                        slots: self,
                        user: Some((offset, file)),
                    });
                }
                // Another bot's run holds it.
                Ok(None) => continue,
                Err(error) => return Err(NoSlot::Lock { path, error }),
            }
        }
        Err(NoSlot::RangeTaken {
            first_uid: range.first_uid,
            count: range.count,
        })
    }

    pub fn first_uid(&self) -> Option<u32> {
        self.range.as_ref().map(|r| r.first_uid)
    }
}

impl UserSlot<'_> {
    /// Who the run is: its user, or its own user namespace.
    pub fn identity(&self) -> Identity {
        match (&self.user, &self.slots.range) {
            (Some((offset, _)), Some(range)) => Identity::Drop {
                uid: range.first_uid + offset,
                gid: range.first_gid + offset,
            },
            _ => Identity::NewUserNamespace,
        }
    }
}

impl Drop for UserSlot<'_> {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock_recovered();
        state.runs = state.runs.saturating_sub(1);
        if let Some((offset, _)) = &self.user {
            state.taken.remove(offset);
        }
        // The lock file is closed with the slot, which lets the user go to any bot.
    }
}

/// The lock of one user, if no other holder has it. The lock is on the open file, so that a bot
/// that dies gives its users back with it; the file itself stays, empty.
fn lock(dir: &Path, path: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)?;
    // SAFETY: flock on a descriptor this function owns.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked == 0 {
        return Ok(Some(file));
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(locks: &Path, count: u32) -> UidRange {
        UidRange {
            first_uid: 70_000,
            first_gid: 80_000,
            count,
            locks: locks.to_path_buf(),
        }
    }

    #[test]
    fn two_bots_on_a_host_never_hold_the_same_user() {
        let locks = tempfile::tempdir().unwrap();
        let one = UserSlots::new(Some(range(locks.path(), 3)), 8);
        let other = UserSlots::new(Some(range(locks.path(), 3)), 8);
        let a = one.take().unwrap();
        let b = other.take().unwrap();
        let c = one.take().unwrap();
        let ids: std::collections::HashSet<Identity> =
            [&a, &b, &c].iter().map(|s| s.identity()).collect();
        assert_eq!(ids.len(), 3, "{ids:?}");
        assert!(ids.contains(&Identity::Drop {
            uid: 70_000,
            gid: 80_000
        }));
        // The range is spent: neither bot gets a fourth user.
        assert!(matches!(
            other.take(),
            Err(NoSlot::RangeTaken { count: 3, .. })
        ));
        // One given back is the other bot's to take.
        let freed = b.identity();
        drop(b);
        let d = one.take().unwrap();
        assert_eq!(d.identity(), freed);
        drop((a, c, d));
    }

    #[test]
    fn runs_are_counted_on_both_paths() {
        let counted = UserSlots::new(None, 2);
        let a = counted.take().unwrap();
        let _b = counted.take().unwrap();
        assert_eq!(a.identity(), Identity::NewUserNamespace);
        assert!(matches!(counted.take(), Err(NoSlot::Busy(2))));
        drop(a);
        assert!(counted.take().is_ok());
    }
}
