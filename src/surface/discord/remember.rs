//! Approve & remember on a card: the "Remember…" button answers privately with a menu of the rules
//! the command allows (scope × reach × how long), and a choice approves the card and keeps the
//! rule. Server-wide rules are offered to the server's admins only.
//!
//! The button is `CardAction::Remember`; the menu is a private string select of scope × reach ×
//! life. A choice (`CardAction::RememberChoose`, value `<scope>.<reach>.<life>`) is checked (the
//! card still offers it, the rights a server rule needs, the limits) before it decides the card
//! with `Decision::Remember`.

use crate::surface::discord::people::person_of;
use poise::serenity_prelude as serenity;
use serenity::{
    ComponentInteraction, ComponentInteractionDataKind, CreateActionRow, CreateInteractionResponse,
    CreateInteractionResponseMessage, CreateSelectMenu, CreateSelectMenuKind,
    CreateSelectMenuOption,
};

use super::commands::Data;
use super::ids::{CardAction, CardId};
use super::no_mentions;
use super::respond::{decide_and_report, ephemeral, something_went_wrong, Interaction};
use crate::core::decision::Decision;
use crate::core::rules::{over_limit, RuleDraft, RuleLife, RuleReach, RuleScope};
use crate::core::state::AgentState;
use crate::service::rights::Requester;

const NOTHING_TO_REMEMBER: &str =
    "No rule can be made from this card: its class asks every time, needs several approvers, or the command sends data out.";

/// Whether `who` may make rules for every agent of the server.
fn may_make_server_rules(who: &Requester) -> bool {
    who.manage_guild
}

fn reach_code(reach: RuleReach) -> &'static str {
    match reach {
        RuleReach::Agent => "a",
        RuleReach::Server => "s",
    }
}

fn life_code(life: RuleLife) -> &'static str {
    match life {
        RuleLife::Hour => "h",
        RuleLife::Day => "d",
        RuleLife::UntilRevoked => "r",
    }
}

/// A menu choice: `<scope index>.<reach>.<life>`.
fn choice_value(scope: usize, reach: RuleReach, life: RuleLife) -> String {
    format!("{scope}.{}.{}", reach_code(reach), life_code(life))
}

const REACHES: [RuleReach; 2] = [RuleReach::Agent, RuleReach::Server];

fn parse_choice(value: &str) -> Option<(usize, RuleReach, RuleLife)> {
    let mut parts = value.split('.');
    let scope = parts.next()?.parse().ok()?;
    let reach = parts.next()?;
    let reach = REACHES.into_iter().find(|r| reach_code(*r) == reach)?;
    let life = parts.next()?;
    let life = RuleLife::ALL.into_iter().find(|l| life_code(*l) == life)?;
    parts.next().is_none().then_some((scope, reach, life))
}

/// The menu's options: every scope the card offers, for this agent and (for admins) the server,
/// for each lifetime. At most 3 × 2 × 3 = 18, within Discord's 25.
fn menu_options(scopes: &[RuleScope], admin: bool) -> Vec<CreateSelectMenuOption> {
    let reaches = if admin { &REACHES[..] } else { &REACHES[..1] };
    let mut options = Vec::new();
    for (index, scope) in scopes.iter().enumerate() {
        for &reach in reaches {
            for life in RuleLife::ALL {
                let label = format!(
                    "{} · {} · {}",
                    scope.short_label(),
                    reach.label(),
                    life.label()
                );
                let description = crate::core::text::truncate_chars(&scope.label(), 100);
                options.push(
                    CreateSelectMenuOption::new(label, choice_value(index, reach, life))
                        .description(description),
                );
            }
        }
    }
    debug_assert!(options.len() <= 25, "Discord's limit on a menu's options");
    options
}

/// "Remember…" on a card (rights, staleness and revision checked by the router): the private menu.
pub(super) async fn on_remember_click(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
) {
    let interaction = Interaction::Click(click);
    let scopes = data
        .app
        .store
        .load_agent_record(&id.agent)
        .ok()
        .flatten()
        .and_then(|state| state.progress.pending)
        .map(|pending| pending.remember)
        .unwrap_or_default();
    if scopes.is_empty() {
        interaction
            .respond(http, ephemeral(NOTHING_TO_REMEMBER))
            .await;
        return;
    }
    let menu = CreateSelectMenu::new(
        id.for_action(CardAction::RememberChoose).encode(),
        CreateSelectMenuKind::String {
            options: menu_options(&scopes, may_make_server_rules(who)),
        },
    )
    .placeholder("Approve now, and from now on approve…");
    let message = CreateInteractionResponseMessage::new()
        .content(format!(
            "Choose what to approve without asking from now on. Choosing approves cycle {} now. Rules are listed, and revoked, with `/agent rules`.",
            id.cycle
        ))
        .components(vec![CreateActionRow::SelectMenu(menu)])
        .ephemeral(true)
        .allowed_mentions(no_mentions());
    interaction
        .respond(http, CreateInteractionResponse::Message(message))
        .await;
}

/// Why the chosen rule cannot be kept, checked before the card is decided so that the clicker
/// is told and the card stays open (the core checks again when it keeps the rule).
fn refusal(
    data: &Data,
    state: &AgentState,
    scope: Option<&RuleScope>,
    reach: RuleReach,
    who: &Requester,
) -> Option<String> {
    if scope.is_none() {
        return Some("The card no longer offers that rule; look at it again.".into());
    }
    let server = match (reach, &state.money.spender.guild) {
        (RuleReach::Agent, _) => Vec::new(),
        (RuleReach::Server, _) if !may_make_server_rules(who) => {
            return Some(
                "Only the server's admins (Manage Server) make rules for every agent.".into(),
            )
        }
        (RuleReach::Server, None) => return Some("Rules for every agent need a server.".into()),
        (RuleReach::Server, Some(guild)) => match data.app.store.server_rules(guild) {
            Ok(rules) => rules,
            Err(e) => return Some(something_went_wrong("reading the server's rules", &e)),
        },
    };
    let now = data.app.clock.now();
    over_limit(reach, &state.safety.rules, &server, now).map(|why| {
        format!(
            "{}. Nothing was decided.",
            super::commands::capitalise(&why)
        )
    })
}

/// A choice in the menu: the card is approved with the rule.
pub(super) async fn on_choice(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
) {
    let interaction = Interaction::Click(click);
    let chosen = match &click.data.kind {
        ComponentInteractionDataKind::StringSelect { values } => {
            values.first().and_then(|v| parse_choice(v))
        }
        _ => None,
    };
    let Some((index, reach, life)) = chosen else {
        interaction
            .respond(
                http,
                ephemeral("That choice is not from this version of the bot."),
            )
            .await;
        return;
    };
    let Some(state) = data.app.store.load_agent_record(&id.agent).ok().flatten() else {
        interaction
            .respond(http, ephemeral("This agent no longer exists."))
            .await;
        return;
    };
    let scope = state
        .progress
        .pending
        .as_ref()
        .and_then(|pending| pending.remember.get(index));
    if let Some(why) = refusal(data, &state, scope, reach, who) {
        interaction.respond(http, ephemeral(why)).await;
        return;
    }
    let Some(scope) = scope.cloned() else {
        return;
    };
    let done = CreateInteractionResponseMessage::new()
        .content(format!(
            "Approving cycle {} and remembering: {} for {}, {}. The card and the thread say how it went.",
            id.cycle,
            scope.label(),
            reach.label(),
            life.label()
        ))
        .components(Vec::new())
        .allowed_mentions(no_mentions());
    if !interaction
        .respond(http, CreateInteractionResponse::UpdateMessage(done))
        .await
    {
        return;
    }
    let draft = RuleDraft { scope, reach, life };
    let by = person_of(&click.user);
    decide_and_report(
        http,
        data,
        interaction,
        id,
        Decision::Remember(Box::new(draft)),
        &by,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::commands::RuleArgument;
    use crate::core::commands::{ArgType, CommandSpec, Risk};
    use crate::core::reply::CommandCall;
    use crate::core::rules::offered_scopes;
    use serde_json::json;

    #[test]
    fn the_menu_fits_discord_and_its_choices_read_back() {
        let spec = CommandSpec::new("read_webpage", "r", Risk::Network)
            .arg("url", ArgType::String, "u")
            .rule_argument(RuleArgument::Url("url".into()));
        let call = CommandCall {
            name: "read_webpage".into(),
            args: json!({"url": format!("https://example.com/{}", "x".repeat(500))})
                .as_object()
                .cloned()
                .unwrap(),
        };
        let scopes = offered_scopes(&spec, &call, crate::core::rules::RuleBreadth::Any);
        let options = menu_options(&scopes, true);
        assert_eq!(options.len(), scopes.len() * 2 * 3);
        let json = serde_json::to_value(&options).unwrap();
        for option in json.as_array().unwrap() {
            for (key, max) in [("label", 100), ("value", 100), ("description", 100)] {
                let text = option[key].as_str().unwrap();
                assert!(text.chars().count() <= max, "{key}: {text}");
            }
            let value = option["value"].as_str().unwrap();
            assert!(parse_choice(value).is_some(), "{value}");
        }
        assert_eq!(menu_options(&scopes, false).len(), scopes.len() * 3);
        assert_eq!(
            parse_choice("1.s.r"),
            Some((1, RuleReach::Server, RuleLife::UntilRevoked))
        );
        for bad in ["", "x.a.h", "1.z.h", "1.a.z", "1.a.h.9"] {
            assert_eq!(parse_choice(bad), None, "{bad}");
        }
    }
}
