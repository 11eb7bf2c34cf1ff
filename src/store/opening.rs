//! Opening sled for the store: the settings a store keeps from its creation and the wait
//! (`LOCK_WAIT`) for a directory another handle still holds.
//!
//! `created_setting` reads sled's `conf` file, so a store sled compressed (made before `packed`, at
//! `COMPRESSION_LEVEL`) opens as it was, and so does one made with sled's default 512 KiB log
//! segments. New stores get `SEGMENT_BYTES` segments: sled reclaims a segment only once at most
//! half of it is live, and with small segments a store of many agents kept seven to eight times its
//! live records on disk. Larger segments cost memory, since sled keeps a write buffer the size of a
//! segment for each segment with writes under way (two to five at once in a soak).

use std::path::Path;

use super::StoreError;

/// The size of the segments sled's log is made of, in new stores. sled reclaims a segment only
/// once at most half of it is live, and with its default (512 KiB) a store of many agents
/// cycling kept seven to eight times its live records on disk; with 8 MiB segments, about four
/// times (see the README's store figures). sled allocates a write buffer the size of a segment for
/// each segment and frees it only once its writes are done and no thread can still see it: a
/// soak of 300 agents held two to five at once, so 16 MiB segments swung the bot's memory by
/// 50 MiB and more.
pub(super) const SEGMENT_BYTES: usize = 8 << 20;

/// How long `Store::open` waits for another handle on the same directory to go away.
pub(super) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// zstd's level for what sled writes in stores made with sled's compression (before `packed`):
/// sled compresses every record it logs with a fresh context, and at its default (5) setting up
/// and searching took a fifth of a cycle's own time. sled does not store the level, so any store
/// opens with it.
const COMPRESSION_LEVEL: i32 = 3;

/// Opens sled, waiting briefly when the directory is still locked: a process that just exited (or
/// a handle just dropped) can hold sled's file lock for a moment while its flusher thread stops.
pub(super) fn open_waiting_for_lock(
    dir: &Path,
    cache_bytes: u64,
) -> Result<crate::store::kv::Db, StoreError> {
    // New stores leave compression to `packed`, value by value with a kept context; a store
    // sled compressed must be opened that way for good.
    let compress = created_setting(dir, "use_compression").map(|value| value == "true");
    let compress = compress.unwrap_or(false);
    // sled fixes the segment size when a store is created and refuses another one later.
    let segment_bytes = created_setting(dir, "segment_size")
        .and_then(|value| value.parse().ok())
        .unwrap_or(SEGMENT_BYTES);
    let started = std::time::Instant::now();
    loop {
        match sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .use_compression(compress)
            .compression_factor(COMPRESSION_LEVEL)
            .segment_size(segment_bytes)
            .open()
        {
            Ok(db) => return Ok(crate::store::kv::Db::from_sled(db)),
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if started.elapsed() >= LOCK_WAIT {
                    return Err(StoreError::Locked(dir.to_path_buf()));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A setting sled wrote beside the store in `dir` when it was created (`use_compression`,
/// `segment_size`), as text; `None` for a new store. sled fixes both when a store is created and
/// refuses to open it with others, so a store keeps what it was made with. New stores are made
/// without compression (their records are compressed by `packed` instead: records are JSON and
/// text, which zstd shrinks about threefold) and with `SEGMENT_BYTES` segments.
pub(super) fn created_setting(dir: &Path, name: &str) -> Option<String> {
    // The settings are text lines ("name: value") followed by a binary checksum.
    let settings = std::fs::read(dir.join("conf")).ok()?;
    String::from_utf8_lossy(&settings)
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|value| value.trim().to_string())
}
