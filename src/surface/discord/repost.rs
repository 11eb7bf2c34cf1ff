//! Re-post: a card buried under a long thread is posted again at the bottom, with the same buttons,
//! and the old message becomes a pointer to it. The card reference moves to the new message, so
//! decisions and edits land there.
//!
//! The click (`CardAction::Repost`) is deferred privately first. `repost_card` posts under a nonce
//! derived from the clicked message, so two clicks make one copy, and tells a click on a card
//! already moved so.

use crate::core::person::Person;
use crate::surface::discord::people::person_of;
use poise::serenity_prelude as serenity;
use serenity::{
    ChannelId, ComponentInteraction, CreateAttachment, CreateInteractionResponse,
    CreateInteractionResponseMessage, CreateMessage, EditAttachments, EditMessage, MessageId,
};

use super::commands::Data;
use super::ids::CardId;
use super::respond::Interaction;
use super::{card_buttons, cards, no_mentions, post, to_embed, DiscordSurface};
use crate::service::UserError;
use crate::tools::preview::preview;
use crate::tools::AgentFiles;

impl DiscordSurface {
    /// Posts `agent`'s waiting card again at the bottom of its thread and turns the card clicked
    /// (`clicked`) into a pointer; `Err` says why not (the card is no longer waiting, it was moved
    /// already, Discord refused the post).
    pub(super) async fn repost_card(
        &self,
        agent: &str,
        cycle: u64,
        clicked: u64,
        by: &Person,
    ) -> Result<(), UserError> {
        const NOT_WAITING: &str = "This card is no longer waiting for a decision.";
        let state = self
            .store
            .load_agent_record(agent)
            .ok()
            .flatten()
            .filter(|state| state.awaits_decision_on(cycle))
            .ok_or(NOT_WAITING)?;
        let proposal = state.progress.pending.as_ref().ok_or(NOT_WAITING)?;
        let mut binding = self.binding(agent).ok_or("This agent no longer exists.")?;
        let old = binding
            .card
            .filter(|card| card.cycle == cycle)
            .ok_or(NOT_WAITING)?;
        if old.message_id != clicked {
            // A second click on the same buried card, once the first moved it.
            return Err("This card was moved to the bottom of the thread already.".into());
        }
        let files = AgentFiles::new(&self.store, agent);
        let changes = preview(&proposal.command, &files);
        let text = cards::proposal_card(
            state.name(),
            proposal,
            changes.as_ref(),
            "Waiting for a decision",
        );
        let mut message = CreateMessage::new()
            .embed(to_embed(text))
            .components(card_buttons(agent, proposal, self.approve_n_default));
        for (name, body) in cards::card_attachments(proposal, changes.as_ref()) {
            message = message.add_file(CreateAttachment::bytes(body.into_bytes(), name));
        }
        // Two clicks on the same buried card carry the same nonce, so Discord keeps one copy.
        let nonce = repost_nonce(agent, cycle, old.message_id);
        let new_id = self
            .send_once(agent, message, nonce)
            .await
            .ok_or("Discord did not take the card; nothing changed.")?;
        // Posting takes a moment: a decision, an edit or the next card may have come meanwhile.
        // Then the copy is out of date, and the card stays where it was.
        let still = self
            .store
            .load_agent_record(agent)
            .ok()
            .flatten()
            .and_then(|now| {
                now.progress
                    .pending
                    .filter(|p| now.progress.phase == state.progress.phase && p.cycle == cycle)
            })
            .is_some_and(|now| now.revision == proposal.revision);
        let binding_now = self.binding(agent);
        let current = binding_now.as_ref().and_then(|b| b.card);
        if current.is_some_and(|card| card.message_id == new_id) {
            // A second click on the same card, whose post Discord answered with the first one's
            // copy (same nonce), after the first click moved the card there.
            return Ok(());
        }
        if !still || current != Some(old) {
            let stale = EditMessage::new()
                .content("This copy is out of date: the card changed while it was moved.")
                .embeds(Vec::new())
                .components(Vec::new())
                .attachments(EditAttachments::new())
                .allowed_mentions(no_mentions());
            let _ = ChannelId::new(binding.thread_id)
                .edit_message(&self.http, MessageId::new(new_id), stale)
                .await;
            return Err("The card changed while it was moved; it stays where it is.".into());
        }
        if let Some(now) = binding_now {
            binding = now;
        }
        self.remember_card(agent, &mut binding, cycle, new_id);
        let link = format!(
            "https://discord.com/channels/{}/{}/{new_id}",
            binding.guild_id, binding.thread_id
        );
        let pointer = EditMessage::new()
            .content(cards::message_text(&format!(
                "⬇️ Cycle {cycle}'s card was moved to the bottom of the thread by {}: {link}",
                by.name
            )))
            .embeds(Vec::new())
            .components(Vec::new())
            .attachments(EditAttachments::new())
            .allowed_mentions(no_mentions());
        if let Err(e) = ChannelId::new(binding.thread_id)
            .edit_message(&self.http, MessageId::new(old.message_id), pointer)
            .await
        {
            tracing::warn!(%agent, error = %e, "cannot turn the old card into a pointer");
        }
        Ok(())
    }
}

/// The nonce of a re-post of the card in `message_id`: short enough for Discord (25 characters).
fn repost_nonce(agent: &str, cycle: u64, message_id: u64) -> String {
    let text = format!("{agent}.{cycle}.{message_id}");
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let nonce = format!("rp{hash:016x}");
    debug_assert!(nonce.len() <= post::NONCE_MAX);
    nonce
}

/// Re-post on a card, after the router checked the clicker's rights: acknowledged at once, since
/// posting may take longer than Discord waits for an answer, then the outcome is told privately.
pub(super) async fn on_repost_click(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
) {
    let interaction = Interaction::Click(click);
    let deferred =
        CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new().ephemeral(true));
    if !interaction.respond(http, deferred).await {
        return;
    }
    let text = match data
        .surface
        .repost_card(
            &id.agent,
            id.cycle,
            click.message.id.get(),
            &person_of(&click.user),
        )
        .await
    {
        Ok(()) => "Moved to the bottom of the thread.".to_string(),
        Err(why) => why.0,
    };
    interaction.follow_up(http, text).await;
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_repost_nonce_fits_and_differs_per_card_message() {
        let a = super::repost_nonce("0123456789ab", 7, 9_000_000_000_000_000_001);
        let b = super::repost_nonce("0123456789ab", 7, 9_000_000_000_000_000_002);
        assert!(a.len() <= super::post::NONCE_MAX);
        assert_ne!(a, b);
    }
}
