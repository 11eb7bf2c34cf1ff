//! The spend ledger in sled: accounts (settled and reserved micro-dollars), open reservations and
//! admin-set limits, on the trees `ledger_accounts`, `ledger_reservations`, `ledger_settlements`
//! and `budget_limits`. The books live in memory behind one lock, so checking every account a call
//! is charged to and booking it is one step no interleaving of agents or retries can split; on disk
//! each reservation and each settlement is one key, so a crash at any point leaves books that add
//! up when they are read back.
//!
//! The books are read once per open store and shared between its clones (`Store::shared_books`,
//! typed by the ledger so that the store names nothing of the budget). Memory holds only the
//! accounts of open or unfolded reservations and those touched since the last fold; any other
//! account is read from `ledger_accounts`. `reserve` checks every account and books the call all or
//! none; `settle` charges what the call cost, in full even above the reservation, and settling
//! twice charges once; `release` gives a reservation back. Every `SETTLEMENTS_PER_FOLD` settlements
//! the ledger writes the settled spend into the stored accounts and drops the folded reservations
//! and settlements in one transaction (`fold`). There is no transaction per call, since sled writes
//! and syncs its log buffer around each one. At start-up `settle_unsettled` charges every
//! reservation still open at its worst case (a crash between reserve and settle).
//!
//! On a store several processes share (PostgreSQL), books in memory would each think they held
//! all the money, so the books are the stored accounts themselves (see `shared`): each reservation
//! and each settlement is one transaction that changes every account it touches only if each is
//! still what was read (compare-and-set), read again and retried when another process got in
//! first. A budget then holds across every process sharing the store.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::core::budget::{format_usd, Micros};
use crate::locks::LockRecovered;
use crate::store::{decode, encode, Store, StoreError};

mod shared;

/// How many settlements are kept as their own keys before they are folded into the accounts.
/// Folding takes a sled transaction, which writes and syncs about three log buffers whatever its
/// size; a single insert rides on the next flush. Each of those writes also cuts short the buffer
/// a flush window was filling, and the next write dirties the synced buffer's last page again.
/// One in 256 keeps the ledger's share of a cycle's disk writes small while bounding what
/// start-up has to add up and what is held in memory until the fold.
const SETTLEMENTS_PER_FOLD: usize = 256;

/// One budget's bookkeeping. A reservation is made only when `spent + reserved` stays within the
/// limit; only a call that cost more than its reservation (charged in full) can take an account
/// past its limit, and then no new reservation is made on it.
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
    /// On a shared store: the store handle (one per process) that made it, and that its amount
    /// is booked in its accounts' stored `reserved` (see `shared`). Absent on sled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booked_by: Option<String>,
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

/// The ledger of one store. Every `Ledger` of a store shares the same books (see `Ledger::new`).
#[derive(Clone)]
pub struct Ledger {
    books: Arc<Books>,
}

struct Books {
    db: crate::store::kv::Db,
    /// The store's shared flush (see `store::Durable`).
    durable: crate::store::Durable,
    /// Settled spend per account, as of the last fold (`reserved` is kept at zero on disk).
    accounts: crate::store::kv::Tree,
    /// Every reservation not yet folded, open or settled.
    reservations: crate::store::kv::Tree,
    /// What a reservation was charged, by its id, until it is folded into the accounts.
    settlements: crate::store::kv::Tree,
    limits: crate::store::kv::Tree,
    state: Mutex<BookState>,
    /// On a store shared by several processes (PostgreSQL), this handle's id: the books are then
    /// the stored accounts themselves, changed by compare-and-set (see `shared`), and `state`
    /// stays empty.
    shared: Option<String>,
}

/// The books as they stand: what the trees add up to.
#[derive(Default)]
struct BookState {
    /// The accounts with open or unfolded reservations, and those touched since the last fold. Any
    /// other account is exactly what `ledger_accounts` stores, so it is read from there: holding
    /// every account ever charged (each user's every day) would grow without a bound.
    accounts: HashMap<String, Account>,
    open: HashMap<u64, Reservation>,
    /// Settled reservations not yet folded into the stored accounts, with what each was charged.
    unfolded: Vec<(Reservation, Micros)>,
}

impl BookState {
    /// Brings `names` into memory from the stored accounts.
    fn load_accounts(&mut self, books: &Books, names: &[String]) -> Result<(), StoreError> {
        for name in names {
            if !self.accounts.contains_key(name) {
                let stored = books.stored_account(name)?;
                self.accounts.insert(name.clone(), stored);
            }
        }
        Ok(())
    }

    fn book(&mut self, names: &[String], reserve: Micros, release: Micros, charge: Micros) {
        for name in names {
            let account = self.accounts.entry(name.clone()).or_default();
            account.reserved = account.reserved.saturating_add(reserve);
            account.reserved = account.reserved.saturating_sub(release);
            account.spent = account.spent.saturating_add(charge);
        }
    }
}

impl Ledger {
    /// The store's ledger. The books are read from disk once per open store and shared by every
    /// clone of it, because two sets of books over the same trees would each think they held
    /// all the money.
    pub fn new(store: &Store) -> Result<Ledger, StoreError> {
        let books = store.shared_books(|| Books::load(store.db(), store.durable()))?;
        Ok(Ledger { books })
    }
}

impl Books {
    /// An account as folded. Stores written before settlements were kept apart booked open
    /// reservations into their accounts too; what is reserved always comes from the open ones.
    fn stored_account(&self, name: &str) -> Result<Account, StoreError> {
        Ok(match self.accounts.get(name)? {
            Some(raw) => Account {
                spent: decode::<Account>(name.as_bytes(), &raw)?.spent,
                reserved: Micros::ZERO,
            },
            None => Account::default(),
        })
    }

    fn load(
        db: &crate::store::kv::Db,
        durable: crate::store::Durable,
    ) -> Result<Books, StoreError> {
        let books = Books {
            accounts: db.open_tree("ledger_accounts")?,
            reservations: db.open_tree("ledger_reservations")?,
            settlements: db.open_tree("ledger_settlements")?,
            limits: db.open_tree("budget_limits")?,
            db: db.clone(),
            durable,
            state: Mutex::new(BookState::default()),
            shared: (db.backend() == crate::store::kv::Backend::Postgres)
                .then(|| uuid::Uuid::new_v4().simple().to_string()),
        };
        if books.shared.is_some() {
            let marks = db.open_tree("ledger_shared")?;
            db.exclusively(|| books.book_into_shared_accounts(&marks))?;
            return Ok(books);
        }
        let mut state = BookState::default();
        for item in books.reservations.iter() {
            let (key, raw) = item?;
            let reservation: Reservation = decode(&key, &raw)?;
            state.load_accounts(&books, &reservation.accounts)?;
            match books.settlements.get(&key)? {
                Some(raw) => {
                    let charged: Micros = decode(&key, &raw)?;
                    state.book(&reservation.accounts, Micros::ZERO, Micros::ZERO, charged);
                    state.unfolded.push((reservation, charged));
                }
                None => {
                    state.book(
                        &reservation.accounts,
                        reservation.amount,
                        Micros::ZERO,
                        Micros::ZERO,
                    );
                    state.open.insert(reservation.id, reservation);
                }
            }
        }
        *books.state.lock_recovered() = state;
        Ok(books)
    }
}

impl Ledger {
    fn state(&self) -> MutexGuard<'_, BookState> {
        // A panic while the lock was held happened between whole bookings: the books are whole.
        self.books.state.lock_recovered()
    }

    pub fn account(&self, key: &str) -> Result<Account, StoreError> {
        if self.books.shared.is_some() {
            return Ok(self.books.shared_account(key)?.1);
        }
        if let Some(account) = self.state().accounts.get(key) {
            return Ok(*account);
        }
        self.books.stored_account(key)
    }

    /// Every account whose name starts with `prefix`, as it stands now (settled spend, and what
    /// open reservations hold), in name order.
    pub fn accounts_with_prefix(&self, prefix: &str) -> Result<Vec<(String, Account)>, StoreError> {
        if self.books.shared.is_some() {
            return self.books.shared_accounts_with_prefix(prefix);
        }
        let mut found = std::collections::BTreeMap::new();
        // Held while the stored accounts are read, so that no fold moves spend from memory to
        // the store in between (which would show the older stored figure).
        let state = self.state();
        for item in self.books.accounts.scan_prefix(prefix.as_bytes()) {
            let (key, raw) = item?;
            let account = Account {
                spent: decode::<Account>(&key, &raw)?.spent,
                reserved: Micros::ZERO,
            };
            found.insert(String::from_utf8_lossy(&key).into_owned(), account);
        }
        // The books in memory are newer than the stored accounts they were loaded from.
        for (name, account) in &state.accounts {
            if name.starts_with(prefix) {
                found.insert(name.clone(), *account);
            }
        }
        Ok(found.into_iter().collect())
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
        if let Some(by) = &self.books.shared {
            return self
                .books
                .shared_reserve(charges, amount, agent, what, at, by);
        }
        let names: Vec<String> = charges.iter().map(|c| c.account.clone()).collect();
        let mut state = self.state();
        state.load_accounts(&self.books, &names)?;
        for charge in charges {
            let Some(limit) = charge.limit else { continue };
            let committed = state
                .accounts
                .get(&charge.account)
                .map(Account::committed)
                .unwrap_or_default();
            let available = limit.saturating_sub(committed);
            if amount > available {
                return Ok(Err(Refusal {
                    label: charge.label.clone(),
                    limit,
                    available,
                    needed: amount,
                }));
            }
        }
        let reservation = Reservation {
            id: self.books.db.generate_id()?,
            accounts: names,
            amount,
            agent: agent.to_string(),
            what: what.to_string(),
            at,
            booked_by: None,
        };
        // One key: after a crash the reservation is either there whole or was never made.
        self.books
            .reservations
            .insert(reservation.id.to_be_bytes(), encode(&reservation)?)?;
        state.book(&reservation.accounts, amount, Micros::ZERO, Micros::ZERO);
        state.open.insert(reservation.id, reservation.clone());
        Ok(Ok(reservation))
    }

    /// Turns a reservation into spend: `actual` is charged, in full even above the amount reserved
    /// (the provider bills it; the limits are kept by the reservations that follow, which see it).
    /// Returns what was charged; settling twice charges once.
    pub fn settle(&self, id: u64, actual: Micros) -> Result<Micros, StoreError> {
        self.close(id, actual)
    }

    /// Gives a reservation back unused (the call failed and nothing was billed).
    pub fn release(&self, id: u64) -> Result<(), StoreError> {
        self.close(id, Micros::ZERO).map(|_| ())
    }

    fn close(&self, id: u64, actual: Micros) -> Result<Micros, StoreError> {
        if self.books.shared.is_some() {
            return self.books.shared_close(id, actual);
        }
        let mut state = self.state();
        let Some(reservation) = state.open.remove(&id) else {
            return Ok(Micros::ZERO);
        };
        let charged = actual;
        // One key again: the settlement is either on disk whole, or the reservation is still
        // open and is settled at its worst case at the next start.
        if let Err(e) = self
            .books
            .settlements
            .insert(id.to_be_bytes(), encode(&charged)?)
        {
            state.open.insert(id, reservation);
            return Err(e.into());
        }
        state.book(
            &reservation.accounts,
            Micros::ZERO,
            reservation.amount,
            charged,
        );
        state.unfolded.push((reservation, charged));
        if state.unfolded.len() >= SETTLEMENTS_PER_FOLD {
            self.fold_settled(&mut state)?;
        }
        Ok(charged)
    }

    /// Folds the settlements so far into the stored accounts now (the ledger does it by itself
    /// every `SETTLEMENTS_PER_FOLD` settlements).
    pub fn fold(&self) -> Result<(), StoreError> {
        // Shared books have nothing to fold: a settlement lands in its accounts.
        if self.books.shared.is_some() {
            return Ok(());
        }
        let mut state = self.state();
        self.fold_settled(&mut state)
    }

    /// Writes the settled spend into the stored accounts and drops the settlements folded in, in
    /// one transaction, so start-up never adds a settlement twice or loses one.
    fn fold_settled(&self, state: &mut BookState) -> Result<(), StoreError> {
        if state.unfolded.is_empty() {
            return Ok(());
        }
        let mut touched: HashMap<&str, Account> = HashMap::new();
        for (reservation, _) in &state.unfolded {
            for name in &reservation.accounts {
                let spent = state
                    .accounts
                    .get(name)
                    .map(|a| a.spent)
                    .unwrap_or_default();
                touched.insert(
                    name,
                    Account {
                        spent,
                        reserved: Micros::ZERO,
                    },
                );
            }
        }
        let encoded = touched
            .iter()
            .map(|(name, account)| Ok((name.as_bytes().to_vec(), encode(account)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let books = &*self.books;
        // The accounts and the reservations folded into them change together or not at all.
        let mut fold = crate::store::kv::Batch::default();
        for (name, account) in encoded {
            fold.put(&books.accounts, name, account);
        }
        for (reservation, _) in &state.unfolded {
            let key = reservation.id.to_be_bytes();
            fold.remove(&books.reservations, key);
            fold.remove(&books.settlements, key);
        }
        books.db.write_batch(&fold)?;
        state.unfolded.clear();
        // What is folded is on disk now; only the accounts of open reservations stay in memory.
        let open: std::collections::HashSet<&String> =
            state.open.values().flat_map(|r| &r.accounts).collect();
        let keep: std::collections::HashSet<String> = open.into_iter().cloned().collect();
        state.accounts.retain(|name, _| keep.contains(name));
        Ok(())
    }

    /// The reservations still open: on a shared store, every process's.
    pub fn open_reservations(&self) -> Result<Vec<Reservation>, StoreError> {
        if self.books.shared.is_some() {
            return self.books.shared_open();
        }
        let mut open: Vec<Reservation> = self.state().open.values().cloned().collect();
        open.sort_by_key(|r| r.id);
        Ok(open)
    }

    /// At start-up: a reservation still open belongs to a call cut short by a crash. Whether the
    /// provider billed it is unknown, so it is settled at its worst case.
    pub fn settle_unsettled(&self) -> Result<Vec<Reservation>, StoreError> {
        self.settle_unsettled_where(|_| true)
    }

    /// `settle_unsettled`, for the open reservations `orphaned` picks: on a shared store, another
    /// process's reservation may belong to a call it is making now, so the caller says which
    /// were left by a process that is gone (see `shared`).
    pub fn settle_unsettled_where(
        &self,
        orphaned: impl Fn(&Reservation) -> bool,
    ) -> Result<Vec<Reservation>, StoreError> {
        let mut open = self.open_reservations()?;
        open.retain(|reservation| orphaned(reservation));
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

    /// On a shared store, settles at their worst case the agent's open reservations that another
    /// process made: called once this process holds the agent's lease, when whoever made them
    /// can no longer be running the agent (its lease expired, or was given back). Their process
    /// may still close them; the first close counts.
    pub fn settle_left_by_others(&self, agent: &str) -> Result<Vec<Reservation>, StoreError> {
        let Some(this) = self.books.shared.clone() else {
            return Ok(Vec::new());
        };
        self.settle_unsettled_where(|reservation| {
            reservation.agent == agent && reservation.booked_by.as_deref() != Some(this.as_str())
        })
    }

    /// Waits until the ledger's writes are on disk; a reservation must be durable before its call.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        self.books.durable.flush_blocking()?;
        Ok(())
    }

    /// As `flush_blocking`, for async code: waits without holding a thread.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.books.durable.flush().await?;
        Ok(())
    }

    pub fn limit(&self, key: &str) -> Result<Option<Micros>, StoreError> {
        match self.books.limits.get(key)? {
            Some(raw) => decode(key.as_bytes(), &raw),
            None => Ok(None),
        }
    }

    /// Sets (or with `None` removes) an admin's limit override.
    pub fn set_limit(&self, key: &str, limit: Option<Micros>) -> Result<(), StoreError> {
        match limit {
            Some(limit) => {
                self.books.limits.insert(key, encode(&limit)?)?;
            }
            None => {
                self.books.limits.remove(key)?;
            }
        }
        self.books.limits.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kv::Backend;
    use crate::store::test_backends::{on_both_backends, TestStore};

    fn ledger(backend: Backend) -> Option<(TestStore, Ledger)> {
        let test = TestStore::on(backend)?;
        let ledger = Ledger::new(&test.open()).unwrap();
        Some((test, ledger))
    }

    fn charge(account: &str, limit: Option<Micros>) -> Charge {
        Charge {
            account: account.into(),
            limit,
            label: format!("budget {account}"),
        }
    }

    fn a_reservation_books_every_account_or_none(backend: Backend) {
        let Some((_test, ledger)) = ledger(backend) else {
            return;
        };
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

    fn an_overrun_is_charged_in_full_and_refuses_what_follows_and_release_charges_nothing(
        backend: Backend,
    ) {
        let Some((_test, ledger)) = ledger(backend) else {
            return;
        };
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let charges = [charge("a", Some(Micros(1000)))];
        let r = ledger
            .reserve(&charges, Micros(400), "x", "t", at)
            .unwrap()
            .unwrap();
        let r2 = ledger
            .reserve(&charges, Micros(400), "x", "t", at)
            .unwrap()
            .unwrap();
        ledger.release(r2.id).unwrap();
        assert_eq!(ledger.settle(r.id, Micros(1100)).unwrap(), Micros(1100));
        assert_eq!(
            ledger.account("a").unwrap(),
            Account {
                spent: Micros(1100),
                reserved: Micros(0)
            }
        );
        // The overrun went past the limit; no new reservation is made on top of it.
        let refused = ledger
            .reserve(&charges, Micros(1), "x", "t", at)
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.available, Micros(0));
        assert!(ledger.open_reservations().unwrap().is_empty());
    }

    fn open_reservations_are_settled_at_their_worst_case_on_recovery(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        {
            let store = test.open();
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
        let store = test.open();
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

    fn settlements_past_a_fold_are_read_back_once_and_every_ledger_of_a_store_shares_the_books(
        backend: Backend,
    ) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let charges = [charge("a", Some(Micros(1_000_000))), charge("u", None)];
        let settled = SETTLEMENTS_PER_FOLD as u64 + 5;
        {
            let store = test.open();
            let ledger = Ledger::new(&store).unwrap();
            let other = Ledger::new(&store.clone()).unwrap();
            for _ in 0..settled {
                let r = ledger
                    .reserve(&charges, Micros(10), "x", "t", at)
                    .unwrap()
                    .unwrap();
                other.settle(r.id, Micros(7)).unwrap();
            }
            // One more left open, as a crash would leave it.
            ledger
                .reserve(&charges, Micros(10), "x", "t", at)
                .unwrap()
                .unwrap();
            assert_eq!(
                other.account("a").unwrap(),
                Account {
                    spent: Micros(7 * settled),
                    reserved: Micros(10)
                }
            );
            // The fold took the first `SETTLEMENTS_PER_FOLD` settlements off their own keys; on a
            // shared store each settlement landed in its accounts, and none is kept apart.
            let unfolded = store.db().open_tree("ledger_settlements").unwrap().len();
            let kept_apart = if backend == Backend::Sled { 5 } else { 0 };
            assert_eq!(unfolded, kept_apart);
        }
        let store = test.open();
        let ledger = Ledger::new(&store).unwrap();
        assert_eq!(
            ledger.account("u").unwrap(),
            Account {
                spent: Micros(7 * settled),
                reserved: Micros(10)
            }
        );
        assert_eq!(ledger.settle_unsettled().unwrap().len(), 1);
        ledger.fold().unwrap();
        // Folded accounts are read from disk again: memory holds only what is open.
        assert!(ledger.state().accounts.is_empty());
        assert_eq!(ledger.account("a").unwrap().spent, Micros(7 * settled + 10));
        drop(ledger);
        drop(store);
        let store = test.open();
        let ledger = Ledger::new(&store).unwrap();
        assert_eq!(
            ledger.account("a").unwrap(),
            Account {
                spent: Micros(7 * settled + 10),
                reserved: Micros(0)
            }
        );
        assert!(ledger.open_reservations().unwrap().is_empty());
    }

    fn the_accounts_under_a_prefix_count_folded_settled_and_open_spend(backend: Backend) {
        let Some((_test, ledger)) = ledger(backend) else {
            return;
        };
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let spend = |account: &str, reserve: u64, settle: Option<u64>| {
            let reservation = ledger
                .reserve(&[charge(account, None)], Micros(reserve), "x", "think", at)
                .unwrap()
                .unwrap();
            if let Some(actual) = settle {
                ledger.settle(reservation.id, Micros(actual)).unwrap();
            }
        };
        spend("day/1/alice/a1", 100, Some(60));
        ledger.fold().unwrap();
        spend("day/1/alice/a1", 100, Some(30));
        spend("day/1/bob/b1", 50, None);
        spend("day/2/alice/a1", 10, Some(10));
        let found = ledger.accounts_with_prefix("day/1/").unwrap();
        let expected = [
            (
                "day/1/alice/a1".to_string(),
                Account {
                    spent: Micros(90),
                    reserved: Micros::ZERO,
                },
            ),
            (
                "day/1/bob/b1".to_string(),
                Account {
                    spent: Micros::ZERO,
                    reserved: Micros(50),
                },
            ),
        ];
        assert_eq!(found, expected);
    }

    fn a_store_whose_accounts_booked_their_reservations_is_read_without_counting_them_twice(
        backend: Backend,
    ) {
        // Before settlements had their own keys, a reservation was booked in its accounts too.
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        {
            let store = test.open();
            let db = store.db();
            let accounts = db.open_tree("ledger_accounts").unwrap();
            let reservations = db.open_tree("ledger_reservations").unwrap();
            let open = Reservation {
                id: 9,
                accounts: vec!["a".into()],
                amount: Micros(300),
                agent: "x".into(),
                what: "think".into(),
                at: DateTime::<Utc>::UNIX_EPOCH,
                booked_by: None,
            };
            let booked = Account {
                spent: Micros(500),
                reserved: Micros(300),
            };
            accounts.insert("a", encode(&booked).unwrap()).unwrap();
            reservations
                .insert(9u64.to_be_bytes(), encode(&open).unwrap())
                .unwrap();
        }
        let store = test.open();
        let ledger = Ledger::new(&store).unwrap();
        assert_eq!(
            ledger.account("a").unwrap(),
            Account {
                spent: Micros(500),
                reserved: Micros(300)
            }
        );
        assert_eq!(ledger.settle_unsettled().unwrap().len(), 1);
        assert_eq!(ledger.account("a").unwrap().spent, Micros(800));
    }

    on_both_backends!(
        a_reservation_books_every_account_or_none,
        an_overrun_is_charged_in_full_and_refuses_what_follows_and_release_charges_nothing,
        open_reservations_are_settled_at_their_worst_case_on_recovery,
        settlements_past_a_fold_are_read_back_once_and_every_ledger_of_a_store_shares_the_books,
        the_accounts_under_a_prefix_count_folded_settled_and_open_spend,
        a_store_whose_accounts_booked_their_reservations_is_read_without_counting_them_twice,
    );
}
