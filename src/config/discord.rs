//! The `[discord]` section of `bot.toml`: where the bot connects, whether it asks for the
//! privileged Message Content intent, who may start agents and how many, which thread messages are
//! feedback, and the models members may choose.
//!
//! Without Message Content (the default, as a new application has it switched off in the Developer
//! Portal), Discord still delivers a message's text to the bot when the message @mentions the bot
//! (a reply mentions the author it answers unless the replier turns the mention off) and in DMs;
//! every other message arrives with an empty text. `MessageContent::limits` says what that leaves
//! out, for the start-up log and `autothread check`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Secret;

/// Which thread messages are feedback while a card waits: a team talking in the thread is not
/// steering the agent unless it says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum FeedbackMessages {
    /// Replies to the waiting card, and messages that start with `feedback_prefix`.
    Replies,
    /// Every message from someone who may decide.
    Any,
}

impl FeedbackMessages {
    /// The feedback `text` gives, if any: a message that starts with `prefix` (any case) gives
    /// what follows it; under `Replies`, a reply to the card gives all of it.
    pub fn feedback<'t>(
        self,
        text: &'t str,
        prefix: &str,
        replies_to_card: bool,
    ) -> Option<&'t str> {
        let text = text.trim();
        let prefixed = (!prefix.is_empty())
            .then(|| {
                text.get(..prefix.len())
                    .filter(|head| head.eq_ignore_ascii_case(prefix))
                    .map(|_| text[prefix.len()..].trim())
            })
            .flatten();
        match (prefixed, self) {
            (Some(rest), _) => Some(rest).filter(|rest| !rest.is_empty()),
            (None, FeedbackMessages::Any) => Some(text),
            (None, FeedbackMessages::Replies) => replies_to_card.then_some(text),
        }
    }
}

/// Whether the bot asks the gateway for the privileged Message Content intent
/// (`discord.message_content_intent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageContent {
    /// Asked for: every message in an agent's thread is read, as the application must then have
    /// the intent switched on, or Discord closes the gateway (4014).
    Requested,
    /// Not asked for: a typed message is read only when it mentions the bot or replies to it.
    NotRequested,
}

/// Where the switch is in the Developer Portal, for every message that asks to flip it.
pub const MESSAGE_CONTENT_SWITCH: &str =
    "Developer Portal → your application → Bot → Privileged Gateway Intents → Message Content Intent";

impl MessageContent {
    /// What this choice means for typed messages, one sentence for the start-up log and `check`.
    pub fn limits(self) -> &'static str {
        match self {
            MessageContent::Requested => {
                "Message Content intent requested (discord.message_content_intent = true): every \
                 message typed in an agent's thread is read"
            }
            MessageContent::NotRequested => {
                "Message Content intent not requested (discord.message_content_intent = false): a \
                 message typed in an agent's thread reaches the bot only when it @mentions the bot \
                 or replies to the bot's message with the mention on, so answers to ask_user and \
                 typed feedback must be sent that way; the card's buttons and forms (Feedback…, \
                 Edit…) work as ever"
            }
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct DiscordConfig {
    /// Another Discord-compatible API (a proxy, the test fake); empty means Discord itself.
    pub api_base: Option<String>,
    /// Register slash commands in this guild only (instant updates while developing).
    pub dev_guild: Option<u64>,
    /// Ask the gateway for the privileged Message Content intent, which the application must have
    /// switched on (`MESSAGE_CONTENT_SWITCH`); off, typed messages are read only when they mention
    /// the bot or reply to it. `DISCORD_MESSAGE_CONTENT_INTENT` overrides it.
    pub message_content_intent: bool,
    /// `DISCORD_MESSAGE_CONTENT_INTENT` when it was neither true nor false, for `validate` to
    /// refuse rather than guess.
    #[serde(skip)]
    pub message_content_env_unreadable: Option<String>,
    /// Only members with this role (or Manage Threads) may start agents; unset: everyone.
    pub start_role: Option<u64>,
    /// Agents running (not paused or finished), per person and per server; 0: no limit.
    pub max_agents_per_user: usize,
    pub max_agents_per_guild: usize,
    /// Whether thread messages can be feedback at all (false: only the card's Feedback button);
    /// which ones, `feedback_messages` says.
    pub messages_as_feedback: bool,
    /// Which messages in the thread, from someone who may decide, are feedback while a card waits.
    pub feedback_messages: FeedbackMessages,
    /// A message that starts with this (any case) is feedback, without it, under `replies`.
    pub feedback_prefix: String,
    /// How often a card Discord did not take (after its retries) is posted again.
    pub repost_interval_secs: u64,
    /// Requests a second, for all agents together, that keep each thread's pinned live status
    /// message and typing indicator up to date; 0 turns the live status off. Discord allows a
    /// bot about 50 requests a second in all, which cards and commands share.
    pub status_requests_per_second: u32,
    /// The models members may choose with `/agent start model:`, besides `llm.model`; each needs
    /// a price. Server admins change their server's list with `/agent models`.
    pub models: Vec<String>,
    /// A server's own list instead of `models`, by server id.
    pub guild_models: BTreeMap<String, Vec<String>>,
    #[serde(skip)]
    pub token: Option<Secret>,
}

impl DiscordConfig {
    /// Whether the bot asks for the Message Content intent.
    pub fn message_content(&self) -> MessageContent {
        if self.message_content_intent {
            MessageContent::Requested
        } else {
            MessageContent::NotRequested
        }
    }

    /// Reads `DISCORD_MESSAGE_CONTENT_INTENT` (true/false, 1/0, yes/no, on/off, any case); any
    /// other value is kept for `validate` to refuse.
    pub(super) fn set_message_content_from_env(&mut self, value: &str) {
        match value.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => self.message_content_intent = true,
            "false" | "0" | "no" | "off" => self.message_content_intent = false,
            _ => self.message_content_env_unreadable = Some(value.to_string()),
        }
    }
}

impl Default for DiscordConfig {
    fn default() -> Self {
        DiscordConfig {
            api_base: None,
            dev_guild: None,
            message_content_intent: false,
            message_content_env_unreadable: None,
            start_role: None,
            max_agents_per_user: 3,
            max_agents_per_guild: 25,
            messages_as_feedback: true,
            feedback_messages: FeedbackMessages::Replies,
            feedback_prefix: "fb:".into(),
            repost_interval_secs: 15,
            status_requests_per_second: 4,
            models: Vec::new(),
            guild_models: BTreeMap::new(),
            token: None,
        }
    }
}
