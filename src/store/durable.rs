//! Group commit for the store's database: callers that need their writes on disk at about the same
//! moment share one sled flush instead of each sealing and syncing a log buffer of its own. There
//! is one `Durable` per open store, shared by its clones and by the ledger, and every durable flush
//! goes through it.
//!
//! Why: with hundreds of agents cycling, each step's flush wrote out a buffer holding a few records
//! and synced it, so each flush cost at least a page of disk writes, and a segment of sled's log
//! filled with many small buffers. A caller waits for a flush that began after its own writes;
//! every caller that arrives while a flush is under way is covered by the next one.
//!
//! When the last flush was shared, callers are arriving faster than flushes finish, and the next
//! flush starts no sooner than `SHARED_FLUSH_GAP` after it: the callers of that gap share it. A
//! lone caller (the console, one agent) never waits, since its flushes cover one call each.
//!
//! A process serving many agents (the bot) also sets a window (`Durable::share_within`): a flush
//! starts no sooner than that long after the previous one started. Every sled flush writes and
//! syncs at least a page of disk for a few hundred bytes of records, because the next write dirties
//! the last page again, so flushes that each cover one call cost a page each; with a window the
//! flushes of a busy bot are at most one a window, and an idle one (the previous flush long ago)
//! flushes at once. Measured with 300 agents, a 10 ms window took 1.8 flushes and 120 KB written a
//! cycle down to 0.28 and 37 KB.
//!
//! One caller at a time flushes (`Flushed::flushing`, handed back by a drop guard). The others wait
//! on a condition variable (`flush_blocking`) or, from async code (`Durable::flush`, used by
//! `Store::flush` and the ledger's `make_durable`), on a `Notify` without holding a thread: a
//! waiter per blocking-pool thread once made 220 threads, and the memory sled frees only once every
//! thread has moved on piled up in the idle ones. What a caller does next is one decision
//! (`Flushed::turn_of`: its outcome, the flusher's role, or a wait), and a failed flush answers the
//! calls it was to cover with its error (`outcome_for`). The console's flushes run on the calling
//! thread (`flush_in_place`) rather than on the blocking pool, since its step has nothing else to
//! do until the flush ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::kv::{self, Backend, Error};
use crate::locks::LockRecovered;

/// The least time from the end of a shared flush to the start of the next one. 300 agents
/// cycling flushed about 950 times a second, 2.7 times a cycle, each a sync of the disk for a
/// few hundred bytes of records; waiting this long for company brought that to 1.2–1.5 a cycle
/// in two-minute runs (2.0 over a half-hour soak), for at most a few milliseconds on a step that
/// also waits for a model call.
const SHARED_FLUSH_GAP: Duration = Duration::from_millis(3);

/// What the last flush did, and whether one is under way.
#[derive(Debug, Default, Clone)]
struct Flushed {
    /// Every call numbered up to this is on disk.
    covered: u64,
    /// The last flush covered more than one call.
    shared: bool,
    ended: Option<Instant>,
    started: Option<Instant>,
    /// A caller is flushing (or waiting out the gap before it): every other caller waits for it
    /// rather than flushing beside it.
    flushing: bool,
    /// The last flush that failed: the calls it was to cover (up to this number) get its error.
    failed: Option<(u64, String)>,
}

impl Flushed {
    /// How long the next flush waits for company, at `now`: after a shared flush, what is left of
    /// the gap since it ended; with a `window`, what is left of it since the last flush started;
    /// the longer of the two.
    fn wait_before_next(&self, now: Instant, window: Duration) -> Option<Duration> {
        let rest_of = |span: Duration, since: Option<Instant>| {
            since.and_then(|at| span.checked_sub(now.saturating_duration_since(at)))
        };
        let after_shared = rest_of(SHARED_FLUSH_GAP, self.ended.filter(|_| self.shared));
        let in_window = rest_of(window, self.started);
        after_shared.max(in_window).filter(|rest| !rest.is_zero())
    }

    /// What call `number` does next: returns the outcome a flush decided for it, flushes itself
    /// (the role is taken here) when no flush is under way, or waits for the one that is.
    fn turn_of(&mut self, number: u64) -> Turn {
        match self.outcome_for(number) {
            Some(outcome) => Turn::Done(outcome),
            None if std::mem::replace(&mut self.flushing, true) => Turn::Wait,
            None => Turn::Flush,
        }
    }

    /// The outcome for call `number`, once a flush has decided it.
    fn outcome_for(&self, number: u64) -> Option<Result<(), Error>> {
        if self.covered >= number {
            return Some(Ok(()));
        }
        match &self.failed {
            Some((through, error)) if *through >= number => Some(Err(Error::Flush(error.clone()))),
            _ => None,
        }
    }
}

/// What a caller of a flush does next (`Flushed::turn_of`).
enum Turn {
    Done(Result<(), Error>),
    Flush,
    Wait,
}

/// Numbers the calls and remembers how far the last finished flush reaches.
#[derive(Debug, Default)]
struct Gate {
    /// The number of the last call taken; a call's writes come before its number.
    taken: AtomicU64,
    /// What the flushes did; one caller at a time flushes, and the others wait for it to change.
    state: Mutex<Flushed>,
    /// Wakes the callers of `flush_blocking` when a flush ends.
    ended: Condvar,
    /// Wakes the callers of `flush` when a flush ends. They wait without a thread: with a window,
    /// a busy bot had a blocked thread for every waiting step (220 threads), and the memory sled
    /// frees once every thread has moved on piled up in the idle ones (RSS tripled).
    ended_async: tokio::sync::Notify,
    /// The least time between the starts of two flushes, in microseconds (0: none).
    window_micros: AtomicU64,
    /// Async callers flush on their own thread rather than on the blocking pool (`flush_in_place`).
    in_place: AtomicBool,
    /// Flushes made, for tests to see that calls were shared.
    #[cfg(test)]
    flushed: AtomicU64,
}

/// A handle that makes everything written to one database before the call durable. Clones share
/// the gate, and every handle on one store must be a clone of the same one (`Store` hands it
/// out), or two gates would flush separately and share nothing.
#[derive(Clone)]
pub(crate) struct Durable {
    db: kv::Db,
    gate: Arc<Gate>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").finish_non_exhaustive()
    }
}

/// Hands the flusher's role back (and wakes the waiters) however the flush ended, so that a
/// panic in it cannot leave every later caller waiting.
struct FlushingRole<'a>(&'a Gate);

impl Drop for FlushingRole<'_> {
    fn drop(&mut self) {
        self.0.lock().flushing = false;
        self.0.ended.notify_all();
        self.0.ended_async.notify_waiters();
    }
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, Flushed> {
        self.state.lock_recovered()
    }

    fn number_next_call(&self) -> u64 {
        self.taken.fetch_add(1, Ordering::SeqCst) + 1
    }
}

impl Durable {
    pub(crate) fn new(db: kv::Db) -> Durable {
        Durable {
            db,
            gate: Arc::default(),
        }
    }

    /// Returns once everything this thread wrote before the call is on disk: at once if a flush
    /// that began after the call has already finished, else after the flush it makes or waits
    /// for. Blocks.
    pub(crate) fn flush_blocking(&self) -> Result<(), Error> {
        if self.db.backend() == Backend::Postgres {
            // Each write was durable when PostgreSQL committed it.
            return Ok(());
        }
        let number = self.gate.number_next_call();
        let mut state = self.gate.lock();
        loop {
            match state.turn_of(number) {
                Turn::Done(outcome) => return outcome,
                Turn::Flush => {
                    drop(state);
                    self.flush_as_the_flusher();
                    state = self.gate.lock();
                }
                Turn::Wait => {
                    state = self
                        .gate
                        .ended
                        .wait(state)
                        .unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }

    /// As `flush_blocking`, for async code: a caller that finds a flush under way waits for it
    /// without holding a thread; the one that flushes does so on the blocking pool, or on its own
    /// thread after `flush_in_place`.
    pub(crate) async fn flush(&self) -> Result<(), Error> {
        if self.db.backend() == Backend::Postgres {
            return Ok(());
        }
        let number = self.gate.number_next_call();
        loop {
            // Registered before the state is read, so a flush ending in between still wakes it.
            let ended = self.gate.ended_async.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let turn = self.gate.lock().turn_of(number);
            match turn {
                Turn::Done(outcome) => return outcome,
                Turn::Wait => ended.await,
                Turn::Flush if self.gate.in_place.load(Ordering::Relaxed) => {
                    self.flush_as_the_flusher();
                }
                Turn::Flush => {
                    let durable = self.clone();
                    tokio::task::spawn_blocking(move || durable.flush_as_the_flusher())
                        .await
                        .map_err(|e| Error::Flush(format!("the flush task failed: {e}")))?;
                }
            }
        }
    }

    /// One flush, by the caller that took the flusher's role: waits out the gap or the window
    /// (the callers that arrive meanwhile are covered too), flushes, and records the outcome.
    fn flush_as_the_flusher(&self) {
        let _role = FlushingRole(&self.gate);
        let window = Duration::from_micros(self.gate.window_micros.load(Ordering::Relaxed));
        let wait = self.gate.lock().wait_before_next(Instant::now(), window);
        if let Some(rest) = wait {
            std::thread::sleep(rest);
        }
        // Every call numbered up to here made its writes before this flush begins.
        let covered = self.gate.taken.load(Ordering::SeqCst);
        let started = Instant::now();
        super::count_durable_flush();
        let result = self.db.flush();
        #[cfg(test)]
        self.gate.flushed.fetch_add(1, Ordering::SeqCst);
        let mut state = self.gate.lock();
        match result {
            Ok(_) => {
                state.shared = covered - state.covered > 1;
                state.covered = covered;
                state.ended = Some(Instant::now());
                state.started = Some(started);
            }
            Err(error) => state.failed = Some((covered, error.to_string())),
        }
    }

    /// Makes async callers flush on their own thread, for every clone of this handle: for a
    /// process of one agent on a runtime of one thread (the console), whose step has nothing else
    /// to do until its flush ends (its effects wait for it). Handing the flush to the blocking
    /// pool and back cost each cycle two switches of threads. Not for a runtime that serves
    /// others meanwhile: the flush holds its thread until the disk has the writes.
    pub(crate) fn flush_in_place(&self) {
        self.gate.in_place.store(true, Ordering::Relaxed);
    }

    /// Makes every flush of this store start no sooner than `window` after the previous one
    /// started (`Duration::ZERO`: no window). For every clone of this handle.
    pub(crate) fn share_within(&self, window: Duration) {
        let micros = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
        self.gate.window_micros.store(micros, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_callers_share_flushes_and_each_returns_after_one_that_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = kv::Db::from_sled(sled::Config::new().path(dir.path()).open().unwrap());
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
                        let done = durable.gate.lock().covered;
                        assert!(done >= number_before, "{done} < {number_before}");
                    }
                });
            }
        });
        let calls = (threads * rounds) as u64;
        assert_eq!(durable.gate.taken.load(Ordering::SeqCst), calls);
        assert_eq!(durable.gate.lock().covered, calls);
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
            started: ended.map(|ago| now - ago),
            ..Flushed::default()
        };
        // A lone caller (each flush covering its own call) never waits: the console's steps.
        assert_eq!(
            after(false, Some(Duration::ZERO)).wait_before_next(now, Duration::ZERO),
            None
        );
        assert_eq!(
            after(true, None).wait_before_next(now, Duration::ZERO),
            None
        );
        // After a shared flush, the rest of the gap since it ended.
        assert_eq!(
            after(true, Some(Duration::ZERO)).wait_before_next(now, Duration::ZERO),
            Some(SHARED_FLUSH_GAP)
        );
        assert_eq!(
            after(true, Some(Duration::from_millis(1))).wait_before_next(now, Duration::ZERO),
            Some(SHARED_FLUSH_GAP - Duration::from_millis(1))
        );
        assert_eq!(
            after(true, Some(SHARED_FLUSH_GAP)).wait_before_next(now, Duration::ZERO),
            None
        );
        assert_eq!(
            after(true, Some(Duration::from_secs(1))).wait_before_next(now, Duration::ZERO),
            None
        );
    }

    #[test]
    fn with_a_window_a_flush_waits_for_what_is_left_of_it_since_the_last_one_started() {
        let now = Instant::now();
        let window = Duration::from_millis(5);
        let started = |ago: Option<Duration>, shared| Flushed {
            covered: 3,
            shared,
            ended: ago.map(|ago| now - ago),
            started: ago.map(|ago| now - ago - Duration::from_millis(1)),
            ..Flushed::default()
        };
        // The first flush of all never waits.
        assert_eq!(started(None, false).wait_before_next(now, window), None);
        // A lone caller waits too once there is a window: a busy bot's flushes cover one call each
        // far more often than not.
        assert_eq!(
            started(Some(Duration::ZERO), false).wait_before_next(now, window),
            Some(window - Duration::from_millis(1))
        );
        assert_eq!(
            started(Some(Duration::from_millis(4)), false).wait_before_next(now, window),
            None
        );
        // An idle store (its last flush long ago) flushes at once.
        assert_eq!(
            started(Some(Duration::from_secs(2)), true).wait_before_next(now, window),
            None
        );
        // After a shared flush, the longer of the gap and the window.
        let long_window = Duration::from_millis(10);
        assert_eq!(
            started(Some(Duration::ZERO), true).wait_before_next(now, long_window),
            Some(long_window - Duration::from_millis(1))
        );
        assert_eq!(
            started(Some(Duration::ZERO), true).wait_before_next(now, Duration::from_millis(2)),
            Some(SHARED_FLUSH_GAP)
        );
    }

    #[test]
    fn a_window_set_on_one_handle_holds_for_its_clones() {
        let dir = tempfile::tempdir().unwrap();
        let db = kv::Db::from_sled(sled::Config::new().path(dir.path()).open().unwrap());
        let durable = Durable::new(db);
        let clone = durable.clone();
        durable.share_within(Duration::from_millis(4));
        assert_eq!(clone.gate.window_micros.load(Ordering::Relaxed), 4_000);
        clone.share_within(Duration::ZERO);
        assert_eq!(durable.gate.window_micros.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_callers_share_flushes_and_each_returns_after_one_that_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = kv::Db::from_sled(sled::Config::new().path(dir.path()).open().unwrap());
        let durable = Durable::new(db.clone());
        durable.share_within(Duration::from_millis(2));
        let tasks: Vec<_> = (0..50u32)
            .map(|task| {
                let (durable, db) = (durable.clone(), db.clone());
                tokio::spawn(async move {
                    for round in 0..4u32 {
                        db.insert(format!("{task}/{round}"), &[1u8][..]).unwrap();
                        let number_before = durable.gate.taken.load(Ordering::SeqCst) + 1;
                        durable.flush().await.unwrap();
                        assert!(durable.gate.lock().covered >= number_before);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let state = durable.gate.lock().clone();
        assert_eq!(state.covered, 200);
        assert!(!state.flushing);
        let flushed = durable.gate.flushed.load(Ordering::SeqCst);
        assert!(
            (1..200).contains(&flushed),
            "{flushed} flushes for 200 calls"
        );
    }

    /// The console's flushes need no blocking thread: with the pool's only thread held until the
    /// flush has ended, the flush still ends (handed to the pool, it would wait for ever).
    #[test]
    fn an_in_place_flush_ends_with_the_blocking_pool_busy() {
        let dir = tempfile::tempdir().unwrap();
        let db = kv::Db::from_sled(sled::Config::new().path(dir.path()).open().unwrap());
        let durable = Durable::new(db.clone());
        durable.clone().flush_in_place();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (release, held) = std::sync::mpsc::channel::<()>();
            let busy = tokio::task::spawn_blocking(move || held.recv());
            db.insert("k", &[1u8][..]).unwrap();
            let flushed = tokio::time::timeout(Duration::from_secs(10), durable.flush()).await;
            release.send(()).unwrap();
            busy.await.unwrap().unwrap();
            assert!(
                matches!(flushed, Ok(Ok(()))),
                "the flush did not end: {flushed:?}"
            );
            assert_eq!(durable.gate.lock().covered, 1);
        });
    }

    #[test]
    fn a_failed_flush_answers_the_calls_it_was_to_cover_and_only_those() {
        let state = Flushed {
            covered: 4,
            failed: Some((9, "disk full".to_string())),
            ..Flushed::default()
        };
        assert!(matches!(state.outcome_for(3), Some(Ok(()))));
        let error = state.outcome_for(9).unwrap().unwrap_err().to_string();
        assert!(error.contains("disk full"), "{error}");
        // A call after the failed flush waits for the next one, which may succeed.
        assert!(state.outcome_for(10).is_none());
    }

    #[test]
    fn a_lone_callers_flushes_are_not_shared() {
        let dir = tempfile::tempdir().unwrap();
        let db = kv::Db::from_sled(sled::Config::new().path(dir.path()).open().unwrap());
        let durable = Durable::new(db.clone());
        for round in 0..3u8 {
            db.insert([round], &[1u8][..]).unwrap();
            durable.flush_blocking().unwrap();
            assert!(!durable.gate.lock().shared);
        }
        assert_eq!(durable.gate.flushed.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_call_after_a_finished_flush_flushes_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = kv::Db::from_sled(sled::Config::new().path(dir.path()).open().unwrap());
        let durable = Durable::new(db.clone());
        durable.flush_blocking().unwrap();
        db.insert("later", &[1u8][..]).unwrap();
        let before = durable.gate.lock().covered;
        durable.flush_blocking().unwrap();
        assert_eq!(durable.gate.lock().covered, before + 1);
    }
}
