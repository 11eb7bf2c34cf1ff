//! Taking a lock whose holder panicked: the data behind every lock here stays consistent at each
//! step (a panic mid-update is caught where it happens), so a poisoned lock is used as it is
//! rather than passing the panic on to every later caller.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `Mutex::lock`, recovering the guard from a holder's panic.
pub trait LockRecovered<T: ?Sized> {
    fn lock_recovered(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockRecovered<T> for Mutex<T> {
    fn lock_recovered(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `RwLock::read` and `RwLock::write`, recovering the guard from a holder's panic.
pub trait RwLockRecovered<T: ?Sized> {
    fn read_recovered(&self) -> RwLockReadGuard<'_, T>;
    fn write_recovered(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockRecovered<T> for RwLock<T> {
    fn read_recovered(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_recovered(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_whose_holder_panicked_is_taken_with_the_data_as_it_was_left() {
        let counter = std::sync::Arc::new(Mutex::new(1));
        let held = counter.clone();
        let panicked = std::thread::spawn(move || {
            let mut guard = held.lock().unwrap();
            *guard = 2;
            panic!("the holder fails mid-way");
        })
        .join();
        assert!(panicked.is_err());
        assert!(counter.is_poisoned());
        assert_eq!(*counter.lock_recovered(), 2);

        let table = std::sync::Arc::new(RwLock::new(vec![1]));
        let writer = table.clone();
        let _ = std::thread::spawn(move || {
            let mut guard = writer.write().unwrap();
            guard.push(2);
            panic!("the writer fails");
        })
        .join();
        assert!(table.is_poisoned());
        table.write_recovered().push(3);
        assert_eq!(*table.read_recovered(), vec![1, 2, 3]);
    }
}
