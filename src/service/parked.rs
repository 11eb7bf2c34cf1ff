//! What the buttons of a parked agent's card do (paused for a budget, or by the runaway brake): go
//! on, stop, or raise the budget that stopped it, each for those allowed to.
//!
//! `park_choice` first checks that the agent is still parked. Continue and Stop are for deciders; a
//! raise goes to an absolute target through `check_agent_budget` or `set_limit`, with the rights
//! those need.

use super::rights::{may_decide, Requester};
use super::{AgentService, LimitChange, ServiceResult, UserError, NOT_ALLOWED};
use crate::budget::LimitScope;
use crate::core::budget::{format_usd, BudgetKind, Micros};
use crate::core::event::Event;
use crate::core::person::Person;
use crate::core::state::{AgentState, PauseReason, Phase};
use crate::runtime::supervisor::Supervisor;

/// A choice on a parked agent's card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkChoice {
    /// Let it go on (the runaway brake's card); `cycle` is where the card saw it parked.
    Continue { cycle: u64 },
    /// Keep it paused until someone resumes it.
    Stop { cycle: u64 },
    /// Raise a budget to `to`: an absolute target, so that two clicks raise it once.
    Raise { budget: BudgetKind, to: Micros },
}

/// The most a card offers to raise a budget by, in dollars: small steps, so that a click never
/// commits much more than the person meant.
pub const RAISE_STEPS_USD: [u64; 2] = [1, 5];

/// What a stale card's button answers.
const NO_LONGER_PARKED: &str =
    "This agent is no longer parked as this card says; nothing changed. `/agent status` shows where it is.";

impl AgentService {
    /// The limit in force for one of the budgets an agent draws on (no limit: the most there
    /// is), as the ledger's own lines give it.
    fn limit_of(&self, state: &AgentState, budget: BudgetKind) -> ServiceResult<Micros> {
        let limit = self
            .budgets
            .lines(
                &state.id,
                &state.money.spender,
                self.budgets.agent_limit(state),
                self.clock.now(),
            )?
            .into_iter()
            .find(|line| line.kind == budget)
            .and_then(|line| line.limit);
        Ok(limit.unwrap_or(Micros::MAX))
    }

    /// Applies a choice made on a parked agent's card and says what happened, for the card.
    pub fn park_choice(
        &self,
        supervisor: &Supervisor,
        agent: &str,
        who: &Requester,
        by: &Person,
        choice: ParkChoice,
    ) -> ServiceResult<String> {
        let binding = self
            .store
            .binding(agent)?
            .ok_or_else(|| UserError::new("This agent no longer exists."))?;
        let state = self
            .store
            .load_agent_record(agent)?
            .ok_or_else(|| UserError::new("This agent no longer exists."))?;
        let Phase::Paused(reason) = &state.progress.phase else {
            return Err(UserError::new(NO_LONGER_PARKED).into());
        };
        // A card is good for the park it was posted for: the same cycle, the same budget, and a
        // raise that still raises (an old "+$1" must never lower a limit set since).
        let current = match (reason, choice) {
            (
                PauseReason::Runaway { .. },
                ParkChoice::Continue { cycle } | ParkChoice::Stop { cycle },
            )
            | (PauseReason::Budget { .. }, ParkChoice::Stop { cycle }) => {
                (cycle == state.progress.cycle).then_some(None)
            }
            (
                PauseReason::Runaway { .. },
                ParkChoice::Raise {
                    budget: BudgetKind::Agent,
                    ..
                },
            ) => Some(Some(self.budgets.agent_limit(&state))),
            (
                PauseReason::Budget {
                    stop: Some(stop), ..
                },
                ParkChoice::Raise { budget, .. },
            ) if stop.kind == budget => Some(Some(self.limit_of(&state, budget)?)),
            _ => None,
        };
        let Some(current) = current else {
            return Err(UserError::new(NO_LONGER_PARKED).into());
        };
        if let (Some(current), ParkChoice::Raise { to, .. }) = (current, choice) {
            if to <= current {
                return Err(UserError(format!(
                    "That budget is already {}; nothing changed.",
                    format_usd(current)
                ))
                .into());
            }
        }
        match choice {
            ParkChoice::Continue { .. } | ParkChoice::Stop { .. } => {
                if !may_decide(&binding, who) {
                    return Err(UserError::new(NOT_ALLOWED).into());
                }
                let (event, done) = match choice {
                    ParkChoice::Continue { .. } => (
                        Event::Continue {
                            by: by.clone(),
                            budget: None,
                        },
                        format!("Continued by {}.", by.name),
                    ),
                    _ => (
                        Event::Pause { by: by.clone() },
                        format!("Stopped by {}; `/agent resume` continues.", by.name),
                    ),
                };
                supervisor.send(agent, event)?;
                Ok(done)
            }
            ParkChoice::Raise {
                budget: BudgetKind::Agent,
                to,
            } => {
                self.check_agent_budget(&binding, who, to)?;
                let event = Event::Continue {
                    by: by.clone(),
                    budget: Some(to),
                };
                supervisor.send(agent, event)?;
                Ok(format!(
                    "{} raised the agent's budget to {}; it goes on.",
                    by.name,
                    format_usd(to)
                ))
            }
            ParkChoice::Raise { budget, to } => {
                let scope = match budget {
                    BudgetKind::OwnerDaily => LimitScope::UserDaily,
                    BudgetKind::GuildDaily => LimitScope::GuildDaily,
                    _ => LimitScope::GuildMonthly,
                };
                let change = LimitChange {
                    scope,
                    guild_id: binding.guild_id,
                    // The owner's own day, not everyone's.
                    user: (scope == LimitScope::UserDaily).then_some(binding.owner_id),
                    micros: to,
                };
                let resumed = self.set_limit(supervisor, who, by, change)?;
                Ok(format!(
                    "{} raised {} to {}; {resumed} paused agent{} of this server {}.",
                    by.name,
                    budget.label(),
                    format_usd(to),
                    if resumed == 1 { "" } else { "s" },
                    if resumed == 1 { "goes on" } else { "go on" }
                ))
            }
        }
    }
}
