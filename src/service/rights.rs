//! Who may do what with an agent: its owner, the users and roles it is shared with, moderators
//! (Manage Threads) and server admins (Manage Server). Surface-neutral: Discord fills a
//! `Requester` from the interaction's own member data on every click.

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

/// Only the owner and moderators may change who an agent is shared with.
pub fn may_share(binding: &ThreadBinding, requester: &Requester) -> bool {
    requester.user_id == binding.owner_id || requester.manage_threads
}

#[cfg(test)]
mod tests {
    use super::*;

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
