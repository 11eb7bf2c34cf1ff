//! `/agent budget chart`: the server's spend per day, by person and by agent, as a chart for its
//! admins.
//!
//! Only for those who manage the server. The spend comes from `Budgets::spend_on`; people are named
//! from the cache, else through Discord's member lookup, else by the end of their id, and only the
//! named series are looked up. The answer is the chart and its totals in words.

use std::collections::HashMap;

use chrono::{Duration, NaiveDate};
use poise::serenity_prelude::{CreateAttachment, UserId};

use super::{guild_of, Ctx, Error};
use crate::charts::{daily_spend_png, DailySpend};
use crate::core::budget::{format_usd, Micros};
use crate::core::state::GuildId;
use crate::service::UserError;
use crate::surface::discord::respond::{author, defer_privately, send_privately};

/// The longest window the chart shows: a bar a day stays readable up to about a month.
const MOST_DAYS: u8 = 31;

/// Show the server's spend per day, by person and by agent (server admins).
#[poise::command(slash_command, guild_only, rename = "chart")]
pub(super) async fn budget_chart(
    ctx: Ctx<'_>,
    #[description = "How many days back, today included (default 14)"]
    #[min = 1]
    #[max = 31]
    days: Option<u8>,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    if !author(ctx).manage_guild {
        return Err(UserError::new(
            "Only server admins (Manage Server) see what each person and agent spent.",
        )
        .into());
    }
    let data = ctx.data();
    let guild_id = guild_of(ctx)?;
    let guild = GuildId::from(guild_id);
    let today = data.app.clock.now().date_naive();
    let days: Vec<NaiveDate> = (0..i64::from(days.unwrap_or(14).clamp(1, MOST_DAYS)))
        .rev()
        .map(|back| today - Duration::days(back))
        .collect();
    let mut by_person = Vec::new();
    let mut by_agent = Vec::new();
    for day in &days {
        for (person, agent, spent) in data.app.budgets.spend_on(&guild, *day)? {
            let person = person.unwrap_or_else(|| "(nobody)".into());
            by_person.push((person, *day, spent));
            by_agent.push((agent, *day, spent));
        }
    }
    let total: Micros = by_agent.iter().map(|(_, _, spent)| *spent).sum();
    let mut by_person = DailySpend::from_rows(days.clone(), &by_person);
    let mut by_agent = DailySpend::from_rows(days.clone(), &by_agent);
    // Only the named series are looked up, so a busy server costs a handful of lookups.
    let mut people = HashMap::new();
    for (id, _) in &by_person.series {
        let name = person_name(ctx, guild_id, id).await;
        people.insert(id.clone(), name);
    }
    by_person.rename(|id| people.get(id).cloned().flatten());
    let store = data.app.store.clone();
    by_agent.rename(|id| {
        store
            .load_agent_record(id)
            .ok()
            .flatten()
            .map(|state| state.name().to_string())
            .or_else(|| {
                // People's server notes are embedded at their own expense, under the server's
                // memory account rather than an agent.
                let place = crate::memory::MemoryPlace::from_key(id);
                Some(match place.scope {
                    crate::core::memory::MemoryScope::Server => "server notes".to_string(),
                    _ => format!("{id} (deleted)"),
                })
            })
    });
    let first = days.first().copied().unwrap_or(today);
    let title = format!(
        "Spend per day, {} to {}: {}",
        first.format("%b %-d"),
        today.format("%b %-d"),
        format_usd(total)
    );
    // The chart's key in words too, for anyone who cannot see the picture.
    let listed = |spend: &DailySpend| {
        let named: Vec<String> = spend
            .totals()
            .into_iter()
            .map(|(name, spent)| format!("{name} {}", format_usd(spent)))
            .collect();
        if named.is_empty() {
            "nothing".to_string()
        } else {
            named.join(", ")
        }
    };
    let text = format!(
        "The server spent {} in the last {} days (UTC).\nBy person: {}\nBy agent: {}",
        format_usd(total),
        days.len(),
        listed(&by_person),
        listed(&by_agent)
    );
    let png = data
        .agents_runtime
        .spawn_blocking(move || daily_spend_png(&title, &by_person, &by_agent))
        .await??;
    send_privately(
        ctx,
        text,
        vec![CreateAttachment::bytes(png, "spend-per-day.png")],
    )
    .await
}

/// A person's name for the chart: from the cache, else from Discord, else the end of their id.
async fn person_name(ctx: Ctx<'_>, guild: u64, id: &str) -> Option<String> {
    let user = UserId::new(id.parse().ok()?);
    if let Some(user) = ctx.cache().user(user) {
        return Some(user.display_name().to_string());
    }
    match poise::serenity_prelude::GuildId::new(guild)
        .member(ctx, user)
        .await
    {
        Ok(member) => Some(member.display_name().to_string()),
        Err(e) => {
            tracing::debug!(error = %e, "a person on the spend chart could not be looked up");
            Some(format!("user …{}", &id[id.len().saturating_sub(4)..]))
        }
    }
}
