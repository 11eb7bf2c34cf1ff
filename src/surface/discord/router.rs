//! The interaction router: every button click, form and thread message reaches the bot here. Each
//! is acknowledged within Discord's 3 s first (a modal, a deferred update or a private refusal),
//! checked against the clicker's rights and the card's staleness, and only then decided in the
//! agent's actor.
//!
//! `on_event` only clones the interaction and spawns `on_click`, `on_modal` or `on_thread_message`,
//! so the gateway loop never waits on the store or the model. `check_click` checks rights
//! (`service::rights::may_decide` on a `Requester` built from the interaction's own member data),
//! then staleness (`AgentState::awaits_decision_on` on the stored record); `decide_and_report`
//! decides and sends a late refusal (`DecideError`) as a private follow-up. A thread message is an
//! answer to `ask_user`, or feedback on a waiting card only as `FeedbackMessages` says (by default
//! a reply to the card, a message that begins by mentioning the bot, or the `fb:` prefix); the
//! bot's own mentions are taken out of the text first. Without the Message Content intent Discord
//! sends only mentions and replies (with the mention on) with their text and every other message
//! empty, which is never an answer or feedback. A parked card's buttons go to `parked`, memory
//! buttons to `commands::memory`. As each server arrives (GUILD_CREATE), the permissions the bot
//! lacks there are logged (`report_permissions`, from `permissions`).

use crate::surface::discord::people::person_of;
use poise::serenity_prelude as serenity;
use serenity::{ComponentInteraction, CreateInteractionResponse, FullEvent, ModalInteraction};

use super::commands::{Data, Error};
use super::forms::{
    approve_n_form, edit_form, edited_arguments, feedback_form, modal_fields, modal_value,
};
use super::ids::{CardAction, CardId};
use super::parked;
use super::permissions;
use super::respond::{
    decide_and_report, ephemeral, requester_of, something_went_wrong, Interaction,
};
use crate::core::decision::{Decision, APPROVE_N_MAX};
use crate::core::reply::CommandCall;
use crate::core::state::Phase;
use crate::runtime::DecideError;
use crate::service::rights::{may_decide, Requester};
use crate::service::{UserError, NOT_ALLOWED};

const NOT_FROM_THIS_VERSION: &str = "This button is not from this version of the bot.";
const EDITED_SINCE: &str =
    "The command was edited since this card or form was shown; nothing was done. Look at the card again.";

/// The framework's event hook: spawns the handler and returns at once, so the gateway loop never
/// waits on the store or the model.
pub async fn on_event(
    ctx: poise::FrameworkContext<'_, Data, Error>,
    event: &FullEvent,
) -> Result<(), Error> {
    let http = ctx.serenity_context.http.clone();
    let data = ctx.user_data;
    match event {
        FullEvent::InteractionCreate { interaction } => match interaction {
            serenity::Interaction::Component(click) => {
                let (click, data) = (click.clone(), data.clone());
                tokio::spawn(async move { on_click(&http, &data, click).await });
            }
            serenity::Interaction::Modal(submit) => {
                let (submit, data) = (submit.clone(), data.clone());
                tokio::spawn(async move { on_modal(&http, &data, submit).await });
            }
            _ => {}
        },
        FullEvent::Message { new_message } if !new_message.author.bot => {
            let (message, data) = (new_message.clone(), data.clone());
            tokio::spawn(async move { on_thread_message(&data, message).await });
        }
        FullEvent::Ready { .. } => crate::ops::health().set_gateway(crate::ops::Gateway::Connected),
        FullEvent::GuildCreate { guild, .. } => {
            report_permissions(guild, ctx.serenity_context.cache.current_user().id)
        }
        FullEvent::ShardStageUpdate { event } => crate::ops::health().set_gateway(
            if event.new == serenity::gateway::ConnectionStage::Connected {
                crate::ops::Gateway::Connected
            } else {
                crate::ops::Gateway::Disconnected
            },
        ),
        _ => {}
    }
    Ok(())
}

/// Logs, as a server arrives, the permissions the bot lacks there (by its roles, and in each
/// channel where agents start) and what breaks without each.
fn report_permissions(guild: &serenity::Guild, bot: serenity::UserId) {
    let Some(report) = permissions::report_server(guild, bot) else {
        tracing::warn!(
            guild = guild.id.get(),
            "the bot's own member is not in the server's data: its permissions there are unknown"
        );
        return;
    };
    for line in &report.lines {
        match line.lacking {
            permissions::Lacking::Nothing => {
                tracing::info!(guild = report.guild_id, "{}", line.text)
            }
            _ => tracing::warn!(guild = report.guild_id, "{}", line.text),
        }
    }
}

/// Checks that the click is for the agent's current proposal and that the clicker may decide.
/// Returns the refusal to show otherwise.
fn check_click(data: &Data, id: &CardId, who: &Requester) -> Result<(), UserError> {
    let store = &data.app.store;
    let binding = match store.binding(&id.agent) {
        Ok(Some(binding)) => binding,
        Ok(None) => return Err("This agent no longer exists.".into()),
        Err(e) => return Err(something_went_wrong("reading a binding", &e).into()),
    };
    if !may_decide(&binding, who) {
        return Err(NOT_ALLOWED.into());
    }
    let state = store.load_agent_record(&id.agent).ok().flatten();
    let pending = state
        .as_ref()
        .and_then(|state| state.progress.pending.as_ref())
        .filter(|_| {
            state
                .as_ref()
                .is_some_and(|s| s.awaits_decision_on(id.cycle))
        });
    let approving = matches!(
        id.action,
        CardAction::Approve
            | CardAction::ApproveN
            | CardAction::ApproveNSubmit
            | CardAction::RememberChoose
    );
    // An approval or an edit refers to the version of the command its card showed; a card edited
    // since must be looked at again (a Deny or feedback stands whatever the version).
    let revised = matches!(
        id.action,
        CardAction::Approve
            | CardAction::ApproveN
            | CardAction::ApproveNSubmit
            | CardAction::Edit
            | CardAction::EditSubmit
            | CardAction::Remember
            | CardAction::RememberChoose
            | CardAction::Rethink
            | CardAction::Skip
    );
    if let (true, Some(shown), Some(pending)) = (revised, id.revision, pending) {
        if pending.revision != shown {
            return Err(EDITED_SINCE.into());
        }
    }
    // A class that needs several approvals counts only its server's approvers, when it names a
    // role for them.
    if let (true, Some(pending)) = (approving, pending) {
        let approvals = &data.app.config.approvals;
        let guild = crate::core::state::GuildId::from(binding.guild_id);
        let needed = approvals.for_guild(Some(&guild)).needed(pending.risk);
        let role = approvals.approvers_role(binding.guild_id);
        if let Some(role) = role.filter(|r| needed > 1 && !who.role_ids.contains(r)) {
            return Err(format!(
                "This command needs {needed} approvals from members of <@&{role}>, and you are not one."
            )
            .into());
        }
    }
    if pending.is_none() {
        return Err(DecideError::late(store, &id.agent, id.cycle)
            .to_string()
            .into());
    }
    Ok(())
}

/// The command the card of `id` proposes, as the agent's record holds it now.
fn pending_command(data: &Data, id: &CardId) -> Result<CommandCall, UserError> {
    match data.app.store.load_agent_record(&id.agent) {
        Ok(Some(state)) => state
            .progress
            .pending
            .filter(|p| p.cycle == id.cycle)
            .map(|p| p.command)
            .ok_or_else(|| DecideError::NotPending.to_string().into()),
        Ok(None) => Err("This agent no longer exists.".into()),
        Err(e) => Err(something_went_wrong("reading an agent", &e).into()),
    }
}

async fn on_click(http: &serenity::Http, data: &Data, click: ComponentInteraction) {
    let interaction = Interaction::Click(&click);
    let Some(id) = CardId::parse(&click.data.custom_id) else {
        interaction
            .respond(http, ephemeral(NOT_FROM_THIS_VERSION))
            .await;
        return;
    };
    let who = requester_of(click.user.id, click.member.as_ref());
    if matches!(
        id.action,
        CardAction::MemoryForget
            | CardAction::MemoryPin
            | CardAction::MemoryUnpin
            | CardAction::MemoryPage
    ) {
        super::commands::memory::on_memory_click(http, data, &click, &id, &who).await;
        return;
    }
    if id.action == CardAction::RevokeRule {
        super::commands::rules::on_revoke_click(http, data, &click, &id, &who).await;
        return;
    }
    if id.action == CardAction::DeleteAgent {
        super::commands::delete::on_delete_click(http, data, &click, &id, &who).await;
        return;
    }
    if id.action == CardAction::RewindAgent {
        super::commands::rewind::on_rewind_click(http, data, &click, &id, &who).await;
        return;
    }
    if id.action == CardAction::AuditPage {
        super::commands::audit::on_page_click(http, data, &click, &id, &who).await;
        return;
    }
    if let Some(choice) = parked::park_choice(&id) {
        parked::on_park_click(http, data, &click, &id, choice, &who).await;
        return;
    }
    if let Err(refusal) = check_click(data, &id, &who) {
        interaction.respond(http, ephemeral(refusal.0)).await;
        return;
    }
    let decision = match id.action {
        CardAction::Repost => {
            super::repost::on_repost_click(http, data, &click, &id).await;
            return;
        }
        CardAction::Remember => {
            super::remember::on_remember_click(http, data, &click, &id, &who).await;
            return;
        }
        CardAction::RememberChoose => {
            super::remember::on_choice(http, data, &click, &id, &who).await;
            return;
        }
        CardAction::Approve => Decision::Approve,
        CardAction::Deny => Decision::Deny,
        CardAction::Rethink => Decision::Rethink,
        CardAction::Skip => Decision::Skip,
        CardAction::SelfCritique => Decision::SelfCritique,
        CardAction::ApproveN => {
            let form = approve_n_form(&id, data.app.config.agent.approve_n_default);
            interaction
                .respond(http, CreateInteractionResponse::Modal(form))
                .await;
            return;
        }
        CardAction::Feedback => {
            let form = feedback_form(&id);
            interaction
                .respond(http, CreateInteractionResponse::Modal(form))
                .await;
            return;
        }
        CardAction::Edit => {
            let response = match pending_command(data, &id) {
                Ok(command) => match edit_form(&id, &command.name, &command.args) {
                    Ok(form) => CreateInteractionResponse::Modal(form),
                    Err(why) => ephemeral(why.0),
                },
                Err(why) => ephemeral(why.0),
            };
            interaction.respond(http, response).await;
            return;
        }
        CardAction::ApproveNSubmit
        | CardAction::FeedbackSubmit
        | CardAction::EditSubmit
        | CardAction::MemoryForget
        | CardAction::MemoryPin
        | CardAction::MemoryUnpin
        | CardAction::MemoryPage
        | CardAction::ParkContinue
        | CardAction::ParkStop
        | CardAction::RaiseAgent
        | CardAction::RaiseOwnerDaily
        | CardAction::RaiseServerDaily
        | CardAction::RaiseServerMonthly
        | CardAction::AuditPage
        | CardAction::RevokeRule
        | CardAction::DeleteAgent
        | CardAction::RewindAgent => {
            interaction
                .respond(http, ephemeral(NOT_FROM_THIS_VERSION))
                .await;
            return;
        }
    };
    if !interaction
        .respond(http, CreateInteractionResponse::Acknowledge)
        .await
    {
        return;
    }
    let by = person_of(&click.user);
    decide_and_report(http, data, interaction, &id, decision, &by).await;
}

async fn on_modal(http: &serenity::Http, data: &Data, submit: ModalInteraction) {
    let interaction = Interaction::Modal(&submit);
    let Some(id) = CardId::parse(&submit.data.custom_id) else {
        interaction
            .respond(http, ephemeral(NOT_FROM_THIS_VERSION))
            .await;
        return;
    };
    let who = requester_of(submit.user.id, submit.member.as_ref());
    if let Err(refusal) = check_click(data, &id, &who) {
        interaction.respond(http, ephemeral(refusal.0)).await;
        return;
    }
    let value = modal_value(&submit);
    let decision = match id.action {
        CardAction::ApproveNSubmit => match value.trim().parse::<u32>() {
            Ok(n) if (1..=APPROVE_N_MAX).contains(&n) => Decision::ApproveN(n),
            _ => {
                let text = format!("Give a number from 1 to {APPROVE_N_MAX}.");
                interaction.respond(http, ephemeral(text)).await;
                return;
            }
        },
        CardAction::FeedbackSubmit if !value.trim().is_empty() => {
            Decision::Feedback(value.trim().to_string())
        }
        CardAction::EditSubmit => {
            // Applied to the command as it is now, so that two people's edits of different
            // arguments both count.
            let edited = pending_command(data, &id)
                .and_then(|command| edited_arguments(&command.args, &modal_fields(&submit)));
            match edited {
                Ok(args) => Decision::Edit(Box::new(args)),
                Err(why) => {
                    interaction.respond(http, ephemeral(why.0)).await;
                    return;
                }
            }
        }
        _ => {
            let text = "Nothing to do with an empty form.";
            interaction.respond(http, ephemeral(text)).await;
            return;
        }
    };
    if !interaction
        .respond(http, CreateInteractionResponse::Acknowledge)
        .await
    {
        return;
    }
    let by = person_of(&submit.user);
    decide_and_report(http, data, interaction, &id, decision, &by).await;
}

/// A message in an agent's thread answers a waiting `ask_user`, or, while a card waits, is taken
/// as feedback from someone allowed to decide when it replies to the card or starts with the
/// feedback prefix (or, as configured, whatever it is).
async fn on_thread_message(data: &Data, message: serenity::Message) {
    let store = &data.app.store;
    let Ok(Some(agent)) = store.agent_for_thread(message.channel_id.get()) else {
        return;
    };
    let Ok(Some(binding)) = store.binding(&agent) else {
        return;
    };
    // A message carries roles but no permissions, so moderators decide here only through shares.
    let who = Requester {
        user_id: message.author.id.get(),
        role_ids: message
            .member
            .as_ref()
            .map(|m| m.roles.iter().map(|r| r.get()).collect())
            .unwrap_or_default(),
        manage_threads: false,
        manage_guild: false,
    };
    // Without the Message Content intent Discord sends most messages with an empty text: those
    // are neither answers nor feedback, whoever sent them.
    let said = Said::read(&message.content, data.bot_user_id);
    let text = said.text.as_str();
    if !may_decide(&binding, &who) || text.is_empty() {
        return;
    }
    if data.surface.answer_question(binding.thread_id, text).await {
        return;
    }
    let discord = &data.app.config.discord;
    if !discord.messages_as_feedback {
        return;
    }
    let replied_to = message
        .message_reference
        .as_ref()
        .and_then(|reference| reference.message_id)
        .map(|id| id.get());
    // A reply names the card it answers: it decides that card's cycle, which is refused when a
    // later card has taken its place.
    let replied_card = binding
        .card
        .filter(|card| replied_to == Some(card.message_id));
    // A message that begins by mentioning the bot is addressed to it, as a reply to the card is:
    // without the Message Content intent it is one of the two ways typed feedback arrives.
    let addressed = replied_card.is_some() || said.begins_with_mention;
    let Some(text) = discord
        .feedback_messages
        .feedback(text, &discord.feedback_prefix, addressed)
    else {
        return;
    };
    let Ok(Some(state)) = store.load_agent_record(&agent) else {
        return;
    };
    if let (Phase::AwaitingDecision, Some(pending)) =
        (&state.progress.phase, &state.progress.pending)
    {
        let feedback = Decision::Feedback(text.to_string());
        let by = &person_of(&message.author);
        let cycle = replied_card.map_or(pending.cycle, |card| card.cycle);
        if let Err(refusal) = data.supervisor.decide(&agent, cycle, feedback, by).await {
            // The card was decided in the meantime; the message stays an ordinary message.
            tracing::debug!(agent = %agent, %refusal, "a thread message was not taken as feedback");
        }
    }
}

/// A thread message's text as the bot reads it: the bot's own mentions taken out, and whether
/// the message began with one (it is addressed to the bot).
#[derive(Debug, PartialEq, Eq)]
struct Said {
    text: String,
    begins_with_mention: bool,
}

impl Said {
    fn read(content: &str, bot_user_id: u64) -> Said {
        let mentions = [format!("<@{bot_user_id}>"), format!("<@!{bot_user_id}>")];
        let content = content.trim();
        let begins_with_mention = mentions.iter().any(|m| content.starts_with(m.as_str()));
        let mut text = content.to_string();
        for mention in &mentions {
            text = text.replace(mention.as_str(), "");
        }
        Said {
            text: text.trim().to_string(),
            begins_with_mention,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Said;

    #[test]
    fn the_bots_mentions_are_taken_out_and_a_leading_one_addresses_it() {
        let read = |content| Said::read(content, 42);
        assert_eq!(
            read("<@42> use red"),
            Said {
                text: "use red".into(),
                begins_with_mention: true
            }
        );
        assert_eq!(
            read("  <@!42>  fb: shorter "),
            Said {
                text: "fb: shorter".into(),
                begins_with_mention: true
            }
        );
        assert_eq!(
            read("thanks <@42>, and <@7>"),
            Said {
                text: "thanks , and <@7>".into(),
                begins_with_mention: false
            }
        );
        // What Discord sends without the Message Content intent, and a bare mention: nothing said.
        assert_eq!(read("").text, "");
        assert_eq!(read("<@42>").text, "");
        assert!(!read("<@421> hi").begins_with_mention);
    }
}
