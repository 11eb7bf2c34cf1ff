//! Who may do what with an agent: its owner, the users and roles it is shared with, moderators
//! (Manage Threads) and server admins (Manage Server). Surface-neutral: Discord fills a `Requester`
//! from the interaction's own member data on every click.
//!
//! `may_decide`, `may_share`, `may_set_agent_budget` and `is_owner_or_admin` read a
//! `ThreadBinding`; `may_write_server_memory` allows admins and the writer roles the store keeps
//! per server (`Store::memory_writers`). `shares_in` reads the users and roles a start names to
//! share with.

use crate::store::ThreadBinding;

/// The clicking member, as the interaction describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub user_id: u64,
    pub role_ids: Vec<u64>,
    pub manage_threads: bool,
    /// Server admins (Manage Server) set the user and server budgets.
    pub manage_guild: bool,
}

pub fn may_decide(binding: &ThreadBinding, requester: &Requester) -> bool {
    requester.user_id == binding.owner_id
        || requester.manage_threads
        || binding.shared_users.contains(&requester.user_id)
        || requester
            .role_ids
            .iter()
            .any(|role| binding.shared_roles.contains(role))
}

/// Who may change an agent's own budget: its owner (up to the configured maximum), moderators and admins.
pub fn may_set_agent_budget(binding: &ThreadBinding, requester: &Requester) -> bool {
    may_share(binding, requester) || requester.manage_guild
}

/// The owner or a server admin (Manage Server): for what cannot be undone lightly, deleting an
/// agent or rewinding it.
pub fn is_owner_or_admin(binding: &ThreadBinding, requester: &Requester) -> bool {
    requester.user_id == binding.owner_id || requester.manage_guild
}

/// Who may add to, pin, unpin and forget a server's shared memories: its admins (Manage Server)
/// and the roles they named writers.
pub fn may_write_server_memory(requester: &Requester, writer_roles: &[u64]) -> bool {
    requester.manage_guild
        || requester
            .role_ids
            .iter()
            .any(|role| writer_roles.contains(role))
}

/// The most roles a server may name as writers of its shared memories.
pub const MAX_MEMORY_WRITER_ROLES: usize = 25;

/// Only the owner and moderators may change who an agent is shared with.
pub fn may_share(binding: &ThreadBinding, requester: &Requester) -> bool {
    requester.user_id == binding.owner_id || requester.manage_threads
}

/// The most users and roles one agent is shared with at its start.
pub const MAX_SHARES: usize = 25;

/// Why the users and roles a start names to share with were refused; its text tells the person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// A word that is no mention at all (the first 40 characters of it).
    #[error("`{0}` is not a mention: name people and roles with @ (e.g. @alice @reviewers).")]
    NotAMention(String),
    /// A mention whose id is not a number (the first 40 characters of it).
    #[error("`{0}` is not a mention of a user or a role.")]
    BadId(String),
    /// More users and roles than `MAX_SHARES`.
    #[error("An agent can be shared with at most {MAX_SHARES} users and roles at its start.")]
    TooMany,
}

/// The users and roles named in `text` by their mentions (`<@id>`, `<@!id>`, `<@&id>`), as
/// `/agent start share_with:` takes them; anything else in it is refused, saying what.
pub fn shares_in(text: &str) -> Result<(Vec<u64>, Vec<u64>), ShareError> {
    let (mut users, mut roles) = (Vec::new(), Vec::new());
    for word in text.split([' ', ',', '\n', '\t']).filter(|w| !w.is_empty()) {
        let inner = word
            .strip_prefix('<')
            .and_then(|w| w.strip_suffix('>'))
            .and_then(|w| w.strip_prefix('@'));
        let (list, id) = match inner {
            Some(role) if role.starts_with('&') => (&mut roles, &role[1..]),
            Some(user) => (&mut users, user.strip_prefix('!').unwrap_or(user)),
            None => {
                return Err(ShareError::NotAMention(
                    word.chars().take(40).collect::<String>(),
                ))
            }
        };
        let id: u64 = id
            .parse()
            .map_err(|_| ShareError::BadId(word.chars().take(40).collect::<String>()))?;
        if !list.contains(&id) {
            list.push(id);
        }
    }
    if users.len() + roles.len() > MAX_SHARES {
        return Err(ShareError::TooMany);
    }
    Ok((users, roles))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_read_from_mentions_and_anything_else_is_refused() {
        assert_eq!(
            shares_in("<@11> <@!12>, <@&500>\n<@11>"),
            Ok((vec![11, 12], vec![500]))
        );
        assert_eq!(shares_in("  "), Ok((vec![], vec![])));
        assert!(shares_in("<@11> bob")
            .unwrap_err()
            .to_string()
            .contains("`bob` is not a mention"));
        assert!(shares_in("<@x1>")
            .unwrap_err()
            .to_string()
            .contains("not a mention"));
        assert!(shares_in("<#123>")
            .unwrap_err()
            .to_string()
            .contains("not a mention"));
        let many: String = (1..=26).map(|i| format!("<@{i}> ")).collect();
        assert!(shares_in(&many)
            .unwrap_err()
            .to_string()
            .contains("at most 25"));
    }

    fn binding() -> ThreadBinding {
        ThreadBinding {
            agent_id: "a".into(),
            guild_id: 1,
            parent_channel_id: 2,
            thread_id: 3,
            owner_id: 10,
            shared_users: vec![11],
            shared_roles: vec![500],
            card: None,
        }
    }

    fn requester(user_id: u64, role_ids: &[u64], manage_threads: bool) -> Requester {
        Requester {
            user_id,
            role_ids: role_ids.to_vec(),
            manage_threads,
            manage_guild: false,
        }
    }

    #[test]
    fn decision_rights_matrix() {
        let b = binding();
        let cases = [
            (requester(10, &[], false), true, true),
            (requester(11, &[], false), true, false),
            (requester(12, &[500], false), true, false),
            (requester(13, &[501], false), false, false),
            (requester(14, &[], true), true, true),
        ];
        for (who, decide, share) in cases {
            assert_eq!(may_decide(&b, &who), decide, "{who:?}");
            assert_eq!(may_share(&b, &who), share, "{who:?}");
            assert_eq!(may_set_agent_budget(&b, &who), share, "{who:?}");
        }
        let admin = Requester {
            manage_guild: true,
            ..requester(15, &[], false)
        };
        assert!(may_set_agent_budget(&b, &admin));
        assert!(!may_decide(&b, &admin));
    }
}
