//! Which of Discord's gateway shards this process serves (`Shards`, from `run --shards A..B
//! --total-shards N`; `A..=B` and a single `A` are read too), and the start-up check that its store
//! holds no agent of a guild another process serves.
//!
//! A guild belongs to shard `(guild_id >> 22) % N`, as Discord computes it (`shard_of`, `serves`).
//! `serenity_range` converts to serenity's `start_shard_range`, which takes its range's end as the
//! last shard, included. With sled, each process has its own store, and `check_store` makes `run`
//! refuse one holding an agent of a server this process does not serve, since that agent's clicks
//! would reach another process. With PostgreSQL, every process shares the store, and agents follow
//! their shard instead: a process resumes and adopts only the agents of the servers it serves
//! (`serves_agent`), each under its lease (see `runtime::supervisor`), so that changing
//! `--total-shards` moves every agent to the process now serving its server.

use std::fmt;
use std::ops::Range;

use crate::store::{Store, StoreError};

/// Why `--shards` and `--total-shards` describe no shards this process can serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardArgsError {
    /// `--shards` was given without the total it is a part of.
    #[error("--shards needs --total-shards N as well")]
    RangeWithoutTotal,
    /// `--total-shards 0`.
    #[error("--total-shards must be at least 1")]
    NoShards,
    /// `--shards` in none of the forms it is read in (the text as given).
    #[error("--shards {0:?} is not a shard range: write A..B (B excluded), A..=B or A")]
    NotARange(String),
    /// A range that is empty or reaches past the last shard.
    #[error(
        "--shards {range} does not fit in --total-shards {total}: shards are numbered 0 to {last}"
    )]
    DoesNotFit {
        range: String,
        total: u32,
        last: u32,
    },
}

/// Why `run` refuses the store it was given with this process's shards.
#[derive(Debug, thiserror::Error)]
pub enum ShardStoreError {
    /// The store's bindings could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store holds agents of servers another process serves; one of them is named.
    #[error(
        "the store in {dir} holds {count} agent(s) of servers this process does not serve with {shards} \
         (agent {agent} of server {guild} is on shard {shard}). Each process keeps the store it was started \
         with: run it again with the --shards and --total-shards it had"
    )]
    StrayAgents {
        dir: String,
        count: usize,
        shards: Shards,
        agent: String,
        guild: u64,
        shard: u32,
    },
}

/// The shards `first..end` (end excluded) out of `total`. Discord sends a guild's events to one
/// shard, `(guild_id >> 22) % total`, so every agent lives in the process serving its guild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shards {
    pub first: u32,
    pub end: u32,
    pub total: u32,
}

impl Default for Shards {
    fn default() -> Self {
        Shards {
            first: 0,
            end: 1,
            total: 1,
        }
    }
}

impl fmt::Display for Shards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.end == self.first + 1 {
            write!(f, "shard {} of {}", self.first, self.total)
        } else {
            write!(f, "shards {}..{} of {}", self.first, self.end, self.total)
        }
    }
}

impl Shards {
    /// From `--shards` (`A..B` with B excluded, `A..=B`, or one shard `A`) and `--total-shards`.
    /// A total alone means every shard in this process; neither means Discord's single shard.
    pub fn from_args(range: Option<&str>, total: Option<u32>) -> Result<Shards, ShardArgsError> {
        let Some(total) = total else {
            return match range {
                Some(_) => Err(ShardArgsError::RangeWithoutTotal),
                None => Ok(Shards::default()),
            };
        };
        if total == 0 {
            return Err(ShardArgsError::NoShards);
        }
        let (first, end) = match range {
            None => (0, total),
            Some(text) => parse_range(text)?,
        };
        if first >= end || end > total {
            return Err(ShardArgsError::DoesNotFit {
                range: range.unwrap_or_default().to_string(),
                total,
                last: total - 1,
            });
        }
        Ok(Shards { first, end, total })
    }

    /// The shard Discord sends `guild`'s events to.
    pub fn shard_of(&self, guild: u64) -> u32 {
        ((guild >> 22) % u64::from(self.total)) as u32
    }

    pub fn serves(&self, guild: u64) -> bool {
        (self.first..self.end).contains(&self.shard_of(guild))
    }

    /// The range serenity's `start_shard_range` wants: its end is the last shard, included.
    pub fn serenity_range(&self) -> Range<u32> {
        self.first..self.end - 1
    }

    /// Refuses a store holding agents of guilds this process does not serve: their clicks and
    /// messages would go to another process, which knows nothing of them, while this one kept
    /// running them. That happens when the layout changes or two processes swap stores.
    pub fn check_store(&self, store: &Store) -> Result<(), ShardStoreError> {
        // A shared store holds every process's agents; each runs those of its own servers.
        if store.backend() == crate::store::kv::Backend::Postgres {
            return Ok(());
        }
        let bindings = store.bindings()?;
        let strays: Vec<_> = bindings
            .iter()
            .filter(|b| !self.serves(b.guild_id))
            .collect();
        let Some(first) = strays.first() else {
            return Ok(());
        };
        Err(ShardStoreError::StrayAgents {
            dir: store.dir().display().to_string(),
            count: strays.len(),
            shards: *self,
            agent: first.agent_id.clone(),
            guild: first.guild_id,
            shard: self.shard_of(first.guild_id),
        })
    }
}

impl Shards {
    /// Whether this process runs `agent`: one living in a thread of a server it serves, or one
    /// living in no thread (started over the Agent Protocol), which any process may run under
    /// its lease.
    pub fn serves_agent(&self, store: &Store, agent: &crate::core::state::AgentState) -> bool {
        match store.binding(&agent.id) {
            Ok(Some(binding)) => self.serves(binding.guild_id),
            Ok(None) => true,
            Err(error) => {
                tracing::error!(agent = %agent.id, %error, "cannot read where an agent lives");
                false
            }
        }
    }
}

fn parse_range(text: &str) -> Result<(u32, u32), ShardArgsError> {
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| ShardArgsError::NotARange(text.to_string()))
    };
    if let Some((a, b)) = text.split_once("..=") {
        Ok((number(a)?, number(b)?.saturating_add(1)))
    } else if let Some((a, b)) = text.split_once("..") {
        Ok((number(a)?, number(b)?))
    } else {
        let shard = number(text)?;
        Ok((shard, shard.saturating_add(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_users_write_them_and_checked_against_the_total() {
        let shards = |r: Option<&str>, t: Option<u32>| Shards::from_args(r, t);
        assert_eq!(shards(None, None), Ok(Shards::default()));
        assert_eq!(
            shards(Some("2..4"), Some(8)),
            Ok(Shards {
                first: 2,
                end: 4,
                total: 8
            })
        );
        assert_eq!(
            shards(Some("2..=3"), Some(8)),
            shards(Some("2..4"), Some(8))
        );
        assert_eq!(shards(Some("5"), Some(8)), shards(Some("5..6"), Some(8)));
        assert_eq!(shards(None, Some(4)).unwrap().end, 4);
        let err = shards(Some("6..9"), Some(8)).unwrap_err().to_string();
        assert!(err.contains("numbered 0 to 7"), "{err}");
        assert!(shards(Some("3..3"), Some(8)).is_err());
        assert!(shards(Some("a..b"), Some(8))
            .unwrap_err()
            .to_string()
            .contains("not a shard range"));
        assert!(shards(Some("0..1"), None)
            .unwrap_err()
            .to_string()
            .contains("--total-shards"));
        assert!(shards(None, Some(0)).is_err());
    }

    #[test]
    fn a_guild_belongs_to_the_shard_discord_computes_for_it() {
        let two = Shards {
            first: 1,
            end: 2,
            total: 2,
        };
        // Discord's formula: (guild_id >> 22) % num_shards.
        assert_eq!(two.shard_of(41771983423143937), 0);
        assert_eq!(two.shard_of(41771983423143937 + (1 << 22)), 1);
        assert!(two.serves(1 << 22));
        assert!(!two.serves(2 << 22));
        assert_eq!(two.serenity_range(), 1..1);
        assert_eq!(two.to_string(), "shard 1 of 2");
    }
}
