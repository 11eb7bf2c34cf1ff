//! `/agent help`: what the card buttons do and every command (`/agent …`, `/memory …`), listed
//! from the commands as they are registered so that the help never drifts from them.

use super::{Ctx, Data, Error};
use crate::config::MessageContent;
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::note_command_ack;

/// What each of a card's buttons does, in the order the card shows them.
const BUTTONS: &str = "\
**The card's buttons** (for the agent's deciders):
• **Approve** runs the command; then the agent thinks again.
• **Approve ×N…** runs it and the next N without asking (up to the soft cap).
• **Approve & remember…** approves, and keeps a rule that approves commands like it.
• **Feedback…** sends your words instead of running the command.
• **Self-critique** asks the model to criticise itself and propose again.
• **Edit…** changes the arguments first; **Re-post ↓** moves the card down.
• **Deny** stops the agent, card kept; `/agent resume` shows it again.";

/// Which typed messages the bot reads, as the Message Content intent allows.
fn typed_messages(message_content: MessageContent) -> &'static str {
    match message_content {
        MessageContent::Requested => {
            "A reply to the card (or a message with the feedback prefix) is feedback; any message answers a question."
        }
        MessageContent::NotRequested => {
            "The bot reads only messages that @mention it or reply to its messages: a reply to the card (or a mention with the feedback prefix) is feedback; such a message answers a question."
        }
    }
}

/// Explain the card buttons and the /agent commands (only you see it).
#[poise::command(slash_command, guild_only)]
pub(super) async fn help(ctx: Ctx<'_>) -> Result<(), Error> {
    let commands = all_lines(&ctx.framework().options().commands);
    // An embed's description holds twice a message's text: room for the commands to come.
    let text = help_text(
        &commands,
        typed_messages(ctx.data().app.config.discord.message_content()),
    );
    note_command_ack(ctx);
    ctx.send(
        poise::CreateReply::default()
            .embed(serenity::all::CreateEmbed::new().description(text))
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}

/// The buttons, then one line per command.
fn help_text(commands: &[String], typed: &str) -> String {
    format!(
        "{BUTTONS}\n{typed}\n\n**Commands** (in a channel: `start`, `list` and `/memory`; the rest in an agent's thread):\n{}",
        commands.join("\n")
    )
}

/// Every `/agent` command, then the other top-level commands (`/memory …`), one line each.
fn all_lines(commands: &[poise::Command<Data, Error>]) -> Vec<String> {
    let mut lines = Vec::new();
    for command in commands.iter().filter(|c| c.name == "agent") {
        lines.extend(command_lines(command, "/agent"));
    }
    for command in commands.iter().filter(|c| c.name != "agent") {
        lines.push(command_line(command, ""));
    }
    lines
}

/// One line per command under `parent`, so the help stays one message as commands are added.
fn command_lines(parent: &poise::Command<Data, Error>, path: &str) -> Vec<String> {
    parent
        .subcommands
        .iter()
        .map(|command| command_line(command, &format!("{path} ")))
        .collect()
}

/// A command's line; a group is one line with its subcommands' names and the group's
/// description (`/agent budget show|set`).
fn command_line(command: &poise::Command<Data, Error>, prefix: &str) -> String {
    let what = command.description.as_deref().unwrap_or("");
    let names: Vec<&str> = command.subcommands.iter().map(|s| &*s.name).collect();
    if names.is_empty() {
        format!(
            "`/{}{}` — {what}",
            prefix.trim_start_matches('/'),
            command.name
        )
    } else {
        format!(
            "`/{}{} {}` — {what}",
            prefix.trim_start_matches('/'),
            command.name,
            names.join("|")
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::config::MessageContent;

    #[test]
    fn every_command_is_listed_with_its_description() {
        let lines = super::all_lines(&super::super::all());
        for expected in [
            "`/agent start` — ",
            "`/memory add|search|list|writers` — ",
            "`/agent help` — ",
            "`/agent budget show|set|chart` — ",
            "`/agent models show|allow|remove` — ",
        ] {
            assert!(
                lines.iter().any(|l| l.starts_with(expected)),
                "{expected} in {lines:#?}"
            );
        }
        assert!(
            lines.iter().all(|l| !l.ends_with("— ")),
            "a command without a description: {lines:#?}"
        );
        for message_content in [MessageContent::Requested, MessageContent::NotRequested] {
            let text = super::help_text(&lines, super::typed_messages(message_content));
            assert!(
                text.chars().count() <= crate::surface::discord::cards::DESCRIPTION_MAX,
                "{} characters",
                text.chars().count()
            );
        }
    }
}
