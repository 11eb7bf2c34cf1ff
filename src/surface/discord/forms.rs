//! The forms (modals) behind Approve ×N and Feedback, and reading what was typed into them.

use poise::serenity_prelude::{
    ActionRowComponent, CreateActionRow, CreateInputText, CreateModal, InputTextStyle,
    ModalInteraction,
};

use super::ids::{CardAction, CardId};
use crate::core::event::APPROVE_N_MAX;

/// The form Approve ×N opens.
pub fn approve_n_form(id: &CardId, default: u32) -> CreateModal {
    CreateModal::new(
        CardId::new(CardAction::ApproveNSubmit, &id.agent, id.cycle).encode(),
        "Approve several commands",
    )
    .components(vec![CreateActionRow::InputText(
        CreateInputText::new(
            InputTextStyle::Short,
            format!("How many commands (1–{APPROVE_N_MAX})?"),
            "n",
        )
        .value(default.to_string())
        .min_length(1)
        .max_length(APPROVE_N_MAX.to_string().len() as u16),
    )])
}

/// The form Feedback opens.
pub fn feedback_form(id: &CardId) -> CreateModal {
    CreateModal::new(
        CardId::new(CardAction::FeedbackSubmit, &id.agent, id.cycle).encode(),
        "Feedback instead of running",
    )
    .components(vec![CreateActionRow::InputText(
        CreateInputText::new(InputTextStyle::Paragraph, "Your feedback", "text")
            .min_length(1)
            .max_length(4000),
    )])
}

/// The text typed into a submitted form (each of ours has one field).
pub fn modal_value(submit: &ModalInteraction) -> String {
    submit
        .data
        .components
        .iter()
        .flat_map(|row| row.components.iter())
        .find_map(|c| match c {
            ActionRowComponent::InputText(input) => input.value.clone(),
            _ => None,
        })
        .unwrap_or_default()
}
