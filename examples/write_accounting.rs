//! Shows how Linux counts a process's `write_bytes` against what reaches the disk, for writes
//! shaped like sled's: appends of about 51 KB, each synced with `sync_file_range`, into a new file,
//! and over a file first written in one write and still cached (sled reuses its log segments).
//!
//! `cargo run --release --example write_accounting [DIR]` (the current folder by default; a
//! folder on tmpfs has no disk to count). The kernel counts a page-cache folio whole as it
//! becomes dirty, so where the file is cached in large folios a small write counts the folio.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use autothread::ops::proc_counters::{device_bytes_written, proc_counter};

const FILE_BYTES: u64 = 64 << 20;
const WRITE_BYTES: usize = 51_000;

/// Writes `FILE_BYTES` into `file` in appends of `chunk` bytes, each synced as sled syncs its log
/// buffers, and prints what the process and the disk counted.
fn append_synced(label: &str, chunk: usize, file: &std::fs::File, dir: &std::path::Path) {
    let data: Vec<u8> = (0..chunk).map(|i| (i * 31 % 251) as u8).collect();
    let counted_before = proc_counter("self", "io", "write_bytes:").unwrap();
    let disk_before = device_bytes_written(dir).expect("a folder on a block device");
    let mut offset = 0u64;
    while offset + chunk as u64 <= FILE_BYTES {
        file.write_all_at(&data, offset).unwrap();
        // SAFETY: the descriptor is open for the whole call; the range is within the file.
        let synced = unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as libc::off64_t,
                chunk as libc::off64_t,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            )
        };
        assert_eq!(synced, 0, "sync_file_range failed");
        offset += chunk as u64;
    }
    file.sync_all().unwrap();
    let counted = proc_counter("self", "io", "write_bytes:").unwrap() - counted_before;
    let disk = device_bytes_written(dir).unwrap() - disk_before;
    println!(
        "{label}: {offset} bytes written; write_bytes counted {counted} ({:.2} times), the disk {disk} ({:.2} times, every writer on the machine)",
        counted as f64 / offset as f64,
        disk as f64 / offset as f64,
    );
}

fn main() {
    let base = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let dir = tempfile::tempdir_in(&base).unwrap();
    let new_file = |name: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join(name))
            .unwrap()
    };
    append_synced(
        "51 KB writes into a new file",
        WRITE_BYTES,
        &new_file("small"),
        dir.path(),
    );
    let whole = new_file("whole");
    append_synced(
        "one 64 MiB write into a new file",
        FILE_BYTES as usize,
        &whole,
        dir.path(),
    );
    append_synced("51 KB writes over it", WRITE_BYTES, &whole, dir.path());
}
