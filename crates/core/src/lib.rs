//! The pure agent core: no I/O, no async, no clock reads, no randomness. Everything the loop decides
//! is a function of the state and one event; the runtime carries out the returned effects.

pub mod audit;
pub mod brake;
pub mod budget;
pub mod commands;
pub mod decision;
pub mod digest;
pub mod event;
pub mod expiry;
pub mod history;
pub mod memory;
pub mod message;
pub mod paths;
pub mod person;
pub mod policy;
pub mod prompt;
pub mod quorum;
pub mod repair;
pub mod reply;
pub mod rules;
pub mod state;
pub mod step;
pub mod taint;
pub mod text;
pub mod transcript;
pub mod usage;
pub mod watchdog;

#[cfg(test)]
mod step_audit_tests;
#[cfg(test)]
mod step_edit_tests;
#[cfg(test)]
mod step_expiry_tests;
#[cfg(test)]
mod step_rules_tests;
#[cfg(test)]
mod step_stuck_tests;
#[cfg(test)]
mod step_taint_tests;
#[cfg(test)]
mod step_tests;
