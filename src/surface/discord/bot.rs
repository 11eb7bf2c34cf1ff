//! The Discord bot: connects through serenity (optionally via another Discord-compatible API),
//! registers `/agent …` with poise, and routes every button click, modal and thread message.
//! Interactions are acknowledged first; the slow work runs in spawned tasks, never in the handler.

use std::sync::Arc;

use anyhow::Context as _;
use poise::serenity_prelude as serenity;
use serenity::{
    ActionRowComponent, AutoArchiveDuration, ChannelType, ComponentInteraction, CreateActionRow,
    CreateInputText, CreateInteractionResponse, CreateInteractionResponseFollowup,
    CreateInteractionResponseMessage, CreateModal, CreateThread, FullEvent, GatewayIntents,
    HttpBuilder, InputTextStyle, Interaction, ModalInteraction, RoleId, UserId,
};

use super::cards::thread_name;
use super::ids::{CardAction, CardId};
use super::perms::{may_decide, may_set_agent_budget, may_share, Clicker};
use super::{no_mentions, DiscordSurface};
use crate::budget::{Budgets, LimitScope};
use crate::config::Config;
use crate::core::budget::{format_usd, usd_to_micros};
use crate::core::commands::Risk;
use crate::core::event::{Decision, Event};
use crate::core::policy::ClassAction;
use crate::core::state::{AgentSettings, AgentState, PauseReason, Phase, Profile, Spender};
use crate::llm::openai::OpenAiChat;
use crate::llm::tokens::TiktokenCounter;
use crate::runtime::clock::{Clock, SystemClock};
use crate::runtime::supervisor::Supervisor;
use crate::runtime::Deps;
use crate::store::{Store, ThreadBinding};
use crate::surface::Surface;
use crate::tools::Registry;

/// Shared by the commands and, cloned, by the spawned interaction handlers.
#[derive(Clone)]
pub struct Data {
    pub supervisor: Supervisor,
    pub store: Store,
    pub surface: Arc<DiscordSurface>,
    pub config: Arc<Config>,
    pub budgets: Arc<Budgets>,
    pub memory: Option<Arc<crate::memory::Memory>>,
}

type Error = anyhow::Error;
type Ctx<'a> = poise::Context<'a, Data, Error>;

/// Connects and serves until the gateway connection ends.
pub async fn run(config: Config, store: Store) -> anyhow::Result<()> {
    let token = config
        .discord
        .token
        .clone()
        .context("DISCORD_TOKEN is not set; the bot needs its token in the environment")?;
    let mut http = HttpBuilder::new(token.expose());
    if let Some(base) = &config.discord.api_base {
        // serenity ignores a proxy unless its own rate limiter is off; the proxy (or Discord
        // behind it) then answers 429s, which serenity reports as errors we retry at our level.
        http = http
            .proxy(base.trim_end_matches('/'))
            .ratelimiter_disabled(true);
    }
    let http = http.build();
    let config = Arc::new(config);
    let counter = TiktokenCounter::for_model(&config.llm.model);
    counter.warm_up();
    let model: Arc<dyn crate::llm::ChatModel> = Arc::new(OpenAiChat::new(&config.llm)?);
    let tools = Arc::new(Registry::for_config(&config));
    let counter = Arc::new(counter);
    let budgets = Arc::new(Budgets::new(&store, &config.budget)?);
    let memory =
        crate::memory::Memory::from_config(&store, &config, budgets.clone(), counter.clone())?;
    let web = crate::web::Web::for_config(&config)?;
    let setup_config = config.clone();
    let dev_guild = config.discord.dev_guild;
    let framework = poise::Framework::builder()
        .options(poise::FrameworkOptions {
            commands: vec![agent()],
            event_handler: |ctx, event| Box::pin(on_event(ctx, event)),
            on_error: |error| Box::pin(on_error(error)),
            ..Default::default()
        })
        .initialize_owners(false)
        // setup must not fail: an Err here would leave every later event waiting forever.
        .setup(move |ctx, _ready, framework| {
            Box::pin(async move {
                let config = setup_config;
                let surface = Arc::new(DiscordSurface::new(
                    ctx.http.clone(),
                    store.clone(),
                    config.agent.approve_n_default,
                ));
                let deps = Deps {
                    store: store.clone(),
                    model,
                    tools,
                    surface: surface.clone() as Arc<dyn Surface>,
                    config: config.clone(),
                    counter,
                    clock: Arc::new(SystemClock),
                    budgets: budgets.clone(),
                    memory: memory.clone(),
                    web,
                };
                let data = Data {
                    supervisor: Supervisor::new(deps),
                    store,
                    surface,
                    config,
                    budgets,
                    memory,
                };
                let commands = &framework.options().commands;
                let registered = match dev_guild {
                    Some(guild) => {
                        poise::builtins::register_in_guild(ctx, commands, guild.into()).await
                    }
                    None => poise::builtins::register_globally(ctx, commands).await,
                };
                if let Err(e) = registered {
                    tracing::error!(error = %e, "cannot register the slash commands");
                }
                match data.supervisor.resume_all() {
                    Ok(n) if n > 0 => tracing::info!(agents = n, "resumed agents after a restart"),
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "cannot resume agents"),
                }
                Ok(data)
            })
        })
        .build();
    let intents =
        GatewayIntents::GUILDS | GatewayIntents::GUILD_MESSAGES | GatewayIntents::MESSAGE_CONTENT;
    let mut client = serenity::ClientBuilder::new_with_http(http, intents)
        .framework(framework)
        .await
        .context("cannot connect to Discord")?;
    client
        .start()
        .await
        .context("the gateway connection ended")?;
    Ok(())
}

/// A short reference that ties what a user sees to the log line with the details.
fn error_ref() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

async fn on_error(error: poise::FrameworkError<'_, Data, Error>) {
    match error {
        poise::FrameworkError::Command { error, ctx, .. } => {
            let reference = error_ref();
            tracing::error!(%reference, command = %ctx.command().qualified_name, error = ?error, "command failed");
            let _ = ctx
                .send(
                    poise::CreateReply::default()
                        .content(format!("Something went wrong (ref {reference})."))
                        .ephemeral(true),
                )
                .await;
        }
        other => {
            if let Err(e) = poise::builtins::on_error(other).await {
                tracing::error!(error = %e, "cannot report a framework error");
            }
        }
    }
}

async fn on_event(
    ctx: poise::FrameworkContext<'_, Data, Error>,
    event: &FullEvent,
) -> Result<(), Error> {
    let http = ctx.serenity_context.http.clone();
    let data = ctx.user_data;
    match event {
        FullEvent::InteractionCreate { interaction } => match interaction {
            Interaction::Component(click) => {
                let (click, data) = (click.clone(), data.clone());
                tokio::spawn(async move { on_click(&http, &data, click).await });
            }
            Interaction::Modal(submit) => {
                let (submit, data) = (submit.clone(), data.clone());
                tokio::spawn(async move { on_modal(&http, &data, submit).await });
            }
            _ => {}
        },
        FullEvent::Message { new_message } if !new_message.author.bot => {
            let (message, data) = (new_message.clone(), data.clone());
            tokio::spawn(async move { on_thread_message(&data, message).await });
        }
        _ => {}
    }
    Ok(())
}

fn clicker_of(user: UserId, member: Option<&serenity::Member>) -> Clicker {
    Clicker {
        user_id: user.get(),
        role_ids: member
            .map(|m| m.roles.iter().map(|r| r.get()).collect())
            .unwrap_or_default(),
        manage_threads: member
            .and_then(|m| m.permissions)
            .map(|p| p.manage_threads())
            .unwrap_or(false),
        manage_guild: member
            .and_then(|m| m.permissions)
            .map(|p| p.manage_guild())
            .unwrap_or(false),
    }
}

fn ephemeral(text: impl Into<String>) -> CreateInteractionResponse {
    CreateInteractionResponse::Message(
        CreateInteractionResponseMessage::new()
            .content(text)
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
}

fn followup(text: impl Into<String>) -> CreateInteractionResponseFollowup {
    CreateInteractionResponseFollowup::new()
        .content(text)
        .ephemeral(true)
        .allowed_mentions(no_mentions())
}

const NOT_ALLOWED: &str = "Only the agent's owner, the people and roles it is shared with, and members who can manage threads can decide for it.";
const NOT_PENDING: &str = "This proposal is no longer pending.";
const NOT_PENDING_PREFIX: &str = "This proposal is no longer pending";

/// Checks that the click is for the agent's current proposal and that the clicker may decide.
/// Returns the refusal to show otherwise.
fn check_click(handle: &Data, id: &CardId, clicker: &Clicker) -> Result<(), String> {
    let binding = match handle.store.binding(&id.agent) {
        Ok(Some(binding)) => binding,
        Ok(None) => return Err("This agent no longer exists.".into()),
        Err(e) => {
            let reference = error_ref();
            tracing::error!(%reference, error = %e, "cannot read a binding");
            return Err(format!("Something went wrong (ref {reference})."));
        }
    };
    if !may_decide(&binding, clicker) {
        return Err(NOT_ALLOWED.into());
    }
    let pending = handle
        .store
        .load_agent_record(&id.agent)
        .ok()
        .flatten()
        .is_some_and(|state| {
            matches!(state.phase, Phase::AwaitingDecision)
                && state.pending.as_ref().map(|p| p.cycle) == Some(id.cycle)
        });
    if !pending {
        return Err(match handle.store.decision(&id.agent, id.cycle) {
            Ok(Some(winner)) => format!("{NOT_PENDING_PREFIX}: already decided by {}.", winner.by),
            _ => NOT_PENDING.into(),
        });
    }
    Ok(())
}

async fn decide_and_report(
    http: &serenity::Http,
    handle: &Data,
    token_owner: Either<'_>,
    id: &CardId,
    decision: Decision,
    by: &str,
) {
    if let Err(why) = handle
        .supervisor
        .decide(&id.agent, id.cycle, decision, by)
        .await
    {
        let text = if why.starts_with("already decided by") {
            format!("{NOT_PENDING_PREFIX}: {why}.")
        } else if why.contains("no longer pending") {
            NOT_PENDING.to_string()
        } else {
            why
        };
        let sent = match token_owner {
            Either::Click(c) => c.create_followup(http, followup(text)).await,
            Either::Modal(m) => m.create_followup(http, followup(text)).await,
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "cannot send a follow-up");
        }
    }
}

/// Forget or Pin on a memory search result: checked against the agent's deciders again, since
/// the results may be old and rights may have changed.
fn memory_click(handle: &Data, id: &CardId, clicker: &Clicker) -> String {
    let Some(memory) = &handle.memory else {
        return "Long-term memory is switched off.".into();
    };
    match handle.store.binding(&id.agent) {
        Ok(Some(binding)) if may_decide(&binding, clicker) => {}
        Ok(Some(_)) => return NOT_ALLOWED.into(),
        _ => return "This agent no longer exists.".into(),
    }
    let memory_id = id.cycle;
    let done = match id.action {
        CardAction::MemoryForget => memory.forget(&id.agent, memory_id).map(|_| "Forgot"),
        _ => memory.pin(&id.agent, memory_id, true).map(|_| "Pinned"),
    };
    match done {
        Ok(verb) => format!("{verb} memory #{memory_id}."),
        Err(e) => format!("Nothing changed: {e}."),
    }
}

enum Either<'a> {
    Click(&'a ComponentInteraction),
    Modal(&'a ModalInteraction),
}

async fn on_click(http: &serenity::Http, handle: &Data, click: ComponentInteraction) {
    let Some(id) = CardId::parse(&click.data.custom_id) else {
        let _ = click
            .create_response(
                http,
                ephemeral("This button is not from this version of the bot."),
            )
            .await;
        return;
    };
    let clicker = clicker_of(click.user.id, click.member.as_ref());
    if matches!(id.action, CardAction::MemoryForget | CardAction::MemoryPin) {
        let text = memory_click(handle, &id, &clicker);
        let _ = click.create_response(http, ephemeral(text)).await;
        return;
    }
    if let Err(refusal) = check_click(handle, &id, &clicker) {
        let _ = click.create_response(http, ephemeral(refusal)).await;
        return;
    }
    let by = click.user.name.clone();
    let (decision, response) = match id.action {
        CardAction::Approve => (Decision::Approve, CreateInteractionResponse::Acknowledge),
        CardAction::Deny => (Decision::Deny, CreateInteractionResponse::Acknowledge),
        CardAction::SelfCritique => (
            Decision::SelfCritique,
            CreateInteractionResponse::Acknowledge,
        ),
        CardAction::ApproveN => {
            let n = handle.config.agent.approve_n_default;
            let modal = CreateModal::new(
                CardId::new(CardAction::ApproveNSubmit, &id.agent, id.cycle).encode(),
                "Approve several commands",
            )
            .components(vec![CreateActionRow::InputText(
                CreateInputText::new(InputTextStyle::Short, "How many commands (1–100)?", "n")
                    .value(n.to_string())
                    .min_length(1)
                    .max_length(3),
            )]);
            let _ = click
                .create_response(http, CreateInteractionResponse::Modal(modal))
                .await;
            return;
        }
        CardAction::Feedback => {
            let modal = CreateModal::new(
                CardId::new(CardAction::FeedbackSubmit, &id.agent, id.cycle).encode(),
                "Feedback instead of running",
            )
            .components(vec![CreateActionRow::InputText(
                CreateInputText::new(InputTextStyle::Paragraph, "Your feedback", "text")
                    .min_length(1)
                    .max_length(4000),
            )]);
            let _ = click
                .create_response(http, CreateInteractionResponse::Modal(modal))
                .await;
            return;
        }
        CardAction::ApproveNSubmit
        | CardAction::FeedbackSubmit
        | CardAction::MemoryForget
        | CardAction::MemoryPin => {
            let _ = click
                .create_response(
                    http,
                    ephemeral("This button is not from this version of the bot."),
                )
                .await;
            return;
        }
    };
    if let Err(e) = click.create_response(http, response).await {
        tracing::warn!(error = %e, "cannot acknowledge a click");
        return;
    }
    decide_and_report(http, handle, Either::Click(&click), &id, decision, &by).await;
}

fn modal_value(submit: &ModalInteraction) -> String {
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

async fn on_modal(http: &serenity::Http, handle: &Data, submit: ModalInteraction) {
    let Some(id) = CardId::parse(&submit.data.custom_id) else {
        return;
    };
    let clicker = clicker_of(submit.user.id, submit.member.as_ref());
    if let Err(refusal) = check_click(handle, &id, &clicker) {
        let _ = submit.create_response(http, ephemeral(refusal)).await;
        return;
    }
    let value = modal_value(&submit);
    let decision = match id.action {
        CardAction::ApproveNSubmit => match value.trim().parse::<u32>() {
            Ok(n) if (1..=100).contains(&n) => Decision::ApproveN(n),
            _ => {
                let _ = submit
                    .create_response(http, ephemeral("Give a number from 1 to 100."))
                    .await;
                return;
            }
        },
        CardAction::FeedbackSubmit if !value.trim().is_empty() => {
            Decision::Feedback(value.trim().to_string())
        }
        _ => {
            let _ = submit
                .create_response(http, ephemeral("Nothing to do with an empty form."))
                .await;
            return;
        }
    };
    if let Err(e) = submit
        .create_response(http, CreateInteractionResponse::Acknowledge)
        .await
    {
        tracing::warn!(error = %e, "cannot acknowledge a modal");
        return;
    }
    let by = submit.user.name.clone();
    decide_and_report(http, handle, Either::Modal(&submit), &id, decision, &by).await;
}

/// A message in an agent's thread answers a waiting `ask_user`, or, while a card waits, is taken
/// as feedback from someone allowed to decide.
async fn on_thread_message(handle: &Data, message: serenity::Message) {
    let Ok(Some(agent)) = handle.store.agent_for_thread(message.channel_id.get()) else {
        return;
    };
    let Ok(Some(binding)) = handle.store.binding(&agent) else {
        return;
    };
    let clicker = Clicker {
        user_id: message.author.id.get(),
        role_ids: message
            .member
            .as_ref()
            .map(|m| m.roles.iter().map(|r| r.get()).collect())
            .unwrap_or_default(),
        manage_threads: false,
        manage_guild: false,
    };
    if !may_decide(&binding, &clicker) || message.content.trim().is_empty() {
        return;
    }
    if handle
        .surface
        .answer_question(binding.thread_id, message.content.trim())
        .await
    {
        return;
    }
    if !handle.config.discord.messages_as_feedback {
        return;
    }
    let Ok(Some(state)) = handle.store.load_agent_record(&agent) else {
        return;
    };
    if let (Phase::AwaitingDecision, Some(pending)) = (&state.phase, &state.pending) {
        let feedback = Decision::Feedback(message.content.trim().to_string());
        let _ = handle
            .supervisor
            .decide(&agent, pending.cycle, feedback, &message.author.name)
            .await;
    }
}

/// Agent commands. Use them in a channel to start an agent, and in its thread for the rest.
#[poise::command(
    slash_command,
    guild_only,
    subcommands(
        "start", "status", "pause", "resume", "stop", "list", "share", "unshare", "export",
        "budget", "memory", "policy"
    )
)]
async fn agent(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

async fn reply(ctx: Ctx<'_>, text: impl Into<String>, private: bool) -> Result<(), Error> {
    ctx.send(
        poise::CreateReply::default()
            .content(super::cards::message_text(&text.into()))
            .ephemeral(private)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}

fn author_clicker(ctx: Ctx<'_>) -> Clicker {
    match ctx {
        poise::Context::Application(app) => {
            clicker_of(app.interaction.user.id, app.interaction.member.as_deref())
        }
        poise::Context::Prefix(_) => Clicker {
            user_id: ctx.author().id.get(),
            role_ids: Vec::new(),
            manage_threads: false,
            manage_guild: false,
        },
    }
}

/// Start an agent on a task, in a new thread.
// poise takes every slash option as a parameter.
#[allow(clippy::too_many_arguments)]
#[poise::command(slash_command, guild_only)]
async fn start(
    ctx: Ctx<'_>,
    #[description = "What the agent should do"]
    #[max_length = 4000]
    task: String,
    #[description = "The agent's name (otherwise generated from the task)"]
    #[max_length = 64]
    name: Option<String>,
    #[description = "Model to use"] model: Option<String>,
    #[description = "Share the agent with this user"] share_user: Option<UserId>,
    #[description = "Share the agent with this role"] share_role: Option<RoleId>,
    #[description = "Approve this many commands without asking"]
    #[min = 1]
    #[max = 100]
    continuous: Option<u32>,
    #[description = "The agent's budget in dollars (default from the bot's config)"]
    #[min = 0.01]
    budget: Option<f64>,
) -> Result<(), Error> {
    ctx.defer().await?;
    let data = ctx.data();
    let guild_id = ctx.guild_id().context("guild only")?.get();
    let clicker = author_clicker(ctx);
    let discord = &data.config.discord;
    let budget = budget.map(usd_to_micros);
    let max_budget = data.config.budget.agent_max();
    if budget.is_some_and(|b| b > max_budget) && !clicker.manage_guild {
        return reply(
            ctx,
            format!(
                "An agent's budget can be at most {} here; a server admin can raise it later with `/agent budget set`.",
                format_usd(max_budget)
            ),
            true,
        )
        .await;
    }
    if let Some(role) = discord.start_role {
        if !clicker.role_ids.contains(&role) && !clicker.manage_threads {
            return reply(
                ctx,
                format!("You need the <@&{role}> role to start agents."),
                true,
            )
            .await;
        }
    }
    let bindings = data.store.bindings()?;
    let running = |b: &&ThreadBinding| {
        data.store
            .load_agent_record(&b.agent_id)
            .ok()
            .flatten()
            .is_some_and(|s| !matches!(s.phase, Phase::Finished { .. }))
    };
    let in_guild: Vec<&ThreadBinding> = bindings
        .iter()
        .filter(|b| b.guild_id == guild_id)
        .filter(running)
        .collect();
    if discord.max_agents_per_guild > 0 && in_guild.len() >= discord.max_agents_per_guild {
        return reply(
            ctx,
            format!(
                "This server already runs {} agents, the limit.",
                in_guild.len()
            ),
            true,
        )
        .await;
    }
    let mine = in_guild
        .iter()
        .filter(|b| b.owner_id == clicker.user_id)
        .count();
    if discord.max_agents_per_user > 0 && mine >= discord.max_agents_per_user {
        return reply(
            ctx,
            format!("You already run {mine} agents, the limit per person."),
            true,
        )
        .await;
    }
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let title = name.clone().unwrap_or_else(|| format!("agent {id}"));
    let thread = ctx
        .channel_id()
        .create_thread(
            ctx.http(),
            CreateThread::new(thread_name(&title))
                .kind(ChannelType::PublicThread)
                .auto_archive_duration(AutoArchiveDuration::OneDay),
        )
        .await
        .context("cannot create the agent's thread")?;
    data.store.save_binding(&ThreadBinding {
        agent_id: id.clone(),
        guild_id,
        parent_channel_id: ctx.channel_id().get(),
        thread_id: thread.id.get(),
        owner_id: clicker.user_id,
        shared_users: share_user.map(|u| vec![u.get()]).unwrap_or_default(),
        shared_roles: share_role.map(|r| vec![r.get()]).unwrap_or_default(),
        card: None,
    })?;
    let profile = name.map(|name| Profile {
        name,
        ..Profile::fallback()
    });
    let mut state = AgentState::new(
        id.clone(),
        task,
        profile,
        AgentSettings {
            model: model.unwrap_or_else(|| data.config.llm.model.clone()),
            continuous: false,
            cycle_limit: data.config.agent.cycle_limit,
            budget,
            policy: Default::default(),
        },
        SystemClock.now(),
    );
    state.spender = Spender {
        user: Some(clicker.user_id.to_string()),
        guild: Some(guild_id.to_string()),
    };
    state.auto_approvals_left = continuous.unwrap_or(0);
    data.supervisor.start_new(state).await?;
    reply(
        ctx,
        format!("Started agent `{id}` in <#{}>.", thread.id.get()),
        false,
    )
    .await
}

/// The agent of the thread this command is used in, or a reply saying there is none.
async fn thread_agent(ctx: Ctx<'_>) -> Result<Option<(ThreadBinding, AgentState)>, Error> {
    let data = ctx.data();
    let Some(agent) = data.store.agent_for_thread(ctx.channel_id().get())? else {
        reply(ctx, "Use this in an agent's thread.", true).await?;
        return Ok(None);
    };
    let binding = data.store.binding(&agent)?.context("binding vanished")?;
    let state = data.store.load_agent(&agent)?.context("agent vanished")?;
    Ok(Some((binding, state)))
}

/// Show the agent's state, cycle, last action and approvals left.
#[poise::command(slash_command, guild_only)]
async fn status(ctx: Ctx<'_>) -> Result<(), Error> {
    let Some((_, state)) = thread_agent(ctx).await? else {
        return Ok(());
    };
    let last = state
        .last_episode()
        .map(|e| format!("`{}` ({})", e.command.name, e.outcome.status()))
        .unwrap_or_else(|| "none yet".into());
    let data = ctx.data();
    let now = SystemClock.now();
    let limit = data.budgets.agent_limit(&state);
    let spent = data
        .budgets
        .ledger()
        .account(&Budgets::agent_account(&state.id))?;
    let waiting = state
        .paced
        .as_ref()
        .filter(|p| p.until > now && state.phase == Phase::Thinking)
        .map(|p| format!("\nRate limited: {}", p.describe()))
        .unwrap_or_default();
    let policy = data
        .config
        .policy
        .for_agent(&state)
        .describe(&state.settings.policy)
        .join(", ");
    let subagents = data.store.subagents(&state.id)?;
    let subagents = if subagents.is_empty() {
        String::new()
    } else {
        let listed: Vec<String> = subagents
            .iter()
            .map(|r| {
                format!(
                    "{}: {} ({} messages, {})",
                    r.key,
                    r.name,
                    r.messages.len().saturating_sub(1),
                    format_usd(r.spent)
                )
            })
            .collect();
        format!("\nSub-agents: {}", listed.join("; "))
    };
    let text = format!(
        "**{}** — {} — cycle {}\nLast action: {last}\nApprovals left: {}\nSpend: {} of {} ({} reserved for calls in flight){waiting}\nTokens: {} prompt + {} completion in {} calls\nPolicy: {policy}{subagents}",
        state.name(),
        match &state.phase {
            Phase::Paused(reason) => reason.describe(),
            other => other.label().to_string(),
        },
        state.cycle,
        state.auto_approvals_left,
        format_usd(spent.spent),
        format_usd(limit),
        format_usd(spent.reserved),
        state.usage.prompt_tokens,
        state.usage.completion_tokens,
        state.usage.calls
    );
    reply(ctx, text, true).await
}

/// What each risk class of command does for this agent: show it, or make it stricter.
#[poise::command(slash_command, guild_only, subcommands("policy_show", "policy_set"))]
async fn policy(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, poise::ChoiceParameter)]
enum RiskChoice {
    #[name = "read (files and memory)"]
    Read,
    #[name = "write (files and memory)"]
    Write,
    #[name = "network (web search and pages)"]
    Network,
    #[name = "control (finish, ask_user, sub-agents)"]
    Control,
    #[name = "external (effects outside the bot)"]
    External,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, poise::ChoiceParameter)]
enum ActionChoice {
    #[name = "auto: runs under Approve ×N"]
    Auto,
    #[name = "ask: always a card"]
    Ask,
    #[name = "deny: never runs"]
    Deny,
    #[name = "server default"]
    ServerDefault,
}

/// Show what each class of command does for this agent (only you see it).
#[poise::command(slash_command, guild_only, rename = "show")]
async fn policy_show(ctx: Ctx<'_>) -> Result<(), Error> {
    let Some((_, state)) = thread_agent(ctx).await? else {
        return Ok(());
    };
    let server = ctx.data().config.policy.for_agent(&state);
    let lines = server.describe(&state.settings.policy);
    reply(
        ctx,
        format!(
            "Command policy for **{}**:\n{}\nauto: runs without a card under Approve ×N and continuous mode; ask: always a card; deny: never runs.",
            state.name(),
            lines.iter().map(|l| format!("- {l}")).collect::<Vec<_>>().join("\n")
        ),
        true,
    )
    .await
}

/// Make a class of command stricter for this agent (owner or moderators; never looser than the server).
#[poise::command(slash_command, guild_only, rename = "set")]
async fn policy_set(
    ctx: Ctx<'_>,
    #[description = "Which class of command"] class: RiskChoice,
    #[description = "What it does for this agent"] action: ActionChoice,
) -> Result<(), Error> {
    ctx.defer_ephemeral().await?;
    let Some((binding, state)) = thread_agent(ctx).await? else {
        return Ok(());
    };
    if !may_share(&binding, &author_clicker(ctx)) {
        return reply(
            ctx,
            "Only the agent's owner and moderators (Manage Threads) can change its policy.",
            true,
        )
        .await;
    }
    let risk = match class {
        RiskChoice::Read => Risk::Read,
        RiskChoice::Write => Risk::Write,
        RiskChoice::Network => Risk::Network,
        RiskChoice::Control => Risk::Control,
        RiskChoice::External => Risk::External,
    };
    let action = match action {
        ActionChoice::Auto => Some(ClassAction::Auto),
        ActionChoice::Ask => Some(ClassAction::Ask),
        ActionChoice::Deny => Some(ClassAction::Deny),
        ActionChoice::ServerDefault => None,
    };
    let server = ctx.data().config.policy.for_agent(&state);
    if let Some(action) = action {
        if let Err(why) = server.check_narrowing(risk, action) {
            return reply(ctx, why, true).await;
        }
    }
    let by = ctx.author().name.clone();
    ctx.data()
        .supervisor
        .send(&state.id, Event::SetPolicy { risk, action, by })
        .map_err(anyhow::Error::msg)?;
    let now = match action {
        Some(action) => action.max(server.action(risk)),
        None => server.action(risk),
    };
    reply(
        ctx,
        format!(
            "{} commands are now `{}` for this agent.",
            capitalise(risk.label()),
            now.label()
        ),
        true,
    )
    .await
}

/// Long-term memory: search it, then forget or pin what you find.
#[poise::command(slash_command, guild_only, subcommands("memory_search"))]
async fn memory(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// Search this agent's memories (only you see the results).
#[poise::command(slash_command, guild_only, rename = "search")]
async fn memory_search(
    ctx: Ctx<'_>,
    #[description = "What to look for"]
    #[max_length = 500]
    query: String,
) -> Result<(), Error> {
    ctx.defer_ephemeral().await?;
    let Some((binding, state)) = thread_agent(ctx).await? else {
        return Ok(());
    };
    let data = ctx.data();
    let Some(memory) = &data.memory else {
        return reply(ctx, "Long-term memory is switched off.", true).await;
    };
    let clicker = author_clicker(ctx);
    if !may_decide(&binding, &clicker) {
        return reply(ctx, NOT_ALLOWED, true).await;
    }
    let hits = match memory.search(&memory.payer(&state), &query, 5).await {
        Ok(hits) => hits,
        Err(e) => return reply(ctx, format!("The search failed: {e}."), true).await,
    };
    if hits.is_empty() {
        return reply(ctx, "No memories match.", true).await;
    }
    let mut lines = vec![format!(
        "Memories of **{}** for “{}”:",
        state.name(),
        super::cards::message_text(&query)
    )];
    let mut rows = Vec::new();
    for hit in &hits {
        lines.push(format!(
            "**#{}** · cycle {} · {}{} · similarity {:.2}\n> {}",
            hit.id,
            hit.cycle,
            hit.source.label(),
            if hit.pinned { " · pinned" } else { "" },
            hit.score,
            crate::core::history::truncate_chars(&hit.text.replace('\n', " / "), 250)
        ));
        rows.push(CreateActionRow::Buttons(vec![
            serenity::CreateButton::new(
                CardId::new(CardAction::MemoryPin, &state.id, hit.id).encode(),
            )
            .label(format!("Pin #{}", hit.id))
            .style(serenity::ButtonStyle::Secondary)
            .disabled(hit.pinned),
            serenity::CreateButton::new(
                CardId::new(CardAction::MemoryForget, &state.id, hit.id).encode(),
            )
            .label(format!("Forget #{}", hit.id))
            .style(serenity::ButtonStyle::Danger),
        ]));
    }
    let text = crate::core::history::truncate_chars(&lines.join("\n"), super::cards::MESSAGE_MAX);
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

/// Spend and budgets: see them, or change them.
#[poise::command(slash_command, guild_only, subcommands("budget_show", "budget_set"))]
async fn budget(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// Show spend and limits: this thread's agent (if any), yours today, and the server's.
#[poise::command(slash_command, guild_only, rename = "show")]
async fn budget_show(ctx: Ctx<'_>) -> Result<(), Error> {
    let data = ctx.data();
    let guild = ctx.guild_id().context("guild only")?.get().to_string();
    let now = SystemClock.now();
    let agent = data.store.agent_for_thread(ctx.channel_id().get())?;
    let mut lines = Vec::new();
    let (agent_id, spender, agent_limit, name) = match &agent {
        Some(id) => {
            let state = data.store.load_agent(id)?.context("agent vanished")?;
            let limit = data.budgets.agent_limit(&state);
            (
                state.id.clone(),
                state.spender.clone(),
                limit,
                Some(state.name().to_string()),
            )
        }
        // Outside an agent's thread: the caller's own day and the server.
        None => (
            String::new(),
            Spender {
                user: Some(ctx.author().id.get().to_string()),
                guild: Some(guild.clone()),
            },
            0,
            None,
        ),
    };
    for line in data
        .budgets
        .lines(&agent_id, &spender, agent_limit, now)?
        .into_iter()
        .skip(usize::from(name.is_none()))
    {
        let label = match (&name, line.label.as_str()) {
            (Some(name), "the agent's budget") => format!("**{name}**"),
            (None, "the owner's daily budget") => "**You, today**".to_string(),
            (_, other) => format!("**{}**", capitalise(other)),
        };
        let limit = line
            .limit
            .map(format_usd)
            .unwrap_or_else(|| "no limit".into());
        let reserved = if line.account.reserved > 0 {
            format!(" (+{} reserved)", format_usd(line.account.reserved))
        } else {
            String::new()
        };
        lines.push(format!(
            "{label}: {} of {limit}{reserved}",
            format_usd(line.account.spent)
        ));
    }
    reply(ctx, lines.join("\n"), true).await
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().collect::<String>() + chars.as_str())
        .unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, poise::ChoiceParameter)]
enum BudgetScope {
    #[name = "this agent"]
    Agent,
    #[name = "each user per day"]
    UserDaily,
    #[name = "the server per day"]
    GuildDaily,
    #[name = "the server per month"]
    GuildMonthly,
}

/// Change this agent's budget, or (server admins) a user's daily or the server's budget.
#[poise::command(slash_command, guild_only, rename = "set")]
async fn budget_set(
    ctx: Ctx<'_>,
    #[description = "Which budget"] scope: BudgetScope,
    #[description = "Dollars (0 removes a user or server limit)"]
    #[min = 0.0]
    usd: f64,
    #[description = "For a daily user budget: only this user"] user: Option<UserId>,
) -> Result<(), Error> {
    ctx.defer_ephemeral().await?;
    let data = ctx.data();
    let guild = ctx.guild_id().context("guild only")?.get().to_string();
    let clicker = author_clicker(ctx);
    let micros = usd_to_micros(usd);
    let limit_scope = match scope {
        BudgetScope::Agent => {
            let Some((binding, state)) = thread_agent(ctx).await? else {
                return Ok(());
            };
            if !may_set_agent_budget(&binding, &clicker) {
                return reply(ctx, NOT_ALLOWED, true).await;
            }
            let max = data.config.budget.agent_max();
            if micros == 0 || (micros > max && !clicker.manage_guild) {
                return reply(
                    ctx,
                    format!(
                        "An agent's budget must be more than $0 and at most {}, unless a server admin sets it.",
                        format_usd(max)
                    ),
                    true,
                )
                .await;
            }
            let by = ctx.author().name.clone();
            data.supervisor
                .send(&state.id, Event::SetBudget { budget: micros, by })
                .map_err(anyhow::Error::msg)?;
            return reply(
                ctx,
                format!("The agent's budget is now {}.", format_usd(micros)),
                true,
            )
            .await;
        }
        BudgetScope::UserDaily => LimitScope::UserDaily,
        BudgetScope::GuildDaily => LimitScope::GuildDaily,
        BudgetScope::GuildMonthly => LimitScope::GuildMonthly,
    };
    if !clicker.manage_guild {
        return reply(
            ctx,
            "Only server admins (Manage Server) can change user and server budgets.",
            true,
        )
        .await;
    }
    let user = user
        .filter(|_| limit_scope == LimitScope::UserDaily)
        .map(|u| u.get().to_string());
    data.budgets
        .set_limit(limit_scope, &guild, user.as_deref(), micros)?;
    let what = match (limit_scope, &user) {
        (LimitScope::UserDaily, Some(u)) => format!("<@{u}>'s daily budget"),
        (LimitScope::UserDaily, None) => "Each user's daily budget".into(),
        (LimitScope::GuildDaily, _) => "The server's daily budget".into(),
        (LimitScope::GuildMonthly, _) => "The server's monthly budget".into(),
    };
    let amount = if micros == 0 {
        "no limit".to_string()
    } else {
        format_usd(micros)
    };
    // Agents of this server that stopped for want of budget try again under the new limit.
    let by = ctx.author().name.clone();
    let mut resumed = 0;
    for binding in data.store.bindings()? {
        if binding.guild_id.to_string() != guild {
            continue;
        }
        let paused_for_budget = data
            .store
            .load_agent_record(&binding.agent_id)?
            .is_some_and(|s| matches!(s.phase, Phase::Paused(PauseReason::Budget { .. })));
        if paused_for_budget
            && data
                .supervisor
                .send(
                    &binding.agent_id,
                    Event::Resume {
                        by: by.clone(),
                        follow_up: None,
                    },
                )
                .is_ok()
        {
            resumed += 1;
        }
    }
    let resumed = match resumed {
        0 => String::new(),
        1 => " 1 agent paused for budget is trying again.".into(),
        n => format!(" {n} agents paused for budget are trying again."),
    };
    reply(ctx, format!("{what} is now {amount}.{resumed}"), true).await
}

async fn control(
    ctx: Ctx<'_>,
    event: impl FnOnce(String) -> Event,
    done: &str,
) -> Result<(), Error> {
    ctx.defer_ephemeral().await?;
    let Some((binding, state)) = thread_agent(ctx).await? else {
        return Ok(());
    };
    if !may_decide(&binding, &author_clicker(ctx)) {
        return reply(ctx, NOT_ALLOWED, true).await;
    }
    let by = ctx.author().name.clone();
    ctx.data()
        .supervisor
        .send(&state.id, event(by))
        .map_err(anyhow::Error::msg)?;
    reply(ctx, done, true).await
}

/// Pause the agent (a running command finishes first).
#[poise::command(slash_command, guild_only)]
async fn pause(ctx: Ctx<'_>) -> Result<(), Error> {
    control(ctx, |by| Event::Pause { by }, "Pausing.").await
}

/// Stop the agent; it is kept and can be resumed.
#[poise::command(slash_command, guild_only)]
async fn stop(ctx: Ctx<'_>) -> Result<(), Error> {
    control(
        ctx,
        |by| Event::Pause { by },
        "Stopped; `/agent resume` continues.",
    )
    .await
}

/// Resume a paused agent, or give a finished one a follow-up task.
#[poise::command(slash_command, guild_only)]
async fn resume(
    ctx: Ctx<'_>,
    #[description = "A follow-up task (for a finished agent)"]
    #[max_length = 4000]
    follow_up: Option<String>,
) -> Result<(), Error> {
    control(ctx, |by| Event::Resume { by, follow_up }, "Resuming.").await
}

/// List this server's agents with links to their threads.
#[poise::command(slash_command, guild_only)]
async fn list(ctx: Ctx<'_>) -> Result<(), Error> {
    let data = ctx.data();
    let guild_id = ctx.guild_id().context("guild only")?.get();
    let mut lines = Vec::new();
    for binding in data
        .store
        .bindings()?
        .into_iter()
        .filter(|b| b.guild_id == guild_id)
    {
        if let Some(state) = data.store.load_agent_record(&binding.agent_id)? {
            lines.push(format!(
                "**{}** `{}` — {} — cycle {} — <#{}>",
                state.name(),
                state.id,
                state.phase.label(),
                state.cycle,
                binding.thread_id
            ));
        }
    }
    let text = if lines.is_empty() {
        "No agents in this server yet. Start one with `/agent start`.".to_string()
    } else {
        lines.join("\n")
    };
    reply(ctx, text, true).await
}

async fn change_share(
    ctx: Ctx<'_>,
    user: Option<UserId>,
    role: Option<RoleId>,
    add: bool,
) -> Result<(), Error> {
    let Some((mut binding, _)) = thread_agent(ctx).await? else {
        return Ok(());
    };
    if !may_share(&binding, &author_clicker(ctx)) {
        return reply(ctx, "Only the agent's owner and members who can manage threads can change who it is shared with.", true).await;
    }
    if user.is_none() && role.is_none() {
        return reply(ctx, "Name a user or a role.", true).await;
    }
    fn apply(list: &mut Vec<u64>, id: Option<u64>, add: bool) {
        if let Some(id) = id {
            list.retain(|x| *x != id);
            if add {
                list.push(id);
            }
        }
    }
    apply(&mut binding.shared_users, user.map(|u| u.get()), add);
    apply(&mut binding.shared_roles, role.map(|r| r.get()), add);
    ctx.data().store.save_binding(&binding)?;
    let who = [
        user.map(|u| format!("<@{}>", u.get())),
        role.map(|r| format!("<@&{}>", r.get())),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" and ");
    let verb = if add {
        "now shared with"
    } else {
        "no longer shared with"
    };
    reply(ctx, format!("The agent is {verb} {who}."), true).await
}

/// Let a user or a role approve, give feedback and stop this agent.
#[poise::command(slash_command, guild_only)]
async fn share(
    ctx: Ctx<'_>,
    #[description = "User"] user: Option<UserId>,
    #[description = "Role"] role: Option<RoleId>,
) -> Result<(), Error> {
    change_share(ctx, user, role, true).await
}

/// Take back a share.
#[poise::command(slash_command, guild_only)]
async fn unshare(
    ctx: Ctx<'_>,
    #[description = "User"] user: Option<UserId>,
    #[description = "Role"] role: Option<RoleId>,
) -> Result<(), Error> {
    change_share(ctx, user, role, false).await
}

/// Attach the agent's transcript (Markdown) and its workspace (zip).
#[poise::command(slash_command, guild_only)]
async fn export(ctx: Ctx<'_>) -> Result<(), Error> {
    ctx.defer_ephemeral().await?;
    let Some((binding, state)) = thread_agent(ctx).await? else {
        return Ok(());
    };
    if !may_decide(&binding, &author_clicker(ctx)) {
        return reply(ctx, NOT_ALLOWED, true).await;
    }
    let transcript = crate::export::transcript(&ctx.data().store, &state)?;
    let archive = crate::export::workspace_zip(&ctx.data().store, &state.id)?;
    ctx.send(
        poise::CreateReply::default()
            .content(format!("Export of **{}**.", state.name()))
            .attachment(serenity::CreateAttachment::bytes(
                transcript.into_bytes(),
                format!("{}-transcript.md", state.id),
            ))
            .attachment(serenity::CreateAttachment::bytes(
                archive,
                format!("{}-workspace.zip", state.id),
            ))
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}
