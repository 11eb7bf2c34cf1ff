//! Opening an agent's thread (`open_thread`, for `/agent start`, fork and the Agent Protocol),
//! and `BotThreads`: the bot as the Agent Protocol's `ThreadHost`, which binds a task created
//! over the API to a thread (see `surface::api::threads`).
//!
//! `BotThreads::prepare` checks what `/agent start` checks before anything is made, reading
//! Discord afresh over REST (the gateway's cache may not hold a server yet just after a start or
//! a reconnect): the channel is a text or announcement channel of a server this process's
//! shards serve, and the bot's permissions there, from the server's roles and the channel's
//! overwrites, carry an agent's cards (`permissions::refusal`). Then the owner's member in that
//! server: their roles and their permissions in the channel (as Discord puts them in an
//! interaction), so that the server's start role, budget ceiling and caps apply to the owner as
//! if they had typed `/agent start` there.

use std::sync::Arc;

use async_trait::async_trait;
use poise::serenity_prelude as serenity;
use serenity::{
    AutoArchiveDuration, Channel, ChannelId, ChannelType, CreateThread, GuildChannel, GuildId,
    Http, HttpError, Member, UserId,
};

use super::permissions;
use super::shards::Shards;
use crate::service::rights::Requester;
use crate::service::UserError;
use crate::surface::api::{BindRefusal, ThreadHost, ThreadPlace};
use crate::surface::discord::cards::thread_name;

/// Opens a public thread for an agent in `channel`; a refusal for want of permissions is a
/// `UserError` saying which ones the bot's role needs.
pub(super) async fn open_thread(
    http: &Http,
    channel: ChannelId,
    title: &str,
) -> anyhow::Result<serenity::GuildChannel> {
    channel
        .create_thread(
            http,
            CreateThread::new(thread_name(title))
                .kind(ChannelType::PublicThread)
                .auto_archive_duration(AutoArchiveDuration::OneDay),
        )
        .await
        .map_err(|e| match e {
            serenity::Error::Http(HttpError::UnsuccessfulRequest(refusal))
                if refusal.status_code.as_u16() == 403 =>
            {
                UserError::new(
                    "I may not open a thread in this channel: give my role the Create Public \
                     Threads and Send Messages in Threads permissions here, or start the agent \
                     in another channel.",
                )
                .into()
            }
            other => anyhow::Error::new(other).context("cannot create the agent's thread"),
        })
}

/// The bot, opening threads for tasks bound over the Agent Protocol.
pub struct BotThreads {
    http: Arc<Http>,
    shards: Shards,
}

/// Whether Discord answered a REST read with "no such thing" (or "not yours to see").
fn not_found(error: &serenity::Error) -> bool {
    matches!(
        error,
        serenity::Error::Http(HttpError::UnsuccessfulRequest(refusal))
            if matches!(refusal.status_code.as_u16(), 403 | 404)
    )
}

impl BotThreads {
    pub fn new(http: Arc<Http>, shards: Shards) -> BotThreads {
        BotThreads { http, shards }
    }

    /// `channel` as a text or announcement channel of a server this process serves, or why not.
    async fn server_channel(&self, channel: u64) -> Result<GuildChannel, BindRefusal> {
        let not_a_server_channel = BindRefusal::NotAServerChannel(channel);
        match self.http.get_channel(ChannelId::new(channel)).await {
            Ok(Channel::Guild(found))
                if matches!(found.kind, ChannelType::Text | ChannelType::News)
                    && self.shards.serves(found.guild_id.get()) =>
            {
                Ok(found)
            }
            Ok(_) => Err(not_a_server_channel),
            Err(error) if not_found(&error) => Err(not_a_server_channel),
            Err(error) => Err(BindRefusal::Unreachable(error.to_string())),
        }
    }

    /// A member of `guild`; `None` when the user is not in it.
    async fn member(&self, guild: GuildId, user: u64) -> Result<Option<Member>, BindRefusal> {
        match self.http.get_member(guild, UserId::new(user)).await {
            Ok(member) => Ok(Some(member)),
            Err(error) if not_found(&error) => Ok(None),
            Err(error) => Err(BindRefusal::Unreachable(error.to_string())),
        }
    }
}

#[async_trait]
impl ThreadHost for BotThreads {
    async fn prepare(&self, channel: u64, owner: u64) -> Result<ThreadPlace, BindRefusal> {
        let found = self.server_channel(channel).await?;
        let guild_id = found.guild_id;
        let unreachable = |error: serenity::Error| BindRefusal::Unreachable(error.to_string());
        // Read fresh rather than from the gateway's cache, which may not hold the server yet
        // (just after a start or a reconnect): a bound task is rare, a wrong refusal confusing.
        let guild = self.http.get_guild(guild_id).await.map_err(unreachable)?;
        let bot_id = self.http.get_current_user().await.map_err(unreachable)?.id;
        let bot = self
            .member(guild_id, bot_id.get())
            .await?
            .ok_or(BindRefusal::NotAServerChannel(channel))?;
        if let Some(refusal) = permissions::refusal(guild.user_permissions_in(&found, &bot)) {
            return Err(BindRefusal::BotMayNot(refusal));
        }
        let member = self
            .member(guild_id, owner)
            .await?
            .ok_or(BindRefusal::NotAMember {
                user: owner,
                channel,
            })?;
        // As Discord gives a member's permissions in an interaction: in the channel.
        let granted = guild.user_permissions_in(&found, &member);
        Ok(ThreadPlace {
            guild_id: guild_id.get(),
            owner: Requester {
                user_id: owner,
                role_ids: member.roles.iter().map(|role| role.get()).collect(),
                manage_threads: granted.manage_threads(),
                manage_guild: granted.manage_guild(),
            },
        })
    }

    async fn open_thread(&self, channel: u64, title: &str) -> Result<u64, BindRefusal> {
        match open_thread(&self.http, ChannelId::new(channel), title).await {
            Ok(thread) => Ok(thread.id.get()),
            Err(error) => Err(match error.downcast::<UserError>() {
                Ok(refusal) => BindRefusal::BotMayNot(refusal.0),
                Err(other) => BindRefusal::Unreachable(format!("{other:#}")),
            }),
        }
    }
}
