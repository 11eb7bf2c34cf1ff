//! The private confirmation button of a command that cannot be undone lightly (`/agent delete`,
//! `/agent rewind`): the first reply with its button, and the click's checks and answers.
//!
//! `ask` sends the question with one danger button; `begin` handles the click (the binding, the
//! rights checked again through `Rights`, the message turned to "…ing" without its button); `end`
//! says how it ended. `bring_to_rest` sends the agent the event that stops it and waits, at most
//! `REST_WAIT`, for its actor to rest.

use poise::serenity_prelude as serenity;
use serenity::{
    ButtonStyle, ComponentInteraction, CreateActionRow, CreateButton, CreateInteractionResponse,
    CreateInteractionResponseMessage, EditInteractionResponse,
};

use super::{Ctx, Data, Error};
use crate::service::rights::Requester;
use crate::service::UserError;
use crate::store::ThreadBinding;
use crate::surface::discord::ids::CardId;
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::{
    ephemeral, note_command_ack, something_went_wrong, Interaction,
};

/// Answers the command privately with `question` and one danger button for `id`.
pub(super) async fn ask(
    ctx: Ctx<'_>,
    question: String,
    id: &CardId,
    label: &str,
) -> Result<(), Error> {
    let button = CreateButton::new(id.encode())
        .label(label)
        .style(ButtonStyle::Danger);
    note_command_ack(ctx);
    ctx.send(
        poise::CreateReply::default()
            .content(question)
            .components(vec![CreateActionRow::Buttons(vec![button])])
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}

/// Who may press a confirmation, and what anyone else is told.
pub(super) struct Rights {
    pub may: fn(&ThreadBinding, &Requester) -> bool,
    pub refusal: &'static str,
}

/// A click on a confirmation: the agent's binding, once the rights are checked again and the
/// message turned into `working` (without its button, so it cannot be pressed twice); `None`
/// when the click was answered already (gone, refused or failed).
pub(super) async fn begin(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
    rights: Rights,
    working: &str,
) -> Option<ThreadBinding> {
    let interaction = Interaction::Click(click);
    let binding = match data.app.store.binding(&id.agent) {
        Ok(Some(binding)) => binding,
        Ok(None) => {
            let gone = "This agent no longer exists.";
            interaction.respond(http, ephemeral(gone)).await;
            return None;
        }
        Err(e) => {
            let why = something_went_wrong("reading the agent", &e);
            interaction.respond(http, ephemeral(why)).await;
            return None;
        }
    };
    if !(rights.may)(&binding, who) {
        interaction.respond(http, ephemeral(rights.refusal)).await;
        return None;
    }
    let working = CreateInteractionResponseMessage::new()
        .content(working)
        .components(Vec::new())
        .allowed_mentions(no_mentions());
    interaction
        .respond(http, CreateInteractionResponse::UpdateMessage(working))
        .await
        .then_some(binding)
}

/// Says in the confirmation's message how it ended.
pub(super) async fn end(http: &serenity::Http, click: &ComponentInteraction, text: String) {
    let edit = EditInteractionResponse::new()
        .content(text)
        .allowed_mentions(no_mentions());
    if let Err(e) = click.edit_response(http, edit).await {
        tracing::warn!(error = %e, "a confirmation could not be updated");
    }
}

/// How long a confirmed action waits for a running agent to come to rest.
const REST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How an agent came to rest for a confirmed action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rest {
    /// It was resting already: nothing was sent to it.
    Already,
    /// The action's event brought it to rest (a pause or a finish, which its thread was told).
    Brought,
}

/// Brings a running agent to rest with `event` (a pause or a finish; `doing` names it, as in
/// "pausing") and waits for its actor to stop; `still_running` is the answer when a command
/// outlasts the wait.
pub(super) async fn bring_to_rest(
    data: &Data,
    agent: &str,
    event: crate::core::event::Event,
    doing: &str,
    still_running: &str,
) -> Result<Rest, UserError> {
    if !data.supervisor.is_running(agent) {
        return Ok(Rest::Already);
    }
    if let Err(e) = data.supervisor.send(agent, event) {
        return Err(something_went_wrong(&format!("{doing} the agent"), &e).into());
    }
    let started = tokio::time::Instant::now();
    while data.supervisor.is_running(agent) {
        if started.elapsed() >= REST_WAIT {
            return Err(still_running.into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(Rest::Brought)
}
