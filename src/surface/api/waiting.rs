//! `ApiSurface`: the runtime's port for agents driven over the Agent Protocol. It shows nothing
//! itself (a caller reads what an agent did from the store, as a step); it wakes the step
//! requests waiting on an agent whenever the agent shows something, holds the question an
//! `ask_user` waits on until a step answers it, and remembers which resting point each task was
//! last shown at (`RestPoint`), so that a step's input is applied only to what its caller has
//! seen.
//!
//! Inside the Discord bot it stands in front of the Discord surface (`ApiSurface::beside`):
//! everything is shown there too, and a question is answered by whichever side answers first.
//! The map it keeps holds only agents a caller or the agent touched, and an agent leaves it once
//! it has finished and no request waits on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};

use crate::core::decision::Decision;
use crate::core::history::Episode;
use crate::core::person::ActedBy;
use crate::core::state::{AgentState, AgentView, PauseReason, Phase, Proposal};
use crate::locks::LockRecovered;
use crate::runtime::{AgentHandle, LiveStatus, ShownAs, Surface};
use crate::tools::preview::Preview;
use crate::tools::NoAnswer;

/// How long an `ask_user` waits for an answer over the API, as on Discord.
const ANSWER_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// Where an agent waits for its caller: what a step shows, and what the next step's input
/// answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestPoint {
    /// A proposal waits for a decision: its cycle, its revision (an edit changes it) and how
    /// many approvals it has (a quorum class waits at the same cycle for more).
    Decision {
        cycle: u64,
        revision: u32,
        approvals: usize,
    },
    /// `ask_user` waits for an answer.
    Question {
        cycle: u64,
    },
    Paused {
        cycle: u64,
    },
    Finished {
        cycle: u64,
    },
}

impl RestPoint {
    /// Where `state` rests, given the question its `ask_user` waits on; `None` while it works.
    pub fn of(state: &AgentState, question_cycle: Option<u64>) -> Option<RestPoint> {
        let cycle = state.progress.cycle;
        if let Some(cycle) = question_cycle {
            return Some(RestPoint::Question { cycle });
        }
        match &state.progress.phase {
            Phase::AwaitingDecision => {
                state
                    .progress
                    .pending
                    .as_ref()
                    .map(|p| RestPoint::Decision {
                        cycle: p.cycle,
                        revision: p.revision,
                        approvals: p.approvals.len(),
                    })
            }
            Phase::Paused(_) => Some(RestPoint::Paused { cycle }),
            Phase::Finished { .. } => Some(RestPoint::Finished { cycle }),
            _ => None,
        }
    }
}

/// A question `ask_user` waits on.
struct Question {
    cycle: u64,
    text: String,
    answer: oneshot::Sender<String>,
}

/// What the surface keeps for one agent.
struct Watched {
    /// Bumped whenever the agent shows something.
    changed: watch::Sender<u64>,
    question: Option<Question>,
    /// The resting point the last step answered with.
    shown: Option<RestPoint>,
}

impl Watched {
    fn new() -> Watched {
        Watched {
            changed: watch::Sender::new(0),
            question: None,
            shown: None,
        }
    }
}

#[derive(Default)]
pub struct ApiSurface {
    beside: Option<Arc<dyn Surface>>,
    agents: Mutex<HashMap<String, Watched>>,
}

impl ApiSurface {
    /// The surface of `autothread serve`, where the API is the only way in.
    pub fn alone() -> ApiSurface {
        ApiSurface::default()
    }

    /// In front of another surface (Discord's), which shows everything too.
    pub fn beside(other: Arc<dyn Surface>) -> ApiSurface {
        ApiSurface {
            beside: Some(other),
            agents: Mutex::new(HashMap::new()),
        }
    }

    fn with<T>(&self, agent: &str, act: impl FnOnce(&mut Watched) -> T) -> T {
        let mut agents = self.agents.lock_recovered();
        act(agents.entry(agent.to_string()).or_insert_with(Watched::new))
    }

    /// Wakes the step requests waiting on `agent`. An agent no caller has asked about is not
    /// added: inside the Discord bot most agents are never driven over the API.
    fn wake(&self, agent: &str) {
        if let Some(watched) = self.agents.lock_recovered().get(agent) {
            watched.changed.send_modify(|n| *n += 1);
        }
    }

    /// A receiver that sees every change of `agent` from now on.
    pub fn watch(&self, agent: &str) -> watch::Receiver<u64> {
        self.with(agent, |watched| watched.changed.subscribe())
    }

    /// The cycle and text of the question `agent` waits on, if any.
    pub fn question(&self, agent: &str) -> Option<(u64, String)> {
        let agents = self.agents.lock_recovered();
        let question = agents.get(agent)?.question.as_ref()?;
        Some((question.cycle, question.text.clone()))
    }

    /// Answers the question `agent` waits on; false when none does.
    pub fn answer(&self, agent: &str, text: String) -> bool {
        let question = self.with(agent, |watched| watched.question.take());
        match question {
            Some(question) => question.answer.send(text).is_ok(),
            None => false,
        }
    }

    /// The resting point the last step of `agent` answered with.
    pub fn shown(&self, agent: &str) -> Option<RestPoint> {
        self.agents.lock_recovered().get(agent)?.shown.clone()
    }

    pub fn set_shown(&self, agent: &str, point: Option<RestPoint>) {
        self.with(agent, |watched| watched.shown = point);
    }

    /// Forgets an agent nobody waits on (a finished one), so the map holds only agents in use.
    pub fn forget(&self, agent: &str) {
        self.forget_if_idle(agent);
    }

    fn forget_if_idle(&self, agent: &str) {
        let mut agents = self.agents.lock_recovered();
        if agents
            .get(agent)
            .is_some_and(|w| w.changed.receiver_count() == 0 && w.question.is_none())
        {
            agents.remove(agent);
        }
    }

    /// How many agents the surface keeps, for tests of its bound.
    pub fn kept(&self) -> usize {
        self.agents.lock_recovered().len()
    }

    /// Waits for the API's answer to a question just set.
    async fn answer_over_api(rx: oneshot::Receiver<String>) -> Result<String, NoAnswer> {
        match tokio::time::timeout(ANSWER_WAIT, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(NoAnswer::Withdrawn),
            Err(_) => Err(NoAnswer::TimedOut),
        }
    }
}

#[async_trait]
impl Surface for ApiSurface {
    async fn show_profile(&self, agent: &AgentState) {
        if let Some(other) = &self.beside {
            other.show_profile(agent).await;
        }
        self.wake(&agent.id);
    }

    async fn show_proposal(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        shown: ShownAs,
        preview: Option<&Preview>,
    ) {
        if let Some(other) = &self.beside {
            other.show_proposal(agent, proposal, shown, preview).await;
        }
        self.wake(&agent.id);
    }

    async fn request_decision(&self, agent: &AgentState, proposal: &Proposal, handle: AgentHandle) {
        if let Some(other) = &self.beside {
            other.request_decision(agent, proposal, handle).await;
        }
        self.wake(&agent.id);
    }

    async fn show_result(&self, agent: &AgentState, episode: &Episode) {
        if let Some(other) = &self.beside {
            other.show_result(agent, episode).await;
        }
        self.wake(&agent.id);
    }

    async fn notify(&self, agent: &AgentState, text: &str) {
        if let Some(other) = &self.beside {
            other.notify(agent, text).await;
        }
        self.wake(&agent.id);
    }

    async fn paused(&self, agent: &AgentState, reason: &PauseReason) {
        if let Some(other) = &self.beside {
            other.paused(agent, reason).await;
        }
        self.wake(&agent.id);
    }

    async fn finished(&self, agent: &AgentState, reason: &str) {
        if let Some(other) = &self.beside {
            other.finished(agent, reason).await;
        }
        self.wake(&agent.id);
        self.forget_if_idle(&agent.id);
    }

    async fn decided(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        decision: &Decision,
        by: &ActedBy,
    ) {
        if let Some(other) = &self.beside {
            other.decided(agent, proposal, decision, by).await;
        }
        self.wake(&agent.id);
    }

    async fn expired(&self, agent: &AgentState, proposal: &Proposal, text: &str, escalate: bool) {
        if let Some(other) = &self.beside {
            other.expired(agent, proposal, text, escalate).await;
        }
        self.wake(&agent.id);
    }

    async fn thinking(&self, agent: &AgentState) {
        if let Some(other) = &self.beside {
            other.thinking(agent).await;
        }
    }

    async fn ask_user(&self, agent: &AgentView, question: &str) -> Result<String, NoAnswer> {
        let (answer, rx) = oneshot::channel();
        self.with(&agent.id, |watched| {
            watched.question = Some(Question {
                cycle: agent.cycle,
                text: question.to_string(),
                answer,
            });
            watched.changed.send_modify(|n| *n += 1);
        });
        let over_api = Self::answer_over_api(rx);
        let answered = match &self.beside {
            None => over_api.await,
            Some(other) => {
                tokio::pin!(over_api);
                let elsewhere = other.ask_user(agent, question);
                tokio::pin!(elsewhere);
                tokio::select! {
                    answer = &mut over_api => {
                        // Nobody should be left answering on the other side.
                        other.withdraw_question(agent).await;
                        answer
                    }
                    answer = &mut elsewhere => match answer {
                        Ok(answer) => Ok(answer),
                        // The other side cannot ask this agent (no thread): the API can.
                        Err(NoAnswer::NoThread | NoAnswer::NobodyToAsk) => over_api.await,
                        Err(why) => Err(why),
                    },
                }
            }
        };
        self.with(&agent.id, |watched| {
            watched.question = None;
            watched.changed.send_modify(|n| *n += 1);
        });
        answered
    }

    async fn withdraw_question(&self, agent: &AgentView) {
        if let Some(other) = &self.beside {
            other.withdraw_question(agent).await;
        }
        // Dropping the sender ends the wait with `Withdrawn`.
        self.with(&agent.id, |watched| watched.question = None);
        self.wake(&agent.id);
    }

    fn needs_stored_proposals(&self) -> bool {
        // A step reads the proposal from the store, so it must be there before it is shown.
        true
    }

    fn wants_status(&self) -> bool {
        self.beside
            .as_ref()
            .is_some_and(|other| other.wants_status())
    }

    fn status(&self, agent: &AgentState, status: &LiveStatus) {
        if let Some(other) = &self.beside {
            other.status(agent, status);
        }
    }

    fn progress(&self, agent: &AgentView, text: &str) {
        if let Some(other) = &self.beside {
            other.progress(agent, text);
        }
    }

    fn watches_stream(&self) -> bool {
        self.beside
            .as_ref()
            .is_some_and(|other| other.watches_stream())
    }

    fn streamed(&self, agent: &str, piece: &str) {
        if let Some(other) = &self.beside {
            other.streamed(agent, piece);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_question_is_answered_once_over_the_api_and_a_finished_agent_is_forgotten() {
        let surface = Arc::new(ApiSurface::alone());
        let view = AgentView {
            id: "a1".into(),
            name: "n".into(),
            cycle: 4,
            model: "m".into(),
        };
        let mut changes = surface.watch("a1");
        let asking = {
            let surface = surface.clone();
            let view = view.clone();
            tokio::spawn(async move { surface.ask_user(&view, "which colour?").await })
        };
        changes.changed().await.unwrap();
        assert_eq!(surface.question("a1"), Some((4, "which colour?".into())));
        assert!(surface.answer("a1", "blue".into()));
        assert!(!surface.answer("a1", "red".into()), "answered twice");
        assert_eq!(asking.await.unwrap(), Ok("blue".to_string()));
        assert_eq!(surface.question("a1"), None);

        // A withdrawn question ends the wait.
        let asking = {
            let surface = surface.clone();
            let view = view.clone();
            tokio::spawn(async move { surface.ask_user(&view, "still there?").await })
        };
        while surface.question("a1").is_none() {
            changes.changed().await.unwrap();
        }
        surface.withdraw_question(&view).await;
        assert_eq!(asking.await.unwrap(), Err(NoAnswer::Withdrawn));

        drop(changes);
        let state = AgentState::for_test("a1");
        surface.finished(&state, "done").await;
        assert_eq!(surface.kept(), 0);
    }
}
