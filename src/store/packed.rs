//! Compression of stored values: a record or vector from `PACK_FROM` bytes on is kept as a zstd
//! frame, made with a compression context each thread keeps. sled's own compression makes a
//! fresh context for every write it logs, and that cost a third of a cycle's time; stores made
//! before this keep sled's compression as well and read either form. Values are read back
//! whichever way they were written: a zstd frame starts with its magic number, which neither a
//! JSON record (`{`) nor a unit vector (its first component is at most 1 in size) can.

use std::borrow::Cow;
use std::cell::RefCell;

/// Smaller values are kept as they are: zstd's frame would outweigh what it saves.
const PACK_FROM: usize = 256;

/// zstd's level: 3 (its default) shrinks JSON about threefold at a few microseconds a record.
const LEVEL: i32 = 3;

/// The most a stored value may unpack to (a record is far smaller; this bounds a damaged one).
/// `workspace.max_file_bytes` is held below it.
pub const UNPACKED_MAX: usize = 1 << 30;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

thread_local! {
    static COMPRESSOR: RefCell<zstd::block::Compressor> = RefCell::new(zstd::block::Compressor::new());
    static DECOMPRESSOR: RefCell<zstd::block::Decompressor> =
        RefCell::new(zstd::block::Decompressor::new());
}

/// `raw` as it is to be stored: compressed when that makes it smaller.
pub(crate) fn pack(raw: Vec<u8>) -> Vec<u8> {
    if raw.len() < PACK_FROM {
        return raw;
    }
    let packed = COMPRESSOR.with(|compressor| compressor.borrow_mut().compress(&raw, LEVEL));
    match packed {
        Ok(packed) if packed.len() < raw.len() => packed,
        _ => raw,
    }
}

/// `pack`, for a value whose own bytes may look like a zstd frame (a workspace file may be a
/// `.zst`): such a value is always framed, so that a stored value that looks like a frame is one.
/// Fails (rather than store it ambiguous) only if zstd cannot get memory for its buffers.
pub(crate) fn pack_any(raw: Vec<u8>) -> Result<Vec<u8>, String> {
    if !raw.starts_with(&ZSTD_MAGIC) {
        return Ok(pack(raw));
    }
    COMPRESSOR
        .with(|compressor| compressor.borrow_mut().compress(&raw, LEVEL))
        .map_err(|e| format!("a value could not be compressed: {e}"))
}

/// The length of a stored value before `pack`, read from the frame's header (no decompression).
pub(crate) fn unpacked_len(stored: &[u8]) -> u64 {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return stored.len() as u64;
    }
    match zstd::zstd_safe::get_frame_content_size(stored) {
        size if size <= UNPACKED_MAX as u64 => size,
        _ => stored.len() as u64,
    }
}

/// A stored value as it was before `pack`.
pub(crate) fn unpack(stored: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return Ok(Cow::Borrowed(stored));
    }
    let size = zstd::zstd_safe::get_frame_content_size(stored);
    let size = usize::try_from(size)
        .ok()
        .filter(|size| *size <= UNPACKED_MAX)
        .ok_or_else(|| format!("a compressed value gives no usable size ({size})"))?;
    DECOMPRESSOR
        .with(|decompressor| decompressor.borrow_mut().decompress(stored, size))
        .map(Cow::Owned)
        .map_err(|e| format!("a compressed value cannot be read: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_as_they_went_in_and_only_large_ones_are_compressed() {
        let small = br#"{"v":1,"data":3}"#.to_vec();
        assert_eq!(pack(small.clone()), small);
        let record =
            serde_json::to_vec(&serde_json::json!({"v": 1, "data": "word ".repeat(400)})).unwrap();
        let packed = pack(record.clone());
        assert!(packed.len() * 4 < record.len(), "{} bytes", packed.len());
        assert_eq!(unpack(&packed).unwrap(), record.as_slice());
        assert_eq!(unpack(&small).unwrap(), small.as_slice());
        // What does not compress is kept as it is.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        assert_eq!(pack(noise.clone()), noise);
        assert_eq!(unpacked_len(&packed), record.len() as u64);
        assert_eq!(unpacked_len(&small), small.len() as u64);
        // A value that looks like a frame is framed, even when that makes it larger.
        let looks_packed = packed.clone();
        let framed = pack_any(looks_packed.clone()).unwrap();
        assert_ne!(framed, looks_packed);
        assert_eq!(unpack(&framed).unwrap(), looks_packed.as_slice());
        // A damaged frame is an error, not a panic.
        let mut damaged = packed.clone();
        damaged.truncate(packed.len() / 2);
        assert!(unpack(&damaged).is_err());
    }
}
