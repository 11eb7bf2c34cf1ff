//! The parts of a card that Discord renders: its embed (from `cards::EmbedText`), its buttons
//! (the five decisions, or the stuck panel, and the ways to change the command), and the mention
//! policy every message carries.

use serenity::all::{
    ButtonStyle, CreateActionRow, CreateAllowedMentions, CreateButton, CreateEmbed,
    CreateEmbedFooter,
};

use super::cards::EmbedText;
use super::ids::{CardAction, CardId};
use crate::core::state::Proposal;

/// Every message the bot sends mentions nobody, whatever the model wrote.
pub fn no_mentions() -> CreateAllowedMentions {
    CreateAllowedMentions::new()
}

pub fn to_embed(text: EmbedText) -> CreateEmbed {
    let mut embed = CreateEmbed::new()
        .title(text.title)
        .description(text.description);
    for (name, value) in text.fields {
        embed = embed.field(name, value, false);
    }
    if !text.footer.is_empty() {
        embed = embed.footer(CreateEmbedFooter::new(text.footer));
    }
    embed
}

/// A card's buttons: the five decisions in one row (or, for a stuck agent, the stuck panel's),
/// and the ways to change the command first in the second.
pub fn card_buttons(agent: &str, proposal: &Proposal, approve_n: u32) -> Vec<CreateActionRow> {
    let button = |action, label: String, style| {
        CreateButton::new(
            CardId::new(action, agent, proposal.cycle)
                .at_revision(proposal.revision)
                .encode(),
        )
        .label(label)
        .style(style)
    };
    let decide = match &proposal.stuck {
        Some(stuck) => stuck_panel(stuck, &button),
        None => decision_row(approve_n, &button),
    };
    // A row holds five buttons; the second holds the ways to change the command first.
    let mut change = vec![
        button(CardAction::Edit, "Edit…".into(), ButtonStyle::Secondary),
        button(
            CardAction::Repost,
            "Re-post ↓".into(),
            ButtonStyle::Secondary,
        ),
    ];
    // Only where a rule may approve the command (see `core::rules`).
    if !proposal.remember.is_empty() && proposal.stuck.is_none() {
        change.insert(
            0,
            button(
                CardAction::Remember,
                "Approve & remember…".into(),
                ButtonStyle::Success,
            ),
        );
    }
    vec![decide, CreateActionRow::Buttons(change)]
}

type MakeButton<'a> = dyn Fn(CardAction, String, ButtonStyle) -> CreateButton + 'a;

/// The stuck panel: think again, a hint (the feedback form), skip the step, stop, or run it.
fn stuck_panel(stuck: &crate::core::watchdog::Stuck, button: &MakeButton<'_>) -> CreateActionRow {
    let rethink = match stuck.smart {
        true => "Rethink with the stronger model",
        false => "Rethink",
    };
    CreateActionRow::Buttons(vec![
        button(CardAction::Rethink, rethink.into(), ButtonStyle::Primary),
        button(
            CardAction::Feedback,
            "Give a hint…".into(),
            ButtonStyle::Secondary,
        ),
        button(
            CardAction::Skip,
            "Skip this step".into(),
            ButtonStyle::Secondary,
        ),
        button(CardAction::Deny, "Stop".into(), ButtonStyle::Danger),
        button(
            CardAction::Approve,
            "Approve anyway".into(),
            ButtonStyle::Success,
        ),
    ])
}

/// The five decisions of an ordinary card.
fn decision_row(approve_n: u32, button: &MakeButton<'_>) -> CreateActionRow {
    CreateActionRow::Buttons(vec![
        button(CardAction::Approve, "Approve".into(), ButtonStyle::Success),
        button(
            CardAction::ApproveN,
            format!("Approve ×{approve_n}…"),
            ButtonStyle::Primary,
        ),
        button(
            CardAction::Feedback,
            "Feedback…".into(),
            ButtonStyle::Secondary,
        ),
        button(
            CardAction::SelfCritique,
            "Self-critique".into(),
            ButtonStyle::Secondary,
        ),
        button(CardAction::Deny, "Deny".into(), ButtonStyle::Danger),
    ])
}
