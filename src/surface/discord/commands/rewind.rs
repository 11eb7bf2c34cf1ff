//! `/agent rewind cycle`: its owner (or a server admin) puts an agent back, in place, to how it
//! was after a cycle (history, memories and workspace) after a private confirmation button.

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
    "Only the agent's owner, or a server admin (Manage Server), can rewind it.";

/// Put the agent back to how it was after a cycle: later steps, memories and file changes undone.
#[poise::command(slash_command, guild_only)]
pub(super) async fn rewind(
    ctx: Ctx<'_>,
    #[description = "The cycle to go back to (its step is kept)"]
    #[min = 0]
    cycle: u64,
) -> Result<(), Error> {
    // A few store reads, then the answer: the first response, private, with its button.
    let (binding, state) = thread_agent(ctx).await?;
    let who = author(ctx);
    if !is_owner_or_admin(&binding, &who) {
        return Err(UserError::new(ONLY_OWNER).into());
    }
    // Checked now so that a cycle out of reach is said before anyone confirms.
    ctx.data().agents.fork_cycle(&state, Some(cycle))?;
    ctx.data().agents.check_resume(&binding, &state, &who)?;
    let later = ctx.data().app.store.steps_after(&state.id, cycle)?;
    let question = format!(
        "Rewind **{}** to how it was after cycle {cycle}? The {later} steps after it, the memories \
         they made and their changes to its files are undone; it then thinks again from there. \
         `/agent fork` tries another way without undoing anything.",
        state.name()
    );
    let id = CardId::new(CardAction::RewindAgent, &state.id, cycle);
    confirm::ask(ctx, question, &id, &format!("Rewind to cycle {cycle}")).await
}

/// The confirmation's click: rights checked again, the agent paused and waited for, rewound
/// while no actor can start, its later memories forgotten, then started again.
pub(crate) async fn on_rewind_click(
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
    let Some(binding) = confirm::begin(http, data, click, id, who, rights, "Rewinding…").await
    else {
        return;
    };
    let by = person_of(&click.user);
    let text = match rewind_agent(data, &binding, who, id.cycle, &by).await {
        Ok((name, steps, next)) => {
            let said = format!(
                "⏪ {by} rewound **{name}** to how it was after cycle {}: {steps} later steps, \
                 their memories and their file changes are undone. It goes on from there with \
                 cycle {next}; older cards no longer act.",
                id.cycle
            );
            data.surface.say_in_thread(binding.thread_id, &said).await;
            format!("Rewound to cycle {}.", id.cycle)
        }
        Err(why) => why,
    };
    confirm::end(http, click, text).await;
}

/// Checks the rewind can happen, pauses the agent if it runs and waits for it to rest, then in
/// one step no event can split (`Supervisor::change_resting_and_start`) forgets the memories of
/// the undone cycles, rewinds the store and starts the agent again. Returns its name, the steps
/// undone and its next cycle.
async fn rewind_agent(
    data: &Data,
    binding: &ThreadBinding,
    who: &Requester,
    cycle: u64,
    by: &Person,
) -> Result<(String, usize, u64), String> {
    let agent = &binding.agent_id;
    let refused = |e: anyhow::Error| match e.downcast_ref::<UserError>() {
        Some(refusal) => refusal.0.clone(),
        None => something_went_wrong("rewinding the agent", &e),
    };
    // Before anything changes: a rewind that cannot happen leaves the agent as it was.
    let current = match data.app.store.load_agent(agent) {
        Ok(Some(state)) => state,
        Ok(None) => return Err("This agent no longer exists.".into()),
        Err(e) => return Err(something_went_wrong("reading the agent", &e)),
    };
    data.agents
        .fork_cycle(&current, Some(cycle))
        .map_err(refused)?;
    data.agents
        .check_resume(binding, &current, who)
        .map_err(refused)?;
    let pause = Event::Pause { by: by.clone() };
    confirm::bring_to_rest(
        data,
        agent,
        pause,
        "pausing",
        "The agent is still running a command; it pauses when the command returns. Rewind it then.",
    )
    .await?;
    let first = Event::Recovered { interrupted: false };
    let rewound = data.supervisor.change_resting_and_start(agent, first, || {
        let current = data
            .app
            .store
            .load_agent(agent)?
            .ok_or_else(|| anyhow::anyhow!("the agent vanished"))?;
        // Memories first: if the store's rewind then fails, nothing was undone that a retry
        // would not undo again.
        if let Some(memory) = &data.app.memory {
            memory.forget_after(agent, cycle)?;
        }
        let (state, steps) = data.agents.rewind(&current, cycle, by)?;
        let done = (state.name().to_string(), steps, state.cycle);
        Ok::<_, anyhow::Error>((state, done))
    });
    match rewound {
        None => Err("The agent started again meanwhile (or the bot is shutting down); pause it, then rewind it.".into()),
        Some(Err(e)) => Err(refused(e)),
        Some(Ok(done)) => Ok(done),
    }
}
