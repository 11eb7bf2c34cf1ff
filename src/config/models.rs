//! The built-in catalogue of OpenAI models: context window, reply reserve, price and whether the
//! model reasons (and so takes `max_completion_tokens` and no temperature). Dated snapshots
//! (`gpt-4o-2024-08-06`) are looked up under their family's name.

/// One model as OpenAI publishes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownModel {
    pub name: &'static str,
    pub context_tokens: u32,
    /// The reply reserve sent as `max_tokens` (or `max_completion_tokens`).
    pub max_tokens: u32,
    /// Dollars per million tokens: input, input served from OpenAI's prompt cache, and output.
    pub input_per_million: f64,
    pub cached_input_per_million: f64,
    pub output_per_million: f64,
    /// Dollars per million input tokens written to the prompt cache, for a model that bills
    /// writes above its input price; `None`: writes cost the input price, as for every model
    /// catalogued here (`[budget.prices]` gives one to a model that bills them).
    pub cache_write_per_million: Option<f64>,
    pub reasoning: bool,
}

const fn chat(
    name: &'static str,
    context_tokens: u32,
    max_tokens: u32,
    [input_per_million, cached_input_per_million, output_per_million]: [f64; 3],
) -> KnownModel {
    KnownModel {
        name,
        context_tokens,
        max_tokens,
        input_per_million,
        cached_input_per_million,
        output_per_million,
        cache_write_per_million: None,
        reasoning: false,
    }
}

/// Reasoning tokens are billed as output and count against `max_completion_tokens`, so these
/// models get a larger reply reserve: with 1,500 tokens a medium-effort reply is often cut off
/// before it says anything.
const fn reasoning(
    name: &'static str,
    context_tokens: u32,
    [input_per_million, cached_input_per_million, output_per_million]: [f64; 3],
) -> KnownModel {
    KnownModel {
        name,
        context_tokens,
        max_tokens: 8_000,
        input_per_million,
        cached_input_per_million,
        output_per_million,
        cache_write_per_million: None,
        reasoning: true,
    }
}

const fn embedding(name: &'static str, input_per_million: f64) -> KnownModel {
    KnownModel {
        name,
        context_tokens: 8_191,
        max_tokens: 0,
        input_per_million,
        cached_input_per_million: input_per_million,
        output_per_million: 0.0,
        cache_write_per_million: None,
        reasoning: false,
    }
}

/// Published prices and windows at the time of writing (input, cached input, output; a model
/// without a prompt-cache discount repeats its input price); `[llm.models]` and `[budget.prices]`
/// override them and add others. GPT-5.4 and 5.5 bill a whole request at a higher rate once its
/// input passes 272K tokens, so their window is held at that line: an agent never pays the
/// long-context rate unknowingly.
pub const KNOWN_MODELS: &[KnownModel] = &[
    reasoning("gpt-5.5", 272_000, [5.00, 0.50, 30.00]),
    reasoning("gpt-5.4", 272_000, [2.50, 0.25, 15.00]),
    reasoning("gpt-5.4-mini", 272_000, [0.75, 0.075, 4.50]),
    reasoning("gpt-5.4-nano", 272_000, [0.20, 0.02, 1.25]),
    reasoning("gpt-5.2", 400_000, [1.75, 0.175, 14.00]),
    reasoning("gpt-5.1", 400_000, [1.25, 0.125, 10.00]),
    reasoning("gpt-5", 400_000, [1.25, 0.125, 10.00]),
    reasoning("gpt-5-mini", 400_000, [0.25, 0.025, 2.00]),
    reasoning("gpt-5-nano", 400_000, [0.05, 0.005, 0.40]),
    reasoning("o4-mini", 200_000, [1.10, 0.275, 4.40]),
    reasoning("o3", 200_000, [2.00, 0.50, 8.00]),
    reasoning("o3-mini", 200_000, [1.10, 0.55, 4.40]),
    reasoning("o1", 200_000, [15.00, 7.50, 60.00]),
    chat("gpt-4.1", 1_047_576, 2_000, [2.00, 0.50, 8.00]),
    chat("gpt-4.1-mini", 1_047_576, 2_000, [0.40, 0.10, 1.60]),
    chat("gpt-4.1-nano", 1_047_576, 2_000, [0.10, 0.025, 0.40]),
    chat("gpt-4o", 128_000, 1_500, [2.50, 1.25, 10.00]),
    chat("gpt-4o-mini", 128_000, 1_500, [0.15, 0.075, 0.60]),
    chat("gpt-4-turbo", 128_000, 1_500, [10.00, 10.00, 30.00]),
    chat("gpt-4", 8_192, 1_000, [30.00, 30.00, 60.00]),
    chat("gpt-3.5-turbo", 16_385, 1_000, [0.50, 0.50, 1.50]),
    embedding("text-embedding-3-small", 0.02),
    embedding("text-embedding-3-large", 0.13),
    embedding("text-embedding-ada-002", 0.10),
];

/// The catalogue's entry for `model`, also under a dated snapshot's name.
pub fn known(model: &str) -> Option<&'static KnownModel> {
    let family = without_date(model);
    KNOWN_MODELS.iter().find(|m| m.name == family)
}

/// Whether `model` belongs to OpenAI's reasoning families, catalogued or not (a new `o5` or
/// `gpt-5.9-mini` is one too): they refuse `max_tokens` and any temperature but the default.
pub fn is_reasoning(model: &str) -> bool {
    if let Some(known) = known(model) {
        return known.reasoning;
    }
    let family = model.rsplit('/').next().unwrap_or(model);
    let o_series = family.len() >= 2
        && family.starts_with('o')
        && family[1..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit());
    o_series || family.starts_with("gpt-5")
}

/// `gpt-4o-2024-08-06` → `gpt-4o`; OpenAI dates snapshots as `-YYYY-MM-DD` (and the oldest as
/// `-MMDD`), and a snapshot is priced as its family.
fn without_date(model: &str) -> &str {
    let bytes = model.as_bytes();
    let is_dated = |suffix_len: usize, dashes: &[usize]| {
        model.len() > suffix_len
            && bytes[model.len() - suffix_len] == b'-'
            && model[model.len() - suffix_len + 1..]
                .char_indices()
                .all(|(i, c)| {
                    if dashes.contains(&(i + 1)) {
                        c == '-'
                    } else {
                        c.is_ascii_digit()
                    }
                })
    };
    if is_dated(11, &[5, 8]) {
        &model[..model.len() - 11]
    } else if is_dated(5, &[]) {
        &model[..model.len() - 5]
    } else {
        model
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_snapshots_are_their_family() {
        assert_eq!(without_date("gpt-4o-2024-08-06"), "gpt-4o");
        assert_eq!(without_date("gpt-4-0613"), "gpt-4");
        assert_eq!(without_date("gpt-5-mini-2025-08-07"), "gpt-5-mini");
        assert_eq!(without_date("gpt-4o-mini"), "gpt-4o-mini");
        assert_eq!(without_date("o3"), "o3");
        assert_eq!(known("gpt-4o-2024-08-06").map(|m| m.name), Some("gpt-4o"));
        assert!(known("gpt-4o-2024-08").is_none());
    }

    #[test]
    fn reasoning_families_are_recognised_beyond_the_catalogue() {
        for model in [
            "o1",
            "o3-mini",
            "o4-mini-2025-04-16",
            "gpt-5",
            "gpt-5.9-mini",
            "o7",
        ] {
            assert!(is_reasoning(model), "{model}");
        }
        for model in [
            "gpt-4o",
            "gpt-4.1-mini",
            "smollm2",
            "openai/gpt-4o",
            "olmo-2",
        ] {
            assert!(!is_reasoning(model), "{model}");
        }
    }
}
