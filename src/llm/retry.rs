//! A retrying HTTP transport for async-openai: retries what cannot have been billed (429, 408, a
//! connection that failed) with exponential backoff and jitter, whatever the response body looks
//! like; a failure the provider may have billed (a 5xx, a timeout once the request was sent) is
//! returned at once, for the caller to charge and to retry only under a new reservation.
//!
//! async-openai's own retry only recognises a 429 whose body is an OpenAI error object and stops
//! after three tries; a plain-text 429 from a proxy or a local server would fail at once.
//! Installing this as the client's HTTP service makes the decision on the status code alone.
//!
//! A wait honours `Retry-After`, else `RetryPolicy::delay` with jitter, the crate's only
//! randomness. A shared context that overflowed (`SHARED_CONTEXT_FULL`, llama.cpp's words) is
//! returned at once, since the same request sent again at once would overflow it again; the chat
//! client makes requests take turns instead.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use rand::Rng;
use reqwest::{Response, StatusCode};

use super::Billing;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    /// Exponential backoff with "equal jitter": half the step is fixed, half random, so that many
    /// agents hitting one rate limit do not retry in lockstep.
    pub fn delay(&self, attempt: u32, unit_random: f64) -> Duration {
        let exp = self
            .initial
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        let capped = exp.min(self.max);
        let half = capped / 2;
        half + half.mul_f64(unit_random.clamp(0.0, 1.0))
    }
}

/// Why the transport gave up; carried through async-openai as a boxed error.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("HTTP {status} {body}")]
    Status {
        status: StatusCode,
        attempts: u32,
        body: String,
        billing: Billing,
    },
    #[error("{kind}")]
    Network {
        attempts: u32,
        kind: String,
        billing: Billing,
    },
}

impl TransportError {
    pub fn attempts(&self) -> u32 {
        match self {
            TransportError::Status { attempts, .. } | TransportError::Network { attempts, .. } => {
                *attempts
            }
        }
    }

    pub fn billing(&self) -> Billing {
        match self {
            TransportError::Status { billing, .. } | TransportError::Network { billing, .. } => {
                *billing
            }
        }
    }
}

/// Whether a failure status may come after the model generated: a server error may, except
/// llama.cpp's "not implemented" and its full shared context, which are said before generating.
/// A 4xx (429 and 408 among them) refuses the request before any generation.
pub(crate) fn status_may_be_billed(status: u16, body: &str) -> bool {
    (500..600).contains(&status) && status != 501 && !body.contains(SHARED_CONTEXT_FULL)
}

/// Whether a request that failed without an answer may have reached the model: only a connection
/// that was never made (refused, or timed out while connecting) certainly did not.
fn network_billing(error: &reqwest::Error) -> Billing {
    if error.is_connect() {
        Billing::NotBilled
    } else {
        Billing::MayBeBilled
    }
}

/// 429, 408 and 5xx may clear by themselves; 501 ("not implemented", e.g. llama.cpp's server
/// without embeddings) will not, so retrying it only makes the caller wait.
/// llama.cpp's words when the requests it serves at once have filled the one context (KV cache)
/// they share: its server splits `-c` among its slots only when the cache is not unified, and a
/// summary call beside a cycle's call is enough to fill 4,096 tokens with a small model.
pub(super) const SHARED_CONTEXT_FULL: &str = "Context size has been exceeded";

/// Marks a failure that was the server refusing `response_format: json_schema`.
pub(super) const REPLY_SCHEMA_REFUSED: &str = "the server refuses response_format json_schema";

/// Whether an error body is a server refusing the `json_schema` reply format, as a server that
/// knows only `json_object` does (llama-cpp-python's answers HTTP 500 with its validation error).
/// Nothing was generated, and the same request would be refused again.
pub(super) fn refuses_reply_schema(body: &str) -> bool {
    body.contains("response_format") && body.contains("json_schema")
}

fn retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || (status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED)
}

fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    let seconds: f64 = value.to_str().ok()?.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

#[derive(Clone, Debug)]
pub struct RetryingTransport {
    client: reqwest::Client,
    policy: RetryPolicy,
}

impl RetryingTransport {
    pub fn new(client: reqwest::Client, policy: RetryPolicy) -> Self {
        RetryingTransport { client, policy }
    }
}

impl tower::Service<HttpRequestFactory> for RetryingTransport {
    type Response = Response;
    type Error = OpenAIError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, OpenAIError>> + Send + 'static>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let client = self.client.clone();
        let policy = self.policy;
        Box::pin(async move {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let request = factory.build().await?;
                let wait = match client.execute(request).await {
                    Ok(response) if retryable_status(response.status()) => {
                        let status = response.status();
                        let hinted = retry_after(&response).map(|d| d.min(policy.max));
                        // The body is read to tell a shared context that overflowed, which the
                        // same request sent again at once would overflow again: the chat client
                        // makes requests take turns instead.
                        let body = response.text().await.unwrap_or_default();
                        if refuses_reply_schema(&body) {
                            let body: String = body.chars().take(200).collect();
                            return Err(OpenAIError::Boxed(Box::new(TransportError::Status {
                                status,
                                attempts: attempt,
                                body: format!("{REPLY_SCHEMA_REFUSED}: {body}"),
                                billing: Billing::NotBilled,
                            })));
                        }
                        // A failure that may have been billed is not sent again here: the
                        // caller charges it, and retries it only under a reservation of its own.
                        let billing = if status_may_be_billed(status.as_u16(), &body) {
                            Billing::MayBeBilled
                        } else {
                            Billing::NotBilled
                        };
                        if attempt >= policy.max_attempts
                            || body.contains(SHARED_CONTEXT_FULL)
                            || billing == Billing::MayBeBilled
                        {
                            let body: String = body.chars().take(200).collect();
                            return Err(OpenAIError::Boxed(Box::new(TransportError::Status {
                                status,
                                attempts: attempt,
                                body,
                                billing,
                            })));
                        }
                        tracing::warn!(%status, attempt, "model endpoint busy or failing; retrying");
                        metrics::counter!(crate::ops::names::RETRIES, "status" => status.as_str().to_string())
                            .increment(1);
                        hinted.unwrap_or_else(|| policy.delay(attempt, rand::rng().random()))
                    }
                    Ok(response) => return Ok(response),
                    Err(error) => match crate::ops::network_failure(&error) {
                        Some(kind)
                            if attempt < policy.max_attempts
                                && network_billing(&error) == Billing::NotBilled =>
                        {
                            tracing::warn!(kind, attempt, "model endpoint unreachable; retrying");
                            metrics::counter!(crate::ops::names::RETRIES, "status" => kind)
                                .increment(1);
                            policy.delay(attempt, rand::rng().random())
                        }
                        Some(kind) => {
                            return Err(OpenAIError::Boxed(Box::new(TransportError::Network {
                                attempts: attempt,
                                kind: kind.to_string(),
                                billing: network_billing(&error),
                            })))
                        }
                        None => return Err(OpenAIError::Reqwest(error)),
                    },
                };
                tokio::time::sleep(wait).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_statuses_that_may_clear_are_retried() {
        for status in [408, 429, 500, 502, 503, 504] {
            assert!(
                retryable_status(StatusCode::from_u16(status).unwrap()),
                "{status}"
            );
        }
        for status in [400, 401, 404, 413, 422, 501] {
            assert!(
                !retryable_status(StatusCode::from_u16(status).unwrap()),
                "{status}"
            );
        }
    }

    #[test]
    fn only_failures_after_a_possible_generation_may_be_billed() {
        for status in [500, 502, 503, 504] {
            assert!(status_may_be_billed(status, "upstream failed"), "{status}");
        }
        for status in [400, 401, 404, 408, 429, 501] {
            assert!(!status_may_be_billed(status, "refused"), "{status}");
        }
        // llama.cpp refuses a request that does not fit its shared context before generating.
        assert!(!status_may_be_billed(
            500,
            r#"{"error":{"message":"Context size has been exceeded."}}"#
        ));
    }

    #[test]
    fn backoff_grows_exponentially_with_bounded_jitter() {
        let policy = RetryPolicy {
            max_attempts: 6,
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        };
        assert_eq!(policy.delay(1, 0.0), Duration::from_millis(50));
        assert_eq!(policy.delay(1, 1.0), Duration::from_millis(100));
        assert_eq!(policy.delay(3, 1.0), Duration::from_millis(400));
        assert_eq!(policy.delay(10, 1.0), Duration::from_millis(1000));
        assert_eq!(policy.delay(10, 0.0), Duration::from_millis(500));
    }
}
