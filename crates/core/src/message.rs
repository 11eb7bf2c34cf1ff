//! The chat messages a model is sent, and how their tokens are counted.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Message {
            role: Role::System,
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Counts tokens the way the target model does (or estimates it); implemented outside the core.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> usize;

    /// Tokens of a whole chat request, with the per-message framing chat models add.
    fn count_messages(&self, messages: &[Message]) -> usize {
        messages
            .iter()
            .map(|m| self.count(&m.content) + MESSAGE_OVERHEAD)
            .sum::<usize>()
            + REPLY_PRIMING
    }
}

/// Framing tokens per chat message (role and separators) and for priming the reply, as OpenAI documents them.
pub const MESSAGE_OVERHEAD: usize = 4;

pub const REPLY_PRIMING: usize = 3;
