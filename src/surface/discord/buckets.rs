//! Keeps serenity's rate-limit buckets bounded: it keeps one for every route it has called and
//! never drops any, and an interaction's answer is a route of its own (keyed by the interaction),
//! so a bot talking to Discord directly gained a bucket with every click and slash command.
//!
//! `spawn_pruning`, started by `client` for both REST clients, drops every minute the buckets that
//! no request holds and whose limit is not in force. Without a rate limiter (behind a proxy) there
//! is nothing to prune.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serenity::http::Http;

use crate::clock::Clock;

/// How often the buckets are pruned. Between two prunings they grow by at most the
/// interactions answered meanwhile, a few hundred bytes each.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Drops every bucket that no request holds and whose limit is not in force (no reset time, or
/// one before `now`). serenity makes a missing bucket afresh, and a fresh one lets the next
/// request through as a bucket whose reset has passed does, so nothing Discord enforces is
/// forgotten. Returns how many were dropped. A client whose rate limiter is off (behind a proxy)
/// has none.
pub async fn prune(http: &Http, now: SystemTime) -> usize {
    let Some(ratelimiter) = &http.ratelimiter else {
        return 0;
    };
    let routes = ratelimiter.routes();
    let mut routes = routes.write().await;
    let before = routes.len();
    routes.retain(|_, bucket| {
        // A request in flight holds a clone: its answer may still set the limit.
        if Arc::strong_count(bucket) > 1 {
            return true;
        }
        match bucket.try_lock() {
            Ok(limit) => limit.reset().is_some_and(|reset| reset > now),
            Err(_) => true,
        }
    });
    before - routes.len()
}

/// Prunes `http`'s buckets every minute, for as long as the runtime it is spawned on runs.
/// serenity stamps its resets with the system's time, which `clock` reads.
pub fn spawn_pruning(http: Arc<Http>, clock: Arc<dyn Clock>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(PRUNE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let dropped = prune(&http, SystemTime::from(clock.now())).await;
            if dropped > 0 {
                tracing::debug!(dropped, "rate-limit buckets of past requests dropped");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serenity::http::{HttpBuilder, Ratelimit, RatelimitingBucket, Route};
    use serenity::model::id::InteractionId;

    fn bucket_of_interaction(id: u64) -> RatelimitingBucket {
        Route::InteractionResponse {
            interaction_id: InteractionId::new(id),
            token: "t",
        }
        .ratelimiting_bucket()
    }

    #[tokio::test]
    async fn buckets_left_by_answered_interactions_are_dropped_and_one_in_use_is_kept() {
        let http = HttpBuilder::new("Bot token").build();
        let routes = http.ratelimiter.as_ref().expect("a rate limiter").routes();
        for id in 1..=1_000 {
            routes
                .write()
                .await
                .insert(bucket_of_interaction(id), Arc::default());
        }
        let in_flight: Arc<tokio::sync::Mutex<Ratelimit>> = Arc::default();
        routes
            .write()
            .await
            .insert(bucket_of_interaction(5_000), in_flight.clone());

        assert_eq!(prune(&http, SystemTime::UNIX_EPOCH).await, 1_000);
        let left = routes.read().await;
        assert_eq!(left.len(), 1);
        assert!(left.contains_key(&bucket_of_interaction(5_000)));
    }

    #[tokio::test]
    async fn a_client_without_a_rate_limiter_has_nothing_to_prune() {
        let http = HttpBuilder::new("Bot token")
            .ratelimiter_disabled(true)
            .build();
        assert!(http.ratelimiter.is_none());
        assert_eq!(prune(&http, SystemTime::UNIX_EPOCH).await, 0);
    }
}
