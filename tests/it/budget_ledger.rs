//! Properties of the spend ledger: whatever the interleaving of reservations (each fitted to what
//! is left, as a budget's last calls are), settlements, failures and crashes, no account passes
//! its limit, a fitted call is never refused, and what the ledger says was spent is
//! exactly the sum of what was charged (settled usage at its price, crashed calls at their worst case).

use std::collections::BTreeMap;
use std::sync::Arc;

use autothread::budget::ledger::{Charge, Ledger, Reservation};
use autothread::core::budget::{Micros, Price, ReplyFit, REPLY_FLOOR_TOKENS};
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
    /// The call in flight at `index` answered, using these shares of its prompt and reserve.
    Settle {
        index: usize,
        prompt_share: u8,
        reply_share: u8,
    },
    /// The call at `index` failed after its retries.
    Fail { index: usize },
    /// The process died: calls in flight are found at start-up and settled at their worst case.
    Crash,
    /// The settlements so far are folded into the stored accounts.
    Fold,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..AGENTS, 10u64..3000, 1u64..1500).prop_map(|(agent, prompt, max_tokens)| Op::Reserve { agent, prompt, max_tokens }),
        3 => (any::<usize>(), 0u8..=100, 0u8..=100).prop_map(|(index, prompt_share, reply_share)| Op::Settle { index, prompt_share, reply_share }),
        1 => any::<usize>().prop_map(|index| Op::Fail { index }),
        1 => Just(Op::Crash),
        1 => Just(Op::Fold),
    ]
}

struct InFlight {
    reservation: Reservation,
    agent: usize,
    prompt: u64,
    max_tokens: u64,
}

fn at() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

fn assert_within_limits(ledger: &Ledger) {
    for (account, limit) in limits() {
        let state = ledger.account(&account).unwrap();
        assert!(
            state.committed() <= limit,
            "{account}: {} spent + {} reserved > {limit}",
            state.spent,
            state.reserved
        );
    }
}

/// Runs `ops` against a fresh ledger and checks the invariants after every step.
fn run(ops: &[Op]) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let mut ledger = Ledger::new(&store).unwrap();
    let price = price();
    let mut in_flight: Vec<InFlight> = Vec::new();
    // What each account should show as spent, from our own arithmetic.
    let mut expected: BTreeMap<String, Micros> = BTreeMap::new();
    let mut charge = |agent: usize, amount: Micros| {
        for c in charges(agent) {
            *expected.entry(c.account).or_default() += amount;
        }
    };
    for op in ops {
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
                let used_prompt = call.prompt * prompt_share as u64 / 100;
                let used_reply = call.max_tokens * reply_share as u64 / 100;
                let cost = price.cost(used_prompt, used_reply);
                assert!(cost <= call.reservation.amount);
                let charged = ledger.settle(call.reservation.id, cost).unwrap();
                assert_eq!(charged, cost);
                charge(call.agent, cost);
                // A second settlement of the same call (a duplicate delivery) charges nothing.
                assert_eq!(ledger.settle(call.reservation.id, cost).unwrap(), Micros(0));
            }
            Op::Fail { index } => {
                if in_flight.is_empty() {
                    continue;
                }
                let call = in_flight.remove(index % in_flight.len());
                ledger.release(call.reservation.id).unwrap();
            }
            Op::Fold => ledger.fold().unwrap(),
            Op::Crash => {
                // The books are read back from disk by a new process.
                drop(ledger);
                drop(store);
                store = Store::open(dir.path()).unwrap();
                ledger = Ledger::new(&store).unwrap();
                let recovered = ledger.settle_unsettled().unwrap();
                assert_eq!(recovered.len(), in_flight.len());
                for call in in_flight.drain(..) {
                    charge(call.agent, call.reservation.amount);
                }
            }
        }
        assert_within_limits(&ledger);
    }
    for call in in_flight.drain(..) {
        ledger.release(call.reservation.id).unwrap();
    }
    for (account, limit) in limits() {
        let state = ledger.account(&account).unwrap();
        assert_eq!(state.reserved, Micros(0), "{account}");
        assert_eq!(
            state.spent,
            expected.get(&account).copied().unwrap_or(Micros(0)),
            "{account}"
        );
        assert!(state.spent <= limit);
    }
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
                    assert_within_limits(&ledger);
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
