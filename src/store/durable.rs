//! Group commit for the store's database: callers that need their writes on disk at about the
//! same moment share one sled flush instead of each sealing and syncing a log buffer of its own.
//!
//! Why: with hundreds of agents cycling, each step's flush wrote out a buffer holding a few
//! records and synced it, so each flush cost at least a page of disk writes, and a segment of
//! sled's log filled with many small buffers. A caller waits for a flush that began after its
//! own writes; every caller that arrives while a flush is under way is covered by the next one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Numbers the calls and remembers how far the last finished flush reaches.
#[derive(Debug, Default)]
struct Gate {
    /// The number of the last call taken; a call's writes come before its number.
    taken: AtomicU64,
    /// Every call numbered up to this is on disk. Held while a flush runs, so flushes of one
    /// database never overlap and the calls that wait behind one share the next.
    done: Mutex<u64>,
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
        if *done >= number {
            return Ok(());
        }
        // Every call numbered up to here made its writes before this flush begins.
        let covered = self.gate.taken.load(Ordering::SeqCst);
        super::count_durable_flush();
        self.db.flush()?;
        #[cfg(test)]
        self.gate.flushed.fetch_add(1, Ordering::SeqCst);
        *done = covered;
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
                        let done = *durable.gate.done.lock().unwrap();
                        assert!(done >= number_before, "{done} < {number_before}");
                    }
                });
            }
        });
        let calls = (threads * rounds) as u64;
        assert_eq!(durable.gate.taken.load(Ordering::SeqCst), calls);
        assert_eq!(*durable.gate.done.lock().unwrap(), calls);
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
    fn a_call_after_a_finished_flush_flushes_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let durable = Durable::new(db.clone());
        durable.flush_blocking().unwrap();
        db.insert("later", &[1u8][..]).unwrap();
        let before = *durable.gate.done.lock().unwrap();
        durable.flush_blocking().unwrap();
        assert_eq!(*durable.gate.done.lock().unwrap(), before + 1);
    }
}
