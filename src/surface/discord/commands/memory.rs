//! `/memory`: team memory in Discord. `add` keeps a note for the thread's agent, its thread or the
//! whole server; `search` finds what the thread's agent would recall (or a server's notes);
//! `list` pages through one place; `writers` lets admins name the roles that may write server
//! memories. Results carry Pin, Unpin and Forget buttons, whose rights are checked again on every
//! click.

use crate::surface::discord::people::person_of;
use poise::serenity_prelude as serenity;
use serenity::{
    ButtonStyle, ComponentInteraction, CreateActionRow, CreateButton, CreateInteractionResponse,
    CreateInteractionResponseMessage, RoleId,
};

use super::{guild_of, Ctx, Data, Error};
use crate::core::memory::MemoryScope;
use crate::core::state::{AgentState, GuildId};
use crate::memory::team::{MemoryPage, NOTE_MAX_CHARS};
use crate::memory::{Memory, MemoryPlace, MemoryRecord, Payer, Stamp};
use crate::service::memory_changes::MemoryChange;
use crate::service::rights::{
    may_decide, may_write_server_memory, Requester, MAX_MEMORY_WRITER_ROLES,
};
use crate::service::{UserError, NOT_ALLOWED};
use crate::store::{Store, ThreadBinding};
use crate::surface::discord::cards::{message_text, MESSAGE_MAX};
use crate::surface::discord::ids::{CardAction, CardId};
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::{
    author, defer_privately, ephemeral, reply_privately, something_went_wrong, Interaction,
};

/// Memories shown per `/memory list` page: with one row of buttons each and one to turn the page,
/// within Discord's five rows.
const PER_PAGE: usize = 4;
/// Memories a search shows.
const SEARCH_HITS: usize = 5;

const SWITCHED_OFF: &str = "Long-term memory is switched off.";
const NOT_A_SERVER_WRITER: &str = "Only the server's admins and the roles they named with `/memory writers` may change its shared memories.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, poise::ChoiceParameter)]
enum ScopeChoice {
    #[name = "this agent"]
    Agent,
    #[name = "this thread"]
    Thread,
    #[name = "the server"]
    Server,
}

/// Team memory: notes for an agent, its thread or the whole server, and what the agents remember.
#[poise::command(
    slash_command,
    guild_only,
    subcommands("add", "search", "list", "writers")
)]
pub(super) async fn memory(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// Where a command is used: the server, and the agent of the thread it is used in, if any.
struct Here {
    guild: u64,
    agent: Option<(ThreadBinding, AgentState)>,
}

impl Here {
    async fn of(ctx: Ctx<'_>) -> Result<Here, Error> {
        let guild = guild_of(ctx)?;
        let store = &ctx.data().app.store;
        let agent = match store.agent_for_thread(ctx.channel_id().get())? {
            Some(agent) => match (store.binding(&agent)?, store.load_agent(&agent)?) {
                (Some(binding), Some(state)) => Some((binding, state)),
                // Never the server instead: a note meant for this agent must not reach them all.
                _ => {
                    return Err(UserError::new(
                        "This thread's agent cannot be read now; try again.",
                    )
                    .into())
                }
            },
            None => None,
        };
        Ok(Here { guild, agent })
    }

    /// The place `scope` names here; without one, the thread's agent in its thread and the
    /// server elsewhere.
    fn place(&self, scope: Option<ScopeChoice>) -> Result<MemoryPlace, UserError> {
        let scope = scope.unwrap_or(match self.agent {
            Some(_) => ScopeChoice::Agent,
            None => ScopeChoice::Server,
        });
        match (scope, &self.agent) {
            (ScopeChoice::Server, _) => Ok(MemoryPlace::server(&GuildId::from(self.guild))),
            (ScopeChoice::Agent, Some((_, state))) => Ok(MemoryPlace::agent(&state.id)),
            (ScopeChoice::Thread, Some((binding, _))) => Ok(MemoryPlace::thread(binding.thread_id)),
            (_, None) => Err(UserError::new(
                "Use this in an agent's thread for the agent's or the thread's memories.",
            )),
        }
    }

    /// Who pays for an embedding: the thread's agent for its own and its thread's memories, the
    /// person for the server's.
    fn payer(&self, memory: &Memory, place: &MemoryPlace, who: &Requester) -> Payer {
        match (&self.agent, place.scope) {
            (Some((_, state)), MemoryScope::Agent | MemoryScope::Thread) => memory.payer(state),
            _ => memory.person_payer(&place.key, who.user_id, GuildId::from(self.guild)),
        }
    }
}

const ANOTHER_SERVERS: &str = "These memories belong to another server.";

/// Whether `who`, in server `guild`, may see the memories kept at `place`: an agent's and a
/// thread's are for the agent's deciders; a server's for its members.
fn may_read(
    store: &Store,
    place: &MemoryPlace,
    who: &Requester,
    guild: u64,
) -> Result<(), UserError> {
    match place.scope {
        MemoryScope::Server if place.server_id() == Some(guild.to_string().as_str()) => Ok(()),
        MemoryScope::Server => Err(ANOTHER_SERVERS.into()),
        MemoryScope::Agent | MemoryScope::Thread => deciders_only(store, place, who, guild),
    }
}

/// Whether `who` may add to, pin, unpin and forget the memories kept at `place`: an agent's and a
/// thread's deciders; for a server's, its admins and the roles they named.
fn may_write(
    store: &Store,
    place: &MemoryPlace,
    who: &Requester,
    guild: u64,
) -> Result<(), UserError> {
    match place.scope {
        MemoryScope::Server => {
            may_read(store, place, who, guild)?;
            let writers = store
                .memory_writers(guild)
                .map_err(|e| something_went_wrong("reading the memory writers", &e))?;
            if may_write_server_memory(who, &writers) {
                Ok(())
            } else {
                Err(NOT_A_SERVER_WRITER.into())
            }
        }
        MemoryScope::Agent | MemoryScope::Thread => deciders_only(store, place, who, guild),
    }
}

/// The agent's deciders, in the agent's own server: the rights a member has come from the
/// server the click is made in, so a moderator elsewhere is nobody here.
fn deciders_only(
    store: &Store,
    place: &MemoryPlace,
    who: &Requester,
    guild: u64,
) -> Result<(), UserError> {
    let agent = match place.thread_id() {
        Some(thread) => store.agent_for_thread(thread),
        None => Ok(Some(place.key.clone())),
    };
    let binding = match agent {
        Ok(Some(agent)) => store.binding(&agent),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    match binding {
        Ok(Some(binding)) if binding.guild_id != guild => Err(ANOTHER_SERVERS.into()),
        Ok(Some(binding)) if may_decide(&binding, who) => Ok(()),
        Ok(Some(_)) => Err(NOT_ALLOWED.into()),
        Ok(None) => Err("This agent no longer exists.".into()),
        Err(e) => Err(something_went_wrong("reading the agent", &e).into()),
    }
}

/// Keep a note: for this agent, this thread, or every agent of the server.
#[poise::command(slash_command, guild_only)]
async fn add(
    ctx: Ctx<'_>,
    #[description = "What to remember"]
    #[max_length = 1000]
    text: String,
    #[description = "Who shares it (in a thread: this agent; elsewhere: the server)"] scope: Option<
        ScopeChoice,
    >,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let data = ctx.data();
    let Some(memory) = data.app.memory.clone() else {
        return reply_privately(ctx, SWITCHED_OFF).await;
    };
    let here = Here::of(ctx).await?;
    let place = here.place(scope)?;
    let who = author(ctx);
    may_write(&data.app.store, &place, &who, here.guild)?;
    if text.trim().is_empty() || text.chars().count() > NOTE_MAX_CHARS {
        return Err(UserError::new("A note is 1 to 1000 characters.").into());
    }
    let cycle = match (&here.agent, place.scope) {
        (Some((_, state)), MemoryScope::Agent) => state.progress.cycle,
        _ => 0,
    };
    let payer = here.payer(&memory, &place, &who);
    let (agents, by) = (data.agents.clone(), person_of(ctx.author()));
    // On the agents' runtime: the embedding call's connection joins their pool.
    let added = data
        .agents_runtime
        .spawn({
            let (place, text) = (place.clone(), text.clone());
            async move {
                agents
                    .add_memory_note(&memory, &payer, &place, cycle, &text, &by)
                    .await
            }
        })
        .await?;
    let reply_text = match added {
        Ok(record) => format!(
            "Kept {} note **#{}**: {}",
            scope_phrase(place.scope),
            record.id,
            if place.scope == MemoryScope::Server {
                "every agent of this server recalls it when it is relevant."
            } else {
                "the agent recalls it when it is relevant."
            }
        ),
        Err(e) => format!(
            "Nothing was kept: {e}. Your note, to try again:\n> {}",
            text.replace('\n', "\n> ")
        ),
    };
    reply_privately(ctx, message_text(&reply_text)).await
}

/// Search memories: in a thread, what its agent would recall; elsewhere, the server's notes.
#[poise::command(slash_command, guild_only)]
async fn search(
    ctx: Ctx<'_>,
    #[description = "What to look for"]
    #[max_length = 500]
    query: String,
    #[description = "Search one place only"] scope: Option<ScopeChoice>,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let data = ctx.data();
    let Some(memory) = data.app.memory.clone() else {
        return reply_privately(ctx, SWITCHED_OFF).await;
    };
    let here = Here::of(ctx).await?;
    let who = author(ctx);
    let places = match (scope, &here.agent) {
        (None, Some((binding, state))) => MemoryPlace::recalled_by(
            &state.id,
            Some(binding.thread_id),
            Some(&GuildId::from(here.guild)),
        ),
        _ => vec![here.place(scope)?],
    };
    for place in &places {
        may_read(&data.app.store, place, &who, here.guild)?;
    }
    let payer = here.payer(&memory, &places[0], &who);
    let search = {
        let (memory, places, query) = (memory.clone(), places.clone(), query.clone());
        async move { memory.search_at(&payer, &places, &query, SEARCH_HITS).await }
    };
    let hits = match data.agents_runtime.spawn(search).await? {
        Ok(hits) => hits,
        Err(e) => return reply_privately(ctx, format!("The search failed: {e}.")).await,
    };
    let own = here
        .agent
        .as_ref()
        .map_or("", |(_, state)| state.id.as_str());
    let mut found = Vec::new();
    for hit in hits.into_iter().take(SEARCH_HITS) {
        let place = MemoryPlace::from_key(hit.kept_under(own));
        if let Some(record) = memory.record_at(&place, hit.id)? {
            found.push((record, Some(hit.score)));
        }
    }
    if found.is_empty() {
        return reply_privately(ctx, "No memories match.").await;
    }
    let heading = format!("Memories for “{}”:", message_text(&query));
    let (text, rows) = memory_view(&heading, &found);
    send(ctx, text, rows).await
}

/// List the memories of this agent, this thread or the server, newest first.
#[poise::command(slash_command, guild_only)]
async fn list(
    ctx: Ctx<'_>,
    #[description = "Whose (in a thread: this agent; elsewhere: the server)"] scope: Option<
        ScopeChoice,
    >,
    #[description = "Which page, from 1 (the newest)"]
    #[min = 1]
    page: Option<u32>,
) -> Result<(), Error> {
    let data = ctx.data();
    let Some(memory) = data.app.memory.as_ref() else {
        return reply_privately(ctx, SWITCHED_OFF).await;
    };
    let here = Here::of(ctx).await?;
    let place = here.place(scope)?;
    may_read(&data.app.store, &place, &author(ctx), here.guild)?;
    let page = page.unwrap_or(1).max(1) as usize - 1;
    let (text, rows) = list_view(memory, &place, page)?;
    send(ctx, text, rows).await
}

/// Choose the roles that may write the server's shared memories (its admins always may).
#[poise::command(slash_command, guild_only)]
async fn writers(
    ctx: Ctx<'_>,
    #[description = "A role to let write (or, with allow: False, to stop)"] role: Option<RoleId>,
    #[description = "Let the role write (the default), or take it back"] allow: Option<bool>,
) -> Result<(), Error> {
    let guild = guild_of(ctx)?;
    if !author(ctx).manage_guild {
        return Err(UserError::new(
            "Only the server's admins (Manage Server) choose who writes its shared memories.",
        )
        .into());
    }
    let store = &ctx.data().app.store;
    let mut roles = store.memory_writers(guild)?;
    if let Some(role) = role.map(|r| r.get()) {
        roles.retain(|r| *r != role);
        if allow.unwrap_or(true) {
            if roles.len() >= MAX_MEMORY_WRITER_ROLES {
                return Err(UserError::new(format!(
                    "At most {MAX_MEMORY_WRITER_ROLES} roles may write server memories; take one back first."
                ))
                .into());
            }
            roles.push(role);
        }
        store.set_memory_writers(guild, &roles)?;
    }
    let text = if roles.is_empty() {
        "Server memories are written by the server's admins only.".to_string()
    } else {
        let named: Vec<String> = roles.iter().map(|r| format!("<@&{r}>")).collect();
        format!(
            "Server memories are written by the server's admins and {}.",
            named.join(", ")
        )
    };
    reply_privately(ctx, text).await
}

async fn send(ctx: Ctx<'_>, text: String, rows: Vec<CreateActionRow>) -> Result<(), Error> {
    ctx.send(
        poise::CreateReply::default()
            .content(text)
            .components(rows)
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}

/// "an agent", "a thread", "a server": how a reply names the kind of note.
fn scope_phrase(scope: MemoryScope) -> &'static str {
    match scope {
        MemoryScope::Agent => "an agent",
        MemoryScope::Thread => "a thread",
        MemoryScope::Server => "a server",
    }
}

fn stamp_text(verb: &str, stamp: &Stamp) -> String {
    format!(
        "{verb} by {} on {}",
        stamp.by.name,
        stamp.at.format("%Y-%m-%d %H:%M UTC")
    )
}

/// One memory as a line: where it is kept, who made it and when, its pin, and its text.
fn memory_line(record: &MemoryRecord, similarity: Option<f32>) -> String {
    let mut parts = vec![
        format!("**#{}**", record.id),
        record.scope.label().to_string(),
    ];
    match &record.added_by {
        Some(added) => parts.push(stamp_text("added", added)),
        None => parts.push(format!(
            "cycle {} · {}",
            record.cycle,
            record.source.label()
        )),
    }
    match (&record.pinned_by, &record.unpinned_by) {
        (Some(pinned), _) if record.pinned => {
            parts.push(format!("📌 {}", stamp_text("pinned", pinned)))
        }
        _ if record.pinned => parts.push("📌 pinned".into()),
        (_, Some(unpinned)) => parts.push(stamp_text("unpinned", unpinned)),
        _ => {}
    }
    if let Some(score) = similarity {
        parts.push(format!("similarity {score:.2}"));
    }
    format!(
        "{}\n> {}",
        parts.join(" · "),
        crate::core::text::truncate_chars(&record.text.replace('\n', " / "), 250)
    )
}

/// The text and button rows that show `memories` under `heading`.
fn memory_view(
    heading: &str,
    memories: &[(MemoryRecord, Option<f32>)],
) -> (String, Vec<CreateActionRow>) {
    let mut lines = vec![heading.to_string()];
    let mut rows = Vec::new();
    for (record, similarity) in memories {
        lines.push(memory_line(record, *similarity));
        let (action, label) = if record.pinned {
            (CardAction::MemoryUnpin, "Unpin")
        } else {
            (CardAction::MemoryPin, "Pin")
        };
        rows.push(CreateActionRow::Buttons(vec![
            CreateButton::new(CardId::new(action, &record.agent, record.id).encode())
                .label(format!("{label} #{}", record.id))
                .style(ButtonStyle::Secondary),
            CreateButton::new(
                CardId::new(CardAction::MemoryForget, &record.agent, record.id).encode(),
            )
            .label(format!("Forget #{}", record.id))
            .style(ButtonStyle::Danger),
        ]));
    }
    let text = crate::core::text::truncate_chars(&lines.join("\n"), MESSAGE_MAX);
    (text, rows)
}

/// A page of a place's memories, with the buttons to its neighbours.
fn list_view(
    memory: &Memory,
    place: &MemoryPlace,
    page: usize,
) -> Result<(String, Vec<CreateActionRow>), Error> {
    let MemoryPage { memories, more } = memory.list(place, page, PER_PAGE)?;
    let whose = match place.scope {
        MemoryScope::Agent => "This agent's memories",
        MemoryScope::Thread => "This thread's notes",
        MemoryScope::Server => "The server's shared memories",
    };
    if memories.is_empty() {
        let text = if page == 0 {
            format!("{whose}: none yet. Add one with `/memory add`.")
        } else {
            format!("{whose}: no page {}.", page + 1)
        };
        return Ok((text, Vec::new()));
    }
    let shown: Vec<(MemoryRecord, Option<f32>)> = memories.into_iter().map(|r| (r, None)).collect();
    let (text, mut rows) = memory_view(&format!("{whose}, page {}:", page + 1), &shown);
    if page > 0 || more {
        let to =
            |page: usize| CardId::new(CardAction::MemoryPage, &place.key, page as u64).encode();
        // The two ids differ even when both buttons are disabled: Discord wants them unique.
        rows.push(CreateActionRow::Buttons(vec![
            CreateButton::new(to(page.saturating_sub(1)))
                .label("◀ Newer")
                .style(ButtonStyle::Secondary)
                .disabled(page == 0),
            CreateButton::new(to(page + 1))
                .label("Older ▶")
                .style(ButtonStyle::Secondary)
                .disabled(!more),
        ]));
    }
    Ok((text, rows))
}

/// Pin, Unpin, Forget or a page turn on `/memory` results: the rights are checked again, since
/// the results may be old and rights may have changed.
pub(crate) async fn on_memory_click(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
) {
    let interaction = Interaction::Click(click);
    let Some(memory) = &data.app.memory else {
        interaction.respond(http, ephemeral(SWITCHED_OFF)).await;
        return;
    };
    let guild = click.guild_id.map_or(0, |g| g.get());
    let place = MemoryPlace::from_key(&id.agent);
    let store = &data.app.store;
    let change = match id.action {
        CardAction::MemoryForget => MemoryChange::Forget,
        CardAction::MemoryPin => MemoryChange::Pin,
        CardAction::MemoryUnpin => MemoryChange::Unpin,
        _ => {
            // A page past any list is shown as empty; the clamp keeps its neighbours' numbers
            // from overflowing.
            let page = usize::try_from(id.cycle.min(u64::from(u32::MAX))).unwrap_or(0);
            let response = match may_read(store, &place, who, guild) {
                Ok(()) => match list_view(memory, &place, page) {
                    Ok((text, rows)) => CreateInteractionResponse::UpdateMessage(
                        CreateInteractionResponseMessage::new()
                            .content(text)
                            .components(rows)
                            .allowed_mentions(no_mentions()),
                    ),
                    Err(e) => ephemeral(something_went_wrong("a memory page", &e)),
                },
                Err(refusal) => ephemeral(refusal.0),
            };
            interaction.respond(http, response).await;
            return;
        }
    };
    let text = match may_write(store, &place, who, guild) {
        Ok(()) => match data
            .agents
            .change_memory(memory, &place, id.cycle, change, &person_of(&click.user))
            .await
        {
            Ok(_) => format!("{} memory #{}.", change.done(), id.cycle),
            Err(e) => format!("Nothing changed: {e}."),
        },
        Err(refusal) => refusal.0,
    };
    interaction.respond(http, ephemeral(text)).await;
}
