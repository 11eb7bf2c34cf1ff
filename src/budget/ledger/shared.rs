//! The ledger's books on a store several processes share (PostgreSQL): no books in memory, since
//! each process would hold its own; the stored account is the book, `spent` and `reserved` both.
//!
//! A reservation reads each account it is charged to, checks every limit against `spent +
//! reserved`, and writes, in one checked batch (`kv::Db::write_batch_checked`), each account with
//! the amount added to `reserved` and the reservation under its id: the batch lands only if every
//! account still holds what was read, and is read again and retried otherwise. Two processes
//! racing for the last of a budget therefore cannot both book it: the second one's batch finds the
//! account changed, reads the first one's booking, and is refused if it no longer fits. A
//! settlement moves the amount from `reserved` to `spent` (the cost charged in full) and removes
//! the reservation, expecting the reservation too: of two closes of one reservation, one counts.
//! Every account of a call changes in one transaction, so the books add up after a crash at any
//! point, and no settlements are kept apart or folded.
//!
//! A reservation records the store handle that made it (`Reservation::booked_by`, one per
//! process). One left open by a process that died is settled at its worst case by the process that
//! takes its agent's lease over (`Ledger::settle_left_by_others`), or at start-up when its agent's
//! lease is not held (`Ledger::settle_unsettled_where`).
//!
//! At open, under the store's exclusive lock, books written the sled way (a store moved into
//! PostgreSQL: settlements kept apart, open reservations not booked in their accounts) are brought
//! into this form once (`book_into_shared_accounts`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{Account, Books, Charge, Refusal, Reservation};
use crate::core::budget::Micros;
use crate::store::kv::{Batch, Bytes, Checked, Error};
use crate::store::{decode, encode, StoreError};

/// The key that says a database's books are in the shared form.
const SHARED_MARK: &[u8] = b"booked_in_accounts";

/// How many times a booking is read again after another process changed its accounts first.
const ATTEMPTS: u32 = 10_000;

impl Books {
    /// The account as stored, with the value it was read from (to expect it unchanged).
    pub(super) fn shared_account(
        &self,
        name: &str,
    ) -> Result<(Option<Bytes>, Account), StoreError> {
        let raw = self.accounts.get(name)?;
        let account = match &raw {
            Some(raw) => decode::<Account>(name.as_bytes(), raw)?,
            None => Account::default(),
        };
        Ok((raw, account))
    }

    pub(super) fn shared_accounts_with_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, Account)>, StoreError> {
        let mut found = BTreeMap::new();
        for item in self.accounts.scan_prefix(prefix.as_bytes()) {
            let (key, raw) = item?;
            let account = decode::<Account>(&key, &raw)?;
            found.insert(String::from_utf8_lossy(&key).into_owned(), account);
        }
        Ok(found.into_iter().collect())
    }

    /// Adds to `batch` each of `names`' accounts changed by `change`, expecting it as read.
    fn change_accounts(
        &self,
        batch: &mut Batch,
        names: &[String],
        mut change: impl FnMut(&str, Account) -> Result<Account, Refusal>,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let mut seen: Vec<&str> = Vec::with_capacity(names.len());
        for name in names {
            // An account named twice is booked once, as the books in memory would key it once.
            if seen.contains(&name.as_str()) {
                continue;
            }
            seen.push(name);
            let (raw, account) = self.shared_account(name)?;
            let changed = match change(name, account) {
                Ok(changed) => changed,
                Err(refusal) => return Ok(Err(refusal)),
            };
            batch.expect(&self.accounts, name.as_bytes(), raw.map(|raw| raw.to_vec()));
            batch.put(&self.accounts, name.as_bytes(), encode(&changed)?);
        }
        Ok(Ok(()))
    }

    pub(super) fn shared_reserve(
        &self,
        charges: &[Charge],
        amount: Micros,
        agent: &str,
        what: &str,
        at: DateTime<Utc>,
        by: &str,
    ) -> Result<Result<Reservation, Refusal>, StoreError> {
        let names: Vec<String> = charges.iter().map(|c| c.account.clone()).collect();
        let reservation = Reservation {
            id: self.db.generate_id()?,
            accounts: names.clone(),
            amount,
            agent: agent.to_string(),
            what: what.to_string(),
            at,
            booked_by: Some(by.to_string()),
        };
        let limits: BTreeMap<&str, &Charge> =
            charges.iter().map(|c| (c.account.as_str(), c)).collect();
        for _ in 0..ATTEMPTS {
            let mut batch = Batch::default();
            let booked = self.change_accounts(&mut batch, &names, |name, account| {
                if let Some(limit) = limits.get(name).and_then(|c| c.limit) {
                    let available = limit.saturating_sub(account.committed());
                    if amount > available {
                        return Err(Refusal {
                            label: limits[name].label.clone(),
                            limit,
                            available,
                            needed: amount,
                        });
                    }
                }
                Ok(Account {
                    reserved: account.reserved.saturating_add(amount),
                    ..account
                })
            })?;
            if let Err(refusal) = booked {
                return Ok(Err(refusal));
            }
            batch.expect(&self.reservations, reservation.id.to_be_bytes(), None);
            batch.put(
                &self.reservations,
                reservation.id.to_be_bytes(),
                encode(&reservation)?,
            );
            match self.db.write_batch_checked(&batch, None)? {
                Checked::Landed => return Ok(Ok(reservation)),
                // Another process booked on one of the accounts meanwhile: read them again.
                Checked::Differs { .. } | Checked::FenceMoved => continue,
            }
        }
        Err(Error::Contended(ATTEMPTS).into())
    }

    /// Closes a reservation at `actual` (zero: released); one closed already charges nothing.
    pub(super) fn shared_close(&self, id: u64, actual: Micros) -> Result<Micros, StoreError> {
        let key = id.to_be_bytes();
        for _ in 0..ATTEMPTS {
            let Some(raw) = self.reservations.get(key)? else {
                return Ok(Micros::ZERO);
            };
            let reservation: Reservation = decode(&key, &raw)?;
            let mut batch = Batch::default();
            batch.expect(&self.reservations, key, Some(raw.to_vec()));
            batch.remove(&self.reservations, key);
            let closed =
                self.change_accounts(&mut batch, &reservation.accounts, |_, account| {
                    Ok(Account {
                        spent: account.spent.saturating_add(actual),
                        reserved: account.reserved.saturating_sub(reservation.amount),
                    })
                })?;
            if closed.is_err() {
                // A close refuses nothing; kept whole rather than assumed.
                return Err(StoreError::Corrupt("a settlement was refused".into()));
            }
            match self.db.write_batch_checked(&batch, None)? {
                Checked::Landed => return Ok(actual),
                Checked::Differs { .. } | Checked::FenceMoved => continue,
            }
        }
        Err(Error::Contended(ATTEMPTS).into())
    }

    pub(super) fn shared_open(&self) -> Result<Vec<Reservation>, StoreError> {
        let mut open = Vec::new();
        for item in self.reservations.iter() {
            let (key, raw) = item?;
            open.push(decode::<Reservation>(&key, &raw)?);
        }
        open.sort_by_key(|r| r.id);
        Ok(open)
    }

    /// Brings books written the sled way into the shared form, once per database (`marks`
    /// remembers it): every account's `reserved` becomes what its open reservations hold (the sled
    /// way keeps it in memory only), each settlement kept apart is charged to its accounts with
    /// its reservation removed, and each open reservation is marked booked. All in one batch, so a
    /// crash leaves the books converted or not at all; the caller holds the store's exclusive lock.
    pub(super) fn book_into_shared_accounts(
        &self,
        marks: &crate::store::kv::Tree,
    ) -> Result<(), StoreError> {
        if marks.contains_key(SHARED_MARK)? {
            return Ok(());
        }
        let by = self.shared.clone().unwrap_or_default();
        let mut accounts: BTreeMap<String, Account> = BTreeMap::new();
        for item in self.accounts.iter() {
            let (key, raw) = item?;
            let account = decode::<Account>(&key, &raw)?;
            if !account.reserved.is_zero() {
                let name = String::from_utf8_lossy(&key).into_owned();
                accounts.insert(
                    name,
                    Account {
                        reserved: Micros::ZERO,
                        ..account
                    },
                );
            }
        }
        let mut batch = Batch::default();
        for item in self.reservations.iter() {
            let (key, raw) = item?;
            let mut reservation: Reservation = decode(&key, &raw)?;
            for name in &reservation.accounts {
                if !accounts.contains_key(name) {
                    let stored = self.shared_account(name)?.1;
                    accounts.insert(
                        name.clone(),
                        Account {
                            reserved: Micros::ZERO,
                            ..stored
                        },
                    );
                }
            }
            let mut seen: Vec<&String> = Vec::new();
            match self.settlements.get(&key)? {
                Some(charged) => {
                    let charged: Micros = decode(&key, &charged)?;
                    for name in &reservation.accounts {
                        if !seen.contains(&name) {
                            seen.push(name);
                            let account = accounts.entry(name.clone()).or_default();
                            account.spent = account.spent.saturating_add(charged);
                        }
                    }
                    batch.remove(&self.reservations, key.to_vec());
                    batch.remove(&self.settlements, key.to_vec());
                }
                None => {
                    for name in &reservation.accounts {
                        if !seen.contains(&name) {
                            seen.push(name);
                            let account = accounts.entry(name.clone()).or_default();
                            account.reserved = account.reserved.saturating_add(reservation.amount);
                        }
                    }
                    reservation.booked_by = Some(by.clone());
                    batch.put(&self.reservations, key.to_vec(), encode(&reservation)?);
                }
            }
        }
        for (name, account) in &accounts {
            batch.put(&self.accounts, name.as_bytes(), encode(account)?);
        }
        batch.put(marks, SHARED_MARK, Vec::new());
        self.db.write_batch(&batch)?;
        Ok(())
    }
}
