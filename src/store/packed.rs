//! Compression of stored values: a record or vector from `PACK_FROM` bytes on is kept as a zstd
//! frame when that is smaller, made with a compression context each thread keeps, and a JSON record
//! smaller than `DICTIONARY_BELOW` with the store's dictionary from `DICTIONARY_FROM` bytes on.
//! This covers JSON records, memory vectors, workspace files and undo records
//! (`ahead::apply_write`) and the sets of writes stored ahead. sled's own compression makes a fresh
//! context for every write it logs, and each new context asks the processor for its features, which
//! a virtual machine answers slowly: that cost a third of a cycle's time. Stores made before this
//! keep sled's compression as well and read either form.
//!
//! Values are read back whichever way they were written: a zstd frame starts with its magic number,
//! which neither a JSON record (`{`) nor a unit vector (its first component is at most 1 in size)
//! can, and names the dictionary it was made with, if any; a frame naming another dictionary is
//! refused. A workspace file that itself starts like a frame is always framed (`pack_any`), and its
//! size is read from the frame header (`unpacked_len`), so the workspace limit counts what was
//! written. `UNPACKED_MAX` is the most a value may unpack to, and `workspace.max_file_bytes` stays
//! below it.
//!
//! The dictionary (`dictionary.zstd`) was made by `scripts/store-dictionary.py` from a load-bench
//! store's records with their free text, ids and times replaced, so it holds what records look
//! like, not what agents said. Once shipped (store schema 11) it never changes; a new one would get
//! a new id beside it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::LazyLock;

/// Smaller values are kept as they are: zstd's frame would outweigh what it saves.
const PACK_FROM: usize = 256;

/// zstd's level: 3 (its default) shrinks JSON about threefold at a few microseconds a record.
const LEVEL: i32 = 3;

/// The store's dictionary: what its JSON records look like (their keys, the names of commands
/// and states, the shape of times and ids), made by `scripts/store-dictionary.py` from the
/// records of a load-bench store with their free text replaced by neutral words and their ids
/// and times by random digits (keys, numbers and single lowercase words are kept, so the
/// fake Discord's user name is in it; nothing an agent wrote is). A record
/// of a few hundred bytes shares little with itself, so zstd alone barely shrinks it: on such a
/// store's records, an agent's record packed to 458 bytes rather than 843, a step to 118 rather
/// than 223, a trail entry to 120 rather than 216, and the small records kept as they were
/// (journal entries, bindings, decisions) to two fifths of their size.
const DICTIONARY: &[u8] = include_bytes!("dictionary.zstd");

/// The id the dictionary carries, written into every frame made with it. A dictionary never
/// changes once shipped: a new one gets a new id, and the old stays for reading.
const DICTIONARY_ID: u32 = 0x6174_0001;

/// JSON records (values that start like one) from this size on are packed with the dictionary
/// (its frame header is a dozen bytes, and records this small shrink by a third with it).
const DICTIONARY_FROM: usize = 48;

/// Larger records (chunks of folded records) share enough with themselves that the dictionary
/// no longer helps, and they are packed without it.
const DICTIONARY_BELOW: usize = 8 << 10;

/// The most a stored value may unpack to (a record is far smaller; this bounds a damaged one).
/// `workspace.max_file_bytes` is held below it.
pub const UNPACKED_MAX: usize = 1 << 30;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

static COMPRESSION_DICTIONARY: LazyLock<zstd::zstd_safe::CDict<'static>> =
    LazyLock::new(|| zstd::zstd_safe::create_cdict(DICTIONARY, LEVEL));
static DECOMPRESSION_DICTIONARY: LazyLock<zstd::zstd_safe::DDict<'static>> =
    LazyLock::new(|| zstd::zstd_safe::create_ddict(DICTIONARY));

// One context of each kind per thread serves frames made with the dictionary and without: each
// call says which, and a context keeps no dictionary from one call to the next.
thread_local! {
    static COMPRESSOR: RefCell<zstd::zstd_safe::CCtx<'static>> =
        RefCell::new(zstd::zstd_safe::create_cctx());
    static DECOMPRESSOR: RefCell<zstd::zstd_safe::DCtx<'static>> =
        RefCell::new(zstd::zstd_safe::create_dctx());
}

/// Why a value could not be packed or unpacked; its text names what zstd refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PackError {
    /// zstd could not compress a value (it found no memory for its buffers), with zstd's reason.
    #[error("a value could not be compressed: {0}")]
    Compress(&'static str),
    /// A stored frame could not be decompressed, with zstd's reason.
    #[error("a compressed value cannot be read: {0}")]
    Unreadable(&'static str),
    /// A stored frame's header gives no size, or one larger than any value the store writes.
    #[error("a compressed value gives no usable size ({0})")]
    NoSize(u64),
    /// A stored frame names a dictionary this version does not carry.
    #[error(
        "a value was compressed with zstd dictionary {0:#x}, which this version does not have"
    )]
    UnknownDictionary(u32),
}

/// `raw` as one zstd frame, made with the store's dictionary or without one.
fn compress(raw: &[u8], with_dictionary: bool) -> Result<Vec<u8>, PackError> {
    let mut packed = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()));
    COMPRESSOR
        .with(|context| {
            let mut context = context.borrow_mut();
            if with_dictionary {
                context.compress_using_cdict(&mut packed, raw, &COMPRESSION_DICTIONARY)
            } else {
                context.compress(&mut packed, raw, LEVEL)
            }
        })
        .map_err(|code| PackError::Compress(zstd::zstd_safe::get_error_name(code)))?;
    Ok(packed)
}

/// A frame's content, `size` bytes, read with the store's dictionary or without one.
fn decompress(stored: &[u8], size: usize, with_dictionary: bool) -> Result<Vec<u8>, PackError> {
    let mut unpacked = Vec::with_capacity(size);
    DECOMPRESSOR
        .with(|context| {
            let mut context = context.borrow_mut();
            if with_dictionary {
                context.decompress_using_ddict(&mut unpacked, stored, &DECOMPRESSION_DICTIONARY)
            } else {
                context.decompress(&mut unpacked, stored)
            }
        })
        .map_err(|code| PackError::Unreadable(zstd::zstd_safe::get_error_name(code)))?;
    Ok(unpacked)
}

/// `raw` as it is to be stored: compressed when that makes it smaller.
pub(crate) fn pack(raw: Vec<u8>) -> Vec<u8> {
    let with_dictionary =
        raw.starts_with(b"{") && (DICTIONARY_FROM..DICTIONARY_BELOW).contains(&raw.len());
    if !with_dictionary && raw.len() < PACK_FROM {
        return raw;
    }
    match compress(&raw, with_dictionary) {
        Ok(packed) if packed.len() < raw.len() => packed,
        _ => raw,
    }
}

/// `pack`, for a value whose own bytes may look like a zstd frame (a workspace file may be a
/// `.zst`): such a value is always framed, so that a stored value that looks like a frame is one.
/// Fails (rather than store it ambiguous) only if zstd cannot get memory for its buffers.
pub(crate) fn pack_any(raw: Vec<u8>) -> Result<Vec<u8>, PackError> {
    if !raw.starts_with(&ZSTD_MAGIC) {
        return Ok(pack(raw));
    }
    compress(&raw, false)
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
pub(crate) fn unpack(stored: &[u8]) -> Result<Cow<'_, [u8]>, PackError> {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return Ok(Cow::Borrowed(stored));
    }
    let size = zstd::zstd_safe::get_frame_content_size(stored);
    let size = usize::try_from(size)
        .ok()
        .filter(|size| *size <= UNPACKED_MAX)
        .ok_or(PackError::NoSize(size))?;
    match zstd::zstd_safe::get_dict_id_from_frame(stored) {
        0 => decompress(stored, size, false).map(Cow::Owned),
        DICTIONARY_ID => decompress(stored, size, true).map(Cow::Owned),
        other => Err(PackError::UnknownDictionary(other)),
    }
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

    #[test]
    fn small_records_are_packed_with_the_stores_dictionary_and_read_back() {
        assert_eq!(
            zstd::zstd_safe::get_dict_id_from_dict(DICTIONARY),
            DICTIONARY_ID
        );
        // A record shaped like a cycle's step, with text no dictionary has seen.
        let step = serde_json::to_vec(&serde_json::json!({"v": 1, "data": {
            "cycle": 7, "command": {"name": "read_file", "args": {"filename": "quarterly.csv"}},
            "reasoning": "The totals need checking against last quarter's figures.",
            "outcome": {"status": "success", "text": "region,total\nnorth,1200\nsouth,980"},
            "summary": null, "decided_by": "maria", "cost": 120}}))
        .unwrap();
        let packed = pack(step.clone());
        assert_eq!(
            zstd::zstd_safe::get_dict_id_from_frame(&packed),
            DICTIONARY_ID
        );
        let without = zstd::block::compress(&step, LEVEL).unwrap();
        assert!(
            packed.len() * 4 < without.len() * 3,
            "{} bytes with the dictionary, {} without",
            packed.len(),
            without.len()
        );
        assert_eq!(unpack(&packed).unwrap(), step.as_slice());
        assert_eq!(unpacked_len(&packed), step.len() as u64);
        // Records too small for a frame to pay stay as they are.
        let tiny = br#"{"v":1,"data":{"at":1}}"#.to_vec();
        assert_eq!(pack(tiny.clone()), tiny);
        // A frame made with a dictionary this version does not have is refused by its id.
        let mut foreign = zstd::block::Compressor::with_dict(
            DICTIONARY
                .iter()
                .enumerate()
                .map(|(at, byte)| if (4..8).contains(&at) { 0x11 } else { *byte })
                .collect(),
        );
        let foreign = foreign.compress(&step, LEVEL).unwrap();
        let refused = unpack(&foreign).unwrap_err().to_string();
        assert!(refused.contains("0x11111111"), "{refused}");
    }
}
