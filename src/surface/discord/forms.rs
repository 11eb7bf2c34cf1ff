//! The forms (modals) behind Approve ×N, Feedback and Edit, and reading what was typed into them.
//!
//! `approve_n_form` asks for a count up to `APPROVE_N_MAX`, `feedback_form` for up to 4,000
//! characters, and `edit_form` fits the arguments into Discord's five inputs and 4,000 characters
//! each. `modal_value`, `modal_fields` and `edited_arguments` read what was typed.

use poise::serenity_prelude::{
    ActionRowComponent, CreateActionRow, CreateInputText, CreateModal, InputTextStyle,
    ModalInteraction,
};

use serde_json::{Map, Value};

use super::ids::{CardAction, CardId};
use crate::core::decision::APPROVE_N_MAX;
use crate::core::step::{argument_text, edited_value};
use crate::core::text::truncate_chars;
use crate::service::UserError;

/// The form Approve ×N opens.
pub fn approve_n_form(id: &CardId, default: u32) -> CreateModal {
    CreateModal::new(
        id.for_action(CardAction::ApproveNSubmit).encode(),
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
        id.for_action(CardAction::FeedbackSubmit).encode(),
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

/// Discord's limits on a form: five inputs, a 45-character label, 4,000 characters a value.
const FORM_INPUTS_MAX: usize = 5;
const LABEL_MAX: usize = 45;
const INPUT_VALUE_MAX: usize = 4000;
/// The input that holds all arguments as JSON when they are more than a form's five inputs.
const JSON_INPUT: &str = "json";
/// The prefix of an input holding one argument; the rest of its id is the argument's name.
const ARG_INPUT: &str = "arg:";
/// Why a command's arguments cannot be edited in a form.
const TOO_LONG_FOR_A_FORM: &str =
    "These arguments are too long to edit in a form (Discord takes 4,000 characters); give feedback instead.";

/// The form Edit opens, prefilled with the command's arguments: one input each, or one JSON input
/// when there are more than five. An argument longer than an input holds is left out and kept.
pub fn edit_form(
    id: &CardId,
    command: &str,
    args: &Map<String, Value>,
) -> Result<CreateModal, UserError> {
    let title = truncate_chars(&format!("Edit {command}"), LABEL_MAX);
    let modal_id = id.for_action(CardAction::EditSubmit).encode();
    let input = |custom_id: String, label: &str, text: String| {
        let style = if text.contains('\n') || text.chars().count() > 80 {
            InputTextStyle::Paragraph
        } else {
            InputTextStyle::Short
        };
        CreateActionRow::InputText(
            CreateInputText::new(style, truncate_chars(label, LABEL_MAX), custom_id)
                .value(text)
                .required(false)
                .max_length(INPUT_VALUE_MAX as u16),
        )
    };
    if args.len() > FORM_INPUTS_MAX {
        let json = serde_json::to_string_pretty(args).unwrap_or_default();
        if json.chars().count() > INPUT_VALUE_MAX {
            return Err(TOO_LONG_FOR_A_FORM.into());
        }
        let row = input(JSON_INPUT.into(), "Arguments (JSON)", json);
        return Ok(CreateModal::new(modal_id, title).components(vec![row]));
    }
    let rows: Vec<CreateActionRow> = args
        .iter()
        .map(|(name, value)| (name, argument_text(value)))
        .filter(|(_, text)| text.chars().count() <= INPUT_VALUE_MAX)
        .map(|(name, text)| input(format!("{ARG_INPUT}{name}"), name, text))
        .collect();
    if rows.is_empty() {
        return Err(if args.is_empty() {
            "This command has no arguments to edit.".into()
        } else {
            TOO_LONG_FOR_A_FORM.into()
        });
    }
    Ok(CreateModal::new(modal_id, title).components(rows))
}

/// Every input of a submitted form, as (input id, text).
pub fn modal_fields(submit: &ModalInteraction) -> Vec<(String, String)> {
    submit
        .data
        .components
        .iter()
        .flat_map(|row| row.components.iter())
        .filter_map(|c| match c {
            ActionRowComponent::InputText(input) => Some((
                input.custom_id.clone(),
                input.value.clone().unwrap_or_default(),
            )),
            _ => None,
        })
        .collect()
}

/// The arguments after an edit form: `original` with each submitted input applied as
/// `edited_value` reads it, or all of them from the JSON input.
pub fn edited_arguments(
    original: &Map<String, Value>,
    fields: &[(String, String)],
) -> Result<Map<String, Value>, UserError> {
    let mut args = original.clone();
    for (input, text) in fields {
        if input == JSON_INPUT {
            return match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(object)) => Ok(object),
                Ok(_) => Err(
                    "The arguments must be a JSON object, such as {\"filename\": \"notes.txt\"}."
                        .into(),
                ),
                Err(e) => Err(format!("The arguments are not valid JSON: {e}.").into()),
            };
        }
        let Some(name) = input.strip_prefix(ARG_INPUT) else {
            continue;
        };
        match edited_value(original.get(name), text) {
            Some(value) => args.insert(name.to_string(), value),
            None => args.remove(name),
        };
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn an_edit_form_keeps_types_removes_emptied_arguments_and_reads_json() {
        let original = json!({"filename": "a.txt", "lines": 3, "mode": "w"});
        let original = original.as_object().unwrap();
        let edited = edited_arguments(
            original,
            &fields(&[
                ("arg:filename", "b.txt"),
                ("arg:lines", "7"),
                ("arg:mode", " "),
            ]),
        )
        .unwrap();
        assert_eq!(
            Value::Object(edited),
            json!({"filename": "b.txt", "lines": 7})
        );
        // A value that is not JSON stays text, for the command's validation to refuse.
        let edited = edited_arguments(original, &fields(&[("arg:lines", "seven")])).unwrap();
        assert_eq!(edited["lines"], "seven");
        let edited =
            edited_arguments(original, &fields(&[("json", r#"{"filename": "c.txt"}"#)])).unwrap();
        assert_eq!(Value::Object(edited), json!({"filename": "c.txt"}));
        assert!(edited_arguments(original, &fields(&[("json", "[1]")]))
            .unwrap_err()
            .0
            .contains("JSON object"));
        assert!(edited_arguments(original, &fields(&[("json", "{")]))
            .unwrap_err()
            .0
            .contains("not valid JSON"));
    }

    #[test]
    fn an_edit_form_fits_discord_and_says_when_it_cannot() {
        let id = CardId::new(CardAction::Edit, "0123456789ab", 4);
        let many: Map<String, Value> = (0..6).map(|i| (format!("a{i}"), json!(i))).collect();
        let form = serde_json::to_value(edit_form(&id, "write_file", &many).unwrap()).unwrap();
        assert_eq!(form["components"].as_array().unwrap().len(), 1);
        assert_eq!(form["components"][0]["components"][0]["custom_id"], "json");
        let long = json!({"filename": "a.txt", "text": "x".repeat(5000)});
        let form =
            serde_json::to_value(edit_form(&id, "write_file", long.as_object().unwrap()).unwrap())
                .unwrap();
        let inputs = form["components"].as_array().unwrap();
        assert_eq!(inputs.len(), 1, "the long text is left out and kept");
        assert_eq!(inputs[0]["components"][0]["value"], "a.txt");
        assert!(edit_form(&id, "list_agents", &Map::new()).is_err());
    }
}
