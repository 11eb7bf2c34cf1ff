//! Lets go, every few seconds after a flush, of the kernel's cached pages of sled's log, so the
//! log's page cache stays bounded and a reused segment is written on fresh pages.
//!
//! Why: sled reuses its log's segments, and the kernel keeps a file's pages cached until memory
//! runs short, so a busy bot's page cache grew to the size of its log (in a container, page
//! cache counts against the memory limit). And the kernel (Linux 6.x on ext4 and others that
//! cache files in large folios) charges a process's `write_bytes` a whole cached folio as it
//! turns dirty, however little of it is written: sled's writes into reused segments were charged
//! 1.8 times what reached the disk over a 300-agent soak. Letting go after every flush made the
//! charge equal the disk's count, but sled reads back from its log whatever its own cache (8 MiB)
//! let go, and those reads then went to the disk, with readahead: 26 MB a second. Every
//! `RELEASE_EVERY`, the pages a segment kept since its last use are gone before sled reuses it,
//! and what sled reads often is read from the disk once in that time.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the log's cached pages are kept at least: a segment is reused long after this, and a
/// page sled reads often costs one read from the disk in this time.
const RELEASE_EVERY: Duration = Duration::from_secs(10);

/// The log file of an open sled database, whose clean cached pages can be let go.
#[derive(Debug)]
pub(crate) struct LogPages {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    file: std::fs::File,
    /// When the pages were last let go (or the log opened).
    released: Mutex<Instant>,
}

impl LogPages {
    /// The log of the sled database in `dir` (its file `db`); `None` where it cannot be opened
    /// (the store then works as before, its pages left to the kernel).
    pub(crate) fn of_store(dir: &Path) -> Option<LogPages> {
        let path = dir.join("db");
        match std::fs::File::open(&path) {
            Ok(file) => Some(LogPages {
                file,
                released: Mutex::new(Instant::now()),
            }),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot open the store's log to let go of its cached pages");
                None
            }
        }
    }

    /// Lets go of the log's pages if `RELEASE_EVERY` has passed since the last time, at `now`;
    /// called after a flush, when everything sled wrote is synced. Whether it did.
    pub(crate) fn let_go_if_due(&self, now: Instant) -> bool {
        {
            let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
            if now.saturating_duration_since(*released) < RELEASE_EVERY {
                return false;
            }
            *released = now;
        }
        self.let_go();
        true
    }

    /// Asks the kernel to drop the log's cached pages that are on disk already; dirty ones stay
    /// until written.
    fn let_go(&self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::io::AsRawFd;
            // SAFETY: the descriptor stays open for the call; offset 0 and length 0 cover the
            // whole file, and the advice only drops clean cached pages.
            let failed = unsafe {
                libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
            };
            if failed != 0 {
                tracing::debug!(errno = failed, "the kernel kept the store log's pages");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    /// How many of `file`'s pages the kernel holds in its cache, from `mincore` on a mapping
    /// that is never touched (so it faults nothing in).
    fn cached_pages(file: &std::fs::File) -> usize {
        use std::os::unix::io::AsRawFd;
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: a read-only shared mapping of an open file, unmapped before returning; its
        // pages are never read, only asked about.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(at, libc::MAP_FAILED, "mmap of the log");
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let mut resident = vec![0u8; len.div_ceil(page)];
            assert_eq!(libc::mincore(at, len, resident.as_mut_ptr()), 0, "mincore");
            libc::munmap(at, len);
            resident.iter().filter(|&&flags| flags & 1 == 1).count()
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_flushed_log_keeps_no_pages_in_the_kernels_cache_once_let_go() {
        // Not the temporary folder, which may be memory (tmpfs), whose pages cannot be let go.
        let beside_the_build = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
        std::fs::create_dir_all(&beside_the_build).unwrap();
        let dir = tempfile::tempdir_in(beside_the_build).unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        for n in 0u32..2_000 {
            db.insert(n.to_be_bytes(), vec![7u8; 300]).unwrap();
        }
        db.flush().unwrap();
        let log = LogPages::of_store(dir.path()).expect("sled's log file");
        let before = cached_pages(&log.file);
        assert!(before > 16, "the flushed log is cached ({before} pages)");
        log.let_go();
        let after = cached_pages(&log.file);
        assert!(after < before / 4, "{after} of {before} pages still cached");
        // The records are still there, read back from the disk.
        drop(db);
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        assert_eq!(db.get(1_999u32.to_be_bytes()).unwrap().unwrap().len(), 300);
    }

    #[test]
    fn the_pages_are_let_go_once_per_period_after_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let _db = sled::Config::new().path(dir.path()).open().unwrap();
        let log = LogPages::of_store(dir.path()).unwrap();
        let opened = *log.released.lock().unwrap();
        assert!(!log.let_go_if_due(opened + RELEASE_EVERY / 2));
        assert!(log.let_go_if_due(opened + RELEASE_EVERY));
        assert!(!log.let_go_if_due(opened + RELEASE_EVERY * 3 / 2));
        assert!(log.let_go_if_due(opened + RELEASE_EVERY * 2));
    }

    #[test]
    fn a_store_without_a_log_file_is_reported_rather_than_failing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(LogPages::of_store(dir.path()).is_none());
    }
}
