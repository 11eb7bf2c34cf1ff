//! Group commit for the store's database: callers that need their writes on disk at about the
//! same moment share one sled flush instead of each sealing and syncing a log buffer of its own.
//!
//! Why: with hundreds of agents cycling, each step's flush wrote out a buffer holding a few
//! records and synced it, so each flush cost at least a page of disk writes, and a segment of
//! sled's log filled with many small buffers. A caller waits for a flush that began after its
//! own writes; every caller that arrives while a flush is under way is covered by the next one.
//!
//! When the last flush was shared, callers are arriving faster than flushes finish, and the next
//! flush starts no sooner than `SHARED_FLUSH_GAP` after it: the callers of that gap share it. A
//! lone caller (the console, one agent) never waits, since its flushes cover one call each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The least time from the end of a shared flush to the start of the next one. 300 agents
/// cycling flushed about 950 times a second, 2.7 times a cycle, each a sync of the disk for a
/// few hundred bytes of records; waiting this long for company brought that to 1.2–1.5 a cycle
/// in two-minute runs (2.0 over a half-hour soak), for at most a few milliseconds on a step that
/// also waits for a model call.
const SHARED_FLUSH_GAP: Duration = Duration::from_millis(3);

/// What the last flush did.
#[derive(Debug, Default, Clone, Copy)]
struct Flushed {
    /// Every call numbered up to this is on disk.
    covered: u64,
    /// The last flush covered more than one call.
    shared: bool,
    ended: Option<Instant>,
}

impl Flushed {
    /// How long the next flush waits for company, at `now`: only after a shared flush, and only
    /// for what is left of the gap since it ended.
    fn wait_before_next(&self, now: Instant) -> Option<Duration> {
        let ended = self.ended.filter(|_| self.shared)?;
        SHARED_FLUSH_GAP
            .checked_sub(now.saturating_duration_since(ended))
            .filter(|rest| !rest.is_zero())
    }
}

/// Numbers the calls and remembers how far the last finished flush reaches.
#[derive(Debug, Default)]
struct Gate {
    /// The number of the last call taken; a call's writes come before its number.
    taken: AtomicU64,
    /// Held while a flush runs (and while it waits for the gap), so flushes of one database never
    /// overlap and the calls that wait behind one share the next.
    done: Mutex<Flushed>,
    /// Flushes made, for tests to see that calls were shared.
    #[cfg(test)]
    flushed: AtomicU64,
}

/// A handle that makes everything written to one database before the call durable. Clones share
/// the gate, and every handle on one store must be a clone of the same one (`Store` hands it
/// out), or two gates would flush separately and share nothing.
#[derive(Clone)]
pub(crate) struct Durable {
    db: sled::Db,
    gate: Arc<Gate>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").finish_non_exhaustive()
    }
}

impl Durable {
    pub(crate) fn new(db: sled::Db) -> Durable {
        Durable {
            db,
            gate: Arc::default(),
        }
    }

    /// Returns once everything this thread wrote before the call is on disk: at once if a flush
    /// that began after the call has already finished, else after the flush it makes or waits
    /// for. Blocks; async code calls it from the blocking pool.
    pub(crate) fn flush_blocking(&self) -> Result<(), sled::Error> {
        let number = self.gate.taken.fetch_add(1, Ordering::SeqCst) + 1;
        let mut done = self.gate.done.lock().unwrap_or_else(|p| p.into_inner());
        if done.covered >= number {
            return Ok(());
        }
        // Callers that arrive meanwhile queue on the lock and are covered by this flush.
        if let Some(rest) = done.wait_before_next(Instant::now()) {
            std::thread::sleep(rest);
        }
        // Every call numbered up to here made its writes before this flush begins.
        let covered = self.gate.taken.load(Ordering::SeqCst);
        super::count_durable_flush();
        self.db.flush()?;
        #[cfg(test)]
        self.gate.flushed.fetch_add(1, Ordering::SeqCst);
        *done = Flushed {
            shared: covered - done.covered > 1,
            covered,
            ended: Some(Instant::now()),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_callers_share_flushes_and_each_returns_after_one_that_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let durable = Durable::new(db.clone());
        let threads = 8;
        let rounds = 40;
        std::thread::scope(|s| {
            for t in 0..threads {
                let durable = durable.clone();
                let db = db.clone();
                s.spawn(move || {
                    for round in 0..rounds {
                        db.insert(format!("{t}/{round}"), &[1u8][..]).unwrap();
                        let number_before = durable.gate.taken.load(Ordering::SeqCst) + 1;
                        durable.flush_blocking().unwrap();
                        // The flush this call returned after covered a number at least its own.
                        let done = durable.gate.done.lock().unwrap().covered;
                        assert!(done >= number_before, "{done} < {number_before}");
                    }
                });
            }
        });
        let calls = (threads * rounds) as u64;
        assert_eq!(durable.gate.taken.load(Ordering::SeqCst), calls);
        assert_eq!(durable.gate.done.lock().unwrap().covered, calls);
        assert_eq!(db.len(), calls as usize);
        // Eight threads flushing at once share: a flush takes a sync of the disk, and every call
        // that arrives meanwhile waits for the next one rather than making its own.
        let flushed = durable.gate.flushed.load(Ordering::SeqCst);
        assert!(
            flushed >= 1 && flushed < calls,
            "{flushed} flushes for {calls} calls"
        );
    }

    #[test]
    fn only_a_flush_after_a_shared_one_waits_and_never_past_the_gap() {
        let now = Instant::now();
        let after = |shared, ended: Option<Duration>| Flushed {
            covered: 7,
            shared,
            ended: ended.map(|ago| now - ago),
        };
        // A lone caller (each flush covering its own call) never waits: the console's steps.
        assert_eq!(
            after(false, Some(Duration::ZERO)).wait_before_next(now),
            None
        );
        assert_eq!(after(true, None).wait_before_next(now), None);
        // After a shared flush, the rest of the gap since it ended.
        assert_eq!(
            after(true, Some(Duration::ZERO)).wait_before_next(now),
            Some(SHARED_FLUSH_GAP)
        );
        assert_eq!(
            after(true, Some(Duration::from_millis(1))).wait_before_next(now),
            Some(SHARED_FLUSH_GAP - Duration::from_millis(1))
        );
        assert_eq!(
            after(true, Some(SHARED_FLUSH_GAP)).wait_before_next(now),
            None
        );
        assert_eq!(
            after(true, Some(Duration::from_secs(1))).wait_before_next(now),
            None
        );
    }

    #[test]
    fn a_lone_callers_flushes_are_not_shared() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let durable = Durable::new(db.clone());
        for round in 0..3u8 {
            db.insert([round], &[1u8][..]).unwrap();
            durable.flush_blocking().unwrap();
            assert!(!durable.gate.done.lock().unwrap().shared);
        }
        assert_eq!(durable.gate.flushed.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_call_after_a_finished_flush_flushes_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let durable = Durable::new(db.clone());
        durable.flush_blocking().unwrap();
        db.insert("later", &[1u8][..]).unwrap();
        let before = durable.gate.done.lock().unwrap().covered;
        durable.flush_blocking().unwrap();
        assert_eq!(durable.gate.done.lock().unwrap().covered, before + 1);
    }
}
