//! A run's output: each stream read to its end, its start kept and the rest counted, and the run
//! stopped once both together pass the flood mark.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The output read from a run so far, and a signal once it passes the flood mark.
pub(super) struct Flood {
    read: std::sync::atomic::AtomicU64,
    mark: u64,
    pub(super) passed: tokio::sync::Notify,
}

impl Flood {
    pub(super) fn new(mark: u64) -> Self {
        Flood {
            read: std::sync::atomic::AtomicU64::new(0),
            mark,
            passed: tokio::sync::Notify::new(),
        }
    }

    /// Counts `n` bytes read; true once the total passes the mark (and the signal is given).
    pub(super) fn add(&self, n: u64) -> bool {
        let total = self.read.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
        let passed = total > self.mark;
        if passed {
            self.passed.notify_one();
        }
        passed
    }

    pub(super) fn is_passed(&self) -> bool {
        self.read.load(std::sync::atomic::Ordering::Relaxed) > self.mark
    }
}

/// Reads a stream to its end, keeping the first `keep` bytes (as text) and counting the rest;
/// stops reading at a flood, so that the writer blocks until the run is stopped.
pub(super) async fn read_capped(
    stream: Option<impl AsyncRead + Unpin>,
    keep: usize,
    flood: Arc<Flood>,
) -> (String, u64) {
    let Some(mut stream) = stream else {
        return (String::new(), 0);
    };
    let mut kept = Vec::new();
    let mut dropped = 0u64;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = keep.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buffer[..room]);
                dropped += (n - room) as u64;
                if flood.add(n as u64) {
                    break;
                }
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), dropped)
}
