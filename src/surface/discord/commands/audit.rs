//! `/agent audit`: the agent's audit trail (who decided, edited or changed what, and when), a page
//! at a time, privately, with Newer and Older buttons that turn the page in place.
//!
//! Only the agent's deciders may read it. The page buttons (`CardAction::AuditPage`, the page in
//! the id's number slot) check the rights again on each click and update the message in the
//! acknowledgement itself.

use poise::serenity_prelude as serenity;
use serenity::{
    ButtonStyle, ComponentInteraction, CreateActionRow, CreateButton, CreateInteractionResponse,
    CreateInteractionResponseMessage,
};

use super::{thread_agent, Ctx, Data, Error};
use crate::core::state::AgentState;
use crate::service::rights::{may_decide, Requester};
use crate::service::{UserError, NOT_ALLOWED};
use crate::store::Store;
use crate::surface::discord::cards::message_text;
use crate::surface::discord::ids::{CardAction, CardId};
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::{author, ephemeral, something_went_wrong, Interaction};

/// Show who approved, denied, edited or changed what, and when (newest first).
#[poise::command(slash_command, guild_only)]
pub(super) async fn audit(
    ctx: Ctx<'_>,
    #[description = "Which page, from 1 (the newest entries)"]
    #[min = 1]
    page: Option<u32>,
) -> Result<(), Error> {
    let (binding, state) = thread_agent(ctx).await?;
    if !may_decide(&binding, &author(ctx)) {
        return Err(UserError::new(NOT_ALLOWED).into());
    }
    let page = page.unwrap_or(1).max(1) as usize - 1;
    let (text, buttons) = audit_view(&ctx.data().app.store, &state, page)?;
    ctx.send(
        poise::CreateReply::default()
            .content(text)
            .components(buttons)
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}

/// A page of the trail and the buttons to its neighbours (disabled at either end).
fn audit_view(
    store: &Store,
    state: &AgentState,
    page: usize,
) -> Result<(String, Vec<CreateActionRow>), Error> {
    let (text, pages) = crate::export::audit_page_text(store, state, page)?;
    let to = |page: usize| CardId::new(CardAction::AuditPage, &state.id, page as u64).encode();
    // The two ids differ even when both buttons are disabled: Discord wants them unique.
    let newer = CreateButton::new(to(page.saturating_sub(1)))
        .label("◀ Newer")
        .style(ButtonStyle::Secondary)
        .disabled(page == 0);
    let older = CreateButton::new(to(page + 1))
        .label("Older ▶")
        .style(ButtonStyle::Secondary)
        .disabled(page + 1 >= pages);
    let buttons = if pages > 1 {
        vec![CreateActionRow::Buttons(vec![newer, older])]
    } else {
        Vec::new()
    };
    Ok((message_text(&text), buttons))
}

/// Newer or Older on an `/agent audit` page: the rights are checked again (they may have changed
/// since), and the private message is turned to the page in place.
pub(crate) async fn on_page_click(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
) {
    let interaction = Interaction::Click(click);
    let store = &data.app.store;
    let allowed = match store.binding(&id.agent) {
        Ok(Some(binding)) => may_decide(&binding, who),
        _ => false,
    };
    let refusal = match store.load_agent_record(&id.agent) {
        Ok(Some(state)) if allowed => Ok(state),
        Ok(Some(_)) => Err(NOT_ALLOWED.to_string()),
        Ok(None) => Err("This agent no longer exists.".to_string()),
        Err(error) => Err(something_went_wrong("an audit page", &error)),
    };
    let state = match refusal {
        Ok(state) => state,
        Err(text) => {
            interaction.respond(http, ephemeral(text)).await;
            return;
        }
    };
    let page = usize::try_from(id.cycle).unwrap_or(usize::MAX);
    match audit_view(store, &state, page) {
        Ok((text, buttons)) => {
            let update = CreateInteractionResponseMessage::new()
                .content(text)
                .components(buttons)
                .allowed_mentions(no_mentions());
            interaction
                .respond(http, CreateInteractionResponse::UpdateMessage(update))
                .await;
        }
        Err(error) => {
            let text = something_went_wrong("an audit page", &error);
            interaction.respond(http, ephemeral(text)).await;
        }
    }
}
