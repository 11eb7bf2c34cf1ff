//! `/agent rules`: the approve-and-remember rules in force for the thread's agent (its own and its
//! server's), privately, each with a Revoke button for those who may revoke it: the agent's
//! deciders for its own rules, the server's admins for the server's.
//!
//! A Revoke button is `CardAction::RevokeRule`, the rule's `<agent>.<cycle>` in its id. A server
//! rule is removed from the store and its revocation recorded on the thread agent's trail
//! (`Store::append_audit`); an agent's own rule is revoked by its actor (`Event::RevokeRule`),
//! which audits it.

use crate::surface::discord::people::person_of;
use poise::serenity_prelude as serenity;
use serenity::{
    ButtonStyle, ComponentInteraction, CreateActionRow, CreateButton, CreateEmbed,
    CreateInteractionResponse, CreateInteractionResponseMessage,
};

use super::{thread_agent, Ctx, Data, Error};
use crate::core::audit::AuditEntry;
use crate::core::event::Event;
use crate::core::rules::{rule_id, ApprovalRule};
use crate::core::state::{AgentState, GuildId};
use crate::core::text::truncate_chars;
use crate::service::rights::{may_decide, Requester};
use crate::service::{UserError, NOT_ALLOWED};
use crate::surface::discord::ids::{CardAction, CardId};
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::{author, ephemeral, something_went_wrong, Interaction};

/// List and revoke the rules that approve this agent's commands without asking.
#[poise::command(slash_command, guild_only)]
pub(super) async fn rules(ctx: Ctx<'_>) -> Result<(), Error> {
    let (binding, state) = thread_agent(ctx).await?;
    let who = author(ctx);
    if !may_decide(&binding, &who) {
        return Err(UserError::new(NOT_ALLOWED).into());
    }
    let guild = GuildId::from(binding.guild_id);
    let server = ctx.data().app.store.server_rules(&guild)?;
    let now = ctx.data().app.clock.now();
    let (list, buttons) = rules_view(&state, &server, &who, now, None);
    ctx.send(
        poise::CreateReply::default()
            .embed(list)
            .components(buttons)
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}

/// The longest line of the list: twenty rules fit an embed's 4,096 characters.
const RULE_LINE_MAX: usize = 190;

/// The list, as an embed, and its Revoke buttons (numbered like the list); `revoked` is left
/// out, for the view shown right after revoking it while the agent applies the change.
fn rules_view(
    state: &AgentState,
    server: &[ApprovalRule],
    who: &Requester,
    now: chrono::DateTime<chrono::Utc>,
    revoked: Option<&str>,
) -> (CreateEmbed, Vec<CreateActionRow>) {
    let live = |rules: &[ApprovalRule]| -> Vec<ApprovalRule> {
        rules
            .iter()
            .filter(|r| r.live(now) && Some(r.id.as_str()) != revoked)
            .cloned()
            .collect()
    };
    let (own, shared) = (live(&state.safety.rules), live(server));
    let mut text = String::new();
    let mut buttons = Vec::new();
    let mut number = 0;
    for (title, rules, may_revoke) in [
        ("This agent's rules", &own, true),
        (
            "This server's rules (for every agent)",
            &shared,
            who.manage_guild,
        ),
    ] {
        text.push_str(&format!("__{title}__\n"));
        if rules.is_empty() {
            text.push_str("None.\n");
        }
        text.push('\n');
        for rule in rules {
            number += 1;
            let line = format!("{number}. {}", rule.describe());
            text.push_str(&balanced_code(&truncate_chars(&line, RULE_LINE_MAX)));
            text.push('\n');
            if let (true, Some((agent, cycle))) = (may_revoke, split_rule_id(&rule.id)) {
                buttons.push(
                    CreateButton::new(CardId::new(CardAction::RevokeRule, agent, cycle).encode())
                        .label(format!("Revoke {number}"))
                        .style(ButtonStyle::Danger),
                );
            }
        }
    }
    if own.is_empty() && shared.is_empty() {
        text.push_str("Make one with **Approve & remember…** on a card.");
    }
    let rows = buttons
        .chunks(5)
        .map(|row| CreateActionRow::Buttons(row.to_vec()))
        .collect();
    let title = truncate_chars(&format!("Rules for {}", state.name()), 256);
    let list = CreateEmbed::new()
        .title(title)
        .description(truncate_chars(text.trim_end(), 4096));
    (list, rows)
}

/// A line cut inside a code span is closed, so that the lines after it still render as written.
fn balanced_code(line: &str) -> String {
    match line.matches('`').count() % 2 {
        0 => line.to_string(),
        _ => format!("{line}`"),
    }
}

/// `<agent>.<cycle>` back into its parts.
fn split_rule_id(id: &str) -> Option<(&str, u64)> {
    let (agent, cycle) = id.rsplit_once('.')?;
    Some((agent, cycle.parse().ok()?))
}

/// Revoke on an `/agent rules` list: a server's rule by its admins, an agent's own rule by its
/// deciders; recorded in the trail of the thread's agent (a server rule) or of the rule's agent.
pub(crate) async fn on_revoke_click(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
) {
    let interaction = Interaction::Click(click);
    match revoke(data, click, id, who).await {
        Ok((text, list, buttons)) => {
            let update = CreateInteractionResponseMessage::new()
                .content(text)
                .embed(list)
                .components(buttons)
                .allowed_mentions(no_mentions());
            interaction
                .respond(http, CreateInteractionResponse::UpdateMessage(update))
                .await;
        }
        Err(why) => {
            interaction.respond(http, ephemeral(why.0)).await;
        }
    }
}

async fn revoke(
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
) -> Result<(String, CreateEmbed, Vec<CreateActionRow>), UserError> {
    let store = &data.app.store;
    let failed = |what: &str, e: &dyn std::fmt::Debug| something_went_wrong(what, e);
    let rule = rule_id(&id.agent, id.cycle);
    let by = person_of(&click.user);
    let now = data.app.clock.now();
    let thread_agent = store
        .agent_for_thread(click.channel_id.get())
        .map_err(|e| failed("finding the thread's agent", &e))?
        .ok_or("Use this in an agent's thread.")?;
    let guild = GuildId::from(click.guild_id.map(|g| g.get()).unwrap_or_default());
    let server = store
        .server_rules(&guild)
        .map_err(|e| failed("reading the server's rules", &e))?;
    if server.iter().any(|r| r.id == rule) {
        if !who.manage_guild {
            return Err("Only the server's admins (Manage Server) revoke its rules.".into());
        }
        let removed = store
            .revoke_server_rule(&guild, &rule)
            .map_err(|e| failed("revoking a rule", &e))?
            .ok_or("That rule was revoked already.")?;
        let entry = AuditEntry {
            at: now,
            by: by.into(),
            event: removed.revoked_event(),
        };
        let recorded = match store.append_audit(&thread_agent, &entry) {
            Ok(()) => store.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = recorded {
            tracing::error!(agent = %thread_agent, error = %e, "cannot record a revoked rule in the trail");
        }
    } else {
        let binding = store
            .binding(&id.agent)
            .ok()
            .flatten()
            .ok_or("That rule's agent no longer exists.")?;
        if !may_decide(&binding, who) {
            return Err(NOT_ALLOWED.into());
        }
        let state = store
            .load_agent_record(&id.agent)
            .map_err(|e| failed("reading an agent", &e))?
            .ok_or("That rule's agent no longer exists.")?;
        if !state.safety.rules.iter().any(|r| r.id == rule) {
            return Err("That rule was revoked already.".into());
        }
        data.supervisor
            .send(
                &id.agent,
                Event::RevokeRule {
                    id: rule.clone(),
                    by,
                },
            )
            .map_err(|e| e.to_string())?;
    }
    let state = store
        .load_agent_record(&thread_agent)
        .ok()
        .flatten()
        .ok_or("This agent no longer exists.")?;
    let server = store.server_rules(&guild).unwrap_or_default();
    let (list, buttons) = rules_view(&state, &server, who, now, Some(&rule));
    Ok((format!("Revoked rule {rule}."), list, buttons))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_id_reads_back_into_its_card() {
        assert_eq!(split_rule_id("a1b2c3.42"), Some(("a1b2c3", 42)));
        assert_eq!(split_rule_id(&rule_id("x.y", 7)), Some(("x.y", 7)));
        assert_eq!(split_rule_id("nodot"), None);
        assert_eq!(split_rule_id("a.b"), None);
        assert_eq!(balanced_code("`a` and `b"), "`a` and `b`");
        assert_eq!(balanced_code("`a` done"), "`a` done");
    }
}
