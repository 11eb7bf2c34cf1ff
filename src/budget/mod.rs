//! Spend control: which budgets a call is charged to (the agent's, its owner's day, its server's
//! day and month), the limits that apply, the ledger that reserves and settles, and the pacer.
//!
//! `charges` names a call's accounts: `agent/<id>`, `user/<guild>/<user>/<day>` (`<guild>` is
//! `every_server` when `budget.user_daily_scope` counts a person's day across servers, its limit
//! still that of the call's server),
//! `guild/<guild>/day/<day>` and `guild/<guild>/month/<month>`, each with its limit, plus the spend
//! record `guild/<guild>/spend/<day>/<user or ->/<agent>`, which has no limit and puts the day
//! first so that a chart of recent days reads only those days (`spend_on`, through
//! `Ledger::accounts_with_prefix`). `view` gives the core its `BudgetView`. `set_limit` stores an
//! admin's limit per `LimitScope`.
//!
//! Every paid call (chat, a command's model call, embeddings, images) goes one way: `reserve_call`
//! books the worst case against every account without waiting for the disk; the reservation is made
//! durable (`make_durable`, or a store flush the caller makes anyway, so a step's own flush carries
//! the reservations of the calls it starts; `reserve_durably` does both); then the call; then
//! `close_call` settles it with what it cost, or with what a failure may have cost
//! (`FailedCharge`), or releases it. A cost above the reservation is charged in full, since the
//! provider bills it, and counted as an overrun: limits are kept by refusing new reservations,
//! never by forgetting spend.

pub mod ledger;
pub mod pace;

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};
use governor::clock::Clock as GovernorClock;

use crate::config::{BudgetConfig, Unpriced, UserDailyScope};
use crate::core::budget::{format_usd, BudgetKind, BudgetView, Micros, Price};
use crate::core::state::{AgentState, GuildId, Spender};
use crate::store::{Store, StoreError};
use ledger::{Account, Charge, Ledger, Refusal, Reservation};
use pace::{PaceLimits, PaceRequest, Pacer, Wait};

/// Who pays for a call: the agent, and through its spender its owner's and its server's budgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payer {
    pub agent: String,
    pub spender: Spender,
    pub agent_limit: Micros,
}

/// Why a metered call brought no result.
#[derive(Debug)]
pub enum Metered<E> {
    /// No budget can pay for the call's worst case; the call was not made.
    Refused(String),
    /// The ledger could not be read or written; the call was not made.
    Ledger(StoreError),
    /// The call itself failed; its reservation was released, or charged when the call may have
    /// been billed (see `FailedCharge`).
    Call(E),
}

/// What a failed call is charged: a provider bills what its model generated, whether or not the
/// answer arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedCharge {
    /// The call certainly was not billed (it never reached the model): its reservation is given
    /// back.
    Nothing,
    /// The call may have been billed for an unknown amount (a timeout once sent, a server error):
    /// it is charged its reservation, its worst case.
    Reservation,
    /// What the call is known to have used before it broke off (the prompt and the reply streamed
    /// so far).
    Used(Micros),
}

/// The budgets that can be set per guild, by admins (`/agent budget set`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitScope {
    UserDaily,
    GuildDaily,
    GuildMonthly,
}

/// The pacer behind a trait object, so the runtime need not know governor's clock type.
pub trait Pace: Send + Sync {
    fn gates(&self) -> usize;
    fn try_gate(&self, index: usize, request: &PaceRequest) -> Result<(), Wait>;
    fn retain_recent(&self);
}

impl<C> Pace for Pacer<C>
where
    C: GovernorClock + Clone + Send + Sync,
    C::Instant: Send + Sync,
{
    fn gates(&self) -> usize {
        Pacer::gates(self)
    }
    fn try_gate(&self, index: usize, request: &PaceRequest) -> Result<(), Wait> {
        Pacer::try_gate(self, index, request)
    }
    fn retain_recent(&self) {
        Pacer::retain_recent(self)
    }
}

/// One budget as `/agent budget` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetLine {
    pub kind: BudgetKind,
    pub account: Account,
    pub limit: Option<Micros>,
}

#[derive(Clone)]
pub struct Budgets {
    ledger: Ledger,
    pacer: Arc<dyn Pace>,
    config: BudgetConfig,
}

fn day(now: DateTime<Utc>) -> String {
    now.format("%Y-%m-%d").to_string()
}

/// Where the spend record of a server's day starts: the day comes before the person and agent,
/// so a chart of the last days reads only those days, however long the server has run.
fn spend_by_day_prefix(guild: &GuildId, day: NaiveDate) -> String {
    format!("guild/{guild}/spend/{}/", day.format("%Y-%m-%d"))
}

/// Stands for the server in a person's daily account when it counts every server
/// (`budget.user_daily_scope = "every_server"`); no server id is made of letters.
const EVERY_SERVER: &str = "every_server";

/// Stands for the person in the spend record of an agent started without one.
const NO_PERSON: &str = "-";

fn spend_by_day_account(guild: &GuildId, day: NaiveDate, spender: &Spender, agent: &str) -> String {
    format!(
        "{}{}/{agent}",
        spend_by_day_prefix(guild, day),
        spender.user.as_deref().unwrap_or(NO_PERSON)
    )
}

fn month(now: DateTime<Utc>) -> String {
    now.format("%Y-%m").to_string()
}

fn limit_key(scope: LimitScope, guild: &GuildId, user: Option<&str>) -> String {
    match (scope, user) {
        (LimitScope::UserDaily, Some(user)) => format!("user_daily/{guild}/{user}"),
        (LimitScope::UserDaily, None) => format!("user_daily/{guild}"),
        (LimitScope::GuildDaily, _) => format!("guild_daily/{guild}"),
        (LimitScope::GuildMonthly, _) => format!("guild_monthly/{guild}"),
    }
}

/// Zero in config means "no limit".
fn configured(usd: f64) -> Option<Micros> {
    let micros = crate::core::budget::usd_to_micros(usd);
    (!micros.is_zero()).then_some(micros)
}

impl Budgets {
    pub fn new(store: &Store, config: &BudgetConfig) -> Result<Budgets, StoreError> {
        let limits = PaceLimits {
            user_spend_per_hour: crate::core::budget::usd_to_micros(config.user_spend_per_hour_usd),
            guild_spend_per_hour: crate::core::budget::usd_to_micros(
                config.guild_spend_per_hour_usd,
            ),
            guild_calls_per_minute: config.guild_calls_per_minute,
        };
        Budgets::with_pacer(store, config, Arc::new(Pacer::new(limits)))
    }

    /// With a given pacer (tests use governor's fake clock).
    pub fn with_pacer(
        store: &Store,
        config: &BudgetConfig,
        pacer: Arc<dyn Pace>,
    ) -> Result<Budgets, StoreError> {
        Ok(Budgets {
            ledger: Ledger::new(store)?,
            pacer,
            config: config.clone(),
        })
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn pacer(&self) -> &dyn Pace {
        self.pacer.as_ref()
    }

    /// The model's price; a model nobody priced is refused, never counted as free.
    pub fn price(&self, model: &str) -> Result<Price, Unpriced> {
        self.config.price_of(model)
    }

    /// What the tightest of the payer's budgets has left at `now` (settled and reserved spend
    /// counted); `Micros::MAX` when none has a limit.
    pub fn available(&self, payer: &Payer, now: DateTime<Utc>) -> Result<Micros, StoreError> {
        let charges = self.charges(&payer.agent, &payer.spender, payer.agent_limit, now)?;
        let mut available = Micros::MAX;
        for charge in charges {
            if let Some(limit) = charge.limit {
                let left = limit.saturating_sub(self.ledger.account(&charge.account)?.committed());
                available = available.min(left);
            }
        }
        Ok(available)
    }

    /// Who pays for this agent's calls, with its budget as it stands.
    pub fn payer(&self, agent: &AgentState) -> Payer {
        Payer {
            agent: agent.id.clone(),
            spender: agent.money.spender.clone(),
            agent_limit: self.agent_limit(agent),
        }
    }

    /// Who pays for a person's own call outside any agent (embedding a server note): the person's
    /// daily budget and their server's budgets. The call is booked on an account of its own
    /// (`account`), which no one could raise, so it has no limit of its own.
    pub fn person_payer(&self, account: &str, user: u64, guild: GuildId) -> Payer {
        Payer {
            agent: account.to_string(),
            spender: Spender {
                user: Some(user.to_string()),
                guild: Some(guild),
            },
            agent_limit: Micros(u64::MAX),
        }
    }

    pub fn agent_limit(&self, state: &AgentState) -> Micros {
        state
            .brief
            .settings
            .budget
            .unwrap_or_else(|| self.config.agent_default())
    }

    /// The share of an agent's budget from which it no longer runs by itself.
    pub fn soft_cap_percent(&self) -> u8 {
        self.config.soft_cap_percent
    }

    pub fn agent_account(agent: &str) -> String {
        format!("agent/{agent}")
    }

    /// The limit in force for a guild-level scope: an admin's override, else config.
    pub fn limit(
        &self,
        scope: LimitScope,
        guild: &GuildId,
        user: Option<&str>,
    ) -> Result<Option<Micros>, StoreError> {
        if user.is_some() {
            if let Some(limit) = self.ledger.limit(&limit_key(scope, guild, user))? {
                return Ok(Some(limit));
            }
        }
        if let Some(limit) = self.ledger.limit(&limit_key(scope, guild, None))? {
            return Ok(Some(limit));
        }
        Ok(match scope {
            LimitScope::UserDaily => configured(self.config.user_daily_usd),
            LimitScope::GuildDaily => configured(self.config.guild_daily_usd),
            LimitScope::GuildMonthly => configured(self.config.guild_monthly_usd),
        })
    }

    /// An admin's new limit (`usd` 0 means "no limit"); `user` narrows the daily user budget to one person.
    pub fn set_limit(
        &self,
        scope: LimitScope,
        guild: &GuildId,
        user: Option<&str>,
        limit: Micros,
    ) -> Result<(), StoreError> {
        self.ledger
            .set_limit(&limit_key(scope, guild, user), Some(limit))
    }

    /// Every budget a call by this agent is charged to, with the limits in force at `now`.
    pub fn charges(
        &self,
        agent: &str,
        spender: &Spender,
        agent_limit: Micros,
        now: DateTime<Utc>,
    ) -> Result<Vec<Charge>, StoreError> {
        let mut charges: Vec<Charge> = self
            .budgets_of(agent, spender, agent_limit, now)?
            .into_iter()
            .map(|(_, charge)| charge)
            .collect();
        // Not a budget: a record of who spent what on which day, for the server's spend chart.
        if let Some(guild) = &spender.guild {
            charges.push(Charge {
                account: spend_by_day_account(guild, now.date_naive(), spender, agent),
                limit: None,
                label: "the server's spend record".into(),
            });
        }
        Ok(charges)
    }

    /// What was spent in `guild` on `day`, by person and agent: `(person, agent, spend)`, the
    /// person `None` for an agent started without one.
    pub fn spend_on(
        &self,
        guild: &GuildId,
        day: NaiveDate,
    ) -> Result<Vec<(Option<String>, String, Micros)>, StoreError> {
        let prefix = spend_by_day_prefix(guild, day);
        Ok(self
            .ledger
            .accounts_with_prefix(&prefix)?
            .into_iter()
            .filter_map(|(name, account)| {
                let (user, agent) = name[prefix.len()..].split_once('/')?;
                let user = (user != NO_PERSON).then(|| user.to_string());
                Some((user, agent.to_string(), account.spent))
            })
            .collect())
    }

    /// The charges of a call, each with the kind of budget it is.
    fn budgets_of(
        &self,
        agent: &str,
        spender: &Spender,
        agent_limit: Micros,
        now: DateTime<Utc>,
    ) -> Result<Vec<(BudgetKind, Charge)>, StoreError> {
        let charge = |kind: BudgetKind, account: String, limit: Option<Micros>| {
            let label = kind.label().to_string();
            (
                kind,
                Charge {
                    account,
                    limit,
                    label,
                },
            )
        };
        let mut charges = vec![charge(
            BudgetKind::Agent,
            Budgets::agent_account(agent),
            Some(agent_limit),
        )];
        let guild = spender.guild.as_ref().map_or("-", GuildId::as_str);
        if let Some(user) = &spender.user {
            let limit = match &spender.guild {
                Some(g) => self.limit(LimitScope::UserDaily, g, Some(user))?,
                None => configured(self.config.user_daily_usd),
            };
            // One account for every server when the day is counted across them; a console agent,
            // in no server, keeps its own.
            let across = spender.guild.is_some()
                && self.config.user_daily_scope == UserDailyScope::EveryServer;
            let place = if across { EVERY_SERVER } else { guild };
            let account = format!("user/{place}/{user}/{}", day(now));
            charges.push(charge(BudgetKind::OwnerDaily, account, limit));
        }
        if let Some(g) = &spender.guild {
            let daily = self.limit(LimitScope::GuildDaily, g, None)?;
            let account = format!("guild/{g}/day/{}", day(now));
            charges.push(charge(BudgetKind::GuildDaily, account, daily));
            let monthly = self.limit(LimitScope::GuildMonthly, g, None)?;
            let account = format!("guild/{g}/month/{}", month(now));
            charges.push(charge(BudgetKind::GuildMonthly, account, monthly));
        }
        Ok(charges)
    }

    /// Spend and limits of every budget the agent draws on.
    pub fn lines(
        &self,
        agent: &str,
        spender: &Spender,
        agent_limit: Micros,
        now: DateTime<Utc>,
    ) -> Result<Vec<BudgetLine>, StoreError> {
        self.budgets_of(agent, spender, agent_limit, now)?
            .into_iter()
            .map(|(kind, charge)| {
                Ok(BudgetLine {
                    account: self.ledger.account(&charge.account)?,
                    kind,
                    limit: charge.limit,
                })
            })
            .collect()
    }

    /// The agent's budget situation for the core; `agent_limit` overrides the state's (a budget
    /// being changed by the event at hand).
    pub fn view(
        &self,
        state: &AgentState,
        agent_limit: Option<Micros>,
        now: DateTime<Utc>,
    ) -> Result<BudgetView, StoreError> {
        let agent_limit = agent_limit.unwrap_or_else(|| self.agent_limit(state));
        let lines = self.lines(&state.id, &state.money.spender, agent_limit, now)?;
        let agent_used = lines
            .first()
            .map_or(Micros::ZERO, |l| l.account.committed());
        let agent_spent = lines.first().map_or(Micros::ZERO, |l| l.account.spent);
        let (remaining, tightest, tightest_limit) = lines
            .iter()
            .filter_map(|l| {
                l.limit.map(|limit| {
                    let left = limit.saturating_sub(l.account.committed());
                    (left, l.kind, limit)
                })
            })
            .min_by_key(|(left, _, _)| *left)
            .unwrap_or((Micros::MAX, BudgetKind::Agent, Micros::MAX));
        Ok(BudgetView {
            // The view only words the prompt's budget lines and the card's estimate; a call on an
            // unpriced model is refused where it is metered.
            price: self.price(&state.brief.settings.model).unwrap_or_default(),
            agent_limit,
            agent_used,
            agent_spent,
            remaining,
            tightest,
            tightest_limit,
            soft_cap_percent: self.config.soft_cap_percent,
        })
    }

    /// Reserves a call's worst case against all its budgets and makes the reservation durable
    /// before the call can be made.
    pub async fn reserve(
        &self,
        charges: &[Charge],
        amount: Micros,
        agent: &str,
        what: &str,
        now: DateTime<Utc>,
    ) -> Result<Result<Reservation, Refusal>, StoreError> {
        let reserved = self.ledger.reserve(charges, amount, agent, what, now)?;
        if reserved.is_ok() {
            self.make_durable().await?;
        }
        Ok(reserved)
    }

    /// Waits until every reservation made so far is on disk. The ledger shares the store's
    /// database, so a store flush made after a reservation does the same.
    pub async fn make_durable(&self) -> Result<(), StoreError> {
        self.ledger.flush().await
    }

    /// Reserves a paid call's worst case against every budget the payer draws on, without
    /// waiting for the disk: the caller makes it durable (`make_durable`, or a store flush it makes
    /// anyway) before the call, and then closes it with `close_call`. This lets a step's own
    /// flush carry the reservations of the calls it starts.
    pub fn reserve_call<E>(
        &self,
        payer: &Payer,
        worst: Micros,
        what: &str,
        now: DateTime<Utc>,
    ) -> Result<Reservation, Metered<E>> {
        let charges = self
            .charges(&payer.agent, &payer.spender, payer.agent_limit, now)
            .map_err(Metered::Ledger)?;
        match self
            .ledger
            .reserve(&charges, worst, &payer.agent, what, now)
            .map_err(Metered::Ledger)?
        {
            Ok(reservation) => Ok(reservation),
            Err(refusal) => Err(Metered::Refused(refusal.to_string())),
        }
    }

    /// Settles a reservation with what the call cost, or, when the call failed, with what
    /// `failed` says the failure may have cost (given back when nothing). A cost above the
    /// reservation is charged in full, since the provider bills it, and logged: the limits are
    /// kept by refusing new reservations, never by forgetting spend.
    pub fn close_call<T, E>(
        &self,
        payer: &Payer,
        reservation: &Reservation,
        result: Result<T, E>,
        cost_of: impl FnOnce(&T) -> Micros,
        failed: impl FnOnce(&E) -> FailedCharge,
    ) -> Result<(T, Micros), Metered<E>> {
        match result {
            Ok(value) => {
                let cost = cost_of(&value);
                self.charge(payer, reservation, cost);
                Ok((value, cost))
            }
            Err(e) => {
                match failed(&e) {
                    FailedCharge::Nothing => self.release_call(payer, reservation),
                    FailedCharge::Reservation => {
                        tracing::info!(agent = %payer.agent, what = %reservation.what, charged = %format_usd(reservation.amount),
                            "a failed call may have been billed; it is charged its reservation");
                        self.charge(payer, reservation, reservation.amount);
                    }
                    FailedCharge::Used(cost) => {
                        tracing::info!(agent = %payer.agent, what = %reservation.what, charged = %format_usd(cost),
                            "a reply that broke off is charged what it used so far");
                        self.charge(payer, reservation, cost);
                    }
                }
                Err(Metered::Call(e))
            }
        }
    }

    /// Settles a reservation at `cost`, logging a cost above it.
    fn charge(&self, payer: &Payer, reservation: &Reservation, cost: Micros) {
        if cost > reservation.amount {
            metrics::counter!(crate::ops::names::BUDGET_OVERRUNS).increment(1);
            tracing::warn!(agent = %payer.agent, what = %reservation.what, cost = %format_usd(cost), reserved = %format_usd(reservation.amount),
                "a call cost more than its reservation; it is charged in full");
        }
        if let Err(e) = self.ledger.settle(reservation.id, cost) {
            // The reservation stays open and is settled at its worst case at the next start.
            tracing::error!(agent = %payer.agent, error = %e, "cannot settle a reservation");
        }
    }

    /// Gives back a reservation whose call was never made.
    pub fn release_call(&self, payer: &Payer, reservation: &Reservation) {
        if let Err(e) = self.ledger.release(reservation.id) {
            tracing::error!(agent = %payer.agent, error = %e, "cannot release a reservation");
        }
    }

    /// `reserve_call`, made durable before it is returned: the call may go out, and is then
    /// closed with `close_call`. Paid calls all go through these two, so the ledger's rules live
    /// in one place.
    pub async fn reserve_durably<E>(
        &self,
        payer: &Payer,
        worst: Micros,
        what: &str,
        now: DateTime<Utc>,
    ) -> Result<Reservation, Metered<E>> {
        let reservation = self.reserve_call(payer, worst, what, now)?;
        if let Err(e) = self.make_durable().await {
            self.release_call(payer, &reservation);
            return Err(Metered::Ledger(e));
        }
        Ok(reservation)
    }

    /// The pacing request for a call of this cost by this agent's spender.
    pub fn pace_request(spender: &Spender, cost: Micros) -> PaceRequest {
        PaceRequest {
            user: spender.user.clone(),
            guild: spender.guild.clone(),
            cost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::budget::Micros;

    #[test]
    fn a_servers_calls_are_recorded_by_day_person_and_agent_without_a_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let budgets = Budgets::new(&store, &BudgetConfig::default()).unwrap();
        let guild = GuildId::from(7);
        let now = DateTime::<Utc>::from_timestamp(1_795_000_000, 0).unwrap();
        let alice = Spender {
            user: Some("11".into()),
            guild: Some(guild.clone()),
        };
        let nobody = Spender {
            user: None,
            guild: Some(guild.clone()),
        };
        for (agent, spender, cost) in [
            ("a1", &alice, 300),
            ("a2", &nobody, 200),
            ("a1", &alice, 50),
        ] {
            let charges = budgets
                .charges(agent, spender, Micros(1_000_000), now)
                .unwrap();
            let record = charges.last().unwrap();
            assert_eq!(record.limit, None, "the record never refuses a call");
            let reservation = budgets
                .ledger()
                .reserve(&charges, Micros(cost), agent, "think", now)
                .unwrap()
                .unwrap();
            budgets
                .ledger()
                .settle(reservation.id, Micros(cost))
                .unwrap();
        }
        let mut spent = budgets.spend_on(&guild, now.date_naive()).unwrap();
        spent.sort();
        assert_eq!(
            spent,
            [
                (None, "a2".to_string(), Micros(200)),
                (Some("11".to_string()), "a1".to_string(), Micros(350)),
            ]
        );
        let yesterday = now.date_naive().pred_opt().unwrap();
        assert!(budgets.spend_on(&guild, yesterday).unwrap().is_empty());
        // A console agent belongs to no server and leaves no record.
        let console = budgets
            .charges("c1", &Spender::default(), Micros(1), now)
            .unwrap();
        assert!(console.iter().all(|c| !c.account.contains("/spend/")));
    }
}
