//! Control commands: finish, ask_user, do_nothing. They steer the agent itself, so the policy
//! always shows them to a human.

use std::sync::Arc;

use async_trait::async_trait;

use super::{str_arg, Command, ToolCtx, ToolOutput};
use crate::core::commands::{ArgType, CommandSpec, Risk, FINISH};
use crate::core::reply::CommandCall;

pub fn commands() -> Vec<Arc<dyn Command>> {
    vec![Arc::new(AskUser), Arc::new(DoNothing), Arc::new(Finish)]
}

struct AskUser;

/// The command's name: a pause or a finish withdraws its question rather than wait for it.
pub const ASK_USER: &str = "ask_user";

#[async_trait]
impl Command for AskUser {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            ASK_USER,
            "Ask the user for what the task needs",
            Risk::Control,
        )
        .arg(
            "question",
            ArgType::String,
            "The question or prompt to the user",
        )
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        match ctx.ask_user.ask(str_arg(call, "question")).await {
            Ok(answer) => ToolOutput::success(format!("The user's answer: {answer}")),
            Err(why) => ToolOutput::error(format!("The user could not be asked: {why}")),
        }
    }
}

struct DoNothing;

#[async_trait]
impl Command for DoNothing {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new("do_nothing", "Do nothing for this step", Risk::Control)
    }

    async fn run(&self, _call: &CommandCall, _ctx: &ToolCtx<'_>) -> ToolOutput {
        ToolOutput::success("No action performed.")
    }
}

struct Finish;

#[async_trait]
impl Command for Finish {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            FINISH,
            "Shut down when the task is done or impossible",
            Risk::Control,
        )
        .arg(
            "reason",
            ArgType::String,
            "A summary to the user of how the goals were accomplished",
        )
        .alias("task_complete", &[])
    }

    async fn run(&self, call: &CommandCall, _ctx: &ToolCtx<'_>) -> ToolOutput {
        ToolOutput::success(str_arg(call, "reason"))
    }
}
