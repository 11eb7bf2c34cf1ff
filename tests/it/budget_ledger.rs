//! Properties of the spend ledger: whatever the interleaving of reservations (each fitted to what
//! is left, as a budget's last calls are), answers (some costing more than their reservation),
//! failures before the model, timeouts, broken streams and crashes, the books never charge less
//! than a provider billed, charge more only by what could not be known (a timed-out or crashed
//! call is charged its reservation, and the provider billed some part of it), a fitted call is
//! never refused, and no new reservation crosses a cap: an account passes its limit only by the
//! overruns charged in full, in the books and in the provider's bill alike.

use std::collections::BTreeMap;
use std::sync::Arc;

use autothread::budget::ledger::{Charge, Ledger, Reservation};
use autothread::budget::{Budgets, FailedCharge, Metered, Payer};
use autothread::config::BudgetConfig;
use autothread::core::budget::{Micros, Price, ReplyFit, REPLY_FLOOR_TOKENS};
use autothread::core::state::Spender;
use autothread::llm::{Billing, LlmError};
use autothread::store::Store;
use chrono::{DateTime, Utc};
use proptest::prelude::*;

const AGENTS: usize = 3;
const AGENT_LIMIT: Micros = Micros(40_000);
const USER_LIMIT: Micros = Micros(70_000);
const GUILD_LIMIT: Micros = Micros(100_000);

fn price() -> Price {
    Price::from_usd_per_million(2.5, 10.0)
}

/// Three agents of one user in one guild: each call is charged to its agent, the user's day and
/// the guild's day, each with its own limit.
fn charges(agent: usize) -> Vec<Charge> {
    vec![
        Charge {
            account: format!("agent/a{agent}"),
            limit: Some(AGENT_LIMIT),
            label: "agent".into(),
        },
        Charge {
            account: "user/g/u/2026-11-22".into(),
            limit: Some(USER_LIMIT),
            label: "user".into(),
        },
        Charge {
            account: "guild/g/day/2026-11-22".into(),
            limit: Some(GUILD_LIMIT),
            label: "guild".into(),
        },
    ]
}

fn limits() -> BTreeMap<String, Micros> {
    let mut all = BTreeMap::new();
    for agent in 0..AGENTS {
        for charge in charges(agent) {
            all.insert(charge.account, charge.limit.unwrap());
        }
    }
    all
}

#[derive(Debug, Clone)]
enum Op {
    /// A call by `agent` with this prompt and reply reserve.
    Reserve {
        agent: usize,
        prompt: u64,
        max_tokens: u64,
    },
    /// The call in flight at `index` answered, using these shares (in percent) of its prompt and
    /// reserve: past 100, more than its reservation (a provider that counts more tokens).
    Settle {
        index: usize,
        prompt_share: u8,
        reply_share: u8,
    },
    /// The call at `index` failed before the model: a refused connection or a 4xx. Nothing billed.
    Fail { index: usize },
    /// The call at `index` timed out once sent, or the server failed (5xx): the provider billed
    /// this share of its worst case, which nobody here can know.
    Timeout { index: usize, billed_share: u8 },
    /// The stream of the call at `index` broke off after this share of its reply was streamed,
    /// which is what the provider generated and billed.
    BrokenStream { index: usize, streamed_share: u8 },
    /// The process died: calls in flight are found at start-up and settled at their worst case;
    /// the provider billed this share of each.
    Crash { billed_share: u8 },
    /// The settlements so far are folded into the stored accounts.
    Fold,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..AGENTS, 10u64..3000, 1u64..1500).prop_map(|(agent, prompt, max_tokens)| Op::Reserve { agent, prompt, max_tokens }),
        3 => (any::<usize>(), 0u8..=130, 0u8..=150).prop_map(|(index, prompt_share, reply_share)| Op::Settle { index, prompt_share, reply_share }),
        1 => any::<usize>().prop_map(|index| Op::Fail { index }),
        1 => (any::<usize>(), 0u8..=100).prop_map(|(index, billed_share)| Op::Timeout { index, billed_share }),
        1 => (any::<usize>(), 1u8..=100).prop_map(|(index, streamed_share)| Op::BrokenStream { index, streamed_share }),
        1 => (0u8..=100).prop_map(|billed_share| Op::Crash { billed_share }),
        1 => Just(Op::Fold),
    ]
}

struct InFlight {
    reservation: Reservation,
    agent: usize,
    prompt: u64,
    max_tokens: u64,
}

impl InFlight {
    /// What the provider bills for `share` percent of the call's prompt and reply.
    fn share(&self, prompt_share: u8, reply_share: u8) -> Micros {
        price().cost(
            self.prompt * prompt_share as u64 / 100,
            self.max_tokens * reply_share as u64 / 100,
        )
    }
}

fn at() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

fn payer(agent: usize) -> Payer {
    Payer {
        agent: format!("a{agent}"),
        spender: Spender::default(),
        agent_limit: AGENT_LIMIT,
    }
}

/// The books against a provider's bill, per account.
#[derive(Default)]
struct Books {
    /// What the ledger should show as spent, from our own arithmetic.
    charged: BTreeMap<String, Micros>,
    /// What the provider billed.
    billed: BTreeMap<String, Micros>,
    /// What was charged above the bill: the part of a timed-out or crashed call's reservation the
    /// provider did not bill, which could not be known.
    unknown: BTreeMap<String, Micros>,
    /// What calls cost beyond their reservations.
    overrun: BTreeMap<String, Micros>,
}

impl Books {
    fn add(map: &mut BTreeMap<String, Micros>, agent: usize, amount: Micros) {
        for c in charges(agent) {
            *map.entry(c.account).or_default() += amount;
        }
    }

    /// A call charged `charged` that the provider billed `billed` (at most `charged` unless the
    /// call ran over its reservation, when the two are equal).
    fn call(&mut self, call: &InFlight, charged: Micros, billed: Micros) {
        assert!(billed <= charged, "the books charge less than the bill");
        Books::add(&mut self.charged, call.agent, charged);
        Books::add(&mut self.billed, call.agent, billed);
        Books::add(
            &mut self.unknown,
            call.agent,
            charged.saturating_sub(billed),
        );
        let over = charged.saturating_sub(call.reservation.amount);
        Books::add(&mut self.overrun, call.agent, over);
    }
}

fn assert_within_limits(ledger: &Ledger, books: &Books) {
    for (account, limit) in limits() {
        let state = ledger.account(&account).unwrap();
        let overrun = books.overrun.get(&account).copied().unwrap_or_default();
        assert!(
            state.committed() <= limit + overrun,
            "{account}: {} spent + {} reserved > {limit} + {overrun} of overruns",
            state.spent,
            state.reserved
        );
        let billed = books.billed.get(&account).copied().unwrap_or_default();
        assert!(billed <= limit + overrun, "{account}: billed {billed}");
    }
}

/// Closes a call through the budgets' own rules: an answer at its cost, a failure at what
/// `failed` says it may have cost.
fn close(
    budgets: &Budgets,
    call: &InFlight,
    result: Result<Micros, LlmError>,
    failed: impl FnOnce(&LlmError) -> FailedCharge,
) -> Micros {
    let before = budgets
        .ledger()
        .account(&format!("agent/a{}", call.agent))
        .unwrap()
        .spent;
    let closed = budgets.close_call(
        &payer(call.agent),
        &call.reservation,
        result,
        |cost| *cost,
        failed,
    );
    if let Err(e) = &closed {
        assert!(matches!(e, Metered::Call(_)));
    }
    budgets
        .ledger()
        .account(&format!("agent/a{}", call.agent))
        .unwrap()
        .spent
        .saturating_sub(before)
}

/// How the runtime charges a failure with nothing streamed.
fn by_billing(error: &LlmError) -> FailedCharge {
    match error.billing() {
        Billing::NotBilled => FailedCharge::Nothing,
        Billing::MayBeBilled => FailedCharge::Reservation,
    }
}

fn open(dir: &std::path::Path) -> (Store, Arc<Budgets>) {
    let store = Store::open(dir).unwrap();
    let budgets = Arc::new(Budgets::new(&store, &BudgetConfig::default()).unwrap());
    (store, budgets)
}

/// Runs `ops` against a fresh ledger and checks the invariants after every step.
fn run(ops: &[Op]) {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut budgets) = open(dir.path());
    let price = price();
    let mut in_flight: Vec<InFlight> = Vec::new();
    let mut books = Books::default();
    for op in ops {
        let ledger = budgets.ledger().clone();
        match op.clone() {
            Op::Reserve {
                agent,
                prompt,
                max_tokens,
            } => {
                // The call's reply reserve is first fitted to what its budgets have left, as the
                // runtime does: a budget's last calls go out with fewer reply tokens.
                let available = charges(agent)
                    .iter()
                    .map(|c| {
                        let limit = c.limit.unwrap();
                        limit.saturating_sub(ledger.account(&c.account).unwrap().committed())
                    })
                    .min()
                    .unwrap();
                let fit = price.fit_reply(prompt, max_tokens as u32, REPLY_FLOOR_TOKENS, available);
                let max_tokens = match fit {
                    ReplyFit::Whole(n) => {
                        assert_eq!(n as u64, max_tokens);
                        n as u64
                    }
                    ReplyFit::Lowered(n) => {
                        assert!((REPLY_FLOOR_TOKENS as u64..max_tokens).contains(&(n as u64)));
                        n as u64
                    }
                    // Not even the floor fits: the whole call goes to the ledger, which refuses.
                    ReplyFit::Refused => {
                        let floor = (REPLY_FLOOR_TOKENS as u64).min(max_tokens);
                        assert!(price.cost(prompt, floor) > available);
                        max_tokens
                    }
                };
                let amount = price.cost(prompt, max_tokens);
                let before = limits()
                    .keys()
                    .map(|k| ledger.account(k).unwrap())
                    .collect::<Vec<_>>();
                match ledger
                    .reserve(&charges(agent), amount, "a", "think", at())
                    .unwrap()
                {
                    Ok(reservation) => {
                        // With nothing in between, a fitted call is never refused.
                        assert_ne!(fit, ReplyFit::Refused);
                        // A new reservation never crosses a cap, whatever overruns came before.
                        for c in charges(agent) {
                            let committed = ledger.account(&c.account).unwrap().committed();
                            assert!(committed <= c.limit.unwrap(), "{}: {committed}", c.account);
                        }
                        in_flight.push(InFlight {
                            reservation,
                            agent,
                            prompt,
                            max_tokens,
                        })
                    }
                    Err(refusal) => {
                        assert_eq!(fit, ReplyFit::Refused, "a fitted call was refused");
                        // Refused only when some budget truly could not cover it, and nothing booked.
                        assert!(refusal.available < amount);
                        let after = limits()
                            .keys()
                            .map(|k| ledger.account(k).unwrap())
                            .collect::<Vec<_>>();
                        assert_eq!(before, after);
                    }
                }
            }
            Op::Settle {
                index,
                prompt_share,
                reply_share,
            } => {
                if in_flight.is_empty() {
                    continue;
                }
                let call = in_flight.remove(index % in_flight.len());
                let cost = call.share(prompt_share, reply_share);
                // Charged in full, above the reservation too: exactly what the provider billed.
                let charged = close(&budgets, &call, Ok(cost), by_billing);
                assert_eq!(charged, cost);
                books.call(&call, cost, cost);
                // A second settlement of the same call (a duplicate delivery) charges nothing.
                assert_eq!(ledger.settle(call.reservation.id, cost).unwrap(), Micros(0));
            }
            Op::Fail { index } => {
                if in_flight.is_empty() {
                    continue;
                }
                let call = in_flight.remove(index % in_flight.len());
                let refused = LlmError::Rejected {
                    status: 429,
                    message: "Rate limit reached".into(),
                };
                let charged = close(&budgets, &call, Err(refused), by_billing);
                assert_eq!(charged, Micros(0));
                books.call(&call, Micros(0), Micros(0));
            }
            Op::Timeout {
                index,
                billed_share,
            } => {
                if in_flight.is_empty() {
                    continue;
                }
                let call = in_flight.remove(index % in_flight.len());
                let timed_out = LlmError::Unavailable {
                    attempts: 1,
                    detail: "timed out".into(),
                    billing: Billing::MayBeBilled,
                };
                let charged = close(&budgets, &call, Err(timed_out), by_billing);
                assert_eq!(charged, call.reservation.amount);
                books.call(&call, charged, call.share(billed_share, billed_share));
            }
            Op::BrokenStream {
                index,
                streamed_share,
            } => {
                if in_flight.is_empty() {
                    continue;
                }
                let call = in_flight.remove(index % in_flight.len());
                let used = call.share(100, streamed_share);
                let broken = LlmError::Unavailable {
                    attempts: 1,
                    detail: "the reply stream broke off".into(),
                    billing: Billing::MayBeBilled,
                };
                let charged = close(&budgets, &call, Err(broken), |_| FailedCharge::Used(used));
                assert_eq!(charged, used);
                books.call(&call, used, used);
            }
            Op::Fold => ledger.fold().unwrap(),
            Op::Crash { billed_share } => {
                // The books are read back from disk by a new process.
                drop(ledger);
                drop(budgets);
                drop(store);
                (store, budgets) = open(dir.path());
                let recovered = budgets.ledger().settle_unsettled().unwrap();
                assert_eq!(recovered.len(), in_flight.len());
                for call in in_flight.drain(..) {
                    let amount = call.reservation.amount;
                    books.call(&call, amount, call.share(billed_share, billed_share));
                }
            }
        }
        assert_within_limits(budgets.ledger(), &books);
    }
    // The calls still in flight at the end are answered as they reserved.
    for call in std::mem::take(&mut in_flight) {
        let cost = call.reservation.amount;
        close(&budgets, &call, Ok(cost), by_billing);
        books.call(&call, cost, cost);
    }
    let ledger = budgets.ledger();
    for account in limits().keys() {
        let state = ledger.account(account).unwrap();
        let of = |map: &BTreeMap<String, Micros>| map.get(account).copied().unwrap_or_default();
        assert_eq!(state.reserved, Micros(0), "{account}");
        assert_eq!(state.spent, of(&books.charged), "{account}");
        // The books equal the provider's bill but for what could not be known.
        assert_eq!(
            state.spent,
            of(&books.billed) + of(&books.unknown),
            "{account}"
        );
    }
    assert_within_limits(ledger, &books);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn interleavings_never_cross_a_cap_and_the_books_balance(ops in prop::collection::vec(op(), 1..80)) {
        run(&ops);
    }
}

/// The same invariants with real concurrency: threads racing to reserve and settle on shared
/// accounts, each thread with its own seeded sequence.
#[test]
fn concurrent_agents_never_cross_a_cap() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Arc::new(Ledger::new(&store).unwrap());
    let price = price();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(7 + t as u64);
                let mut charged: BTreeMap<String, Micros> = BTreeMap::new();
                let mut refusals = 0;
                for _ in 0..300 {
                    let agent = rng.random_range(0..AGENTS);
                    let amount = price.cost(rng.random_range(10..3000), rng.random_range(1..1500));
                    match ledger
                        .reserve(&charges(agent), amount, "a", "t", at())
                        .unwrap()
                    {
                        Ok(reservation) => {
                            let cost = Micros(rng.random_range(0..=amount.0));
                            if rng.random_bool(0.2) {
                                ledger.release(reservation.id).unwrap();
                            } else {
                                assert_eq!(ledger.settle(reservation.id, cost).unwrap(), cost);
                                for c in charges(agent) {
                                    *charged.entry(c.account).or_default() += cost;
                                }
                            }
                        }
                        Err(_) => refusals += 1,
                    }
                    assert_within_limits(&ledger, &Books::default());
                }
                (charged, refusals)
            })
        })
        .collect();
    let mut expected: BTreeMap<String, Micros> = BTreeMap::new();
    let mut refusals = 0;
    for thread in threads {
        let (charged, refused) = thread.join().unwrap();
        refusals += refused;
        for (account, amount) in charged {
            *expected.entry(account).or_default() += amount;
        }
    }
    // The budgets are small enough that the race reaches them.
    assert!(refusals > 0);
    for (account, limit) in limits() {
        let state = ledger.account(&account).unwrap();
        assert_eq!(state.reserved, Micros(0));
        assert_eq!(
            state.spent,
            expected.get(&account).copied().unwrap_or(Micros(0))
        );
        assert!(state.spent <= limit);
    }
}

/// A person's daily budget when it counts every server: $1.
const DAY_CAP: Micros = Micros(1_000_000);

/// A person's day counted across servers, with no other limit in the way.
fn across_servers() -> BudgetConfig {
    BudgetConfig {
        user_daily_usd: 1.0,
        user_daily_scope: autothread::config::UserDailyScope::EveryServer,
        guild_daily_usd: 0.0,
        guild_monthly_usd: 0.0,
        ..BudgetConfig::default()
    }
}

/// One person's agents in three servers, one server on each of `stores` (three processes, or
/// three handles in one), race two threads each to reserve and settle on the person's day: it
/// is one account for the three servers, no reservation ever takes it past its cap, and the
/// spend it ends with is exactly what was charged (no settlement lost to another's).
fn race_for_one_day(stores: Vec<Store>) {
    use rand::{Rng, SeedableRng};
    let config = across_servers();
    let budgets: Vec<Budgets> = stores
        .iter()
        .map(|store| Budgets::new(store, &config).unwrap())
        .collect();
    let charges_in = |budgets: &Budgets, server: usize| {
        let spender = Spender {
            user: Some("7".into()),
            guild: Some(autothread::core::state::GuildId::from(100 + server as u64)),
        };
        budgets
            .charges(&format!("agent{server}"), &spender, Micros(u64::MAX), at())
            .unwrap()
    };
    let day_of = |charges: &[Charge]| {
        charges
            .iter()
            .find(|charge| charge.account.starts_with("user/"))
            .unwrap()
            .account
            .clone()
    };
    let day = day_of(&charges_in(&budgets[0], 0));
    for (server, budgets) in budgets.iter().enumerate() {
        assert_eq!(
            day_of(&charges_in(budgets, server)),
            day,
            "one day for every server"
        );
    }
    let (charged, refusals): (Vec<Micros>, Vec<u32>) = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..6)
            .map(|racer| {
                let (server, budgets) = (racer % 3, &budgets[racer % 3]);
                let (charges, day) = (charges_in(budgets, server), day.as_str());
                scope.spawn(move || {
                    let ledger = budgets.ledger();
                    let mut rng = rand::rngs::StdRng::seed_from_u64(40 + racer as u64);
                    let (mut charged, mut refusals) = (Micros(0), 0);
                    for _ in 0..120 {
                        let amount = Micros(rng.random_range(5_000..=60_000));
                        match ledger
                            .reserve(&charges, amount, "a", "think", at())
                            .unwrap()
                        {
                            Ok(reservation) if rng.random_bool(0.2) => {
                                ledger.release(reservation.id).unwrap()
                            }
                            Ok(reservation) => {
                                let cost = Micros(rng.random_range(0..=amount.0));
                                assert_eq!(ledger.settle(reservation.id, cost).unwrap(), cost);
                                charged += cost;
                            }
                            Err(_) => refusals += 1,
                        }
                        let now = ledger.account(day).unwrap();
                        assert!(now.committed() <= DAY_CAP, "crossed: {now:?}");
                    }
                    (charged, refusals)
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).unzip()
    });
    // The race reached the cap, and the books hold exactly what was charged.
    assert!(refusals.iter().sum::<u32>() > 0);
    let total: Micros = charged.into_iter().sum();
    for budgets in &budgets {
        let account = budgets.ledger().account(&day).unwrap();
        assert_eq!(account.reserved, Micros(0));
        assert_eq!(account.spent, total);
        assert!(account.spent <= DAY_CAP);
    }
}

/// Three processes (three store handles on one PostgreSQL database, each with its own pool of
/// connections) serving the person's three servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_day_across_servers_raced_from_three_processes_on_postgres_is_never_crossed() {
    let Some((url, _)) = crate::support::postgres::fresh_database().await else {
        return;
    };
    let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
    let stores: Vec<Store> = dirs
        .iter()
        .map(|dir| Store::open_postgres(&url, dir.path()).unwrap())
        .collect();
    tokio::task::spawn_blocking(move || race_for_one_day(stores))
        .await
        .unwrap();
}

/// The same in one process on sled: three handles on one store.
#[test]
fn a_persons_day_across_servers_raced_from_three_handles_on_sled_is_never_crossed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    race_for_one_day(vec![store.clone(), store.clone(), store]);
}
