//! Start-up of the Discord bot (`run`): the serenity client on a gateway thread of its own (through
//! `HttpBuilder::proxy` when another Discord-compatible API is configured), the poise framework
//! with `/agent …` and `/memory …`, and, once the gateway is ready, the surface, the supervisor and
//! the agents a restart left running.
//!
//! The shards this process serves connect with `start_shard_range` on a thread and runtime of their
//! own (`on_gateway_thread`), so the gateway and the acknowledgement of clicks never queue behind
//! the agents, which stay on the main runtime (`Deps::runtime`, `App::deps_on`); the surface posts
//! through its own REST client (`rest_client`). Once the gateway is ready: the surface, `Data`, the
//! `Supervisor`, command registration, the resume of its servers' agents (`resume_where`) and the
//! leases kept (`keep_leases`), then the loops that re-post cards (`repost_cards`), keep the live status (`DiscordSurface::run_status_loop`) and prune rate-limit
//! buckets (`buckets::spawn_pruning`). SIGTERM or SIGINT closes the gateway (no new interactions),
//! drains the supervisor for `ops.shutdown_grace_secs`, flushes and returns, so the process exits
//! 0.
//!
//! The gateway is asked for Message Content only when `discord.message_content_intent` says so; a
//! refusal of it (close 4014) ends `run` with `GatewayRefused`, which names the Developer Portal
//! switch and the config key.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use poise::serenity_prelude as serenity;
use serenity::{GatewayIntents, HttpBuilder};
use tokio::sync::oneshot;

use super::commands::{self, Data};
use super::shards::Shards;
use super::{buckets, respond, router, DiscordSurface};
use crate::app::App;
use crate::config::{MessageContent, MESSAGE_CONTENT_SWITCH};
use crate::core::state::AgentState;
use crate::runtime::supervisor::{Serves, Supervisor};
use crate::runtime::Surface;
use crate::surface::api::{Api, ApiSurface, Tokens};

/// Connects the `shards` this process serves and serves until the gateway connection ends, or
/// until SIGTERM or SIGINT, which shut the bot down gracefully (see `shut_down`).
///
/// The gateway, the slash commands and the acknowledgement of clicks run on a thread and runtime
/// of their own, and the agents on the caller's: with 1,000 agents cycling, a click queued behind
/// their work on a shared runtime waited over a second for its acknowledgement (Discord allows
/// three). Each side has its own REST client, so that an acknowledgement never rides on a
/// connection driven by the busy runtime.
pub async fn run(app: App, shards: Shards) -> anyhow::Result<()> {
    let token = app
        .config
        .discord
        .token
        .clone()
        .context("DISCORD_TOKEN is not set; the bot needs its token in the environment")?;
    let agents_runtime = tokio::runtime::Handle::current();
    let surface_http = Arc::new(rest_client(&app, token.expose()));
    let gateway_http = rest_client(&app, token.expose());
    // The supervisor is built once the gateway is ready; the shutdown needs to reach it.
    let supervisor_slot = Arc::new(OnceLock::<Supervisor>::new());
    let slot = supervisor_slot.clone();
    let after = app.clone();
    let (stop_gateway, stop) = oneshot::channel::<()>();
    let (gateway_closed, closed) = oneshot::channel::<()>();
    // Held until the agents are drained: clicks acknowledged before the gateway closed still
    // reach their agents meanwhile, as the gateway's runtime lives on until this is dropped.
    let (release_gateway, released) = oneshot::channel::<()>();
    let clock = app.clock.clone();
    let serve = move || async move {
        buckets::spawn_pruning(surface_http.clone(), clock.clone());
        let message_content = app.config.discord.message_content();
        let framework = framework(app, surface_http, agents_runtime, slot, shards);
        let intents = gateway_intents(message_content);
        let mut client = serenity::ClientBuilder::new_with_http(gateway_http, intents)
            .framework(framework)
            .await
            .context("cannot connect to Discord")?;
        buckets::spawn_pruning(client.http.clone(), clock);
        tracing::info!(%shards, "connecting to the gateway");
        let manager = client.shard_manager.clone();
        tokio::select! {
            ended = client.start_shard_range(shards.serenity_range(), shards.total) => {
                ended.map_err(|e| gateway_ended(e, message_content))
            }
            _ = stop => {
                manager.shutdown_all().await;
                let _ = gateway_closed.send(());
                let _ = released.await;
                Ok(())
            }
        }
    };
    let mut gateway = on_gateway_thread(serve)?;
    tokio::select! {
        ended = &mut gateway => gateway_result(ended),
        signal = crate::surface::shutdown::shutdown_signal() => {
            tracing::info!(signal, "shutting down: no new interactions; calls and commands under way may finish");
            // Closing the gateway stops new interactions and messages; REST stays up, so what
            // finishes during the drain still reaches its thread.
            let _ = stop_gateway.send(());
            let _ = closed.await;
            crate::ops::health().set_gateway(crate::ops::Gateway::Disconnected);
            shut_down(&after, supervisor_slot.get()).await?;
            drop(release_gateway);
            gateway_result(gateway.await)
        }
    }
}

/// Why the gateway connection ended with an error that `run` explains.
#[derive(Debug, thiserror::Error)]
pub enum GatewayRefused {
    /// Discord closed the gateway with 4014: the bot asked for Message Content, which the
    /// application does not have switched on.
    #[error(
        "Discord refused the Message Content intent (gateway close 4014, disallowed intents): the \
         bot asks for it because discord.message_content_intent = true, and the application does \
         not have it switched on. Either switch it on ({}) and start again, \
         or set message_content_intent = false under [discord] in the config (or \
         DISCORD_MESSAGE_CONTENT_INTENT=false): the bot then needs no privileged intent, and a \
         message typed in an agent's thread reaches it only when it @mentions the bot or replies \
         to the bot's message",
        MESSAGE_CONTENT_SWITCH
    )]
    MessageContentNotAllowed,
    /// 4014 although the bot asked for no privileged intent: Discord changed what it requires.
    #[error(
        "Discord refused the bot's gateway intents (close 4014, disallowed intents) although \
         they are not privileged (GUILDS, GUILD_MESSAGES); check the application's Privileged \
         Gateway Intents in the Developer Portal"
    )]
    IntentsNotAllowed,
}

/// What the gateway is asked for: servers and their messages, and Message Content only when
/// configured, since an application without that switch on is refused outright.
fn gateway_intents(message_content: MessageContent) -> GatewayIntents {
    let basic = GatewayIntents::GUILDS | GatewayIntents::GUILD_MESSAGES;
    match message_content {
        MessageContent::Requested => basic | GatewayIntents::MESSAGE_CONTENT,
        MessageContent::NotRequested => basic,
    }
}

/// The error `run` ends with when the gateway connection ends: a refusal of the intents is
/// explained (serenity reports Discord's close 4014 as `DisallowedGatewayIntents`).
fn gateway_ended(error: serenity::Error, message_content: MessageContent) -> anyhow::Error {
    match (&error, message_content) {
        (
            serenity::Error::Gateway(serenity::GatewayError::DisallowedGatewayIntents),
            MessageContent::Requested,
        ) => GatewayRefused::MessageContentNotAllowed.into(),
        (
            serenity::Error::Gateway(serenity::GatewayError::DisallowedGatewayIntents),
            MessageContent::NotRequested,
        ) => GatewayRefused::IntentsNotAllowed.into(),
        _ => anyhow::Error::new(error).context("the gateway connection ended"),
    }
}

/// A REST client for Discord, through `HttpBuilder::proxy` when another Discord-compatible API
/// is configured.
fn rest_client(app: &App, token: &str) -> serenity::Http {
    let mut http = HttpBuilder::new(token);
    if let Some(base) = &app.config.discord.api_base {
        // serenity ignores a proxy unless its own rate limiter is off; the proxy (or Discord
        // behind it) then answers 429s, which serenity reports as errors we retry at our level.
        http = http
            .proxy(base.trim_end_matches('/'))
            .ratelimiter_disabled(true);
    }
    http.build()
}

/// The poise framework with `/agent …`. Once the gateway is ready it builds the surface (posting
/// through `surface_http`), the supervisor (starting actors on `agents_runtime`) and resumes the
/// agents a restart left running.
fn framework(
    app: App,
    surface_http: Arc<serenity::Http>,
    agents_runtime: tokio::runtime::Handle,
    slot: Arc<OnceLock<Supervisor>>,
    shards: Shards,
) -> poise::Framework<Data, anyhow::Error> {
    let dev_guild = app.config.discord.dev_guild;
    poise::Framework::builder()
        .options(poise::FrameworkOptions {
            commands: commands::all(),
            event_handler: |ctx, event| Box::pin(router::on_event(ctx, event)),
            on_error: |error| Box::pin(respond::on_error(error)),
            pre_command: |ctx| Box::pin(respond::pre_command(ctx)),
            ..Default::default()
        })
        .initialize_owners(false)
        // setup must not fail: an Err here would leave every later event waiting forever.
        .setup(move |ctx, ready, framework| {
            let bot_user_id = ready.user.id.get();
            Box::pin(async move {
                let threads_http = surface_http.clone();
                let surface = Arc::new(
                    DiscordSurface::new(
                        surface_http,
                        app.store.clone(),
                        app.config.agent.approve_n_default,
                        app.clock.clone(),
                    )
                    .with_approvals(app.config.approvals.clone())
                    .with_status(app.config.discord.status_requests_per_second > 0)
                    .with_message_content(app.config.discord.message_content()),
                );
                spawn_repost_loop(&agents_runtime, &app, surface.clone());
                spawn_status_loop(&agents_runtime, &app, surface.clone());
                // With `api.listen` set, the Agent Protocol is served beside Discord: its surface
                // stands in front of Discord's, so one set of actors serves both.
                let api_surface = (!app.config.api.listen.trim().is_empty())
                    .then(|| Arc::new(ApiSurface::beside(surface.clone())));
                let shown_by: Arc<dyn Surface> = match &api_surface {
                    Some(api_surface) => api_surface.clone(),
                    None => surface.clone(),
                };
                let supervisor = Supervisor::new(app.deps_on(shown_by, agents_runtime.clone()));
                let _ = slot.set(supervisor.clone());
                if let Some(api_surface) = api_surface {
                    // A task bound to a channel is checked and opens its thread through the
                    // surface's REST client, on the agents' runtime as its posts are.
                    let threads = Arc::new(super::threads::BotThreads::new(threads_http, shards));
                    spawn_api(
                        &agents_runtime,
                        &app,
                        supervisor.clone(),
                        api_surface,
                        threads,
                    );
                }
                let data = Data {
                    supervisor,
                    agents: app.agents(),
                    surface,
                    bot_user_id,
                    app,
                    agents_runtime: agents_runtime.clone(),
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
                // Loading every live agent is store work: off the gateway's thread, which keeps
                // its heartbeats meanwhile. poise holds events until setup ends, so no click
                // reaches an agent before it is resumed.
                let supervisor = data.supervisor.clone();
                let store = data.app.store.clone();
                let serves: Serves =
                    Arc::new(move |agent: &AgentState| shards.serves_agent(&store, agent));
                let resumes = serves.clone();
                let resumed = agents_runtime
                    .spawn_blocking(move || supervisor.resume_where(|agent| resumes(agent)));
                match resumed.await {
                    Ok(Ok(n)) if n > 0 => {
                        tracing::info!(agents = n, "resumed agents after a restart")
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::error!(error = %e, "cannot resume agents"),
                    Err(e) => tracing::error!(error = %e, "the resume task failed"),
                }
                // With a shared store: leases renewed, and agents of dead processes adopted.
                data.supervisor.keep_leases(serves);
                Ok(data)
            })
        })
        .build()
}

/// Runs `serve` to its end on a new thread with a runtime of its own; the receiver gets its
/// result.
fn on_gateway_thread<F, Served>(serve: F) -> anyhow::Result<oneshot::Receiver<anyhow::Result<()>>>
where
    F: FnOnce() -> Served + Send + 'static,
    Served: std::future::Future<Output = anyhow::Result<()>>,
{
    let (done, ended) = oneshot::channel();
    std::thread::Builder::new()
        .name("discord-gateway".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot build the gateway's runtime")
                .and_then(|runtime| runtime.block_on(serve()));
            let _ = done.send(result);
        })
        .context("cannot start the gateway's thread")?;
    Ok(ended)
}

fn gateway_result(
    ended: Result<anyhow::Result<()>, oneshot::error::RecvError>,
) -> anyhow::Result<()> {
    ended.unwrap_or_else(|_| Err(anyhow::anyhow!("the gateway's thread stopped unexpectedly")))
}

/// Serves the Agent Protocol on `api.listen` beside Discord, on the agents' runtime. Its tokens
/// were checked before the bot started.
fn spawn_api(
    agents: &tokio::runtime::Handle,
    app: &App,
    supervisor: Supervisor,
    surface: Arc<ApiSurface>,
    threads: Arc<super::threads::BotThreads>,
) {
    let tokens = match Tokens::from_config(&app.config.api) {
        Ok(tokens) => tokens,
        Err(e) => {
            tracing::error!(error = %e, "the Agent Protocol is not served");
            return;
        }
    };
    let listen_on = app.config.api.listen.clone();
    let api = Api::new(app.clone(), supervisor, surface, tokens).with_threads(threads);
    agents.spawn(async move {
        match crate::surface::api::listen(api, &listen_on).await {
            Ok(addr) => tracing::info!("Agent Protocol: http://{addr}/ap/v1/agent/tasks"),
            Err(e) => tracing::error!(error = %e, "the Agent Protocol is not served"),
        }
    });
}

/// Posts the cards Discord did not take every `discord.repost_interval_secs`, until shutdown.
fn spawn_repost_loop(agents: &tokio::runtime::Handle, app: &App, surface: Arc<DiscordSurface>) {
    let every = Duration::from_secs(app.config.discord.repost_interval_secs.max(1));
    let drain = app.drain.clone();
    agents.spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => surface.repost_cards().await,
                _ = drain.raised() => break,
            }
        }
    });
}

/// Keeps every thread's live status message and typing up to date, until shutdown.
fn spawn_status_loop(agents: &tokio::runtime::Handle, app: &App, surface: Arc<DiscordSurface>) {
    let per_second = app.config.discord.status_requests_per_second;
    let drain = app.drain.clone();
    agents.spawn(async move { surface.run_status_loop(per_second, drain.raised()).await });
}

/// Lets every agent finish what it has under way (at most `ops.shutdown_grace_secs`) without
/// starting anything new, then flushes the store. At the next start the agents continue where
/// they stopped; only calls still running at the deadline are settled at their worst case.
async fn shut_down(app: &App, supervisor: Option<&Supervisor>) -> anyhow::Result<()> {
    let grace = Duration::from_secs(app.config.ops.shutdown_grace_secs);
    let still_running = match supervisor {
        Some(supervisor) => supervisor.shutdown(grace).await,
        None => {
            app.drain.raise();
            Vec::new()
        }
    };
    if let Some(memory) = app.memory.clone() {
        // Saving large graphs is disk work; it is what makes the next start quick.
        tokio::task::spawn_blocking(move || memory.save_indexes()).await?;
    }
    app.store.flush().await?;
    tracing::info!(
        "this run: {}",
        app.store
            .disk_report(crate::ops::proc_counters::bytes_written_by_this_process())
    );
    if still_running.is_empty() {
        tracing::info!("shut down cleanly; agents continue at the next start");
    } else {
        tracing::warn!(
            agents = ?still_running,
            "shut down with work still running after {}s; it is settled at the next start",
            grace.as_secs()
        );
    }
    Ok(())
}
