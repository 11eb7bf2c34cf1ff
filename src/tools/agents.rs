//! Sub-agents with AutoGPT 0.2's semantics: `start_agent`, `message_agent`, `list_agents` and
//! `delete_agent`. A sub-agent is a separate chat with its own history, addressed by key, kept in
//! the store, and paid from its parent's budget. It has no commands, so it cannot start sub-agents
//! of its own: delegation is one level deep by construction.
//!
//! The records (`SubAgentRecord`) go through `ctx.subagents` and are written directly, not with the
//! step; the calls are paid by the parent through `ctx.model`. So that a command approved again
//! after a restart is not run and paid twice, `start_agent` and `message_agent` first look for
//! their own exchange at the parent's cycle.

use std::sync::Arc;

use async_trait::async_trait;

use super::{str_arg, Command, ToolCtx, ToolModel, ToolModelError, ToolOutput};
use crate::core::budget::Micros;
use crate::core::commands::Egress;
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::message::{Message, Role};
use crate::core::reply::CommandCall;
use crate::store::SubAgentRecord;

pub const NAMES: [&str; 4] = [
    "start_agent",
    "message_agent",
    "list_agents",
    "delete_agent",
];

pub fn commands() -> Vec<Arc<dyn Command>> {
    vec![
        Arc::new(StartAgent),
        Arc::new(MessageAgent),
        Arc::new(ListAgents),
        Arc::new(DeleteAgent),
    ]
}

/// The system message that makes a chat a sub-agent.
fn charter(name: &str, task: &str) -> String {
    format!(
        "You are {name}, a helper agent working for another AI agent. Your task: {task}\n\
         You cannot run commands, browse, or start other agents: answer in plain text, concisely, \
         from what you know and what you are told."
    )
}

/// Keeps the charter and the newest messages that fit both `max_messages` and the context left
/// after the reply, so a long conversation never overflows the model.
fn fit_chat(
    messages: &[Message],
    max_messages: usize,
    budget_tokens: usize,
    model: &dyn ToolModel,
) -> Vec<Message> {
    let Some((charter, rest)) = messages.split_first() else {
        return Vec::new();
    };
    let mut kept: Vec<Message> = Vec::new();
    let mut used = model.count(std::slice::from_ref(charter));
    for message in rest.iter().rev() {
        let size = model.count(std::slice::from_ref(message));
        if kept.len() + 1 >= max_messages || used + size > budget_tokens {
            break;
        }
        used += size;
        kept.push(message.clone());
    }
    // A chat sent to the model starts with the charter and then a user message.
    while kept.last().is_some_and(|m| m.role != Role::User) {
        kept.pop();
    }
    kept.push(charter.clone());
    kept.reverse();
    kept
}

/// Why a sub-agent's message got no reply: the agent reads it after what was not done.
#[derive(Debug, thiserror::Error)]
enum ConverseError {
    #[error("No model is available for sub-agents.")]
    NoModel,
    #[error("The message is too long for the model's context.")]
    TooLong,
    #[error(transparent)]
    Model(#[from] ToolModelError),
    #[error("The sub-agent's reply could not be saved: {0}")]
    NotSaved(#[source] crate::store::StoreError),
}

/// Sends the chat, records the reply and its cost, saves the sub-agent, returns the reply.
async fn converse(ctx: &ToolCtx<'_>, record: &mut SubAgentRecord) -> Result<String, ConverseError> {
    let model = ctx.model.ok_or(ConverseError::NoModel)?;
    let config = &ctx.subagent_limits;
    let budget = (model.context_tokens() as usize).saturating_sub(config.reply_max_tokens as usize);
    let chat = fit_chat(&record.messages, config.max_messages, budget, model);
    if chat.len() < 2 {
        return Err(ConverseError::TooLong);
    }
    let what = format!("sub-agent {} ({})", record.key, record.name);
    let reply = model.complete(&what, chat, config.reply_max_tokens).await?;
    let text = reply.text.trim().to_string();
    record.spent += reply.cost;
    record.last_cycle = ctx.agent.cycle;
    record.messages.push(Message::assistant(text.clone()));
    // What is kept on disk is bounded like what is sent: the charter and the newest messages.
    let excess = record
        .messages
        .len()
        .saturating_sub(config.max_messages.max(2));
    if excess > 0 {
        record.messages.drain(1..1 + excess);
    }
    ctx.subagents
        .save(record)
        .map_err(ConverseError::NotSaved)?;
    Ok(text)
}

struct StartAgent;

#[async_trait]
impl Command for StartAgent {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "start_agent",
            "Start a sub-agent, a helper chat paid from your budget",
            Risk::Control,
        )
        .arg("name", ArgType::String, "A short name for the sub-agent")
        .arg("task", ArgType::String, "A short description of its task")
        .arg("prompt", ArgType::String, "The first message to send it")
        .reads_untrusted()
        .egress(Egress::AllArguments)
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let (name, task, prompt) = (
            str_arg(call, "name").trim(),
            str_arg(call, "task").trim(),
            str_arg(call, "prompt").trim(),
        );
        if name.is_empty() || prompt.is_empty() {
            return ToolOutput::error("A sub-agent needs a name and a first prompt.");
        }
        let existing = match ctx.subagents.all() {
            Ok(list) => list,
            Err(e) => return ToolOutput::error(format!("The sub-agents could not be read: {e}")),
        };
        // This very command ran before a crash and was approved again: report what it did.
        if let Some(done) = existing
            .iter()
            .find(|r| r.started_cycle == ctx.agent.cycle && r.name == name)
        {
            let first = done.messages.get(2).map_or("", |m| m.content.as_str());
            return ToolOutput::success(format!(
                "Agent {name} created with key {}. First response: {first}",
                done.key
            ));
        }
        let live = existing.len();
        let max = ctx.subagent_limits.max_per_agent;
        if live >= max {
            return ToolOutput::error(format!(
                "You already have {live} sub-agents, the most allowed; delete one with delete_agent first."
            ));
        }
        let key = match ctx.subagents.next_key() {
            Ok(key) => key,
            Err(e) => return ToolOutput::error(format!("No key for a sub-agent: {e}")),
        };
        let mut record = SubAgentRecord {
            key: key.clone(),
            name: name.to_string(),
            task: task.to_string(),
            messages: vec![Message::system(charter(name, task)), Message::user(prompt)],
            spent: Micros::ZERO,
            started_cycle: ctx.agent.cycle,
            last_cycle: 0,
            created_at: ctx.now,
        };
        match converse(ctx, &mut record).await {
            Ok(reply) => ToolOutput::success(format!(
                "Agent {name} created with key {key}. First response: {reply}"
            )),
            Err(e) => ToolOutput::error(format!("The sub-agent was not started: {e}")),
        }
    }
}

struct MessageAgent;

#[async_trait]
impl Command for MessageAgent {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "message_agent",
            "Message a sub-agent and get its reply",
            Risk::Control,
        )
        .arg("key", ArgType::String, "The sub-agent's key")
        .arg("message", ArgType::String, "The message")
        .reads_untrusted()
        .egress(Egress::Argument("message".into()))
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let key = str_arg(call, "key").trim();
        let message = str_arg(call, "message").trim();
        if message.is_empty() {
            return ToolOutput::error("The message is empty.");
        }
        let mut record = match ctx.subagents.get(key) {
            Ok(Some(record)) => record,
            Ok(None) => return ToolOutput::error(no_such_agent(ctx, key)),
            Err(e) => return ToolOutput::error(format!("The sub-agent could not be read: {e}")),
        };
        if record.last_cycle == ctx.agent.cycle {
            if let [.., asked, answer] = record.messages.as_slice() {
                if asked.role == Role::User
                    && asked.content == message
                    && answer.role == Role::Assistant
                {
                    // Answered before a crash; the re-approved command is not paid for again.
                    return ToolOutput::success(format!(
                        "Agent {} ({key}) replied: {}",
                        record.name, answer.content
                    ));
                }
            }
        }
        record.messages.push(Message::user(message));
        match converse(ctx, &mut record).await {
            Ok(reply) => {
                ToolOutput::success(format!("Agent {} ({key}) replied: {reply}", record.name))
            }
            Err(e) => ToolOutput::error(format!("The message was not answered: {e}")),
        }
    }
}

fn no_such_agent(ctx: &ToolCtx<'_>, key: &str) -> String {
    // The key is the model's: a made-up one can run to thousands of characters, and this answer
    // goes into the next prompts.
    let key = crate::core::text::truncate_chars(key, 64);
    let keys: Vec<String> = ctx
        .subagents
        .all()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.key)
        .collect();
    if keys.is_empty() {
        format!("Agent {key} does not exist; you have no sub-agents.")
    } else {
        format!(
            "Agent {key} does not exist; your sub-agents' keys: {}.",
            keys.join(", ")
        )
    }
}

struct ListAgents;

#[async_trait]
impl Command for ListAgents {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new("list_agents", "List your sub-agents", Risk::Read)
    }

    async fn run(&self, _call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        match ctx.subagents.all() {
            Ok(list) if list.is_empty() => ToolOutput::success("You have no sub-agents."),
            Ok(list) => {
                let lines: Vec<String> = list
                    .iter()
                    .map(|r| format!("{}: {} ({})", r.key, r.name, r.task))
                    .collect();
                ToolOutput::success(format!("List of agents:\n{}", lines.join("\n")))
            }
            Err(e) => ToolOutput::error(format!("The sub-agents could not be read: {e}")),
        }
    }
}

struct DeleteAgent;

#[async_trait]
impl Command for DeleteAgent {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new("delete_agent", "Delete a sub-agent", Risk::Control).arg(
            "key",
            ArgType::String,
            "The sub-agent's key",
        )
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let key = str_arg(call, "key").trim();
        match ctx.subagents.delete(key) {
            Ok(true) => ToolOutput::success(format!("Agent {key} deleted.")),
            Ok(false) => ToolOutput::error(no_such_agent(ctx, key)),
            Err(e) => ToolOutput::error(format!("The sub-agent could not be deleted: {e}")),
        }
    }
}
