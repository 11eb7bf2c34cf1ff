//! `/agent rewind cycle`: its owner (or a server admin) puts an agent back, in place, to how it was
//! after a cycle (history, memories and workspace) after a private confirmation button.
//!
//! The command is checked as a fork would be, then asks with a button (`CardAction::RewindAgent`,
//! the cycle in the id's number slot, see `confirm`). The click checks again (the cycle still in
//! reach, the caps on running agents), pauses the agent and waits at most 10 s for its actor to
//! rest. Then `Supervisor::change_resting_and_start` holds the live-agent lock throughout, so no
//! click or message can start an actor from the old state, and starts the rewound agent once, with
//! `Event::Recovered`. Inside it, `Memory::forget_after` runs first (a failure there leaves nothing
//! undone that a retry would not undo), then `AgentService::rewind`. The thread is told through
//! `rewound`.

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
use crate::surface::discord::rewound::PendingCard;

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
/// while no actor can start, its later memories forgotten, then started again; the card it
/// waited on is closed, and the thread told what happened.
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
    let cycle = id.cycle;
    let text = match rewind_agent(data, &binding, who, cycle, &by).await {
        Ok(rewound) => {
            if let Some(card) = &rewound.superseded {
                let why = format!(
                    "⏪ Superseded: {} rewound the agent to how it was after cycle {cycle}; \
                     this card no longer acts.",
                    by.name
                );
                data.surface.close_superseded(card, &why).await;
            }
            let said = format!(
                "⏪ {} rewound **{}** to how it was after cycle {cycle}: {} later steps, their \
                 memories and their file changes are undone. It starts again by itself from \
                 there, with cycle {}; cards shown before the rewind no longer act.",
                by.name, rewound.name, rewound.steps, rewound.next
            );
            data.surface.say_in_thread(binding.thread_id, &said).await;
            format!("Rewound to cycle {cycle}.")
        }
        Err(not) => {
            if let Some(said) = not.thread_notice {
                data.surface.say_in_thread(binding.thread_id, &said).await;
            }
            not.why
        }
    };
    confirm::end(http, click, text).await;
}

/// A rewind done: the agent's name, the steps undone, its next cycle, and the card it waited on
/// before (now superseded).
struct Rewound {
    name: String,
    steps: usize,
    next: u64,
    superseded: Option<PendingCard>,
}

/// A rewind that did not happen: why, for the person who asked, and, when the rewind had paused
/// the agent, what its thread is told (whether it stays paused).
struct NotRewound {
    why: String,
    thread_notice: Option<String>,
}

impl From<UserError> for NotRewound {
    fn from(refusal: UserError) -> Self {
        NotRewound::from(refusal.0)
    }
}

impl From<String> for NotRewound {
    fn from(why: String) -> Self {
        NotRewound {
            why,
            thread_notice: None,
        }
    }
}

/// Checks the rewind can happen, pauses the agent if it runs and waits for it to rest, then in
/// one step no event can split (`Supervisor::change_resting_and_start`) forgets the memories of
/// the undone cycles, rewinds the store and starts the agent again. While it works, the pause is
/// announced as the rewind's (the rewind starts the agent again).
async fn rewind_agent(
    data: &Data,
    binding: &ThreadBinding,
    who: &Requester,
    cycle: u64,
    by: &Person,
) -> Result<Rewound, NotRewound> {
    let agent = &binding.agent_id;
    let refused = |e: anyhow::Error| match e.downcast_ref::<UserError>() {
        Some(refusal) => refusal.0.clone(),
        None => something_went_wrong("rewinding the agent", &e),
    };
    // Before anything changes: a rewind that cannot happen leaves the agent as it was.
    let current = match data.app.store.load_agent(agent) {
        Ok(Some(state)) => state,
        Ok(None) => return Err(String::from("This agent no longer exists.").into()),
        Err(e) => return Err(something_went_wrong("reading the agent", &e).into()),
    };
    data.agents
        .fork_cycle(&current, Some(cycle))
        .map_err(refused)?;
    data.agents
        .check_resume(binding, &current, who)
        .map_err(refused)?;
    let rest = {
        // Marked only until the agent rests: its pause is the one to be told apart.
        let _rewinding = data.surface.mark_rewind(agent, cycle);
        let pause = Event::Pause { by: by.clone() };
        confirm::bring_to_rest(
            data,
            agent,
            pause,
            "pausing",
            "The agent is still running a command; it pauses when the command returns. Rewind it then.",
        )
        .await?
    };
    let first = Event::Recovered { interrupted: false };
    let rewound = data.supervisor.change_resting_and_start(agent, first, || {
        let current = data
            .app
            .store
            .load_agent(agent)?
            .ok_or_else(|| anyhow::anyhow!("the agent vanished"))?;
        // Read before the files are put back: the card keeps showing the change it showed.
        let superseded = data.surface.pending_card(&current);
        // Memories first: if the store's rewind then fails, nothing was undone that a retry
        // would not undo again.
        if let Some(memory) = &data.app.memory {
            memory.forget_after(agent, cycle)?;
        }
        let (state, steps) = data.agents.rewind(&current, cycle, by)?;
        let done = Rewound {
            name: state.name().to_string(),
            steps,
            next: state.progress.cycle,
            superseded,
        };
        Ok::<_, anyhow::Error>((state, done))
    });
    let why = match rewound {
        Some(Ok(done)) => return Ok(done),
        None => "The agent started again meanwhile (or the bot is shutting down); pause it, then rewind it.".to_string(),
        Some(Err(e)) => refused(e),
    };
    // The thread was told the agent paused for the rewind: it is told how that ended.
    let thread_notice = (rest == confirm::Rest::Brought).then(|| {
        let now = match data.supervisor.is_running(agent) {
            true => "it goes on as it was.",
            false => "it stays paused: `/agent resume` continues it.",
        };
        format!(
            "⏪ The rewind of **{}** to cycle {cycle} did not happen; {now}",
            current.name()
        )
    });
    Err(NotRewound { why, thread_notice })
}
