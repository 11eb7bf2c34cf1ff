//! What every slash command and interaction handler is handed: the bot's services, and the
//! context and error types poise gives them.

use std::sync::Arc;

use super::DiscordSurface;
use crate::app::App;
use crate::runtime::supervisor::Supervisor;
use crate::service::AgentService;

/// Shared by the commands and, cloned, by the spawned interaction handlers.
#[derive(Clone)]
pub struct Data {
    pub app: App,
    pub agents: AgentService,
    pub supervisor: Supervisor,
    pub surface: Arc<DiscordSurface>,
    /// The bot's own user id, from READY: a message that @mentions it is addressed to the bot.
    pub bot_user_id: u64,
    /// The agents' runtime. Commands run on the gateway's one thread, where anything slow would
    /// hold up every click's acknowledgement: they hand slow work (an export, an embedding call)
    /// to this runtime.
    pub agents_runtime: tokio::runtime::Handle,
}

pub type Error = anyhow::Error;

pub type Ctx<'a> = poise::Context<'a, Data, Error>;
