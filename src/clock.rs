//! The clock seam: the runtime reads time and waits through it, so tests can fix and advance it.
//!
//! Only this module reads the wall clock (`Utc::now`, `Local::now`, `SystemTime::now`), so journal
//! stamps, decisions, memories, cards and ledger days share one clock that tests can fix;
//! `architecture::time_is_read_only_through_the_clock_seam` checks it. The rule covers dates, not
//! intervals: the retry backoff, the sandbox's wall clock, the drain's grace, the store's lock
//! wait, the timing of calls for metrics and governor's clock in the pacer still measure or wait
//! without the seam.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Waits for `duration` of this clock's time.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(duration))
    }
}
