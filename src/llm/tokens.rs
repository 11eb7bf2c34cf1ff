//! Token counting with tiktoken-rs (`TiktokenCounter`): one shared BPE per encoding (`for_model`,
//! `warm_up`), and for models it does not know cl100k plus `UNKNOWN_MODEL_MARGIN_PERCENT`, since
//! local models' tokenizers tend to make more tokens.
//!
//! A cycle's prompt repeats most of the one before, so counts of texts of `REMEMBERED_FROM_BYTES`
//! or more are remembered per encoding (`SEEN`, keyed by a foldhash of the text with a seed per
//! process, at most `REMEMBERED_AT_MOST`, then started again). Texts of `SPLIT_FROM_BYTES` or more
//! are counted a line at a time (`lines_for_counting` cuts only after a newline followed by a
//! character other than a space, found with memchr; the encodings never join tokens across such a
//! cut, so the sum is exact). The Progress section, which grows at its end, and the recalled
//! memories, whose lines mostly come back in another order, are thus not encoded whole each cycle.

use std::hash::BuildHasher;
use std::sync::{LazyLock, Mutex, MutexGuard};

use foldhash::HashMap;

use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
use tiktoken_rs::CoreBPE;

use crate::core::message::TokenCounter;
use crate::locks::LockRecovered;

/// Counts with the model's own encoding when tiktoken knows the model; otherwise counts with
/// cl100k and adds a safety margin, since local models' tokenizers tend to produce more tokens.
#[derive(Clone, Copy)]
pub struct TiktokenCounter {
    bpe: &'static CoreBPE,
    margin_percent: usize,
    exact: bool,
}

/// Extra tokens assumed for unknown tokenizers, so the prompt errs on the small side.
const UNKNOWN_MODEL_MARGIN_PERCENT: usize = 20;

impl TiktokenCounter {
    pub fn for_model(model: &str) -> Self {
        match get_tokenizer(model) {
            Some(Tokenizer::O200kBase | Tokenizer::O200kHarmony) => TiktokenCounter {
                bpe: tiktoken_rs::o200k_base_singleton(),
                margin_percent: 0,
                exact: true,
            },
            Some(Tokenizer::Cl100kBase) => TiktokenCounter {
                bpe: tiktoken_rs::cl100k_base_singleton(),
                margin_percent: 0,
                exact: true,
            },
            _ => TiktokenCounter {
                bpe: tiktoken_rs::cl100k_base_singleton(),
                margin_percent: UNKNOWN_MODEL_MARGIN_PERCENT,
                exact: false,
            },
        }
    }

    /// Whether counts are exact for this model or an estimate.
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// Builds this counter's shared encoding now (0.1–0.2 s) rather than inside the first cycle.
    /// Only the encoding the model needs is built: each one holds tens of megabytes.
    pub fn warm_up(&self) {
        let _ = self.bpe.encode_ordinary("warm");
    }

    /// The token ids of `text` (for prefix comparisons, as a provider's prompt cache makes them).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }
}

impl std::fmt::Debug for TiktokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiktokenCounter")
            .field("exact", &self.exact)
            .field("margin_percent", &self.margin_percent)
            .finish()
    }
}

impl TokenCounter for TiktokenCounter {
    fn count(&self, text: &str) -> usize {
        let n = encoded_len(self.bpe, text);
        n + n * self.margin_percent / 100
    }
}

/// The encoded lengths of the longer texts counted lately, for every encoding: (encoding, hash,
/// length in bytes) → tokens. A cycle's prompt repeats most of the one before (the system prompt,
/// the steps shown, their lines) and is built twice when memory is on, and hashing a text costs
/// a small fraction of encoding it. foldhash rather than the standard SipHash: hashing the lines
/// of every prompt twice a cycle was a tenth of a cycle's own time with SipHash.
static SEEN: Mutex<Option<HashMap<SeenText, usize>>> = Mutex::new(None);
/// The seed texts are hashed with, random per process: a model's output cannot be shaped to
/// collide with another text's count without knowing it.
static TEXT_HASH: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);
/// A counted text: its encoding (by address), its hash and its length in bytes.
type SeenText = (usize, u64, usize);
/// Shorter texts are encoded each time: hashing saves little on them. A prompt's Progress lines are
/// mostly 50 to 200 bytes and all but one come back next cycle; encoding them again was most of the
/// counting time (the pre-tokenizer's regex dominates a short text's cost), so they are remembered.
const REMEMBERED_FROM_BYTES: usize = 32;
/// At this many entries the memory starts again, which bounds it (about 0.5 MiB).
const REMEMBERED_AT_MOST: usize = 16_384;

fn seen() -> MutexGuard<'static, Option<HashMap<SeenText, usize>>> {
    SEEN.lock_recovered()
}

/// Longer texts are counted line by line: a prompt's Progress section is one long text that
/// changes at its end each cycle, so its lines are encoded (and the long ones remembered) where
/// the whole would be encoded again every time. Shorter texts too: the recalled memories are one
/// message whose lines mostly come back next cycle in another order, and the newest step is
/// counted on its own and then as lines of the Progress section.
const SPLIT_FROM_BYTES: usize = 256;

fn encoded_len(bpe: &'static CoreBPE, text: &str) -> usize {
    if text.len() < SPLIT_FROM_BYTES {
        return remembered_len(bpe, text);
    }
    lines_for_counting(text)
        .map(|piece| remembered_len(bpe, piece))
        .sum()
}

/// `text` cut after each newline that a character other than whitespace or `/` follows. The
/// encodings' pre-tokenizers never join such a newline to what follows it: a run of newlines and
/// a newline with indentation (any Unicode space) stay together, and so do punctuation, newlines
/// and slashes (o200k has tokens such as `"};\n//"`). So the pieces' counts add up to the whole's
/// exactly.
fn lines_for_counting(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = piece_end(rest);
        let (piece, after) = rest.split_at(cut);
        rest = after;
        Some(piece)
    })
}

/// Where the first piece of `text` ends: just after the first newline that is followed by a
/// character other than whitespace or `/`, or at the end. memchr finds the newlines, so only the
/// character after each one is decoded.
fn piece_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(found) = memchr::memchr(b'\n', &bytes[from..]) {
        let after = from + found + 1;
        match text[after..].chars().next() {
            Some(next) if !next.is_whitespace() && next != '/' => return after,
            Some(_) => from = after,
            None => break,
        }
    }
    text.len()
}

fn remembered_len(bpe: &'static CoreBPE, text: &str) -> usize {
    // encode_ordinary treats special-token text as plain text, so model output cannot make it fail.
    if text.len() < REMEMBERED_FROM_BYTES {
        return bpe.encode_ordinary(text).len();
    }
    let key = (
        std::ptr::from_ref(bpe) as usize,
        TEXT_HASH.hash_one(text),
        text.len(),
    );
    if let Some(&tokens) = seen().as_ref().and_then(|counts| counts.get(&key)) {
        return tokens;
    }
    let tokens = bpe.encode_ordinary(text).len();
    let mut guard = seen();
    let counts = guard.get_or_insert_with(HashMap::default);
    if counts.len() >= REMEMBERED_AT_MOST {
        counts.clear();
    }
    counts.insert(key, tokens);
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_count_exactly_and_unknown_ones_estimate_high() {
        let known = TiktokenCounter::for_model("gpt-4o-mini");
        assert!(known.is_exact());
        assert_eq!(known.count("hello world"), 2);
        let unknown = TiktokenCounter::for_model("smollm2");
        assert!(!unknown.is_exact());
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        assert!(unknown.count(&text) > TiktokenCounter::for_model("gpt-4").count(&text));
        assert!(known.count("<|endoftext|>") > 1);
    }

    #[test]
    fn a_long_text_counted_line_by_line_counts_what_the_whole_encodes_to() {
        let mut text = String::from("### Progress\n\n");
        for i in 0..120 {
            text.push_str(&format!(
                "- Step {i}: `write_file(filename=\"notes/{i}.md\")` → File notes/{i}.md written. ¿Qué tal? 数字 {i}.\n"
            ));
            if i % 7 == 0 {
                text.push_str("\n  indented: a line of prose, then punctuation...\n\n\n");
            }
            if i % 11 == 0 {
                text.push_str("```json\n{\"a\": [1, 2, 3]}\n```\n\t tabbed\r\nwindows line\n");
            }
            if i % 13 == 0 {
                // Punctuation, a newline and slashes are one pre-token in o200k; so are a newline
                // and a following Unicode space or vertical tab.
                text.push_str("fn x() {};\n// note\nx)\n// more\ngo ->\n/tmp/a\n\u{a0}\n\u{3000}\n\u{b}\nend\n");
            }
        }
        assert!(text.len() > SPLIT_FROM_BYTES);
        assert!(lines_for_counting(&text).count() > 100);
        assert_eq!(lines_for_counting(&text).collect::<String>(), text);
        for model in ["gpt-4o-mini", "gpt-4"] {
            let counter = TiktokenCounter::for_model(model);
            assert_eq!(
                counter.count(&text),
                counter.bpe.encode_ordinary(&text).len(),
                "{model}"
            );
        }
    }

    #[test]
    fn a_remembered_count_is_the_encodings_own_and_the_memory_stays_bounded() {
        let counter = TiktokenCounter::for_model("gpt-4o-mini");
        let text = "A step the prompt shows again and again, counted each cycle. ".repeat(10);
        let first = counter.count(&text);
        assert_eq!(first, counter.bpe.encode_ordinary(&text).len());
        assert_eq!(counter.count(&text), first);
        // Another encoding's count of the same text is its own.
        let other = TiktokenCounter::for_model("gpt-4");
        assert_eq!(other.count(&text), other.bpe.encode_ordinary(&text).len());
        for i in 0..REMEMBERED_AT_MOST + 10 {
            counter.count(&format!("{i} {text}"));
        }
        let held = seen().as_ref().map_or(0, |counts| counts.len());
        assert!(held <= REMEMBERED_AT_MOST, "{held} counts held");
    }
}
