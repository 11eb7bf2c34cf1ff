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
    /// Of `prompt_tokens`, those the provider wrote to its prompt cache, which some models bill
    /// above the input price.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those served from the provider's prompt cache.
    #[serde(default)]
    pub cached_prompt_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl UsageTotals {
    /// The agent's average reply so far, once it has one.
    pub fn average_reply_tokens(&self) -> Option<u64> {
        (self.calls > 0).then(|| self.completion_tokens / self.calls)
    }

    /// How many of `prompt_tokens` the cache is likely to serve, at the hit rate seen so far.
    pub fn likely_cached(&self, prompt_tokens: u64) -> u64 {
        self.at_rate_seen(self.cached_prompt_tokens, prompt_tokens)
    }

    /// How many of `prompt_tokens` are likely written to the cache, at the rate seen so far.
    pub fn likely_written(&self, prompt_tokens: u64) -> u64 {
        self.at_rate_seen(self.cache_write_tokens, prompt_tokens)
    }

    /// `prompt_tokens` scaled by the share `part` was of the prompts seen so far.
    fn at_rate_seen(&self, part: u64, prompt_tokens: u64) -> u64 {
        if self.prompt_tokens == 0 {
            return 0;
        }
        let share = part.min(self.prompt_tokens) as u128;
        (prompt_tokens as u128 * share / self.prompt_tokens as u128) as u64
    }

    /// Adds one call's usage.
    pub fn add(&mut self, usage: &Usage) {
        self.calls = self.calls.saturating_add(1);
        self.prompt_tokens = self.prompt_tokens.saturating_add(usage.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(usage.completion_tokens);
        self.cached_prompt_tokens = self
            .cached_prompt_tokens
            .saturating_add(usage.cached_prompt_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(usage.cache_write_tokens);
    }
}
