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
    // gateway's thread. Each part is made on its own, so one that fails leaves the others.
    let (transcript, audit, archive) = ctx
        .data()
        .agents_runtime
        .spawn_blocking(move || {
            let transcript = crate::export::transcript(&store, &agent);
            // Well under the smallest upload limit Discord gives a server.
            let audit = crate::export::audit_markdown(&store, &agent, Some(4 << 20));
            let archive = crate::export::workspace_zip(&store, &agent.id);
            (transcript, audit, archive)
        })
        .await?;
    let mut reply = poise::CreateReply::default()
        .ephemeral(true)
        .allowed_mentions(no_mentions());
    let mut missing = Vec::new();
    match transcript {
        Ok(text) => {
            reply = reply.attachment(serenity::CreateAttachment::bytes(
                text.into_bytes(),
                format!("{}-transcript.md", state.id),
            ))
        }
        Err(e) => missing.push(format!("The transcript could not be made: {e}.")),
    }
    match audit {
        Ok(text) => {
            reply = reply.attachment(serenity::CreateAttachment::bytes(
                text.into_bytes(),
                format!("{}-audit.md", state.id),
            ))
        }
        Err(e) => missing.push(format!("The audit trail could not be made: {e}.")),
    }
    match archive {
        Ok(archive) => {
            missing.extend(archive.notes);
            reply = reply.attachment(serenity::CreateAttachment::bytes(
                archive.bytes,
                format!("{}-workspace.zip", state.id),
            ))
        }
        Err(e) => missing.push(format!("The workspace could not be zipped: {e}.")),
    }
    reply = reply.content(export_message(state.name(), &missing));
    ctx.send(reply).await?;
    Ok(())
}

/// Characters of notes the reply shows; the archive's notes file holds them all.
const MAX_NOTES_CHARS: usize = 1500;

/// The reply's text: whose export it is, and what was renamed or left out, cut to fit a message.
fn export_message(name: &str, notes: &[String]) -> String {
    let mut text = format!("Export of **{}**.", name);
    if notes.is_empty() {
        return text;
    }
    let listed = notes
        .iter()
        .map(|note| format!("- {}", note))
        .collect::<Vec<_>>()
        .join("\n");
    let shown = crate::core::text::truncate_chars(&listed, MAX_NOTES_CHARS);
    text.push_str(&format!(
        "\n{shown}\n(All of them are in {} in the zip.)",
        crate::export::NOTES_NAME
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_lists_the_notes_within_a_message_s_size() {
        assert_eq!(export_message("Ada", &[]), "Export of **Ada**.");
        let notes = vec![format!("{} is left out: it could not be read.", "n".repeat(255)); 40];
        let text = export_message("Ada", &notes);
        assert!(text.starts_with("Export of **Ada**.\n- nnn"), "{text}");
        assert!(text.ends_with("(All of them are in EXPORT-NOTES.txt in the zip.)"));
        assert!(text.chars().count() < 2000, "{}", text.chars().count());
    }
}
