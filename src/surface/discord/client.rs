//! Start-up of the Discord bot: the serenity client (through `HttpBuilder::proxy` when another
//! Discord-compatible API is configured), the poise framework with `/agent …`, and, once the
//! gateway is ready, the surface, the supervisor and the agents a restart left running.

use std::sync::Arc;

use anyhow::Context as _;
use poise::serenity_prelude as serenity;
use serenity::{GatewayIntents, HttpBuilder};

use super::commands::{self, Data};
use super::{respond, router, DiscordSurface};
use crate::app::App;
use crate::runtime::supervisor::Supervisor;

/// Connects and serves until the gateway connection ends.
pub async fn run(app: App) -> anyhow::Result<()> {
    let token = app
        .config
        .discord
        .token
        .clone()
        .context("DISCORD_TOKEN is not set; the bot needs its token in the environment")?;
    let mut http = HttpBuilder::new(token.expose());
    if let Some(base) = &app.config.discord.api_base {
        // serenity ignores a proxy unless its own rate limiter is off; the proxy (or Discord
        // behind it) then answers 429s, which serenity reports as errors we retry at our level.
        http = http
            .proxy(base.trim_end_matches('/'))
            .ratelimiter_disabled(true);
    }
    let http = http.build();
    let dev_guild = app.config.discord.dev_guild;
    let framework = poise::Framework::builder()
        .options(poise::FrameworkOptions {
            commands: commands::all(),
            event_handler: |ctx, event| Box::pin(router::on_event(ctx, event)),
            on_error: |error| Box::pin(respond::on_error(error)),
            pre_command: |ctx| Box::pin(respond::pre_command(ctx)),
            ..Default::default()
        })
        .initialize_owners(false)
        // setup must not fail: an Err here would leave every later event waiting forever.
        .setup(move |ctx, _ready, framework| {
            Box::pin(async move {
                let surface = Arc::new(DiscordSurface::new(
                    ctx.http.clone(),
                    app.store.clone(),
                    app.config.agent.approve_n_default,
                    app.clock.clone(),
                ));
                let data = Data {
                    supervisor: Supervisor::new(app.deps(surface.clone())),
                    agents: app.agents(),
                    surface,
                    app,
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
