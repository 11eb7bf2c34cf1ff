//! Posting to an agent's thread through Discord's bad moments: transient failures are retried with
//! backoff under one nonce (Discord keeps the first message and returns it for the retries), and a
//! card that still could not be posted is remembered until the re-post loop gets it through.
//!
//! `post_with_retry` retries 5xx, 429 and network failures under one enforced nonce: `card_nonce`
//! per agent and cycle for a card, `fresh_nonce` otherwise; it takes the mentions a message may
//! notify, none by default. `Unposted` holds the cards waiting for the re-post loop, one per agent.

use std::collections::BTreeMap;
use std::time::Duration;

use serenity::all::{ChannelId, CreateMessage, Http, HttpError, Message, Nonce};

use crate::locks::LockRecovered;

/// Tries per post. serenity waits out a 429 with `Retry-After` by itself; these cover 5xx, a 429
/// it gave up on, and failed connections.
const POST_ATTEMPTS: u32 = 4;
/// The wait before the second try, doubling: 0.5 + 1 + 2 s, so a post gives up within seconds
/// and the re-post loop takes over.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Discord's limit on a nonce's length.
pub(super) const NONCE_MAX: usize = 25;

/// Whether trying again may help: Discord's 5xx and 429, and requests that never got an answer.
/// A 4xx refusal (missing access, an unknown channel) stays one.
pub fn is_transient(error: &serenity::Error) -> bool {
    match error {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            response.status_code.is_server_error() || response.status_code.as_u16() == 429
        }
        serenity::Error::Http(HttpError::Request(_)) => true,
        _ => false,
    }
}

/// The nonce of the card for `agent`'s proposal at `cycle`: the same on every try and after a
/// restart, so Discord posts the card once however often it is sent within its dedup window.
pub fn card_nonce(agent: &str, cycle: u64) -> String {
    let nonce = format!("{agent}.{cycle}");
    nonce.chars().take(NONCE_MAX).collect()
}

/// A fresh nonce for a one-off message.
pub fn fresh_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..NONCE_MAX].to_string()
}

/// Posts `message` to `channel`, retrying transient failures with backoff. Every try carries the
/// same enforced nonce: a try that Discord stored but answered with a 5xx is not stored twice.
/// The message notifies exactly `mentions`, whatever its text says: nobody (`super::no_mentions`) but
/// for an escalated deadline, which calls the approvers.
pub async fn post_with_retry(
    http: &Http,
    channel: ChannelId,
    message: CreateMessage,
    nonce: String,
    mentions: serenity::all::CreateAllowedMentions,
) -> Result<Message, serenity::Error> {
    let message = message
        .allowed_mentions(mentions)
        .nonce(Nonce::String(nonce))
        .enforce_nonce(true);
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        match channel.send_message(http, message.clone()).await {
            Ok(sent) => return Ok(sent),
            Err(e) if attempt < POST_ATTEMPTS && is_transient(&e) => {
                tracing::warn!(attempt, error = %e, "Discord did not take a message; trying again");
                metrics::counter!(crate::ops::names::DISCORD_RETRIES).increment(1);
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Cards that could not be posted, by agent: the cycle whose proposal waits for one. One entry
/// per agent at most, so the map is bounded by the number of agents.
#[derive(Default)]
pub struct Unposted {
    cards: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl Unposted {
    pub fn remember(&self, agent: &str, cycle: u64) {
        self.lock().insert(agent.to_string(), cycle);
        metrics::gauge!(crate::ops::names::CARDS_UNPOSTED).set(self.lock().len() as f64);
    }

    pub fn forget(&self, agent: &str) {
        self.lock().remove(agent);
        metrics::gauge!(crate::ops::names::CARDS_UNPOSTED).set(self.lock().len() as f64);
    }

    pub fn all(&self) -> Vec<(String, u64)> {
        self.lock().iter().map(|(a, c)| (a.clone(), *c)).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.cards.lock_recovered()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nonces_fit_discords_limit_and_cards_keep_theirs() {
        assert_eq!(super::card_nonce("0123456789ab", 7), "0123456789ab.7");
        assert_eq!(super::card_nonce("0123456789ab", u64::MAX).len(), 25);
        assert_eq!(super::fresh_nonce().len(), 25);
        assert_ne!(super::fresh_nonce(), super::fresh_nonce());
    }
}
