//! Running an approved command: the check that its file is as its card showed it, the command in a
//! task of its own, `ask_user` through the surface, and the cap on what it returns.
//!
//! A file the command writes is checked against the `FileBase` its card showed; a change since
//! makes `Event::CommandStale` instead of a run. A pause or finish ends an `ask_user` wait
//! (`withdraw_open_question`), and a long command reports its progress to the surface. `cap_output`
//! bounds what comes back.

use super::{Actor, ActorMsg, AgentModel, Surface};
use crate::core::event::Event;
use crate::core::history::Outcome;
use crate::core::reply::CommandCall;
use crate::core::state::{AgentView, Phase};
use crate::core::text::truncate_chars;
use crate::tools::preview::file_base;
use crate::tools::{AgentFiles, AskUser, SubAgents, ToolCtx};

impl Actor {
    /// A pause or a finish does not wait for an `ask_user` answer (which may take a day): the
    /// question is withdrawn, the command returns saying so, and the pause or finish follows.
    pub(super) async fn withdraw_open_question(&self) {
        let asking = self.state.progress.phase == Phase::Executing
            && self
                .state
                .progress
                .pending
                .as_ref()
                .is_some_and(|p| p.command.name == crate::tools::control::ASK_USER);
        if asking {
            self.deps
                .surface
                .withdraw_question(&self.state.view())
                .await;
        }
    }

    /// Runs `call` in a task and reports its outcome, unless the file it writes changed since its
    /// card was shown: then the agent is told, and the card is shown again.
    pub(super) fn execute(&mut self, cycle: u64, call: CommandCall) {
        let deps = self.deps.clone();
        let shown = self.shown_base.take().filter(|(shown, ..)| *shown == cycle);
        let script_check = self
            .state
            .progress
            .pending
            .as_ref()
            .filter(|pending| pending.cycle == cycle)
            .and_then(|pending| pending.script_check.clone());
        // Commands see their agent through a view: no copy of its history per command.
        let agent = self.state.view();
        let payer = deps.budgets.payer(&self.state);
        let handle = self.handle.clone();
        self.tasks.spawn(async move {
            let model = AgentModel {
                deps: &deps,
                model: agent.model.clone(),
                payer: payer.clone(),
            };
            let ask_user = SurfaceQuestions {
                surface: deps.surface.as_ref(),
                agent: &agent,
            };
            let ctx = ToolCtx {
                agent: &agent,
                now: deps.clock.now(),
                payer: &payer,
                workspace: AgentFiles::new(&deps.store, &agent.id),
                subagents: SubAgents::new(&deps.store, &agent.id),
                ask_user: &ask_user,
                limits: &deps.config.workspace,
                subagent_limits: &deps.config.subagents,
                memory: deps.memory.as_deref(),
                model: Some(&model),
                web: deps.web.as_deref(),
            };
            if let Some((_, path, base)) = shown {
                if file_base(&ctx.workspace, &path).is_ok_and(|now| now != base) {
                    let why = format!("{path} changed after its card was shown.");
                    let event = Event::CommandStale { cycle, why };
                    handle.report(ActorMsg::Event { event, reply: None }).await;
                    return;
                }
            }
            if let Some(check) = script_check {
                if let Some(why) = script_changed(&ctx.workspace, &check) {
                    let event = Event::CommandStale { cycle, why };
                    handle.report(ActorMsg::Event { event, reply: None }).await;
                    return;
                }
            }
            let output = deps.tools.run(&call, &ctx).await;
            let outcome = cap_output(output.outcome, deps.config.workspace.max_output_chars);
            handle
                .report(ActorMsg::Executed {
                    cycle,
                    call,
                    outcome,
                    ops: output.ops,
                })
                .await;
        });
    }
}

/// `ask_user` as commands see it: the question goes to the agent's surface.
struct SurfaceQuestions<'a> {
    surface: &'a dyn Surface,
    agent: &'a AgentView,
}

#[async_trait::async_trait]
impl AskUser for SurfaceQuestions<'_> {
    async fn ask(&self, question: &str) -> Result<String, crate::tools::NoAnswer> {
        self.surface.ask_user(self.agent, question).await
    }

    fn progress(&self, text: &str) {
        self.surface.progress(self.agent, text);
    }
}

/// Keeps tool output to a bounded size before it reaches the history, saying how much was cut.
fn cap_output(outcome: Outcome, max_chars: usize) -> Outcome {
    let cap = |text: String| {
        let total = text.chars().count();
        if total <= max_chars {
            text
        } else {
            format!(
                "{}\n[output cut: {} more characters]",
                truncate_chars(&text, max_chars),
                total - max_chars
            )
        }
    };
    match outcome {
        Outcome::Success(t) => Outcome::Success(cap(t)),
        Outcome::Error(t) => Outcome::Error(cap(t)),
        other => other,
    }
}

/// Why a script a rule approved may not run under it: it is not the file the rule was made for
/// (changed, gone or unreadable); `None` when it is exactly that file.
fn script_changed(
    files: &crate::tools::AgentFiles<'_>,
    check: &crate::core::rules::ScriptCheck,
) -> Option<String> {
    let now = match files.read(&check.path) {
        Ok(Some(bytes)) => crate::core::digest::sha256_tagged(&bytes),
        Ok(None) => {
            return Some(format!(
                "{} is gone since rule {} was made for it.",
                check.path, check.rule
            ))
        }
        Err(e) => return Some(format!("{} could not be read ({e}).", check.path)),
    };
    (now != check.contents).then(|| {
        format!(
            "{} changed since rule {} was made for it, so the rule does not cover it.",
            check.path, check.rule
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_output_is_capped_with_a_marker() {
        let long = "é".repeat(1000);
        let capped = cap_output(Outcome::Success(long), 300);
        let text = capped.text();
        assert!(text.starts_with(&"é".repeat(299)));
        assert!(
            text.ends_with("[output cut: 700 more characters]"),
            "{text}"
        );
        assert_eq!(
            cap_output(Outcome::Error("short".into()), 300),
            Outcome::Error("short".into())
        );
        let feedback = Outcome::HumanFeedback("x".repeat(500));
        assert_eq!(cap_output(feedback.clone(), 300), feedback);
    }
}
