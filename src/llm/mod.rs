//! The model side: the `ChatModel` trait the runtime calls, its OpenAI-compatible implementation
//! (async-openai with our own retrying transport), and token counting.
//!
//! `ChatModel::complete` answers whole; `complete_streaming` hands the reply's text to a sink piece
//! by piece as the endpoint streams it. Each `ChatRequest` names its purpose, sent as the
//! `PURPOSE_HEADER` header (`CallPurpose::marker`, or `TOOL_PURPOSE` for a command's calls), so
//! logs, metrics and the tests' fake server tell calls apart without reading prompts.

pub mod context;
pub mod embed;
pub mod images;
pub mod openai;
pub mod retry;
pub mod tokens;

use async_trait::async_trait;
use serde_json::Value;

use crate::core::message::Message;
use crate::core::usage::Usage;

/// One chat completion request, independent of any provider's types.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// What the call is for (`CallPurpose::marker`, or `TOOL_PURPOSE`), sent as the
    /// `PURPOSE_HEADER` header.
    pub purpose: &'static str,
    pub model: String,
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    /// The reply schema when structured output is wanted; how it is sent depends on the endpoint.
    pub json_schema: Option<Value>,
    /// The paying agent's prompt-cache key (`prompt_cache_key`), sent where the endpoint takes it
    /// (`config::PromptCacheKeyMode`).
    pub cache_key: Option<String>,
}

/// The prompt-cache key of the agent `agent_id`: a digest of its id, so that it is stable across
/// restarts and the same for all its calls, and tells the provider nothing about the agent or
/// the people who run it.
pub fn prompt_cache_key(agent_id: &str) -> String {
    let digest = crate::core::digest::sha256_tagged(agent_id.as_bytes());
    let hex = digest.trim_start_matches(crate::core::digest::SHA256_PREFIX);
    format!("autothread-{}", &hex[..24])
}

/// The header that carries a request's purpose to the endpoint.
pub const PURPOSE_HEADER: &str = "x-autothread-purpose";

/// The purpose of a model call a command makes (reading a page, a sub-agent's reply).
pub const TOOL_PURPOSE: &str = "tool";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatReply {
    pub content: String,
    pub usage: Option<Usage>,
}

/// Whether a failed request may have cost money: a provider bills what its model generated,
/// whether or not the answer reached us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Billing {
    /// The request never reached the model: the connection failed, or the endpoint refused it
    /// before generating (a 4xx such as 400, 401 or 429).
    NotBilled,
    /// The request was sent and the model may have generated for it: the answer timed out, the
    /// endpoint failed (a 5xx), or the reply was cut short or unreadable.
    MayBeBilled,
}

/// Failures after the transport's retries, phrased for the person running the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    #[error("the model endpoint did not answer after {attempts} attempts ({detail})")]
    Unavailable {
        attempts: u32,
        detail: String,
        /// Whether the last attempt may have been billed (it was sent and not answered whole).
        billing: Billing,
    },
    #[error("the model endpoint refused the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("the model endpoint sent an unusable response: {0}")]
    BadResponse(String),
}

impl LlmError {
    /// Whether the failed request may have been billed. A refusal is billed only when the server
    /// failed (5xx) after it may have generated; llama.cpp's "not implemented" and its full shared
    /// context are said before any generation. An unusable answer was generated, so it is billed.
    pub fn billing(&self) -> Billing {
        match self {
            LlmError::Unavailable { billing, .. } => *billing,
            LlmError::Rejected { status, message } => {
                if retry::status_may_be_billed(*status, message) {
                    Billing::MayBeBilled
                } else {
                    Billing::NotBilled
                }
            }
            LlmError::BadResponse(_) => Billing::MayBeBilled,
        }
    }

    /// The same failure, counting `earlier` attempts made before the one that ended in it (a
    /// paid call retried under a reservation of its own each time).
    pub fn after_attempts(self, earlier: u32) -> LlmError {
        match self {
            LlmError::Unavailable {
                attempts,
                detail,
                billing,
            } => LlmError::Unavailable {
                attempts: attempts.saturating_add(earlier),
                detail,
                billing,
            },
            other => other,
        }
    }
}

#[async_trait]
pub trait ChatModel: Send + Sync {
    async fn complete(&self, request: ChatRequest) -> Result<ChatReply, LlmError>;

    /// `complete`, with the reply's text handed to `on_text` piece by piece as the endpoint
    /// streams it. An endpoint that cannot stream answers whole (one piece at the end).
    async fn complete_streaming(
        &self,
        request: ChatRequest,
        on_text: &(dyn for<'s> Fn(&'s str) + Send + Sync),
    ) -> Result<ChatReply, LlmError> {
        let reply = self.complete(request).await?;
        on_text(&reply.content);
        Ok(reply)
    }
}
