//! What an agent is charged in tokens: one call's usage as the provider reports it, and the
//! running totals an agent keeps of them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those the provider served from its prompt cache (billed lower).
    #[serde(default)]
    pub cached_prompt_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those served from the provider's prompt cache.
    #[serde(default)]
    pub cached_prompt_tokens: u64,
}

impl UsageTotals {
    /// The agent's average reply so far, once it has one.
    pub fn average_reply_tokens(&self) -> Option<u64> {
        (self.calls > 0).then(|| self.completion_tokens / self.calls)
    }

    /// How many of `prompt_tokens` the cache is likely to serve, at the hit rate seen so far.
    pub fn likely_cached(&self, prompt_tokens: u64) -> u64 {
        if self.prompt_tokens == 0 {
            return 0;
        }
        let share = self.cached_prompt_tokens.min(self.prompt_tokens) as u128;
        (prompt_tokens as u128 * share / self.prompt_tokens as u128) as u64
    }
}
