//! Files put into an agent's workspace from outside its loop (the Agent Protocol's uploads), held
//! to `write_file`'s caps and written by whoever runs the agent: its actor, between two of its
//! messages, when it is live; the supervisor, under the lock every start takes, when it rests.
//! Either way the write carries the agent's lease, so an upload never lands in the middle of a
//! command's changes, never beside a second actor, and never from a process that does not run
//! the agent.
//!
//! The caps are checked where the file is written, against the workspace as it is then, so two
//! uploads racing cannot together pass a cap that each passed alone.

use crate::config::WorkspaceConfig;
use crate::core::audit::AuditEntry;
use crate::store::{Fence, Store, StoreError};

/// A file a person gives an agent: where it goes (already normalised and confined to the
/// workspace), its bytes, and the audit entry that names who gave it.
pub struct Upload {
    pub path: String,
    pub contents: Vec<u8>,
    pub entry: AuditEntry,
}

/// Why an upload was not written; nothing was.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("'{path}' is {size} bytes; files are limited to {limit} bytes.")]
    FileTooBig { path: String, size: u64, limit: u64 },
    #[error("The workspace would hold {would_hold} bytes; it is limited to {limit} bytes.")]
    WorkspaceFull { would_hold: u64, limit: u64 },
    #[error("The agent does not exist.")]
    NoSuchAgent,
    #[error("Another process runs the agent now; the file was not written here.")]
    Elsewhere,
    #[error("The agent is busy (its mailbox is full, or it is restarting); try again shortly.")]
    Busy,
    #[error("The bot is shutting down; try again when it is back.")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks the caps against the workspace as it is now and writes the file at the agent's
/// `cycle`, with the lease's `fence` when the store is shared. Not flushed.
pub(super) fn put(
    store: &Store,
    limits: &WorkspaceConfig,
    agent: &str,
    cycle: u64,
    upload: Upload,
    fence: Option<Fence>,
) -> Result<(), UploadError> {
    let size = upload.contents.len() as u64;
    if size > limits.max_file_bytes {
        return Err(UploadError::FileTooBig {
            path: upload.path,
            size,
            limit: limits.max_file_bytes,
        });
    }
    let replaced = store.file_size(agent, &upload.path)?.unwrap_or(0);
    let others = store.workspace_bytes(agent)?.saturating_sub(replaced);
    if others + size > limits.max_agent_bytes {
        return Err(UploadError::WorkspaceFull {
            would_hold: others + size,
            limit: limits.max_agent_bytes,
        });
    }
    store.put_file_from_outside(
        agent,
        cycle,
        &upload.path,
        upload.contents,
        &upload.entry,
        fence,
    )?;
    Ok(())
}
