//! One counter of a process read from Linux's `/proc` (`io`, `status`): what the store's disk
//! report and the benchmarks measure a run by.

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
}
