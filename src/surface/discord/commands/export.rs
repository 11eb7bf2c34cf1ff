//! `/agent export`: the agent's transcript and audit trail (Markdown) and workspace (zip), attached
//! privately.

use poise::serenity_prelude as serenity;

use super::{thread_agent, Ctx, Error};
use crate::service::rights::may_decide;
use crate::service::{UserError, NOT_ALLOWED};
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::{author, defer_privately};

/// Attach the agent's transcript and audit trail (Markdown) and its workspace (zip).
#[poise::command(slash_command, guild_only)]
pub(super) async fn export(ctx: Ctx<'_>) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let (binding, state) = thread_agent(ctx).await?;
    if !may_decide(&binding, &author(ctx)) {
        return Err(UserError::new(NOT_ALLOWED).into());
    }
    let store = ctx.data().app.store.clone();
    let agent = state.clone();
    // Reading every step and zipping up to the workspace's limit takes a while: not on the
    // gateway's thread.
    let (transcript, audit, archive) = ctx
        .data()
        .agents_runtime
        .spawn_blocking(move || -> Result<_, Error> {
            let transcript = crate::export::transcript(&store, &agent)?;
            // Well under the smallest upload limit Discord gives a server.
            let audit = crate::export::audit_markdown(&store, &agent, Some(4 << 20))?;
            let archive = crate::export::workspace_zip(&store, &agent.id)?;
            Ok((transcript, audit, archive))
        })
        .await??;
    ctx.send(
        poise::CreateReply::default()
            .content(format!("Export of **{}**.", state.name()))
            .attachment(serenity::CreateAttachment::bytes(
                transcript.into_bytes(),
                format!("{}-transcript.md", state.id),
            ))
            .attachment(serenity::CreateAttachment::bytes(
                audit.into_bytes(),
                format!("{}-audit.md", state.id),
            ))
            .attachment(serenity::CreateAttachment::bytes(
                archive,
                format!("{}-workspace.zip", state.id),
            ))
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}
