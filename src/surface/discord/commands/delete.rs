//! `/agent delete`: its owner or a server admin removes an agent for good (its history, memories
//! and workspace) after a private confirmation button; the thread is told and archived.
//!
//! The confirmation's button (`CardAction::DeleteAgent`, see `confirm`) checks the rights again,
//! finishes a running agent and waits at most 10 s for its actor to rest, then removes its memories
//! and its thread's notes (`Memory::remove_agent`), its own MCP server instances and their
//! directories (`App::forget_agent_mcp`), and its records (`Store::delete_agent`). The ledger keeps
//! what it spent.

use crate::core::person::Person;
use crate::surface::discord::people::person_of;
use poise::serenity_prelude as serenity;
use serenity::ComponentInteraction;

use super::{confirm, thread_agent, Ctx, Data, Error};
use crate::core::event::Event;
use crate::service::rights::{is_owner_or_admin, Requester};
use crate::service::UserError;
use crate::store::ThreadBinding;
use crate::surface::discord::ids::{CardAction, CardId};
use crate::surface::discord::respond::{author, something_went_wrong};

const ONLY_OWNER: &str =
    "Only the agent's owner, or a server admin (Manage Server), can delete it.";

/// Delete the agent, its memories and its workspace, for good.
#[poise::command(slash_command, guild_only)]
pub(super) async fn delete(ctx: Ctx<'_>) -> Result<(), Error> {
    // Two store reads, then the answer: the first response, private, with its button.
    let (binding, state) = thread_agent(ctx).await?;
    if !is_owner_or_admin(&binding, &author(ctx)) {
        return Err(UserError::new(ONLY_OWNER).into());
    }
    let question = format!(
        "Delete **{}** for good? Its history, memories, workspace and audit trail are removed; this cannot be undone (`/agent export` first keeps a copy).",
        state.name()
    );
    let id = CardId::new(CardAction::DeleteAgent, &state.id, 0);
    confirm::ask(ctx, question, &id, "Delete for good").await
}

/// The confirmation's click: the rights are checked again, the agent is finished and waited for,
/// then removed; the private message says what happened, and the thread is told and archived.
pub(crate) async fn on_delete_click(
    http: &serenity::Http,
    data: &Data,
    click: &ComponentInteraction,
    id: &CardId,
    who: &Requester,
) {
    let rights = confirm::Rights {
        may: is_owner_or_admin,
        refusal: ONLY_OWNER,
    };
    let Some(binding) = confirm::begin(http, data, click, id, who, rights, "Deleting…").await
    else {
        return;
    };
    let by = person_of(&click.user);
    let text = match delete_agent(data, &binding, &by).await {
        Ok(name) => {
            let said = format!(
                "🗑️ **{name}** was deleted by {}: its history, memories and workspace are gone.",
                by.name
            );
            data.surface.say_in_thread(binding.thread_id, &said).await;
            data.surface.archive_thread(binding.thread_id).await;
            format!("Deleted **{name}**.")
        }
        Err(why) => why.0,
    };
    confirm::end(http, click, text).await;
}

/// Finishes the agent if it runs, waits for its actor to rest, then removes it: its memories
/// and its thread's first (a removal that fails there leaves the agent's record, so the delete
/// can be tried again and removes the rest).
async fn delete_agent(
    data: &Data,
    binding: &ThreadBinding,
    by: &Person,
) -> Result<String, UserError> {
    let agent = &binding.agent_id;
    let store = &data.app.store;
    let name = match store.load_agent_record(agent) {
        Ok(Some(state)) => state.name().to_string(),
        Ok(None) => agent.clone(),
        Err(e) => return Err(something_went_wrong("reading the agent", &e).into()),
    };
    let finish = Event::Finish { by: by.clone() };
    confirm::bring_to_rest(
        data,
        agent,
        finish,
        "stopping",
        "The agent is still running a command; it finishes when the command returns. Delete it then.",
    )
    .await?;
    if let Some(memory) = &data.app.memory {
        // The thread's notes go with it: the thread is archived, and no other agent has it.
        let thread = crate::memory::MemoryPlace::thread(binding.thread_id);
        for key in [agent.as_str(), thread.key.as_str()] {
            memory
                .remove_agent(key)
                .map_err(|e| something_went_wrong("removing the agent's memories", &e))?;
        }
    }
    // Its own MCP server instances, and what they kept in their directories, go with it.
    data.app
        .forget_agent_mcp(agent)
        .await
        .map_err(|e| something_went_wrong("removing the agent's MCP server directories", &e))?;
    store
        .delete_agent(agent)
        .map_err(|e| something_went_wrong("removing the agent", &e))?;
    Ok(name)
}
