//! Answers to people: the user-error tier of slash commands (`on_error`), private replies,
//! interaction responses that log a failure instead of dropping it, and the requester a click or a
//! command comes from.
//!
//! `on_error` shows a `UserError` privately as it is, and anything else as "Something went wrong"
//! with a reference that the log line carrying the error also holds, and an option that is not
//! among a command's choices as such, privately; `pre_command` logs each slash
//! command. `requester_of` and `author` build a `Requester` (user, roles, Manage Threads, Manage
//! Server) from the member data Discord sends with the interaction.

use poise::serenity_prelude as serenity;
use serenity::{
    ComponentInteraction, CreateInteractionResponse, CreateInteractionResponseFollowup,
    CreateInteractionResponseMessage, ModalInteraction, UserId,
};

use super::data::{Ctx, Data, Error};
use super::no_mentions;
use crate::runtime::supervisor::SendError;
use crate::service::rights::Requester;
use crate::service::UserError;

/// A short reference that ties what a user sees to the log line with the details.
pub fn error_ref() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// The text shown for a failure the user cannot act on, after logging it under a reference.
pub fn something_went_wrong(what: &str, error: &dyn std::fmt::Debug) -> String {
    let reference = error_ref();
    tracing::error!(%reference, what, ?error, "failed");
    format!("Something went wrong (ref {reference}).")
}

/// The sentence for a failure the user can act on: a refusal, or an agent that is busy or a bot
/// that is shutting down (try again); `None` for anything else, which is logged instead.
pub fn user_text(error: &anyhow::Error) -> Option<String> {
    if let Some(refusal) = error.downcast_ref::<UserError>() {
        return Some(refusal.to_string());
    }
    match error.downcast_ref::<SendError>() {
        Some(busy @ (SendError::Busy | SendError::ShuttingDown)) => Some(busy.to_string()),
        _ => None,
    }
}

/// A slash command's error: a `UserError` is shown privately as it is; anything else is logged
/// and shown as "Something went wrong (ref …)".
pub async fn on_error(error: poise::FrameworkError<'_, Data, Error>) {
    match error {
        poise::FrameworkError::Command { error, ctx, .. } => {
            let text = user_text(&error)
                .unwrap_or_else(|| something_went_wrong(&ctx.command().qualified_name, &error));
            if let Err(e) = reply_privately(ctx, text).await {
                tracing::warn!(error = %e, "cannot report a command's error");
            }
        }
        // An option the command does not offer (a class or an action that is not among its
        // choices): Discord's client sends only offered ones, so the command it shows is older or
        // newer than this bot's. Nothing ran; the person is told so rather than left waiting.
        poise::FrameworkError::CommandStructureMismatch {
            ctx, description, ..
        } => {
            tracing::warn!(command = %ctx.command().qualified_name, description, "options the command does not offer");
            let text = "That is not one of this command's choices (Discord may be showing an older version of it; try again in a minute, choosing from the list). Nothing changed.";
            if let Err(e) = reply_privately(poise::Context::Application(ctx), text).await {
                tracing::warn!(error = %e, "cannot report a command's unknown option");
            }
        }
        other => {
            if let Err(e) = poise::builtins::on_error(other).await {
                tracing::error!(error = %e, "cannot report a framework error");
            }
        }
    }
}

/// The log line every slash command runs under: which command, where, by whom, for which agent.
pub async fn pre_command(ctx: Ctx<'_>) {
    let agent = ctx
        .data()
        .app
        .store
        .agent_for_thread(ctx.channel_id().get())
        .ok()
        .flatten()
        .unwrap_or_default();
    tracing::info!(
        command = %ctx.command().qualified_name,
        guild = ctx.guild_id().map(|g| g.get()).unwrap_or(0),
        user = ctx.author().id.get(),
        agent = %agent,
        "slash command"
    );
}

/// Counts a slash command's acknowledgement in the ack-latency metric when the response about
/// to be sent is its first.
pub(super) fn note_command_ack(ctx: Ctx<'_>) {
    if let poise::Context::Application(app) = ctx {
        if !app
            .has_sent_initial_response
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            record_ack(app.interaction.id.created_at(), "command");
        }
    }
}

/// Defers a slash command privately (Discord shows "thinking…" to the user alone), counting the
/// acknowledgement.
pub async fn defer_privately(ctx: Ctx<'_>) -> Result<(), Error> {
    note_command_ack(ctx);
    ctx.defer_ephemeral().await?;
    Ok(())
}

/// A reply to a slash command that only its author sees, fitted to Discord's message limit and
/// mentioning nobody.
pub async fn reply_privately(ctx: Ctx<'_>, text: impl Into<String>) -> Result<(), Error> {
    note_command_ack(ctx);
    ctx.send(
        poise::CreateReply::default()
            .content(super::cards::message_text(&text.into()))
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}

/// A private reply to a slash command with files attached.
pub async fn send_privately(
    ctx: Ctx<'_>,
    text: impl Into<String>,
    files: Vec<serenity::CreateAttachment>,
) -> Result<(), Error> {
    note_command_ack(ctx);
    let mut message = poise::CreateReply::default()
        .content(super::cards::message_text(&text.into()))
        .ephemeral(true)
        .allowed_mentions(no_mentions());
    for file in files {
        message = message.attachment(file);
    }
    ctx.send(message).await?;
    Ok(())
}

pub fn ephemeral(text: impl Into<String>) -> CreateInteractionResponse {
    CreateInteractionResponse::Message(
        CreateInteractionResponseMessage::new()
            .content(text)
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
}

fn followup(text: impl Into<String>) -> CreateInteractionResponseFollowup {
    CreateInteractionResponseFollowup::new()
        .content(text)
        .ephemeral(true)
        .allowed_mentions(no_mentions())
}

/// The interaction a response goes to: a button click or a submitted form.
#[derive(Clone, Copy)]
pub enum Interaction<'a> {
    Click(&'a ComponentInteraction),
    Modal(&'a ModalInteraction),
}

impl Interaction<'_> {
    /// Sends the first response; a failure is logged (the user sees Discord's own error) and
    /// reported as `false` so that the caller stops.
    pub async fn respond(self, http: &serenity::Http, response: CreateInteractionResponse) -> bool {
        let (sent, created, kind) = match self {
            Interaction::Click(c) => (
                c.create_response(http, response).await,
                c.id.created_at(),
                "button",
            ),
            Interaction::Modal(m) => (
                m.create_response(http, response).await,
                m.id.created_at(),
                "form",
            ),
        };
        record_ack(created, kind);
        if let Err(e) = &sent {
            tracing::warn!(error = %e, "cannot respond to an interaction");
        }
        sent.is_ok()
    }

    /// A private message after the first response.
    pub async fn follow_up(self, http: &serenity::Http, text: impl Into<String>) {
        let sent = match self {
            Interaction::Click(c) => c.create_followup(http, followup(text)).await,
            Interaction::Modal(m) => m.create_followup(http, followup(text)).await,
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "cannot send a follow-up");
        }
    }
}

/// How long Discord's user waited for the first response, counted from the interaction's id (its
/// creation time at Discord). Ids that cannot be a real interaction's (from the future, or older
/// than the 15 minutes an interaction lives) are not counted.
fn record_ack(created: serenity::Timestamp, kind: &'static str) {
    use crate::clock::Clock as _;
    let waited_ms = (crate::clock::SystemClock.now() - *created).num_milliseconds();
    if (0..15 * 60 * 1000).contains(&waited_ms) {
        metrics::histogram!(crate::ops::names::INTERACTION_ACK_SECONDS, "kind" => kind)
            .record(waited_ms as f64 / 1000.0);
    }
}

/// The member behind an interaction, as its own member data describes them.
pub fn requester_of(user: UserId, member: Option<&serenity::Member>) -> Requester {
    let permissions = member.and_then(|m| m.permissions);
    Requester {
        user_id: user.get(),
        role_ids: member
            .map(|m| m.roles.iter().map(|r| r.get()).collect())
            .unwrap_or_default(),
        manage_threads: permissions.is_some_and(|p| p.manage_threads()),
        manage_guild: permissions.is_some_and(|p| p.manage_guild()),
    }
}

/// The member who used a slash command.
pub fn author(ctx: Ctx<'_>) -> Requester {
    match ctx {
        poise::Context::Application(app) => {
            requester_of(app.interaction.user.id, app.interaction.member.as_deref())
        }
        poise::Context::Prefix(_) => Requester {
            user_id: ctx.author().id.get(),
            role_ids: Vec::new(),
            manage_threads: false,
            manage_guild: false,
        },
    }
}

/// Hands a person's decision to the agent's actor and tells them privately when it is refused.
pub(super) async fn decide_and_report(
    http: &serenity::Http,
    data: &Data,
    interaction: Interaction<'_>,
    id: &super::ids::CardId,
    decision: crate::core::decision::Decision,
    by: &crate::core::person::Person,
) {
    if let Err(refusal) = data
        .supervisor
        .decide(&id.agent, id.cycle, decision, by)
        .await
    {
        interaction.follow_up(http, refusal.to_string()).await;
    }
}
