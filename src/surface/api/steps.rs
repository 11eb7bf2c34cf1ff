//! An agent's cycles as the Agent Protocol's steps, read from the store: one step per cycle,
//! whose `step_id` is the cycle's number.
//!
//! A cycle with an episode is a completed step: what the agent reasoned, the command and its
//! result. The cycle the agent is on, when it has no episode yet, is the open step: the card of
//! the proposal waiting for a decision (the console's card text), the question `ask_user`
//! waits on, why the agent paused, or what it is doing while it works (then `running`). Its
//! `additional_output` carries the thoughts, the proposed command, the last command with its
//! result, and the task's cost so far. The step of a finished agent's last cycle is `is_last`.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::protocol::{Step, StepStatus};
use super::waiting::RestPoint;
use crate::core::budget::{format_usd, Micros};
use crate::core::history::{format_call, Episode};
use crate::core::state::{AgentState, Phase};
use crate::runtime::ShownAs;
use crate::surface::console::proposal_text;

/// Characters of a command shown in a step's output.
const CALL_CHARS: usize = 2_000;

/// What a task's steps are made of: the agent, its episodes, the question it waits on, its
/// spend.
pub struct TaskRecord<'a> {
    pub state: &'a AgentState,
    pub episodes: &'a [Episode],
    pub question: Option<(u64, String)>,
    pub spent: Micros,
}

impl TaskRecord<'_> {
    /// Every step, oldest first.
    pub fn steps(&self) -> Vec<Step> {
        let finished = matches!(self.state.progress.phase, Phase::Finished { .. });
        let last_cycle = self.episodes.last().map(|e| e.cycle);
        let mut steps: Vec<Step> = self
            .episodes
            .iter()
            .map(|episode| {
                let is_last = finished && Some(episode.cycle) == last_cycle;
                self.completed_step(episode, is_last)
            })
            .collect();
        let open = last_cycle.is_none_or(|last| self.state.progress.cycle > last);
        if open && !(finished && last_cycle.is_some()) {
            steps.push(self.open_step());
        }
        steps
    }

    fn step(&self, cycle: u64, status: StepStatus) -> Step {
        Step {
            step_id: cycle.to_string(),
            task_id: self.state.id.clone(),
            name: None,
            status,
            input: None,
            additional_input: json!({}),
            output: None,
            additional_output: json!({}),
            artifacts: Vec::new(),
            is_last: false,
            created_at: self.state.created_at,
            modified_at: self.modified_at(),
        }
    }

    fn modified_at(&self) -> DateTime<Utc> {
        self.state.updated_at
    }

    fn completed_step(&self, episode: &Episode, is_last: bool) -> Step {
        let call = format_call(&episode.command, CALL_CHARS);
        let text = episode.outcome.text();
        let mut output = String::new();
        if !episode.reasoning.trim().is_empty() {
            output.push_str(episode.reasoning.trim());
            output.push('\n');
        }
        output.push_str(&format!(
            "COMMAND: {call}\nRESULT ({}): {text}",
            episode.outcome.status()
        ));
        let mut more = Map::new();
        more.insert("cycle".into(), json!(episode.cycle));
        more.insert("command".into(), command_json(episode));
        more.insert(
            "result".into(),
            json!({"status": episode.outcome.status(), "text": text}),
        );
        if let Some(by) = &episode.decided_by {
            more.insert("decided_by".into(), json!(by.names()));
        }
        more.insert("cycle_cost_usd".into(), json!(format_usd(episode.cost)));
        more.insert("task_cost_usd".into(), json!(format_usd(self.spent)));
        let input = match &episode.outcome {
            crate::core::history::Outcome::HumanFeedback(feedback) => Some(feedback.clone()),
            _ => None,
        };
        Step {
            name: Some(episode.command.name.clone()),
            input,
            output: Some(output),
            additional_output: Value::Object(more),
            is_last,
            ..self.step(episode.cycle, StepStatus::Completed)
        }
    }

    fn open_step(&self) -> Step {
        let state = self.state;
        let question_cycle = self.question.as_ref().map(|(cycle, _)| *cycle);
        let resting = RestPoint::of(state, question_cycle);
        let status = match resting {
            Some(_) => StepStatus::Completed,
            None => StepStatus::Running,
        };
        let mut more = Map::new();
        more.insert("cycle".into(), json!(state.progress.cycle));
        more.insert("phase".into(), json!(state.progress.phase.label()));
        let mut name = None;
        let output = match (&self.question, &state.progress.phase) {
            (Some((_, question)), _) => {
                name = Some(crate::tools::control::ASK_USER.to_string());
                more.insert("question".into(), json!(question));
                format!(
                    "{} asks: {question}\nAnswer with the next step's input.",
                    state.name()
                )
            }
            (None, Phase::AwaitingDecision) => match &state.progress.pending {
                Some(proposal) => {
                    name = Some(proposal.command.name.clone());
                    more.insert("thoughts".into(), json!(proposal.thoughts));
                    more.insert(
                        "command".into(),
                        json!({"name": proposal.command.name, "args": proposal.command.args}),
                    );
                    more.insert("class".into(), json!(proposal.risk.label()));
                    if let Some(progress) = proposal.approval_progress() {
                        more.insert("approvals".into(), json!(progress));
                    }
                    format!(
                        "{}\nA step with no input (or \"y\") approves the command; any other input is feedback.",
                        proposal_text(state, proposal, ShownAs::AwaitingDecision).trim()
                    )
                }
                None => format!("{} is waiting for a decision.", state.name()),
            },
            (None, Phase::Paused(reason)) => {
                more.insert("paused".into(), json!(reason.describe()));
                format!(
                    "{} {}. The next step resumes it.",
                    state.name(),
                    reason.describe()
                )
            }
            (None, Phase::Finished { reason }) => format!("{} finished: {reason}", state.name()),
            (None, phase) => format!(
                "{} is {}; a later step continues.",
                state.name(),
                phase.label()
            ),
        };
        if let Some(last) = self.episodes.last() {
            more.insert(
                "last_command".into(),
                json!({
                    "cycle": last.cycle,
                    "command": command_json(last),
                    "status": last.outcome.status(),
                    "result": last.outcome.text(),
                }),
            );
        }
        more.insert("task_cost_usd".into(), json!(format_usd(self.spent)));
        Step {
            name,
            output: Some(output),
            additional_output: Value::Object(more),
            is_last: matches!(state.progress.phase, Phase::Finished { .. }),
            ..self.step(state.progress.cycle, status)
        }
    }
}

fn command_json(episode: &Episode) -> Value {
    json!({"name": episode.command.name, "args": episode.command.args})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::Outcome;
    use crate::core::reply::CommandCall;

    fn episode(cycle: u64, command: &str, outcome: Outcome) -> Episode {
        Episode {
            cycle,
            command: CommandCall {
                name: command.into(),
                args: Map::new(),
            },
            reasoning: format!("reasoning {cycle}"),
            outcome,
            summary: None,
            decided_by: None,
            edited_by: Vec::new(),
            cost: Micros::ZERO,
        }
    }

    #[test]
    fn each_cycle_is_a_step_and_the_finished_one_is_last() {
        let mut state = AgentState::for_test("t1");
        state.progress.cycle = 3;
        state.progress.phase = Phase::Thinking;
        let episodes = vec![
            episode(1, "write_file", Outcome::Success("written".into())),
            episode(2, "read_file", Outcome::HumanFeedback("shorter".into())),
        ];
        let record = TaskRecord {
            state: &state,
            episodes: &episodes,
            question: None,
            spent: Micros(1_500_000),
        };
        let steps = record.steps();
        let ids: Vec<&str> = steps.iter().map(|s| s.step_id.as_str()).collect();
        assert_eq!(ids, ["1", "2", "3"]);
        assert_eq!(steps[0].status, StepStatus::Completed);
        assert_eq!(steps[1].input.as_deref(), Some("shorter"));
        assert_eq!(steps[2].status, StepStatus::Running);
        assert!(steps.iter().all(|s| !s.is_last));
        assert_eq!(steps[2].additional_output["last_command"]["cycle"], 2);
        assert_eq!(steps[2].additional_output["task_cost_usd"], "$1.50");

        state.progress.phase = Phase::Finished {
            reason: "done".into(),
        };
        state.progress.cycle = 2;
        let record = TaskRecord {
            state: &state,
            episodes: &episodes,
            question: None,
            spent: Micros::ZERO,
        };
        let steps = record.steps();
        assert_eq!(steps.len(), 2);
        assert!(steps[1].is_last && !steps[0].is_last);
    }

    #[test]
    fn a_question_is_the_open_step_and_it_rests() {
        let mut state = AgentState::for_test("t1");
        state.progress.cycle = 1;
        state.progress.phase = Phase::Executing;
        let record = TaskRecord {
            state: &state,
            episodes: &[],
            question: Some((1, "which colour?".into())),
            spent: Micros::ZERO,
        };
        let steps = record.steps();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].status, StepStatus::Completed);
        assert_eq!(steps[0].name.as_deref(), Some("ask_user"));
        assert!(steps[0]
            .output
            .as_deref()
            .unwrap()
            .contains("which colour?"));
    }
}
