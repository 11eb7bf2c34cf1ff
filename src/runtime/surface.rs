//! The runtime's port to humans: the `Surface` trait, through which an actor shows an agent's
//! work and asks for decisions. The console and Discord implement it in the surface module; the
//! runtime never names them.

use async_trait::async_trait;

use super::AgentHandle;
use crate::core::event::Decision;
use crate::core::history::Episode;
use crate::core::state::{AgentState, AgentView, PauseReason, Proposal};
use crate::tools::preview::Preview;

#[async_trait]
pub trait Surface: Send + Sync {
    async fn show_profile(&self, agent: &AgentState);
    /// Shows a proposal, with what it would change in a file when it writes one; `auto_approved`
    /// ones are only displayed, the others ask for a decision through `request_decision`.
    async fn show_proposal(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        auto_approved: bool,
        preview: Option<&Preview>,
    );
    /// Asks the humans to decide; must return promptly and deliver the answer through `handle`.
    async fn request_decision(&self, agent: &AgentState, proposal: &Proposal, handle: AgentHandle);
    async fn show_result(&self, agent: &AgentState, episode: &Episode);
    async fn notify(&self, agent: &AgentState, text: &str);
    async fn paused(&self, agent: &AgentState, reason: &PauseReason);
    async fn finished(&self, agent: &AgentState, reason: &str);
    /// A decision was taken on the proposal of `cycle` (the card can show who decided, and when).
    async fn decided(&self, _agent: &AgentState, _cycle: u64, _decision: &Decision, _by: &str) {}
    /// Nobody decided on the card of `proposal` (as it was shown) in time; `text` says what happened. With
    /// `escalate` the card stays open and the approvers are called (Discord mentions them);
    /// otherwise the card closes.
    async fn expired(&self, agent: &AgentState, _proposal: &Proposal, text: &str, _escalate: bool) {
        self.notify(agent, text).await;
    }
    /// The model is working on the agent's next step (Discord shows a typing indicator).
    async fn thinking(&self, _agent: &AgentState) {}
    /// The `ask_user` command: a question to the humans, answered in text.
    async fn ask_user(&self, agent: &AgentView, question: &str) -> Result<String, String>;
    /// Withdraws the question `ask_user` waits on for `agent`, so that it returns at once (the
    /// agent was paused or finished; nobody should be left answering it).
    async fn withdraw_question(&self, _agent: &AgentView) {}
}
