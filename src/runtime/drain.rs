//! The drain signal of a graceful shutdown (`Drain`): once it is raised (by
//! `Supervisor::shutdown`), actors finish the model calls and commands already under way but start
//! none (`carry_out` skips `CallModel`, `Execute` and `Recall`), store where they are, and stop.
//!
//! Nothing new needs to be remembered for the restart: an agent left thinking asks the model again,
//! and one whose approved command never started (no journal entry) runs it then, exactly as after a
//! crash, except that no call was cut off, so none is settled at its worst case.

use std::sync::Arc;

use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct Drain {
    raised: Arc<watch::Sender<bool>>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            raised: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl Drain {
    /// Raises the signal; every actor sees it, including those waiting for their next message.
    pub fn raise(&self) {
        self.raised.send_replace(true);
    }

    pub fn is_raised(&self) -> bool {
        *self.raised.borrow()
    }

    /// Resolves once the signal is raised (at once if it already is).
    pub async fn raised(&self) {
        let mut watching = self.raised.subscribe();
        // The sender lives as long as this `Drain`, so `wait_for` cannot fail.
        let _ = watching.wait_for(|raised| *raised).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_signal_and_waiters_wake() {
        let drain = Drain::default();
        let waiter = {
            let drain = drain.clone();
            tokio::spawn(async move { drain.raised().await })
        };
        assert!(!drain.is_raised());
        drain.clone().raise();
        assert!(drain.is_raised());
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the waiter wakes")
            .expect("the waiter does not panic");
        // Waiting after the fact returns at once.
        tokio::time::timeout(std::time::Duration::from_secs(5), drain.raised())
            .await
            .expect("already raised");
    }
}
