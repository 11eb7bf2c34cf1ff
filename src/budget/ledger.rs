//! The spend ledger in sled: accounts (settled and reserved micro-dollars), open reservations and
//! admin-set limits. Reserving checks every account a call is charged to and books it in one
//! transaction, so no interleaving of agents, retries or crashes can push an account past its limit.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};

use crate::core::budget::{format_usd, Micros};
use crate::store::{decode, encode, Store, StoreError};

/// One budget's bookkeeping. `spent + reserved` never exceeds the limit it was reserved under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub spent: Micros,
    pub reserved: Micros,
}

impl Account {
    pub fn committed(&self) -> Micros {
        self.spent.saturating_add(self.reserved)
    }
}

/// An account a call is charged to, with the limit that applies now (`None`: unlimited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub account: String,
    pub limit: Option<Micros>,
    /// How the budget is named to people ("the agent's budget", "your daily budget").
    pub label: String,
}

/// Money set aside for one call until its usage is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: u64,
    pub accounts: Vec<String>,
    pub amount: Micros,
    pub agent: String,
    /// What the call was for (model and purpose), for the log when it is recovered.
    pub what: String,
    pub at: DateTime<Utc>,
}

/// Why a reservation was refused: the first budget that cannot cover it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub label: String,
    pub limit: Micros,
    pub available: Micros,
    pub needed: Micros,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}) has {} left and the next model call may cost up to {}",
            self.label,
            format_usd(self.limit),
            format_usd(self.available),
            format_usd(self.needed)
        )
    }
}

#[derive(Clone)]
pub struct Ledger {
    db: sled::Db,
    accounts: sled::Tree,
    reservations: sled::Tree,
    limits: sled::Tree,
}

/// A transaction's own failure: either the refusal it decided on or a store error.
enum Abort {
    Refused(Refusal),
    Store(StoreError),
}

fn store_error(e: TransactionError<Abort>) -> Result<Refusal, StoreError> {
    match e {
        TransactionError::Abort(Abort::Refused(refusal)) => Ok(refusal),
        TransactionError::Abort(Abort::Store(e)) => Err(e),
        TransactionError::Storage(e) => Err(e.into()),
    }
}

impl Ledger {
    pub fn new(store: &Store) -> Result<Ledger, StoreError> {
        let db = store.db();
        Ok(Ledger {
            accounts: db.open_tree("ledger_accounts")?,
            reservations: db.open_tree("ledger_reservations")?,
            limits: db.open_tree("budget_limits")?,
            db: db.clone(),
        })
    }

    pub fn account(&self, key: &str) -> Result<Account, StoreError> {
        match self.accounts.get(key)? {
            Some(raw) => decode(key.as_bytes(), &raw),
            None => Ok(Account::default()),
        }
    }

    /// Books `amount` against every charge, or none of them when any budget cannot cover it.
    pub fn reserve(
        &self,
        charges: &[Charge],
        amount: Micros,
        agent: &str,
        what: &str,
        at: DateTime<Utc>,
    ) -> Result<Result<Reservation, Refusal>, StoreError> {
        // Generated outside the transaction, whose closure may run more than once.
        let id = self.db.generate_id()?;
        let reservation = Reservation {
            id,
            accounts: charges.iter().map(|c| c.account.clone()).collect(),
            amount,
            agent: agent.to_string(),
            what: what.to_string(),
            at,
        };
        let encoded = encode(&reservation)?;
        let outcome = (&self.accounts, &self.reservations).transaction(|(accounts, open)| {
            let abort = |e: StoreError| ConflictableTransactionError::Abort(Abort::Store(e));
            for charge in charges {
                let key = charge.account.as_bytes();
                let mut account: Account = match accounts.get(key)? {
                    Some(raw) => decode(key, &raw).map_err(abort)?,
                    None => Account::default(),
                };
                if let Some(limit) = charge.limit {
                    let available = limit.saturating_sub(account.committed());
                    if amount > available {
                        return Err(ConflictableTransactionError::Abort(Abort::Refused(
                            Refusal {
                                label: charge.label.clone(),
                                limit,
                                available,
                                needed: amount,
                            },
                        )));
                    }
                }
                account.reserved += amount;
                accounts.insert(key, encode(&account).map_err(abort)?)?;
            }
            open.insert(&id.to_be_bytes(), encoded.as_slice())?;
            Ok(())
        });
        match outcome {
            Ok(()) => Ok(Ok(reservation)),
            Err(e) => store_error(e).map(Err),
        }
    }

    /// Turns a reservation into spend: `actual` is charged, at most the amount reserved, so the
    /// limits checked at reservation hold. Returns what was charged; settling twice charges once.
    pub fn settle(&self, id: u64, actual: Micros) -> Result<Micros, StoreError> {
        self.close(id, Some(actual))
    }

    /// Gives a reservation back unused (the call failed and nothing was billed).
    pub fn release(&self, id: u64) -> Result<(), StoreError> {
        self.close(id, None).map(|_| ())
    }

    fn close(&self, id: u64, actual: Option<Micros>) -> Result<Micros, StoreError> {
        let key = id.to_be_bytes();
        let outcome = (&self.accounts, &self.reservations).transaction(|(accounts, open)| {
            let abort = |e: StoreError| ConflictableTransactionError::Abort(Abort::Store(e));
            let Some(raw) = open.remove(&key)? else {
                return Ok(Micros::ZERO);
            };
            let reservation: Reservation = decode(&key, &raw).map_err(abort)?;
            let charged = actual.unwrap_or(Micros::ZERO).min(reservation.amount);
            for name in &reservation.accounts {
                let mut account: Account = match accounts.get(name.as_bytes())? {
                    Some(raw) => decode(name.as_bytes(), &raw).map_err(abort)?,
                    None => Account::default(),
                };
                account.reserved = account.reserved.saturating_sub(reservation.amount);
                account.spent += charged;
                accounts.insert(name.as_bytes(), encode(&account).map_err(abort)?)?;
            }
            Ok(charged)
        });
        match outcome {
            Ok(charged) => Ok(charged),
            Err(e) => Err(store_error(e)
                .err()
                .unwrap_or_else(|| StoreError::Corrupt("a settlement was refused".into()))),
        }
    }

    pub fn open_reservations(&self) -> Result<Vec<Reservation>, StoreError> {
        self.reservations
            .iter()
            .map(|item| {
                let (key, raw) = item?;
                decode(&key, &raw)
            })
            .collect()
    }

    /// At start-up: a reservation still open belongs to a call cut short by a crash. Whether the
    /// provider billed it is unknown, so it is settled at its worst case.
    pub fn settle_unsettled(&self) -> Result<Vec<Reservation>, StoreError> {
        let open = self.open_reservations()?;
        for reservation in &open {
            self.settle(reservation.id, reservation.amount)?;
            tracing::warn!(
                agent = %reservation.agent,
                call = %reservation.what,
                amount = %format_usd(reservation.amount),
                "settled a reservation left open by a crash at its worst case"
            );
        }
        Ok(open)
    }

    /// Waits until the ledger's writes are on disk; a reservation must be durable before its call.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        crate::store::count_durable_flush();
        self.db.flush()?;
        Ok(())
    }

    pub fn limit(&self, key: &str) -> Result<Option<Micros>, StoreError> {
        match self.limits.get(key)? {
            Some(raw) => decode(key.as_bytes(), &raw),
            None => Ok(None),
        }
    }

    /// Sets (or with `None` removes) an admin's limit override.
    pub fn set_limit(&self, key: &str, limit: Option<Micros>) -> Result<(), StoreError> {
        match limit {
            Some(limit) => {
                self.limits.insert(key, encode(&limit)?)?;
            }
            None => {
                self.limits.remove(key)?;
            }
        }
        self.limits.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, Ledger::new(&store).unwrap())
    }

    fn charge(account: &str, limit: Option<Micros>) -> Charge {
        Charge {
            account: account.into(),
            limit,
            label: format!("budget {account}"),
        }
    }

    #[test]
    fn a_reservation_books_every_account_or_none() {
        let (_dir, ledger) = ledger();
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let charges = [
            charge("a", Some(Micros(1000))),
            charge("u", Some(Micros(300))),
        ];
        let first = ledger
            .reserve(&charges, Micros(200), "x", "think", at)
            .unwrap();
        let first = first.unwrap();
        assert_eq!(ledger.account("a").unwrap().reserved, Micros(200));
        let refused = ledger
            .reserve(&charges, Micros(200), "x", "think", at)
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.label, "budget u");
        assert_eq!(refused.available, Micros(100));
        // Nothing was booked for the refused call, not even on the account that could pay.
        assert_eq!(ledger.account("a").unwrap().reserved, Micros(200));
        assert_eq!(ledger.settle(first.id, Micros(150)).unwrap(), Micros(150));
        assert_eq!(ledger.settle(first.id, Micros(150)).unwrap(), Micros(0));
        assert_eq!(
            ledger.account("u").unwrap(),
            Account {
                spent: Micros(150),
                reserved: Micros(0)
            }
        );
        let text = refused.to_string();
        assert!(
            text.contains("budget u ($0.00030) has $0.00010 left"),
            "{text}"
        );
    }

    #[test]
    fn settlement_is_capped_at_the_reservation_and_release_charges_nothing() {
        let (_dir, ledger) = ledger();
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let charges = [charge("a", Some(Micros(1000)))];
        let r = ledger
            .reserve(&charges, Micros(400), "x", "t", at)
            .unwrap()
            .unwrap();
        assert_eq!(ledger.settle(r.id, Micros(900)).unwrap(), Micros(400));
        let r = ledger
            .reserve(&charges, Micros(400), "x", "t", at)
            .unwrap()
            .unwrap();
        ledger.release(r.id).unwrap();
        assert_eq!(
            ledger.account("a").unwrap(),
            Account {
                spent: Micros(400),
                reserved: Micros(0)
            }
        );
        assert!(ledger.open_reservations().unwrap().is_empty());
    }

    #[test]
    fn open_reservations_are_settled_at_their_worst_case_on_recovery() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let ledger = Ledger::new(&store).unwrap();
            let at = DateTime::<Utc>::UNIX_EPOCH;
            ledger
                .reserve(
                    &[charge("a", Some(Micros(1000)))],
                    Micros(700),
                    "x",
                    "think",
                    at,
                )
                .unwrap()
                .unwrap();
            ledger.flush_blocking().unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::new(&store).unwrap();
        let recovered = ledger.settle_unsettled().unwrap();
        assert_eq!(recovered.len(), 1);
        assert_eq!(
            ledger.account("a").unwrap(),
            Account {
                spent: Micros(700),
                reserved: Micros(0)
            }
        );
        assert!(ledger.settle_unsettled().unwrap().is_empty());
    }
}
