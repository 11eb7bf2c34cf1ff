//! The rules every surface applies, in one place (`AgentService`): who may start an agent and how
//! many may run, who may set which budget and how far, narrowing an agent's policy, the models a
//! server offers, and which agents try again when a budget is raised. Surfaces (Discord, the
//! console) only route and render. A refusal is a `UserError`, shown to the person as it is.
//!
//! `check_start` applies the start role, the budget maximum and the caps per server and per person
//! on running agents (`counts_against_caps`: working, waiting and budget-parked agents count,
//! paused and finished ones do not); `check_resume` applies the same caps to an agent that would
//! count again. `set_limit` (admins) resumes agents paused for budget, which is why the service
//! names the runtime's `Supervisor`. The models a server offers are the configured one, then the
//! admins' list from the store, else the config's. Rights over one agent live in `rights`, forks
//! and rewinds in `fork`, memory changes in `memory_changes`, a parked card's choices in `parked`,
//! a server's admins' command policy in `server_policy`.

pub mod fork;
pub mod memory_changes;
pub mod parked;
pub mod rights;
pub mod server_policy;

use crate::core::person::Person;
use std::sync::Arc;

use crate::budget::{Budgets, LimitScope};
use crate::clock::Clock;
use crate::config::Config;
use crate::core::budget::{format_usd, Micros};
use crate::core::commands::Risk;
use crate::core::event::Event;
use crate::core::policy::ClassAction;
use crate::core::state::{
    AgentSettings, AgentState, GuildId, PauseReason, Phase, Profile, Spender,
};
use crate::runtime::supervisor::Supervisor;
use crate::store::{Store, ThreadBinding};
use rights::{may_set_agent_budget, Requester};

/// A refusal meant for the person who asked: surfaces show its text as it is (privately, in
/// Discord). Anything else that goes wrong is logged and shown as "Something went wrong (ref …)".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UserError(pub String);

impl UserError {
    pub fn new(text: impl Into<String>) -> Self {
        UserError(text.into())
    }
}

impl From<&str> for UserError {
    fn from(text: &str) -> Self {
        UserError::new(text)
    }
}

impl From<String> for UserError {
    fn from(text: String) -> Self {
        UserError(text)
    }
}

/// Refused with a `UserError`, or failed for a reason the user cannot act on.
pub type ServiceResult<T> = anyhow::Result<T>;

/// Why a member may not decide for an agent; shown by every surface that checks it.
pub const NOT_ALLOWED: &str = "Only the agent's owner, the people and roles it is shared with, and members who can manage threads can decide for it.";

/// What a new agent should be, as a surface collected it.
#[derive(Debug, Clone, Default)]
pub struct NewAgent {
    pub task: String,
    /// A profile given by the user; `None` lets the model generate one.
    pub profile: Option<Profile>,
    /// The model to use; `None` is the configured one.
    pub model: Option<String>,
    pub budget: Option<Micros>,
    pub continuous: bool,
    /// Commands of automatic classes to approve without asking (Approve ×N at the start).
    pub auto_approvals: u32,
    /// Cycles to run before pausing; `None` is the configured limit.
    pub cycle_limit: Option<u64>,
    /// Tokens each cycle's prompt may use; `None` is the model's context.
    pub prompt_budget_tokens: Option<u32>,
    pub spender: Spender,
}

/// An admin's change to the models a server's members may choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChange {
    Allow(String),
    Remove(String),
}

/// Discord shows at most this many autocomplete choices.
pub const MODEL_CHOICES_MAX: usize = 25;

/// A new user or server limit, as an admin sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitChange {
    pub scope: LimitScope,
    pub guild_id: u64,
    /// For a daily user budget: only this user (otherwise everyone's).
    pub user: Option<u64>,
    /// The limit; 0 means no limit.
    pub micros: Micros,
}

/// A model name as a member typed it, cut short and without backticks, for a refusal.
fn shown_model(model: &str) -> String {
    model.chars().filter(|c| *c != '`').take(100).collect()
}

#[derive(Clone)]
pub struct AgentService {
    config: Arc<Config>,
    store: Store,
    budgets: Arc<Budgets>,
    clock: Arc<dyn Clock>,
}

impl AgentService {
    pub fn new(
        config: Arc<Config>,
        store: Store,
        budgets: Arc<Budgets>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        AgentService {
            config,
            store,
            budgets,
            clock,
        }
    }

    /// A fresh agent id: short enough to type, random enough never to repeat in one store.
    pub fn new_agent_id() -> String {
        uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
    }

    /// The agent's first state; nothing is stored yet.
    pub fn new_agent(&self, id: String, request: NewAgent) -> AgentState {
        // Start-up warned about the configured model; a model chosen at start is news.
        if let Some(warning) = request
            .model
            .as_deref()
            .and_then(|model| self.config.llm.guessed_context_warning(model))
        {
            tracing::warn!(agent = %id, "{warning}");
        }
        let mut state = AgentState::new(
            id,
            request.task,
            request.profile,
            AgentSettings {
                model: request
                    .model
                    .unwrap_or_else(|| self.config.llm.model.clone()),
                continuous: request.continuous,
                cycle_limit: request.cycle_limit.unwrap_or(self.config.agent.cycle_limit),
                budget: request.budget,
                policy: Default::default(),
                endpoint: Some(self.config.endpoint()),
                prompt_budget_tokens: request.prompt_budget_tokens,
            },
            self.clock.now(),
        );
        state.money.spender = request.spender;
        state.safety.auto_approvals_left = request.auto_approvals;
        state
    }

    /// Whether `who` may start an agent in this server now: the start role, the budget they ask
    /// for, and the caps on running agents, per server and per person.
    pub fn check_start(
        &self,
        guild_id: u64,
        who: &Requester,
        budget: Option<Micros>,
    ) -> ServiceResult<()> {
        let max_budget = self.config.budget.agent_max();
        if budget.is_some_and(|b| b > max_budget) && !who.manage_guild {
            return Err(UserError(format!(
                "An agent's budget can be at most {} here; a server admin can raise it later with `/agent budget set`.",
                format_usd(max_budget)
            ))
            .into());
        }
        let discord = &self.config.discord;
        if let Some(role) = discord.start_role {
            if !who.role_ids.contains(&role) && !who.manage_threads {
                return Err(
                    UserError(format!("You need the <@&{role}> role to start agents.")).into(),
                );
            }
        }
        self.check_caps(guild_id, who.user_id, "You already run")
    }

    /// Whether `by` may let the agent go on: an agent that does not count against the caps
    /// (paused by a person, stopped for an error, finished) counts again once resumed, so its
    /// owner's and its server's caps are checked as at a start.
    pub fn check_resume(
        &self,
        binding: &ThreadBinding,
        state: &AgentState,
        by: &Requester,
    ) -> ServiceResult<()> {
        if counts_against_caps(&state.progress.phase) {
            return Ok(());
        }
        let whose = if by.user_id == binding.owner_id {
            "You already run"
        } else {
            "Its owner already runs"
        };
        self.check_caps(binding.guild_id, binding.owner_id, whose)
    }

    /// The caps on running agents, per server and per person (`owner`; `whose` starts the
    /// refusal, which names the person's count).
    fn check_caps(&self, guild_id: u64, owner: u64, whose: &str) -> ServiceResult<()> {
        let discord = &self.config.discord;
        let running = self.running_owners(guild_id)?;
        if discord.max_agents_per_guild > 0 && running.len() >= discord.max_agents_per_guild {
            return Err(UserError(format!(
                "This server already runs {} agents, the limit.",
                running.len()
            ))
            .into());
        }
        let mine = running.iter().filter(|&&o| o == owner).count();
        if discord.max_agents_per_user > 0 && mine >= discord.max_agents_per_user {
            return Err(UserError(format!(
                "{whose} {mine} agents, the limit per person. Pausing or finishing one makes room."
            ))
            .into());
        }
        Ok(())
    }

    /// The models members of this server may choose at `/agent start`: the configured model
    /// first (always allowed), then the server's list: its admins', else its own in config, else
    /// `discord.models`.
    pub fn allowed_models(&self, guild_id: u64) -> ServiceResult<Vec<String>> {
        let discord = &self.config.discord;
        let listed = match self.store.guild_models(guild_id)? {
            Some(set_by_admins) => set_by_admins,
            None => discord
                .guild_models
                .get(&guild_id.to_string())
                .unwrap_or(&discord.models)
                .clone(),
        };
        let mut models = vec![self.config.llm.model.clone()];
        for model in listed {
            if !models.contains(&model) {
                models.push(model);
            }
        }
        Ok(models)
    }

    /// The allowed models that start with (or contain) what the member typed, for autocomplete.
    pub fn model_choices(&self, guild_id: u64, typed: &str) -> ServiceResult<Vec<String>> {
        let typed = typed.trim().to_lowercase();
        let mut models = self.allowed_models(guild_id)?;
        models.retain(|m| m.to_lowercase().contains(&typed));
        models.sort_by_key(|m| !m.to_lowercase().starts_with(&typed));
        models.truncate(MODEL_CHOICES_MAX);
        Ok(models)
    }

    /// Whether an agent in this server may use `model`: it must be on the server's list and have
    /// a price (a list set before a price was removed from config is caught here too).
    pub fn check_model(&self, guild_id: u64, model: &str) -> ServiceResult<()> {
        let allowed = self.allowed_models(guild_id)?;
        if !allowed.iter().any(|m| m == model) {
            return Err(UserError(format!(
                "`{}` is not one of the models this server offers: {}. A server admin can add one with `/agent models allow`.",
                shown_model(model),
                allowed.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
            ))
            .into());
        }
        if let Err(unpriced) = self.config.budget.price_of(model) {
            return Err(UserError(format!(
                "`{model}` cannot be used: {unpriced}. Ask the bot's operator."
            ))
            .into());
        }
        Ok(())
    }

    /// A server admin's change to the server's list of models; returns the list as it now is.
    /// A model is allowed only with a price, and the configured model cannot be removed.
    pub fn change_models(
        &self,
        guild_id: u64,
        who: &Requester,
        change: ModelChange,
    ) -> ServiceResult<Vec<String>> {
        if !who.manage_guild {
            return Err(UserError::new(
                "Only server admins (Manage Server) can change the models offered here.",
            )
            .into());
        }
        let mut listed: Vec<String> = self.allowed_models(guild_id)?.into_iter().skip(1).collect();
        match change {
            ModelChange::Allow(model) => {
                let model = model.trim().to_string();
                if let Err(unpriced) = self.config.budget.price_of(&model) {
                    return Err(UserError(format!(
                        "`{}` cannot be offered: {unpriced}.",
                        shown_model(&model)
                    ))
                    .into());
                }
                if model != self.config.llm.model && !listed.contains(&model) {
                    listed.push(model);
                }
            }
            ModelChange::Remove(model) => {
                let model = model.trim();
                if model == self.config.llm.model {
                    return Err(UserError(format!(
                        "`{model}` is the bot's configured model and is always offered."
                    ))
                    .into());
                }
                if !listed.iter().any(|m| m == model) {
                    return Err(UserError(format!(
                        "`{}` is not offered here.",
                        shown_model(model)
                    ))
                    .into());
                }
                listed.retain(|m| m != model);
            }
        }
        self.store.set_guild_models(guild_id, &listed)?;
        self.allowed_models(guild_id)
    }

    /// The models an agent started outside any Discord server (over the Agent Protocol) may
    /// use: the configured model first, then `discord.models`.
    pub fn models_outside_servers(&self) -> Vec<String> {
        let mut models = vec![self.config.llm.model.clone()];
        for model in &self.config.discord.models {
            if !models.contains(model) {
                models.push(model.clone());
            }
        }
        models
    }

    /// Whether a caller outside any server may start an agent: the model must be offered and
    /// priced, the budget within the configured maximum, and the caller must run fewer agents
    /// (`running`, those that count against caps) than the cap per person.
    pub fn check_start_outside_servers(
        &self,
        running: usize,
        model: Option<&str>,
        budget: Option<Micros>,
    ) -> Result<(), UserError> {
        if let Some(model) = model {
            let offered = self.models_outside_servers();
            if !offered.iter().any(|m| m == model) {
                return Err(UserError(format!(
                    "`{}` is not one of the models offered: {}.",
                    shown_model(model),
                    offered
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if let Err(unpriced) = self.config.budget.price_of(model) {
                return Err(UserError(format!("`{model}` cannot be used: {unpriced}.")));
            }
        }
        let max_budget = self.config.budget.agent_max();
        if budget.is_some_and(|b| b.is_zero() || b > max_budget) {
            return Err(UserError(format!(
                "An agent's budget must be more than $0 and at most {}.",
                format_usd(max_budget)
            )));
        }
        let cap = self.config.discord.max_agents_per_user;
        if cap > 0 && running >= cap {
            return Err(UserError(format!(
                "You already run {running} agents, the limit per caller. Finishing one makes room."
            )));
        }
        Ok(())
    }

    /// Whether `who` may give this agent a budget of `micros`: its owner and moderators up to
    /// the configured maximum, server admins beyond it.
    pub fn check_agent_budget(
        &self,
        binding: &ThreadBinding,
        who: &Requester,
        micros: Micros,
    ) -> Result<(), UserError> {
        if !may_set_agent_budget(binding, who) {
            return Err(UserError::new(NOT_ALLOWED));
        }
        let max = self.config.budget.agent_max();
        if micros.is_zero() || (micros > max && !who.manage_guild) {
            return Err(UserError(format!(
                "An agent's budget must be more than $0 and at most {}, unless a server admin sets it.",
                format_usd(max)
            )));
        }
        Ok(())
    }

    /// An admin's new user or server limit (0: no limit), after which the server's agents that
    /// stopped for want of budget try again. Returns how many did.
    pub fn set_limit(
        &self,
        supervisor: &Supervisor,
        who: &Requester,
        by: &Person,
        change: LimitChange,
    ) -> ServiceResult<usize> {
        let LimitChange {
            scope,
            guild_id,
            user,
            micros,
        } = change;
        if !who.manage_guild {
            return Err(UserError::new(
                "Only server admins (Manage Server) can change user and server budgets.",
            )
            .into());
        }
        let user = user
            .filter(|_| scope == LimitScope::UserDaily)
            .map(|u| u.to_string());
        self.budgets
            .set_limit(scope, &GuildId::from(guild_id), user.as_deref(), micros)?;
        let mut resumed = 0;
        for binding in self.bindings_in(guild_id)? {
            let paused_for_budget = self
                .store
                .load_agent_record(&binding.agent_id)?
                .is_some_and(|s| {
                    matches!(s.progress.phase, Phase::Paused(PauseReason::Budget { .. }))
                });
            let resume = Event::Resume {
                by: by.clone(),
                follow_up: None,
            };
            if paused_for_budget && supervisor.send(&binding.agent_id, resume).is_ok() {
                resumed += 1;
            }
        }
        Ok(resumed)
    }

    /// Makes the agent's policy stricter (or, with `None`, back to the server's) for one class;
    /// refuses anything looser than the server's policy.
    pub fn check_narrowing(
        &self,
        state: &AgentState,
        risk: Risk,
        action: Option<ClassAction>,
    ) -> ServiceResult<()> {
        match action {
            Some(action) => Ok(self
                .agent_server_policy(state)?
                .check_narrowing(risk, action)
                .map_err(|e| UserError(e.to_string()))?),
            None => Ok(()),
        }
    }

    /// Applies narrowings to an agent that is not running yet (the console's `--policy`).
    pub fn narrow_policy(
        &self,
        state: &mut AgentState,
        wanted: &[(Risk, Option<ClassAction>)],
    ) -> ServiceResult<()> {
        for (risk, action) in wanted {
            self.check_narrowing(state, *risk, *action)?;
            match action {
                Some(action) => {
                    state.brief.settings.policy.insert(*risk, *action);
                }
                None => {
                    state.brief.settings.policy.remove(risk);
                }
            }
        }
        Ok(())
    }

    /// The agents of one server with their records, in the store's order.
    pub fn agents_in(&self, guild_id: u64) -> ServiceResult<Vec<(ThreadBinding, AgentState)>> {
        let mut agents = Vec::new();
        for binding in self.bindings_in(guild_id)? {
            if let Some(state) = self.store.load_agent_record(&binding.agent_id)? {
                agents.push((binding, state));
            }
        }
        Ok(agents)
    }

    /// The owner of each agent running in a server, from the live index: only the server's
    /// live agents are read, those found finished are dropped from the index, and paused ones
    /// stay in it without counting.
    fn running_owners(&self, guild_id: u64) -> ServiceResult<Vec<u64>> {
        let mut owners = Vec::new();
        for (owner, agent) in self.store.live_agents(guild_id)? {
            match self.store.load_agent_record(&agent)? {
                Some(state) if matches!(state.progress.phase, Phase::Finished { .. }) => {
                    self.store.forget_live(guild_id, owner, &agent)?
                }
                None => self.store.forget_live(guild_id, owner, &agent)?,
                Some(state) if counts_against_caps(&state.progress.phase) => owners.push(owner),
                Some(_) => {}
            }
        }
        Ok(owners)
    }

    fn bindings_in(&self, guild_id: u64) -> ServiceResult<Vec<ThreadBinding>> {
        Ok(self
            .store
            .bindings()?
            .into_iter()
            .filter(|b| b.guild_id == guild_id)
            .collect())
    }
}

/// Whether an agent in `phase` counts against the caps on running agents: it works, waits for a
/// decision, or is parked for its budget or by the brake (from where it goes on by itself once a
/// budget is raised). Paused by a person, stopped for an error and finished agents do not.
pub fn counts_against_caps(phase: &Phase) -> bool {
    phase.is_live()
        || matches!(
            phase,
            Phase::Paused(PauseReason::Budget { .. } | PauseReason::Runaway { .. })
        )
}
