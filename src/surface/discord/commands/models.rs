//! `/agent models show|allow|remove`: which models this server's members may choose at `/agent
//! start`, changed by server admins; and the autocomplete that offers them.
//!
//! Only server admins change the list, and only priced models may be on it. `complete_model` is the
//! autocomplete of `/agent start model:`.

use poise::serenity_prelude as serenity;

use super::{guild_of, Ctx, Error};
use crate::service::ModelChange;
use crate::surface::discord::respond::{author, reply_privately};

/// The models members may choose here: see them, or (server admins) change them.
#[poise::command(
    slash_command,
    guild_only,
    subcommands("models_show", "models_allow", "models_remove")
)]
pub(super) async fn models(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// Show the models members may choose with `/agent start model:`.
#[poise::command(slash_command, guild_only, rename = "show")]
pub(super) async fn models_show(ctx: Ctx<'_>) -> Result<(), Error> {
    let models = ctx.data().agents.allowed_models(guild_of(ctx)?)?;
    reply_privately(ctx, listing(&models)).await
}

/// Offer another model here (server admins; the model needs a price).
#[poise::command(slash_command, guild_only, rename = "allow")]
pub(super) async fn models_allow(
    ctx: Ctx<'_>,
    #[description = "The model's name as the endpoint knows it"]
    #[max_length = 100]
    model: String,
) -> Result<(), Error> {
    change(ctx, ModelChange::Allow(model)).await
}

/// Stop offering a model here (server admins; agents already using it keep it).
#[poise::command(slash_command, guild_only, rename = "remove")]
pub(super) async fn models_remove(
    ctx: Ctx<'_>,
    #[description = "The model to remove"]
    #[max_length = 100]
    #[autocomplete = "complete_model"]
    model: String,
) -> Result<(), Error> {
    change(ctx, ModelChange::Remove(model)).await
}

async fn change(ctx: Ctx<'_>, change: ModelChange) -> Result<(), Error> {
    let models = ctx
        .data()
        .agents
        .change_models(guild_of(ctx)?, &author(ctx), change)?;
    reply_privately(ctx, listing(&models)).await
}

fn listing(models: &[String]) -> String {
    let shown: Vec<String> = models.iter().map(|m| format!("`{m}`")).collect();
    format!(
        "Models offered here: {} (the first is the default).",
        shown.join(", ")
    )
}

/// The models this server offers that match what the member has typed so far.
pub(super) async fn complete_model(
    ctx: Ctx<'_>,
    typed: &str,
) -> serenity::CreateAutocompleteResponse {
    let models = match ctx.guild_id() {
        Some(guild) => ctx
            .data()
            .agents
            .model_choices(guild.get(), typed)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot list the models for autocomplete");
                Vec::new()
            }),
        None => Vec::new(),
    };
    let choices = models
        .into_iter()
        .map(serenity::AutocompleteChoice::from)
        .collect();
    serenity::CreateAutocompleteResponse::new().set_choices(choices)
}
