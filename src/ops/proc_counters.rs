//! One counter of a process read from Linux's `/proc` (`io`, `status`), and the bytes written to
//! the disk that holds a path (`/sys/dev/block`): what the store's disk report and the benchmarks
//! measure a run by.
//!
//! `proc_counter` serves the store's disk report, the benchmarks and `examples/store_churn.rs`.
//! `device_bytes_written` counts every writer on the machine; the load bench and the churn report
//! it beside the process's `write_bytes`, because the kernel counts a page-cache folio whole when
//! it becomes dirty and so counts more than reaches the disk (`examples/write_accounting.rs` shows
//! it).

/// The number after `field` (such as `"write_bytes:"` or `"VmRSS:"`) in `/proc/<process>/<file>`,
/// where `process` is a pid or `"self"`; sizes in `status` are in KiB. `None` where there is no
/// such file or field (off Linux, or once the process is gone).
pub fn proc_counter(process: &str, file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{process}/{file}")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Bytes written so far to the block device that holds `path`, by every writer on the machine
/// (its `stat` counts 512-byte sectors whatever the device's own sector size). `None` where the
/// path is on no block device (tmpfs, overlay) or off Linux.
///
/// A process's `write_bytes` counts page-cache folios as they become dirty, whole, so on kernels
/// that cache files in large folios a small write into a folio already cached counts the folio:
/// rewriting a cached file in 51 KB writes counted 42 times the bytes (`cargo run --release
/// --example write_accounting`). The device's count is what reached the disk.
pub fn device_bytes_written(path: &std::path::Path) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let device = std::fs::metadata(path).ok()?.dev();
        let stat = std::fs::read_to_string(format!(
            "/sys/dev/block/{}:{}/stat",
            libc::major(device),
            libc::minor(device)
        ))
        .ok()?;
        let sectors: u64 = stat.split_whitespace().nth(6)?.parse().ok()?;
        Some(sectors * 512)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}

/// The bytes this process has written to storage (`/proc/self/io`), where the kernel reports them.
pub fn bytes_written_by_this_process() -> Option<u64> {
    proc_counter("self", "io", "write_bytes:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_processs_counters_and_none_for_what_is_not_there() {
        let rss_kib = proc_counter("self", "status", "VmRSS:").unwrap();
        assert!(rss_kib > 0);
        assert!(proc_counter("self", "io", "write_bytes:").is_some());
        assert_eq!(proc_counter("self", "status", "NoSuchField:"), None);
        assert_eq!(proc_counter("self", "no-such-file", "VmRSS:"), None);
    }

    #[test]
    fn the_disk_under_a_written_file_counts_the_bytes_once_they_are_synced() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let Some(before) = device_bytes_written(dir.path()) else {
            panic!(
                "{} is on no block device with a /sys/dev/block counter",
                dir.path().display()
            );
        };
        let file = dir.path().join("written");
        std::fs::write(&file, vec![7u8; 4 << 20]).unwrap();
        std::fs::File::open(&file).unwrap().sync_all().unwrap();
        let after = device_bytes_written(dir.path()).unwrap();
        assert!(
            after - before >= 4 << 20,
            "the device counted {} bytes for a 4 MiB file synced",
            after - before
        );
        assert_eq!(
            device_bytes_written(std::path::Path::new("/no/such/path")),
            None
        );
    }
}
