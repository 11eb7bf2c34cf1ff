//! The `[budget]` section: budgets and rate limits in dollars, and prices (configured, free, or
//! from the catalogue). A model without a price has none: `Unpriced`, never free by default.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::models;
use crate::core::brake::BrakeLimits;
use crate::core::budget::{usd_to_micros, Micros, Price};

/// A model's price in dollars per million tokens, as providers publish them.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    pub input_per_million: f64,
    /// What input served from the provider's prompt cache costs; unset: the input price.
    #[serde(default)]
    pub cached_input_per_million: Option<f64>,
    /// What input written to the prompt cache costs, for a model that bills writes above the
    /// input price (`prompt_tokens_details.cache_write_tokens`); unset: the input price.
    #[serde(default)]
    pub cache_write_per_million: Option<f64>,
    /// Embedding models bill input only.
    #[serde(default)]
    pub output_per_million: f64,
}

/// A model that has no price: the bot refuses to spend on it rather than count it as free.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no price is known for model \"{0}\": add [budget.prices.\"{0}\"] with input_per_million and output_per_million, or, if it runs on a server you do not pay per token, list it in budget.free_models (or AUTOTHREAD_FREE_MODELS)")]
pub struct Unpriced(pub String);

/// What a person's daily budget counts (`budget.user_daily_scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum UserDailyScope {
    /// Their spend in the agent's server only: each server has its own daily budget per person.
    #[default]
    Server,
    /// Their spend in every server: one daily budget per person, which each server's limit for
    /// that person caps (a call made in a server is refused once the person's spend in all
    /// servers together reaches that server's limit), held across processes on a shared store.
    EveryServer,
}

/// Budgets in dollars (0 switches a budget or a rate limit off) and prices.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// An agent's budget when none is given at start.
    pub agent_default_usd: f64,
    /// The most an owner may give an agent at start; admins may set more with `/agent budget set`.
    pub agent_max_usd: f64,
    pub user_daily_usd: f64,
    /// Whether a person's daily budget counts their spend in each server apart (`server`) or in
    /// every server together (`every_server`).
    pub user_daily_scope: UserDailyScope,
    pub guild_daily_usd: f64,
    pub guild_monthly_usd: f64,
    /// From this share of its budget on, an agent's Approve ×N and continuous runs stop.
    pub soft_cap_percent: u8,
    pub user_spend_per_hour_usd: f64,
    pub guild_spend_per_hour_usd: f64,
    pub guild_calls_per_minute: u32,
    pub prices: BTreeMap<String, PriceConfig>,
    /// Models that cost nothing per token (a server you run yourself). Every model an agent can
    /// use needs a price, from `prices`, the built-in catalogue or this list; any other model is
    /// refused, so spend can never go unaccounted. Also AUTOTHREAD_FREE_MODELS (comma-separated).
    pub free_models: Vec<String>,
    /// The runaway brake parks an agent that spends faster than this per hour (0: off), measured
    /// over `runaway_window_minutes`.
    pub runaway_usd_per_hour: f64,
    /// … or uses more tokens than this per minute (0: off) over the same window.
    pub runaway_tokens_per_minute: u64,
    pub runaway_window_minutes: u32,
    /// … or whose newest this many steps repeat one another (0: off).
    pub runaway_repeat_steps: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            agent_default_usd: 1.0,
            agent_max_usd: 20.0,
            user_daily_usd: 5.0,
            user_daily_scope: UserDailyScope::Server,
            guild_daily_usd: 20.0,
            guild_monthly_usd: 200.0,
            soft_cap_percent: 80,
            user_spend_per_hour_usd: 2.0,
            guild_spend_per_hour_usd: 10.0,
            guild_calls_per_minute: 120,
            prices: BTreeMap::new(),
            free_models: Vec::new(),
            runaway_usd_per_hour: 2.0,
            runaway_tokens_per_minute: 100_000,
            runaway_window_minutes: 10,
            runaway_repeat_steps: 4,
        }
    }
}

impl BudgetConfig {
    /// The runaway brake's thresholds; `None` when every check is off.
    pub fn brake_limits(&self) -> Option<BrakeLimits> {
        let limits = BrakeLimits {
            usd_per_hour: usd_to_micros(self.runaway_usd_per_hour),
            tokens_per_minute: self.runaway_tokens_per_minute,
            window: chrono::Duration::minutes(i64::from(self.runaway_window_minutes.max(1))),
            repeat_steps: self.runaway_repeat_steps as usize,
        };
        let off = limits.usd_per_hour.is_zero()
            && limits.tokens_per_minute == 0
            && limits.repeat_steps == 0;
        (!off).then_some(limits)
    }

    /// The configured price, else free when listed in `free_models`, else the built-in one,
    /// else `None`: a model nobody priced, which no call may use.
    pub fn known_price(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.prices.get(model) {
            let price = Price::from_usd_per_million_cached(
                p.input_per_million,
                p.cached_input_per_million.unwrap_or(p.input_per_million),
                p.output_per_million,
            );
            return Some(match p.cache_write_per_million {
                Some(write) => price.with_cache_writes(write),
                None => price,
            });
        }
        if self.free_models.iter().any(|free| free == model) {
            return Some(Price::default());
        }
        models::known(model).map(|known| {
            let price = Price::from_usd_per_million_cached(
                known.input_per_million,
                known.cached_input_per_million,
                known.output_per_million,
            );
            match known.cache_write_per_million {
                Some(write) => price.with_cache_writes(write),
                None => price,
            }
        })
    }

    /// The price, or the sentence that says how to give the model one.
    pub fn price_of(&self, model: &str) -> Result<Price, Unpriced> {
        self.known_price(model)
            .ok_or_else(|| Unpriced(model.to_string()))
    }

    pub fn agent_default(&self) -> Micros {
        usd_to_micros(self.agent_default_usd)
    }

    pub fn agent_max(&self) -> Micros {
        usd_to_micros(self.agent_max_usd)
    }
}
