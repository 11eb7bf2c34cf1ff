//! The metrics autothread records: their names, label sets and help texts, in one place so that
//! a dashboard can be written from this file.

/// Agents by state (`state`: a phase label), read from the store when scraped.
pub const AGENTS: &str = "autothread_agents";
/// Cards waiting for a decision, read from the store when scraped.
pub const PENDING_CARDS: &str = "autothread_pending_cards";
/// The store's size on disk in bytes, read when scraped.
pub const STORE_BYTES: &str = "autothread_store_bytes";
/// Cycles begun.
pub const CYCLES: &str = "autothread_cycles_total";
/// Chat calls (`model`, `purpose`, `outcome`: replied, failed, refused).
pub const MODEL_CALLS: &str = "autothread_model_calls_total";
/// Seconds a chat call took, retries included (`model`).
pub const MODEL_CALL_SECONDS: &str = "autothread_model_call_seconds";
/// Tokens billed (`model`, `kind`: prompt, completion, embedding).
pub const TOKENS: &str = "autothread_tokens_total";
/// Millionths of a dollar charged (`model`): the ledger's own unit, kept exact because
/// Prometheus counters of the `metrics` facade are integers.
pub const SPEND_MICRODOLLARS: &str = "autothread_spend_microdollars_total";
/// Requests the transport retried (`status`: an HTTP status or a network failure).
pub const RETRIES: &str = "autothread_model_retries_total";
/// Calls the budgets refused (`kind`: chat, embeddings).
pub const BUDGET_REFUSALS: &str = "autothread_budget_refusals_total";
/// Calls that cost more than their reservation (charged in full all the same).
pub const BUDGET_OVERRUNS: &str = "autothread_budget_overruns_total";
/// Seconds from a Discord interaction's creation to its acknowledgement (`kind`: command,
/// button, form).
pub const INTERACTION_ACK_SECONDS: &str = "autothread_interaction_ack_seconds";
/// Posts to Discord tried again after a 5xx, a 429 or a failed connection.
pub const DISCORD_RETRIES: &str = "autothread_discord_post_retries_total";
/// Cards that could not be posted yet and wait for the re-post loop.
pub const CARDS_UNPOSTED: &str = "autothread_cards_unposted";

/// Agent Protocol requests (`method`, `route`: the route's pattern, `status`).
pub const API_REQUESTS: &str = "autothread_api_requests_total";
/// Seconds an Agent Protocol request took (`method`, `route`); a step waits for the agent.
pub const API_REQUEST_SECONDS: &str = "autothread_api_request_seconds";

/// The phase labels `AGENTS` reports, zero included, so a dashboard sees every series.
pub const PHASES: &[&str] = &[
    "creating",
    "thinking",
    "awaiting decision",
    "critiquing",
    "executing",
    "paused",
    "finished",
];

/// Registers the help texts with the installed recorder.
pub fn describe() {
    metrics::describe_gauge!(AGENTS, "Agents by state.");
    metrics::describe_gauge!(PENDING_CARDS, "Cards waiting for a decision.");
    metrics::describe_gauge!(STORE_BYTES, "Size of the store on disk, in bytes.");
    metrics::describe_counter!(CYCLES, "Agent cycles begun.");
    metrics::describe_counter!(
        MODEL_CALLS,
        "Chat completion calls by model, purpose and outcome."
    );
    metrics::describe_histogram!(
        MODEL_CALL_SECONDS,
        metrics::Unit::Seconds,
        "Chat call latency, retries included."
    );
    metrics::describe_counter!(TOKENS, "Tokens billed by model and kind.");
    metrics::describe_counter!(
        SPEND_MICRODOLLARS,
        "Millionths of a dollar charged, by model."
    );
    metrics::describe_counter!(RETRIES, "Model endpoint requests retried.");
    metrics::describe_counter!(DISCORD_RETRIES, "Posts to Discord tried again.");
    metrics::describe_gauge!(
        CARDS_UNPOSTED,
        "Cards that could not be posted yet and will be posted again."
    );
    metrics::describe_counter!(BUDGET_REFUSALS, "Calls refused by a budget.");
    metrics::describe_counter!(
        BUDGET_OVERRUNS,
        "Calls that cost more than their reservation."
    );
    metrics::describe_histogram!(
        INTERACTION_ACK_SECONDS,
        metrics::Unit::Seconds,
        "Time from a Discord interaction to its acknowledgement."
    );
    metrics::describe_counter!(
        API_REQUESTS,
        "Agent Protocol requests by method, route and status."
    );
    metrics::describe_histogram!(
        API_REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "Agent Protocol request latency; a step includes its wait for the agent."
    );
}
