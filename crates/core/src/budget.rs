//! Money as the core sees it: prices, integer micro-dollar costs, what the agent is told about its
//! budget, the soft cap that ends unattended runs, and the cost estimate shown on each card.
//!
//! Amounts are integer micro-dollars (`u64`) everywhere, so sums are exact; dollars appear only
//! when text is rendered for people or the model.
//!
//! `Micros` is a newtype, so money cannot be mixed up with token counts. A `Price` has input,
//! cached-input (read), cache-write (for models that bill writes higher) and output rates; a
//! call is charged as its usage reports it (`cost_of`), reserved at its worst case (`cost`: no
//! read, everything written), and costs round up; `fit_reply` lowers a call's reply reserve to
//! what the budgets have left, down to a floor. `BudgetView` is what the core sees of the budgets
//! (`message` for the prompt, `soft_cap_reached`), `SpendNote` the card's cost line, `BudgetKind`
//! the four budgets a call is charged to.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::usage::Usage;
use super::usage::UsageTotals;

/// An amount of money in micro-dollars (one millionth of a US dollar): whole numbers, so sums
/// are exact, and a type of its own, so that money is never mixed up with token counts.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Micros(pub u64);

impl Micros {
    pub const ZERO: Micros = Micros(0);
    pub const MAX: Micros = Micros(u64::MAX);

    pub fn saturating_sub(self, other: Micros) -> Micros {
        Micros(self.0.saturating_sub(other.0))
    }

    pub fn saturating_add(self, other: Micros) -> Micros {
        Micros(self.0.saturating_add(other.0))
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::Add for Micros {
    type Output = Micros;
    fn add(self, other: Micros) -> Micros {
        Micros(self.0 + other.0)
    }
}

impl std::ops::AddAssign for Micros {
    fn add_assign(&mut self, other: Micros) {
        self.0 += other.0;
    }
}

/// The whole number of micro-dollars; `format_usd` is for people.
impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::iter::Sum for Micros {
    fn sum<I: Iterator<Item = Micros>>(iter: I) -> Micros {
        Micros(iter.map(|m| m.0).sum())
    }
}

pub const MICROS_PER_USD: u64 = 1_000_000;

/// A model's price, in micro-dollars per million tokens (so $0.15 per million is 150_000).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Price {
    pub input_per_million: u64,
    /// Input the provider served from its prompt cache (OpenAI: half the input price or less).
    #[serde(default)]
    pub cached_input_per_million: u64,
    pub output_per_million: u64,
    /// Input the provider wrote to its prompt cache, where the model bills that above the input
    /// price (Anthropic's models and OpenAI's newest: 1.25×); `None`: writes cost the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_million: Option<u64>,
}

/// The fewest reply tokens a call may be cut to so that it fits what the budget has left: enough
/// for a short JSON reply with one command. Below it the call is refused instead. (Reasoning
/// models think in their reply tokens and get a higher floor.)
pub const REPLY_FLOOR_TOKENS: u32 = 256;

/// How a call's reply reserve fits what its budgets have left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyFit {
    /// The reserve asked for fits.
    Whole(u32),
    /// Only a smaller reserve fits, still at least the floor (or what was asked).
    Lowered(u32),
    /// Not even the floor fits.
    Refused,
}

impl Price {
    /// From dollars per million tokens, as prices are published, with no cache discount.
    pub fn from_usd_per_million(input: f64, output: f64) -> Price {
        Price::from_usd_per_million_cached(input, input, output)
    }

    /// From dollars per million tokens: input, cached input and output.
    pub fn from_usd_per_million_cached(input: f64, cached_input: f64, output: f64) -> Price {
        Price {
            input_per_million: usd_to_micros(input).0,
            cached_input_per_million: usd_to_micros(cached_input).0,
            output_per_million: usd_to_micros(output).0,
            cache_write_per_million: None,
        }
    }

    /// This price with cache writes billed at `cache_write` dollars per million tokens.
    pub fn with_cache_writes(self, cache_write: f64) -> Price {
        Price {
            cache_write_per_million: Some(usd_to_micros(cache_write).0),
            ..self
        }
    }

    /// What a token written to the cache costs: never less than the input price, since a write
    /// is input the model read (a lower figure would be a typo that under-charges).
    fn cache_write_price(&self) -> u64 {
        self.cache_write_per_million
            .unwrap_or(self.input_per_million)
            .max(self.input_per_million)
    }

    /// The cost of a call in the worst case: no input served from the cache, and all of it
    /// written to the cache where the model bills writes higher. Rounded up to a whole
    /// micro-dollar so a ledger never under-charges.
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> Micros {
        self.cost_of(Usage {
            prompt_tokens,
            completion_tokens,
            cached_prompt_tokens: 0,
            cache_write_tokens: prompt_tokens,
        })
    }

    /// The cost of a call of which `cached_tokens` of the prompt came from the provider's cache
    /// and nothing was written to it.
    pub fn cost_with_cache(
        &self,
        prompt_tokens: u64,
        cached_tokens: u64,
        completion_tokens: u64,
    ) -> Micros {
        self.cost_of(Usage {
            prompt_tokens,
            completion_tokens,
            cached_prompt_tokens: cached_tokens,
            cache_write_tokens: 0,
        })
    }

    /// The cost of a call as the provider reports it: cached input at the read price, input
    /// written to the cache at the write price, the rest of the input at the input price.
    pub fn cost_of(&self, usage: Usage) -> Micros {
        let prompt = usage.prompt_tokens;
        // Reports of more cached or written tokens than the prompt had are held to the prompt.
        let cached = usage.cached_prompt_tokens.min(prompt);
        let written = usage.cache_write_tokens.min(prompt - cached);
        // A cached price above the input price would be a typo; never charge more for a cache hit.
        let cached_price = self.cached_input_per_million.min(self.input_per_million);
        let numerator = (prompt - cached - written) as u128 * self.input_per_million as u128
            + cached as u128 * cached_price as u128
            + written as u128 * self.cache_write_price() as u128
            + usage.completion_tokens as u128 * self.output_per_million as u128;
        let micros = numerator.div_ceil(1_000_000);
        Micros(u64::try_from(micros).unwrap_or(u64::MAX))
    }

    /// The reply reserve a call may have when `available` is all its budgets have left: the
    /// reserve asked for if its worst case fits, else the largest that fits down to `floor`,
    /// else `Refused`. The last calls of a small budget still go out, and the reservation made
    /// from the result never exceeds `available`.
    pub fn fit_reply(
        &self,
        prompt_tokens: u64,
        wanted: u32,
        floor: u32,
        available: Micros,
    ) -> ReplyFit {
        if self.cost(prompt_tokens, wanted as u64) <= available {
            return ReplyFit::Whole(wanted);
        }
        let floor = floor.min(wanted);
        if self.cost(prompt_tokens, floor as u64) > available {
            return ReplyFit::Refused;
        }
        // The largest reserve whose cost fits; costs grow with the reserve, so search.
        let (mut fits, mut too_many) = (floor, wanted);
        while too_many - fits > 1 {
            let middle = fits + (too_many - fits) / 2;
            if self.cost(prompt_tokens, middle as u64) <= available {
                fits = middle;
            } else {
                too_many = middle;
            }
        }
        ReplyFit::Lowered(fits)
    }

    pub fn is_free(&self) -> bool {
        self.input_per_million == 0 && self.output_per_million == 0
    }
}

/// Converts dollars (from config or a command) to micro-dollars; negative and NaN become zero.
pub fn usd_to_micros(usd: f64) -> Micros {
    if usd.is_finite() && usd > 0.0 {
        Micros((usd * MICROS_PER_USD as f64).round() as u64)
    } else {
        Micros::ZERO
    }
}

/// Dollars for people: cents at a dollar and above, otherwise two significant digits, so that
/// small per-step costs stay readable ($0.0021) and budgets look like money ($12.50).
pub fn format_usd(micros: Micros) -> String {
    if micros.is_zero() {
        return "$0.00".into();
    }
    let usd = micros.0 as f64 / MICROS_PER_USD as f64;
    if usd >= 1.0 {
        return format!("${usd:.2}");
    }
    let decimals = (1 - usd.log10().floor() as i32).max(2) as usize;
    format!("${usd:.decimals$}")
}

/// The spend from which an agent with budget `limit` no longer runs by itself.
pub fn soft_cap(limit: Micros, percent: u8) -> Micros {
    Micros((u128::from(limit.0) * u128::from(percent) / 100) as u64)
}

/// The budget situation of one agent at this moment, as the runtime read it from the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetView {
    /// The agent's model's price.
    pub price: Price,
    pub agent_limit: Micros,
    /// Settled plus reserved spend of this agent.
    pub agent_used: Micros,
    /// Settled spend of this agent: what its calls cost.
    pub agent_spent: Micros,
    /// What the tightest applicable budget (the agent's, its owner's day, the server's day or month)
    /// still allows.
    pub remaining: Micros,
    /// Which budget `remaining` comes from, and its limit.
    pub tightest: BudgetKind,
    pub tightest_limit: Micros,
    /// From this share of the agent's budget on, unattended runs stop (AutoGPT has no such cap).
    pub soft_cap_percent: u8,
}

/// Nearly exceeded: the agent is asked to finish up (AutoGPT: under $0.01).
pub const NEARLY_EXCEEDED_PERCENT: u64 = 10;
/// Very nearly exceeded: the agent is asked to shut down gracefully (AutoGPT: under $0.005).
pub const VERY_NEARLY_EXCEEDED_PERCENT: u64 = 5;

impl BudgetView {
    /// Whether Approve ×N and continuous mode must stop asking nobody.
    pub fn soft_cap_reached(&self) -> bool {
        if self.agent_limit.is_zero() {
            return true;
        }
        let used = self.agent_limit.saturating_sub(self.remaining);
        used.0 as u128 * 100 >= self.agent_limit.0 as u128 * self.soft_cap_percent as u128
    }

    /// Why unattended runs ended, for the card.
    pub fn soft_cap_note(&self) -> String {
        format!(
            "Approve ×N and continuous mode stop at {}% of the budget: {} left of {} ({}), so each step asks again.",
            self.soft_cap_percent,
            format_usd(self.remaining),
            format_usd(self.agent_limit),
            self.tightest.label()
        )
    }

    /// AutoGPT's budget lines, with thresholds relative to the agent's budget. "Exceeded" means the
    /// call being made is the last one the budget can pay for: the hard cap refuses the one after.
    pub fn message(&self, next_call_worst: Micros) -> String {
        let mut text = format!(
            "Your remaining API budget is {}",
            format_usd(self.remaining)
        );
        let limit = self.agent_limit.0 as u128;
        let remaining = self.remaining.0 as u128;
        if remaining < 2 * next_call_worst.0 as u128 {
            text.push_str("\nBUDGET EXCEEDED! SHUT DOWN!");
        } else if remaining * 100 <= limit * VERY_NEARLY_EXCEEDED_PERCENT as u128 {
            text.push_str("\nBudget very nearly exceeded! Shut down gracefully!");
        } else if remaining * 100 <= limit * NEARLY_EXCEEDED_PERCENT as u128 {
            text.push_str("\nBudget nearly exceeded. Finish up.");
        }
        text
    }
}

/// What a card says about money: the next step's likely and worst cost and what is left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendNote {
    pub next_step_likely: Micros,
    pub next_step_worst: Micros,
    pub remaining: Micros,
    pub agent_limit: Micros,
    pub agent_used: Micros,
    /// The budget `remaining` comes from when it is not the agent's own.
    #[serde(default)]
    pub limited_by: Option<String>,
}

/// Spend limits are paced in micro-dollars, one governor cell each; u32 cells allow up to about
/// $4,294 per hour, which config validation enforces.
pub const MAX_SPEND_PER_HOUR: Micros = Micros(u32::MAX as u64);

/// The budgets a call is charged to: the agent's own, its owner's day, its server's day and month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    Agent,
    OwnerDaily,
    GuildDaily,
    GuildMonthly,
}

/// The budget that stopped an agent, as it stood: what the pause card shows and offers to raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStop {
    pub kind: BudgetKind,
    pub limit: Micros,
    pub spent: Micros,
}

impl BudgetKind {
    /// How the budget is named to people, in the middle of a sentence.
    pub fn label(self) -> &'static str {
        match self {
            BudgetKind::Agent => "the agent's budget",
            BudgetKind::OwnerDaily => "the owner's daily budget",
            BudgetKind::GuildDaily => "the server's daily budget",
            BudgetKind::GuildMonthly => "the server's monthly budget",
        }
    }
}

impl SpendNote {
    /// The next step's cost from the last prompt's size: likely with the agent's average reply
    /// length so far (half the reserve before the first reply) and the shares of its prompts the
    /// provider served from and wrote to its cache so far; at most with the full reserve, no
    /// cache hit and, where writes are billed higher, the whole prompt written.
    pub fn estimate(
        view: &BudgetView,
        last_prompt_tokens: u64,
        usage: &UsageTotals,
        max_tokens: u32,
    ) -> SpendNote {
        let max_tokens = max_tokens as u64;
        let likely_reply = usage
            .average_reply_tokens()
            .unwrap_or(max_tokens / 2)
            .min(max_tokens);
        SpendNote {
            next_step_likely: view.price.cost_of(Usage {
                prompt_tokens: last_prompt_tokens,
                completion_tokens: likely_reply,
                cached_prompt_tokens: usage.likely_cached(last_prompt_tokens),
                cache_write_tokens: usage.likely_written(last_prompt_tokens),
            }),
            next_step_worst: view.price.cost(last_prompt_tokens, max_tokens),
            remaining: view.remaining,
            agent_limit: view.agent_limit,
            agent_used: view.agent_used,
            limited_by: (view.tightest != BudgetKind::Agent)
                .then(|| view.tightest.label().to_string()),
        }
    }

    /// One line for a card footer or the console.
    pub fn render(&self) -> String {
        let left = match &self.limited_by {
            Some(budget) => format!("{} left in {budget}", format_usd(self.remaining)),
            None => format!(
                "{} left of {}",
                format_usd(self.remaining),
                format_usd(self.agent_limit)
            ),
        };
        format!(
            "Next step ≈ {} (at most {}) · {left}",
            format_usd(self.next_step_likely),
            format_usd(self.next_step_worst)
        )
    }
}

/// The agent waits for a rate limit before its next model call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pacing {
    pub until: DateTime<Utc>,
    pub why: String,
}

impl Pacing {
    pub fn describe(&self) -> String {
        format!(
            "waiting until {} UTC for {}",
            self.until.format("%H:%M:%S"),
            self.why
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(limit: Micros, remaining: Micros) -> BudgetView {
        BudgetView {
            price: Price::from_usd_per_million(0.15, 0.60),
            agent_limit: limit,
            agent_used: limit.saturating_sub(remaining),
            agent_spent: limit.saturating_sub(remaining),
            remaining,
            tightest: BudgetKind::Agent,
            tightest_limit: limit,
            soft_cap_percent: 80,
        }
    }

    #[test]
    fn costs_are_exact_integers_rounded_up() {
        let price = Price::from_usd_per_million(0.15, 0.60);
        assert_eq!(price.input_per_million, 150_000);
        // 1000 prompt tokens at $0.15/M = 150 µ$; 500 completion tokens at $0.60/M = 300 µ$.
        assert_eq!(price.cost(1000, 500), Micros(450));
        // One token costs 0.15 µ$: rounded up to 1, never down to 0.
        assert_eq!(price.cost(1, 0), Micros(1));
        assert_eq!(Price::default().cost(10_000, 10_000), Micros(0));
        assert_eq!(
            price.cost_of(Usage {
                prompt_tokens: 2000,
                completion_tokens: 0,
                cached_prompt_tokens: 0,
                cache_write_tokens: 0,
            }),
            Micros(300)
        );
        assert_eq!(usd_to_micros(-1.0), Micros(0));
        assert_eq!(usd_to_micros(f64::NAN), Micros(0));
        assert_eq!(usd_to_micros(2.5), Micros(2_500_000));
    }

    #[test]
    fn dollars_read_like_money() {
        assert_eq!(format_usd(Micros(0)), "$0.00");
        assert_eq!(format_usd(Micros(12_500_000)), "$12.50");
        assert_eq!(format_usd(Micros(1_000_000)), "$1.00");
        assert_eq!(format_usd(Micros(130_000)), "$0.13");
        assert_eq!(format_usd(Micros(500_000)), "$0.50");
        assert_eq!(format_usd(Micros(2_100)), "$0.0021");
        assert_eq!(format_usd(Micros(5)), "$0.0000050");
    }

    #[test]
    fn the_agent_is_told_its_budget_with_thresholds_relative_to_it() {
        let dollar = MICROS_PER_USD;
        let small_call = 100;
        assert_eq!(
            view(Micros(dollar), Micros(500_000)).message(Micros(small_call)),
            "Your remaining API budget is $0.50"
        );
        assert_eq!(
            view(Micros(dollar), Micros(100_000)).message(Micros(small_call)),
            "Your remaining API budget is $0.10\nBudget nearly exceeded. Finish up."
        );
        assert_eq!(
            view(Micros(dollar), Micros(50_000)).message(Micros(small_call)),
            "Your remaining API budget is $0.050\nBudget very nearly exceeded! Shut down gracefully!"
        );
        // The same dollars are plenty for a bigger budget: thresholds scale with it.
        assert_eq!(
            view(Micros(100 * dollar), Micros(50_000 * 100)).message(Micros(small_call)),
            "Your remaining API budget is $5.00\nBudget very nearly exceeded! Shut down gracefully!"
        );
        assert_eq!(
            view(Micros(100 * dollar), Micros(50 * dollar)).message(Micros(small_call)),
            "Your remaining API budget is $50.00"
        );
        // Not enough for another call after this one: the hard cap will refuse it.
        assert_eq!(
            view(Micros(dollar), Micros(300_000)).message(Micros(200_000)),
            "Your remaining API budget is $0.30\nBUDGET EXCEEDED! SHUT DOWN!"
        );
    }

    #[test]
    fn soft_cap_is_a_share_of_the_agent_budget() {
        assert!(!view(Micros(1_000_000), Micros(201_000)).soft_cap_reached());
        assert!(view(Micros(1_000_000), Micros(200_000)).soft_cap_reached());
        assert!(view(Micros(0), Micros(0)).soft_cap_reached());
        let note = view(Micros(1_000_000), Micros(150_000)).soft_cap_note();
        assert!(
            note.contains("80%") && note.contains("$0.15 left of $1.00"),
            "{note}"
        );
    }

    #[test]
    fn card_estimate_uses_the_last_prompt_and_the_average_reply() {
        let v = view(Micros(1_000_000), Micros(900_000));
        let seen = |calls: u64, completion_tokens: u64| UsageTotals {
            calls,
            completion_tokens,
            ..UsageTotals::default()
        };
        let note = SpendNote::estimate(&v, 10_000, &seen(3, 600), 1000);
        assert_eq!(note.next_step_likely, Micros(1500 + 120));
        assert_eq!(note.next_step_worst, Micros(1500 + 600));
        assert_eq!(
            note.render(),
            "Next step ≈ $0.0016 (at most $0.0021) · $0.90 left of $1.00"
        );
        let first = SpendNote::estimate(&v, 10_000, &seen(0, 0), 1000);
        assert_eq!(first.next_step_likely, Micros(1500 + 300));
        let daily = BudgetView {
            tightest: BudgetKind::OwnerDaily,
            remaining: Micros(50_000),
            ..v
        };
        assert!(SpendNote::estimate(&daily, 10_000, &seen(0, 0), 1000)
            .render()
            .ends_with("· $0.050 left in the owner's daily budget"));
    }

    #[test]
    fn cached_input_is_charged_at_its_price_and_the_estimate_uses_the_hit_rate() {
        let price = Price::from_usd_per_million_cached(0.15, 0.075, 0.60);
        // 10,000 prompt tokens, 6,000 of them cached: 4,000 × 0.15 + 6,000 × 0.075 = 1,050 µ$.
        let usage = Usage {
            prompt_tokens: 10_000,
            completion_tokens: 0,
            cached_prompt_tokens: 6_000,
            cache_write_tokens: 0,
        };
        assert_eq!(price.cost_of(usage), Micros(600 + 450));
        // A report of more cached tokens than the prompt had is held to the prompt.
        let odd = Usage {
            cached_prompt_tokens: 50_000,
            ..usage
        };
        assert_eq!(price.cost_of(odd), Micros(750));
        // A cached price above the input price (a typo) never makes a hit dearer.
        let typo = Price::from_usd_per_million_cached(0.15, 1.5, 0.60);
        assert_eq!(typo.cost_of(usage), Micros(1500));

        // An agent that saw 60% of its prompts served from the cache is estimated so.
        let v = BudgetView {
            price,
            ..view(Micros(1_000_000), Micros(900_000))
        };
        let seen = UsageTotals {
            calls: 2,
            prompt_tokens: 20_000,
            completion_tokens: 400,
            cached_prompt_tokens: 12_000,
            cache_write_tokens: 0,
        };
        let note = SpendNote::estimate(&v, 10_000, &seen, 1000);
        assert_eq!(note.next_step_likely, Micros(600 + 450 + 120));
        // The worst case assumes no hit.
        assert_eq!(note.next_step_worst, Micros(1500 + 600));
    }

    #[test]
    fn cache_writes_are_charged_at_the_write_price_and_the_worst_case_writes_everything() {
        // $1 a million in, reads $0.10, writes $1.25, $5 out (a model that bills writes).
        let price = Price::from_usd_per_million_cached(1.0, 0.10, 5.0).with_cache_writes(1.25);
        // 10,000 prompt tokens: 6,000 read, 3,000 written, 1,000 plain; 100 out:
        // 6,000 × 0.10 + 3,000 × 1.25 + 1,000 × 1 + 100 × 5 = 600 + 3,750 + 1,000 + 500.
        let usage = Usage {
            prompt_tokens: 10_000,
            completion_tokens: 100,
            cached_prompt_tokens: 6_000,
            cache_write_tokens: 3_000,
        };
        assert_eq!(price.cost_of(usage), Micros(600 + 3_750 + 1_000 + 500));
        // Writes reported beyond what the cache did not serve are held to that.
        let odd = Usage {
            cache_write_tokens: 50_000,
            ..usage
        };
        assert_eq!(price.cost_of(odd), Micros(600 + 5_000 + 500));
        // The worst case (what a call reserves) is every prompt token written.
        assert_eq!(price.cost(10_000, 100), Micros(12_500 + 500));
        // A model without a write price bills writes as input, and its worst case is unchanged.
        let plain = Price::from_usd_per_million_cached(1.0, 0.10, 5.0);
        assert_eq!(plain.cost_of(usage), Micros(600 + 4_000 + 500));
        assert_eq!(plain.cost(10_000, 100), Micros(10_000 + 500));
        // A write price below the input price (a typo) never makes a write cheaper than input.
        let typo = plain.with_cache_writes(0.5);
        assert_eq!(typo.cost_of(usage), plain.cost_of(usage));

        // An agent whose prompts were 60% read from and 30% written to the cache is estimated so.
        let v = BudgetView {
            price,
            ..view(Micros(1_000_000), Micros(900_000))
        };
        let seen = UsageTotals {
            calls: 2,
            prompt_tokens: 20_000,
            completion_tokens: 200,
            cached_prompt_tokens: 12_000,
            cache_write_tokens: 6_000,
        };
        let note = SpendNote::estimate(&v, 10_000, &seen, 1000);
        assert_eq!(note.next_step_likely, Micros(600 + 3_750 + 1_000 + 500));
        assert_eq!(note.next_step_worst, Micros(12_500 + 5_000));
        // A price stored before cache writes were priced reads as billing them as input.
        let stored: Price = serde_json::from_str(
            r#"{"input_per_million": 1000000, "cached_input_per_million": 100000, "output_per_million": 5000000}"#,
        )
        .unwrap();
        assert_eq!(stored, plain);
    }

    #[test]
    fn the_last_call_is_cut_to_what_the_budget_covers_down_to_a_floor() {
        let price = Price::from_usd_per_million(2.5, 10.0);
        // 2,000 prompt tokens cost 5,000 µ$; each reply token 10 µ$.
        assert_eq!(
            price.fit_reply(2_000, 1_500, REPLY_FLOOR_TOKENS, Micros(20_000)),
            ReplyFit::Whole(1_500)
        );
        assert_eq!(
            price.fit_reply(2_000, 1_500, REPLY_FLOOR_TOKENS, Micros(19_999)),
            ReplyFit::Lowered(1_499)
        );
        assert_eq!(
            price.fit_reply(2_000, 1_500, REPLY_FLOOR_TOKENS, Micros(9_000)),
            ReplyFit::Lowered(400)
        );
        // The floor still fits; one micro-dollar less and it does not.
        let floor = 5_000 + 10 * REPLY_FLOOR_TOKENS as u64;
        assert_eq!(
            price.fit_reply(2_000, 1_500, REPLY_FLOOR_TOKENS, Micros(floor)),
            ReplyFit::Lowered(REPLY_FLOOR_TOKENS)
        );
        assert_eq!(
            price.fit_reply(2_000, 1_500, REPLY_FLOOR_TOKENS, Micros(floor - 1)),
            ReplyFit::Refused
        );
        // A call that asked for less than the floor is never cut.
        assert_eq!(
            price.fit_reply(2_000, 100, REPLY_FLOOR_TOKENS, Micros(5_999)),
            ReplyFit::Refused
        );
        assert_eq!(
            price.fit_reply(2_000, 100, REPLY_FLOOR_TOKENS, Micros(6_000)),
            ReplyFit::Whole(100)
        );
        // Whatever it returns fits.
        for available in (0..40_000).step_by(997) {
            if let ReplyFit::Whole(n) | ReplyFit::Lowered(n) =
                price.fit_reply(2_000, 1_500, REPLY_FLOOR_TOKENS, Micros(available))
            {
                assert!(price.cost(2_000, n as u64) <= Micros(available));
                assert!(n >= REPLY_FLOOR_TOKENS);
            }
        }
    }
}
