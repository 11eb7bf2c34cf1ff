//! Token counting with tiktoken-rs: one shared BPE per encoding, and an estimate for models it doesn't know.

use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
use tiktoken_rs::CoreBPE;

use crate::core::prompt::TokenCounter;

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
        // encode_ordinary treats special-token text as plain text, so model output cannot make it fail.
        let n = self.bpe.encode_ordinary(text).len();
        n + n * self.margin_percent / 100
    }
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
}
