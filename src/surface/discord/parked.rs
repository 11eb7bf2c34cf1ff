//! A parked agent's card: paused for a budget ([+$1] [+$5] [Stop]) or by the runaway brake
//! ([Continue] [Raise budget +$1] [Stop]), saying why and what it spent; and what its buttons do.
//!
//! A click is answered by updating the card in the acknowledgement itself, or refused privately;
//! what it does is `service::parked::park_choice`.

use crate::surface::discord::people::person_of;
use poise::serenity_prelude as serenity;
use serenity::{
    ButtonStyle, ComponentInteraction, CreateActionRow, CreateButton, CreateInteractionResponse,
    CreateInteractionResponseMessage,
};

use super::cards::EmbedText;
use super::commands::Data;
use super::ids::{CardAction, CardId};
use super::respond::{ephemeral, something_went_wrong, user_text, Interaction};
use super::{no_mentions, to_embed};
use crate::core::budget::{format_usd, BudgetKind, Micros, MICROS_PER_USD};
use crate::core::state::{AgentState, PauseReason};
use crate::service::parked::{ParkChoice, RAISE_STEPS_USD};
use crate::service::rights::Requester;

fn raise_action(kind: BudgetKind) -> CardAction {
    match kind {
        BudgetKind::Agent => CardAction::RaiseAgent,
        BudgetKind::OwnerDaily => CardAction::RaiseOwnerDaily,
        BudgetKind::GuildDaily => CardAction::RaiseServerDaily,
        BudgetKind::GuildMonthly => CardAction::RaiseServerMonthly,
    }
}

/// Who may raise a budget, as the card's footer says it.
fn who_raises(kind: BudgetKind) -> &'static str {
    match kind {
        BudgetKind::Agent => "its owner, moderators and server admins",
        _ => "server admins",
    }
}

/// The card for an agent parked for its budget or by the brake; `None` for other pauses, which
/// are plain notices.
pub fn park_card(
    agent: &AgentState,
    reason: &PauseReason,
) -> Option<(EmbedText, Vec<CreateActionRow>)> {
    let button = |action, slot: u64, label: String, style| {
        CreateButton::new(CardId::new(action, &agent.id, slot).encode())
            .label(label)
            .style(style)
    };
    let stop = button(
        CardAction::ParkStop,
        agent.progress.cycle,
        "Stop".into(),
        ButtonStyle::Danger,
    );
    let raise = |kind: BudgetKind, limit: Micros, usd: u64, label: String| {
        let to = Micros(limit.0.saturating_add(usd * MICROS_PER_USD));
        button(raise_action(kind), to.0, label, ButtonStyle::Primary)
    };
    match reason {
        PauseReason::Budget {
            message,
            stop: Some(budget),
        } if budget.limit != Micros::MAX => {
            let text = EmbedText {
                title: format!(
                    "⏸️ {} paused: {} ran out",
                    agent.name(),
                    budget.kind.label()
                ),
                description: format!("{message}."),
                fields: vec![(
                    "Spent".into(),
                    format!(
                        "{} of {} ({})",
                        format_usd(budget.spent),
                        format_usd(budget.limit),
                        budget.kind.label()
                    ),
                )],
                footer: format!(
                    "Raising it resumes the agent; {} may raise {}.",
                    who_raises(budget.kind),
                    budget.kind.label()
                ),
            };
            let mut buttons: Vec<CreateButton> = RAISE_STEPS_USD
                .iter()
                .map(|&usd| raise(budget.kind, budget.limit, usd, format!("+${usd}")))
                .collect();
            buttons.push(stop);
            Some((text.fitted(), vec![CreateActionRow::Buttons(buttons)]))
        }
        PauseReason::Runaway { why, spent, limit } => {
            let text = EmbedText {
                title: format!("🛑 {} parked by the runaway brake", agent.name()),
                description: format!(
                    "{}: {why}. Approve ×N and continuous mode have ended.",
                    agent.name()
                ),
                fields: vec![(
                    "Spent".into(),
                    format!(
                        "{} of {} (the agent's budget)",
                        format_usd(*spent),
                        format_usd(*limit)
                    ),
                )],
                footer: "Continue and Stop: whoever may decide for the agent; raising its budget: its owner, moderators and server admins.".into(),
            };
            let usd = RAISE_STEPS_USD[0];
            let buttons = vec![
                button(
                    CardAction::ParkContinue,
                    agent.progress.cycle,
                    "Continue".into(),
                    ButtonStyle::Success,
                ),
                raise(
                    BudgetKind::Agent,
                    *limit,
                    usd,
                    format!("Raise budget +${usd}"),
                ),
                stop,
            ];
            Some((text.fitted(), vec![CreateActionRow::Buttons(buttons)]))
        }
        _ => None,
    }
}

/// What a click on a parked agent's card asks for.
pub fn park_choice(id: &CardId) -> Option<ParkChoice> {
    let raise = |budget| ParkChoice::Raise {
        budget,
        to: Micros(id.cycle),
    };
    Some(match id.action {
        CardAction::ParkContinue => ParkChoice::Continue { cycle: id.cycle },
        CardAction::ParkStop => ParkChoice::Stop { cycle: id.cycle },
        CardAction::RaiseAgent => raise(BudgetKind::Agent),
        CardAction::RaiseOwnerDaily => raise(BudgetKind::OwnerDaily),
        CardAction::RaiseServerDaily => raise(BudgetKind::GuildDaily),
        CardAction::RaiseServerMonthly => raise(BudgetKind::GuildMonthly),
        _ => return None,
    })
}

/// A click on a parked agent's card: refused privately, or applied and answered by editing the
/// card (its buttons removed, what happened added) in the acknowledgement itself.
pub(super) async fn on_park_click(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    choice: ParkChoice,
    who: &Requester,
) {
    let interaction = Interaction::Click(click);
    let by = person_of(&click.user);
    let done = data
        .agents
        .park_choice(&data.supervisor, &id.agent, who, &by, choice);
    let text = match done {
        Ok(text) => text,
        Err(error) => {
            let text = user_text(&error)
                .unwrap_or_else(|| something_went_wrong("a parked agent's card", &error));
            interaction.respond(http, ephemeral(text)).await;
            return;
        }
    };
    let mut update = CreateInteractionResponseMessage::new()
        .components(Vec::new())
        .allowed_mentions(no_mentions());
    if let Some(embed) = click.message.embeds.first() {
        let mut text_card = EmbedText {
            title: embed.title.clone().unwrap_or_default(),
            description: embed.description.clone().unwrap_or_default(),
            fields: embed
                .fields
                .iter()
                .map(|f| (f.name.clone(), f.value.clone()))
                .collect(),
            footer: String::new(),
        };
        text_card.fields.push(("Decided".into(), text));
        update = update.embed(to_embed(text_card.fitted()));
    } else {
        update = update.content(text);
    }
    interaction
        .respond(http, CreateInteractionResponse::UpdateMessage(update))
        .await;
}
