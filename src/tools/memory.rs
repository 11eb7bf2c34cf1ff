//! `memory_add`: the model saves a fact to its long-term memory explicitly (AutoGPT's command of
//! the same name); it is recalled in later cycles when relevant.

use std::sync::Arc;

use async_trait::async_trait;

use super::{str_arg, Command, ToolCtx, ToolOutput};
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::memory::MemorySource;
use crate::core::reply::CommandCall;
use crate::core::text::truncate_chars;

pub fn commands() -> Vec<Arc<dyn Command>> {
    vec![Arc::new(MemoryAdd)]
}

/// Longest fact the model may save at once, in characters.
const MAX_FACT_CHARS: usize = 2000;

struct MemoryAdd;

#[async_trait]
impl Command for MemoryAdd {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "memory_add",
            "Save an important fact to long-term memory",
            Risk::Write,
        )
        .arg("string", ArgType::String, "The fact to remember")
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let Some(memory) = ctx.memory else {
            return ToolOutput::error("Long-term memory is switched off for this bot.");
        };
        let fact = str_arg(call, "string").trim();
        if fact.is_empty() {
            return ToolOutput::error("Nothing to remember: the string is empty.");
        }
        let fact = truncate_chars(fact, MAX_FACT_CHARS);
        match memory
            .remember(ctx.payer, ctx.agent.cycle, MemorySource::Command, &fact)
            .await
        {
            Ok(id) => ToolOutput::success(format!("Saved to memory (id {id}).")),
            Err(e) => ToolOutput::success(format!(
                "The memory is queued and will be saved when embeddings work again ({e})."
            )),
        }
    }
}
