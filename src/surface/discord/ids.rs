//! Versioned component ids: `at1:<action>:<agent>:<cycle>` (or another number an action names), and
//! on a proposal card `:<revision>`, the proposal's edit count, so that a click on a card edited
//! since refers to what it showed. The global interaction handler routes them, so a card keeps
//! working after a restart.
//!
//! A `CardId` fits Discord's 100 characters; `check_click` refuses an approval or an edit made on
//! an older revision of a proposal card. `CardAction` names every button and form the bot makes.

/// Discord's limit on a component's custom_id.
pub const MAX_CUSTOM_ID: usize = 100;
const PREFIX: &str = "at1";

/// What a button or modal on a card asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardAction {
    Approve,
    /// Opens the modal that asks for N.
    ApproveN,
    Deny,
    /// Opens the feedback modal.
    Feedback,
    SelfCritique,
    /// The submitted Approve ×N modal.
    ApproveNSubmit,
    /// The submitted feedback modal.
    FeedbackSubmit,
    /// Opens the form that edits the command's arguments.
    Edit,
    /// The submitted edit form.
    EditSubmit,
    /// On `/memory search` and `/memory list`: forget the memory whose id is in the `cycle`
    /// slot, kept under the place whose key is in the agent slot.
    MemoryForget,
    /// Pin that memory (recalled in every cycle).
    MemoryPin,
    /// Unpin it.
    MemoryUnpin,
    /// On `/memory list`: show the page in the `cycle` slot of the place in the agent slot.
    MemoryPage,
    /// On a parked agent's card: go on (the `cycle` slot holds the cycle it parked at).
    ParkContinue,
    /// On a parked agent's card: stay paused until someone resumes it.
    ParkStop,
    /// Raise the agent's budget to the micro-dollars in the `cycle` slot (an absolute target, so a
    /// double click raises once).
    RaiseAgent,
    /// Raise the owner's daily budget, the server's daily or its monthly one, likewise.
    RaiseOwnerDaily,
    RaiseServerDaily,
    RaiseServerMonthly,
    /// Posts the waiting card again at the bottom of the thread.
    Repost,
    /// On `/agent audit`: show the trail's page in the `cycle` slot (0 is the newest).
    AuditPage,
    /// Opens the private menu of rules the card's command allows.
    Remember,
    /// A choice in that menu: approve, and keep the rule.
    RememberChoose,
    /// On `/agent rules`: revoke rule `<agent>.<cycle>` (the card it was made on).
    RevokeRule,
    /// On the stuck panel: drop the proposal and ask the model again.
    Rethink,
    /// On the stuck panel: do not run the command, and go on.
    Skip,
    /// On `/agent delete`'s private confirmation: delete the agent for good.
    DeleteAgent,
    /// On `/agent rewind`'s private confirmation: rewind to the cycle in the `cycle` slot.
    RewindAgent,
}

impl CardAction {
    fn code(self) -> &'static str {
        match self {
            CardAction::Approve => "ok",
            CardAction::ApproveN => "okn",
            CardAction::Deny => "no",
            CardAction::Feedback => "fb",
            CardAction::SelfCritique => "sc",
            CardAction::ApproveNSubmit => "okn-m",
            CardAction::FeedbackSubmit => "fb-m",
            CardAction::Edit => "ed",
            CardAction::EditSubmit => "ed-m",
            CardAction::MemoryForget => "mf",
            CardAction::MemoryPin => "mp",
            CardAction::MemoryUnpin => "mu",
            CardAction::MemoryPage => "mpg",
            CardAction::ParkContinue => "pk-go",
            CardAction::ParkStop => "pk-stop",
            CardAction::RaiseAgent => "ra-a",
            CardAction::RaiseOwnerDaily => "ra-u",
            CardAction::RaiseServerDaily => "ra-gd",
            CardAction::RaiseServerMonthly => "ra-gm",
            CardAction::AuditPage => "au",
            CardAction::Repost => "rp",
            CardAction::Remember => "rm",
            CardAction::RememberChoose => "rm-c",
            CardAction::RevokeRule => "rv",
            CardAction::Rethink => "rt",
            CardAction::Skip => "sk",
            CardAction::DeleteAgent => "del",
            CardAction::RewindAgent => "rwd",
        }
    }

    fn from_code(code: &str) -> Option<Self> {
        Some(match code {
            "ok" => CardAction::Approve,
            "okn" => CardAction::ApproveN,
            "no" => CardAction::Deny,
            "fb" => CardAction::Feedback,
            "sc" => CardAction::SelfCritique,
            "okn-m" => CardAction::ApproveNSubmit,
            "fb-m" => CardAction::FeedbackSubmit,
            "ed" => CardAction::Edit,
            "ed-m" => CardAction::EditSubmit,
            "mf" => CardAction::MemoryForget,
            "mp" => CardAction::MemoryPin,
            "mu" => CardAction::MemoryUnpin,
            "mpg" => CardAction::MemoryPage,
            "pk-go" => CardAction::ParkContinue,
            "pk-stop" => CardAction::ParkStop,
            "ra-a" => CardAction::RaiseAgent,
            "ra-u" => CardAction::RaiseOwnerDaily,
            "ra-gd" => CardAction::RaiseServerDaily,
            "ra-gm" => CardAction::RaiseServerMonthly,
            "au" => CardAction::AuditPage,
            "rp" => CardAction::Repost,
            "rm" => CardAction::Remember,
            "rm-c" => CardAction::RememberChoose,
            "rv" => CardAction::RevokeRule,
            "rt" => CardAction::Rethink,
            "sk" => CardAction::Skip,
            "del" => CardAction::DeleteAgent,
            "rwd" => CardAction::RewindAgent,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardId {
    pub action: CardAction,
    pub agent: String,
    pub cycle: u64,
    /// Which version of the proposal the card showed (`None` on ids without one).
    pub revision: Option<u32>,
}

impl CardId {
    pub fn new(action: CardAction, agent: &str, cycle: u64) -> Self {
        CardId {
            action,
            agent: agent.to_string(),
            cycle,
            revision: None,
        }
    }

    /// This id for the proposal's `revision`.
    pub fn at_revision(mut self, revision: u32) -> Self {
        self.revision = Some(revision);
        self
    }

    /// The id of another action on the same card, at the same revision.
    pub fn for_action(&self, action: CardAction) -> Self {
        CardId {
            action,
            ..self.clone()
        }
    }

    pub fn encode(&self) -> String {
        let id = format!(
            "{PREFIX}:{}:{}:{}",
            self.action.code(),
            self.agent,
            self.cycle
        );
        match self.revision {
            Some(revision) => format!("{id}:{revision}"),
            None => id,
        }
    }

    /// Reads an id; `None` for ids of other versions or other bots' components.
    pub fn parse(raw: &str) -> Option<CardId> {
        let mut parts = raw.split(':');
        if parts.next()? != PREFIX {
            return None;
        }
        let action = CardAction::from_code(parts.next()?)?;
        let agent = parts.next()?;
        let cycle = parts.next()?.parse().ok()?;
        let revision = match parts.next() {
            Some(revision) => Some(revision.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() || agent.is_empty() || agent.len() > 40 {
            return None;
        }
        let id = CardId::new(action, agent, cycle);
        Some(match revision {
            Some(revision) => id.at_revision(revision),
            None => id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_fit_discord_limits() {
        for action in [
            CardAction::Approve,
            CardAction::ApproveN,
            CardAction::Deny,
            CardAction::Feedback,
            CardAction::SelfCritique,
            CardAction::ApproveNSubmit,
            CardAction::FeedbackSubmit,
            CardAction::Edit,
            CardAction::EditSubmit,
            CardAction::MemoryForget,
            CardAction::MemoryPin,
            CardAction::MemoryUnpin,
            CardAction::MemoryPage,
            CardAction::ParkContinue,
            CardAction::ParkStop,
            CardAction::RaiseAgent,
            CardAction::RaiseOwnerDaily,
            CardAction::RaiseServerDaily,
            CardAction::RaiseServerMonthly,
            CardAction::Repost,
            CardAction::AuditPage,
            CardAction::Remember,
            CardAction::RememberChoose,
            CardAction::RevokeRule,
            CardAction::Rethink,
            CardAction::Skip,
            CardAction::DeleteAgent,
            CardAction::RewindAgent,
        ] {
            let id = CardId::new(action, "0123456789ab", u64::MAX);
            let raw = id.encode();
            assert!(raw.chars().count() <= MAX_CUSTOM_ID, "{raw}");
            assert_eq!(CardId::parse(&raw), Some(id.clone()));
            let revised = id.at_revision(u32::MAX);
            let raw = revised.encode();
            assert!(raw.chars().count() <= MAX_CUSTOM_ID, "{raw}");
            assert_eq!(CardId::parse(&raw), Some(revised));
        }
        assert_eq!(CardId::parse("at1:ok:abc:7").unwrap().cycle, 7);
        assert_eq!(CardId::parse("at1:ok:abc:7").unwrap().revision, None);
        assert_eq!(CardId::parse("at1:ok:abc:7:8").unwrap().revision, Some(8));
        for bad in [
            "at2:ok:abc:7",
            "at1:zz:abc:7",
            "at1:ok::7",
            "at1:ok:abc:x",
            "at1:ok:abc:7:x",
            "at1:ok:abc:7:8:9",
            "hello",
        ] {
            assert_eq!(CardId::parse(bad), None, "{bad}");
        }
    }
}
