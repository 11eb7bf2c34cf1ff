//! The migrations runner: reads the numbered files in `migrations/` (embedded at build time and
//! listed in `MIGRATION_FILES`) and applies the steps between the store's schema version and the
//! code's (`SCHEMA_VERSION`), before any tree is opened. It flushes after each migration, and
//! refuses a store with a newer schema (`StoreError::TooNew`) or data without a version. The steps
//! are idempotent: `ensure_tree`, `rename_tree`, `drop_tree`, `set_default`, `pack_into`.
//!
//! Most versions since 6 change what older code would misread, so older code refuses the store: 6
//! drops the `proposals` tree (a waiting proposal lives in its agent's record, and the episode
//! keeps what ran); 7 adds `ahead` and `ledger_settlements` (older code would read settlements as
//! open calls and charge them again); 8 re-stores workspace files and undo records as frames of the
//! store's own compression, packing into a new tree and renaming it back so a crash between the
//! steps frames nothing twice; 9 adds `audit_chunks` and `episode_chunks`; 10 adds `agent_briefs`;
//! 11 packs JSON records with the store's dictionary.

use serde::Deserialize;
use serde_json::Value;

use super::StoreError;

/// The schema this code reads and writes.
pub const SCHEMA_VERSION: u32 = 11;

const SCHEMA_KEY: &[u8] = b"schema_version";

const MIGRATION_FILES: &[(&str, &str)] = &[
    (
        "0001_initial.toml",
        include_str!("../../migrations/0001_initial.toml"),
    ),
    (
        "0002_workspace_and_usage.toml",
        include_str!("../../migrations/0002_workspace_and_usage.toml"),
    ),
    (
        "0003_discord_threads.toml",
        include_str!("../../migrations/0003_discord_threads.toml"),
    ),
    (
        "0004_spend_ledger.toml",
        include_str!("../../migrations/0004_spend_ledger.toml"),
    ),
    (
        "0005_policy_and_subagents.toml",
        include_str!("../../migrations/0005_policy_and_subagents.toml"),
    ),
    (
        "0006_proposals_live_in_agents.toml",
        include_str!("../../migrations/0006_proposals_live_in_agents.toml"),
    ),
    (
        "0007_writes_ahead_and_settlements.toml",
        include_str!("../../migrations/0007_writes_ahead_and_settlements.toml"),
    ),
    (
        "0008_values_packed_by_the_store.toml",
        include_str!("../../migrations/0008_values_packed_by_the_store.toml"),
    ),
    (
        "0009_records_folded_into_chunks.toml",
        include_str!("../../migrations/0009_records_folded_into_chunks.toml"),
    ),
    (
        "0010_agent_briefs_apart.toml",
        include_str!("../../migrations/0010_agent_briefs_apart.toml"),
    ),
    (
        "0011_records_packed_with_a_dictionary.toml",
        include_str!("../../migrations/0011_records_packed_with_a_dictionary.toml"),
    ),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Migration {
    pub version: u32,
    pub description: String,
    pub steps: Vec<MigrationStep>,
}

/// The operations a migration file may use; each is idempotent so a crash mid-migration can rerun it.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum MigrationStep {
    EnsureTree {
        tree: String,
    },
    /// Copies every record, flushes, then drops the old tree.
    RenameTree {
        from: String,
        to: String,
    },
    /// Drops a tree and its records, if it exists.
    DropTree {
        tree: String,
    },
    /// Copies every value of `from`, framed by `packed::pack_any`, into `to` (emptied first),
    /// flushes, then drops `from`; nothing when `from` is gone (a rerun after the drop). Followed
    /// by a `rename_tree` back, it frames a tree's values once whatever crash comes between.
    PackInto {
        from: String,
        to: String,
    },
    /// Sets `pointer` in every JSON record of `tree` where it is missing.
    SetDefault {
        tree: String,
        pointer: String,
        value: Value,
    },
}

pub fn migrations() -> Result<Vec<Migration>, StoreError> {
    let mut list = Vec::new();
    for (index, (file, text)) in MIGRATION_FILES.iter().enumerate() {
        let migration: Migration = toml::from_str(text).map_err(|e| {
            StoreError::Migration(format!("migrations/{file} is not a valid migration: {e}"))
        })?;
        if migration.version as usize != index + 1 {
            return Err(StoreError::Migration(format!(
                "migrations/{file} declares version {} but is number {}",
                migration.version,
                index + 1
            )));
        }
        list.push(migration);
    }
    Ok(list)
}

pub fn schema_version(db: &crate::store::kv::Db) -> Result<Option<u32>, StoreError> {
    let Some(raw) = db.get(SCHEMA_KEY)? else {
        return Ok(None);
    };
    let bytes: [u8; 4] = raw
        .as_ref()
        .try_into()
        .map_err(|_| StoreError::Corrupt("schema_version is not a 4-byte integer".into()))?;
    Ok(Some(u32::from_be_bytes(bytes)))
}

pub fn set_schema_version(db: &crate::store::kv::Db, version: u32) -> Result<(), StoreError> {
    db.insert(SCHEMA_KEY, &version.to_be_bytes())?;
    Ok(())
}

/// Brings the store to `SCHEMA_VERSION`, or refuses a store written by newer code.
/// Returns the versions applied.
pub fn run(db: &crate::store::kv::Db) -> Result<Vec<u32>, StoreError> {
    let current = schema_version(db)?;
    let fresh = current.is_none() && db.tree_names()?.len() <= 1 && db.is_empty();
    let current = current.unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    if current == 0 && !fresh {
        return Err(StoreError::Corrupt(
            "the store has data but no schema version; refusing to guess its layout".into(),
        ));
    }
    let mut applied = Vec::new();
    for migration in migrations()? {
        if migration.version <= current {
            continue;
        }
        tracing::info!(
            version = migration.version,
            description = %migration.description,
            "applying store migration"
        );
        for step in &migration.steps {
            apply(db, step)?;
        }
        set_schema_version(db, migration.version)?;
        db.flush()?;
        applied.push(migration.version);
    }
    Ok(applied)
}

fn has_tree(db: &crate::store::kv::Db, name: &str) -> Result<bool, StoreError> {
    Ok(db
        .tree_names()?
        .iter()
        .any(|n| n.as_ref() == name.as_bytes()))
}

fn apply(db: &crate::store::kv::Db, step: &MigrationStep) -> Result<(), StoreError> {
    match step {
        MigrationStep::EnsureTree { tree } => {
            db.open_tree(tree)?;
        }
        MigrationStep::RenameTree { from, to } => {
            if has_tree(db, from)? {
                let source = db.open_tree(from)?;
                let target = db.open_tree(to)?;
                for item in source.iter() {
                    let (key, value) = item?;
                    target.insert(key, value)?;
                }
                target.flush()?;
                db.drop_tree(from)?;
            } else {
                db.open_tree(to)?;
            }
        }
        MigrationStep::DropTree { tree } => {
            if has_tree(db, tree)? {
                db.drop_tree(tree)?;
            }
        }
        MigrationStep::PackInto { from, to } => {
            if has_tree(db, from)? {
                let source = db.open_tree(from)?;
                let target = db.open_tree(to)?;
                target.clear()?;
                for item in source.iter() {
                    let (key, value) = item?;
                    let framed = super::packed::pack_any(value.to_vec())
                        .map_err(|e| StoreError::Migration(format!("{from}: {e}")))?;
                    target.insert(key, framed)?;
                }
                target.flush()?;
                db.drop_tree(from)?;
            }
        }
        MigrationStep::SetDefault {
            tree,
            pointer,
            value,
        } => {
            let tree = db.open_tree(tree)?;
            let (parent, field) = pointer.rsplit_once('/').ok_or_else(|| {
                StoreError::Migration(format!("pointer {pointer:?} must start with '/'"))
            })?;
            for item in tree.iter() {
                let (key, stored) = item?;
                let corrupt = |e: String| {
                    StoreError::Corrupt(format!("record {:?}: {e}", String::from_utf8_lossy(&key)))
                };
                let raw = super::packed::unpack(&stored).map_err(|e| corrupt(e.to_string()))?;
                let mut record: Value =
                    serde_json::from_slice(&raw).map_err(|e| corrupt(e.to_string()))?;
                let Some(Value::Object(target)) = record.pointer_mut(parent) else {
                    continue;
                };
                if !target.contains_key(field) {
                    target.insert(field.to_string(), value.clone());
                    tree.insert(key, super::packed::pack(serde_json::to_vec(&record)?))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_migrations_are_numbered_and_end_at_the_schema_version() {
        let list = migrations().unwrap();
        assert_eq!(list.last().unwrap().version, SCHEMA_VERSION);
        assert!(list.iter().all(|m| !m.steps.is_empty()));
    }
}
