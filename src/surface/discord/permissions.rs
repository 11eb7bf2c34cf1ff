//! The Discord permissions the bot needs where agents live, what breaks without each
//! (`NEEDED`), and which of them it lacks in a server's channels.
//!
//! The bot's permissions in a channel are computed with serenity's `Permissions` bits and its
//! helpers (`Guild::user_permissions_in`, `PartialGuild::user_permissions_in`): @everyone's and
//! the bot's roles' permissions, everything for the owner or an Administrator, then the channel's
//! overwrites in Discord's order. A thread has no overwrites of its own and takes its parent
//! channel's, so a thread is looked at through its parent. Two sources feed the same computation:
//! - the gateway's cache (the server's roles, the bot's own member, the channels' overwrites, kept
//!   current by the gateway's updates), at start-up for each server (`report_server`, logged) and
//!   before `/agent start` and `/agent fork` open a thread (`refusal_in`), which then refuse where
//!   a card could not be posted, naming the permission; where the cache does not hold the server
//!   yet, the permissions Discord computed for the interaction (`app_permissions`) stand in;
//! - REST (`GET /users/@me/guilds`, then each server, its channels and the bot's member), for
//!   `autothread check`, which runs without a gateway (`audit_servers`).
//!
//! Pin Messages (bit 51) is newer than serenity's names: it is built from its bit, and Manage
//! Messages counts for it, as on servers that predate it. serenity 0.12 drops the bits it does not
//! name when it reads a role or an overwrite, so the bot sees Pin Messages only through Manage
//! Messages: a role that has the first without the second is reported as lacking it.

use std::time::Duration;

use poise::serenity_prelude as serenity;
use serenity::{ChannelId, ChannelType, Guild, GuildChannel, Member, PartialGuild, Permissions};

/// Discord's Pin Messages permission, which serenity 0.12 does not name.
pub const PIN_MESSAGES: Permissions = Permissions::from_bits_retain(1 << 51);

/// Whether the bot can post an agent's cards without the permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Without it, an agent's thread cannot be opened or its cards cannot be read: `/agent
    /// start` refuses.
    Cards,
    /// Without it, some posts or features fail, and the cards still work.
    Features,
}

/// One permission the bot uses, by Discord's name, and what breaks without it.
#[derive(Debug)]
pub struct Needed {
    pub permission: Permissions,
    pub name: &'static str,
    pub without: &'static str,
    pub need: Need,
}

impl Needed {
    /// Whether `granted` holds it (Pin Messages: or Manage Messages, which servers that predate it
    /// pinned with).
    fn is_granted(&self, granted: Permissions) -> bool {
        granted.contains(self.permission)
            || (self.permission == PIN_MESSAGES && granted.contains(Permissions::MANAGE_MESSAGES))
    }
}

/// Every permission the bot uses in the channels where agents start, as the README lists them.
pub const NEEDED: &[Needed] = &[
    Needed {
        permission: Permissions::VIEW_CHANNEL,
        name: "View Channel",
        without: "the bot cannot see the channel or its agents' threads, so nothing works there",
        need: Need::Cards,
    },
    Needed {
        permission: Permissions::CREATE_PUBLIC_THREADS,
        name: "Create Public Threads",
        without: "/agent start and /agent fork cannot open an agent's thread",
        need: Need::Cards,
    },
    Needed {
        permission: Permissions::SEND_MESSAGES_IN_THREADS,
        name: "Send Messages in Threads",
        without: "profiles, cards, results, questions and the live status cannot be posted in \
                  the agents' threads",
        need: Need::Cards,
    },
    Needed {
        permission: Permissions::EMBED_LINKS,
        name: "Embed Links",
        without: "Discord drops every embed: cards, profiles and results arrive without their text",
        need: Need::Cards,
    },
    Needed {
        permission: Permissions::READ_MESSAGE_HISTORY,
        name: "Read Message History",
        without:
            "after a restart the bot cannot find the cards it posted, so a card may be posted \
                  twice",
        need: Need::Cards,
    },
    Needed {
        permission: Permissions::ATTACH_FILES,
        name: "Attach Files",
        without: "long results and arguments, diffs, /agent export, spend charts and images are \
                  refused",
        need: Need::Features,
    },
    Needed {
        permission: PIN_MESSAGES,
        name: "Pin Messages",
        without: "the live status message stays unpinned",
        need: Need::Features,
    },
    Needed {
        permission: Permissions::MENTION_EVERYONE,
        name: "Mention @everyone, @here and All Roles",
        without: "an escalated card's call to an approvers role that is not mentionable does not \
                  notify it",
        need: Need::Features,
    },
    Needed {
        permission: Permissions::MANAGE_THREADS,
        name: "Manage Threads",
        without: "/agent archive cannot archive an agent's thread where Discord asks for it",
        need: Need::Features,
    },
];

/// What the bot lacks of `NEEDED` with `granted`.
pub fn lacking(granted: Permissions) -> Vec<&'static Needed> {
    NEEDED.iter().filter(|n| !n.is_granted(granted)).collect()
}

/// "Embed Links (Discord drops …); Attach Files (…)": each lacking permission and what it
/// breaks.
pub fn describe(lacks: &[&Needed]) -> String {
    lacks
        .iter()
        .map(|n| format!("{} ({})", n.name, n.without))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The refusal of `/agent start` (or fork) where `granted` cannot carry an agent's cards: the
/// missing permissions by name, and what each would break.
pub fn refusal(granted: Permissions) -> Option<String> {
    let missing: Vec<&Needed> = lacking(granted)
        .into_iter()
        .filter(|n| n.need == Need::Cards)
        .collect();
    if missing.is_empty() {
        return None;
    }
    let names: Vec<&str> = missing.iter().map(|n| n.name).collect();
    Some(format!(
        "I cannot run an agent in this channel: my role lacks {} here. Without it, {}. A server \
         admin can grant it to my role (in the server's roles or this channel's permissions), or \
         start the agent in another channel. Nothing was started.",
        names.join(", "),
        missing
            .iter()
            .map(|n| n.without)
            .collect::<Vec<_>>()
            .join("; and ")
    ))
}

/// The bot's permissions in `channel` of a cached server (a thread: its parent's), or `None`
/// when the cache does not hold the channel or the bot's member.
pub fn in_cached_channel(guild: &Guild, channel: ChannelId, bot: &Member) -> Option<Permissions> {
    let parent = match guild.channels.get(&channel) {
        Some(found) => found,
        None => {
            let thread = guild.threads.iter().find(|t| t.id == channel)?;
            guild.channels.get(&thread.parent_id?)?
        }
    };
    Some(guild.user_permissions_in(parent, bot))
}

/// The channels of a server where agents can be started: text and announcement channels.
fn starts_agents(channel: &GuildChannel) -> bool {
    matches!(channel.kind, ChannelType::Text | ChannelType::News)
}

/// At most this many channels of a server are named in a report; the rest are counted.
const CHANNELS_NAMED: usize = 10;

/// At most this many servers are read by `audit_servers`; the rest are counted.
const SERVERS_READ: usize = 25;

/// What the bot lacks in one server: in the server as a whole (its roles), and in each channel
/// where agents start that takes more away (its overwrites).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReport {
    pub guild_id: u64,
    pub name: String,
    /// What it lacks through its roles, everywhere in the server.
    pub server_lacks: Vec<&'static str>,
    /// Each channel (id, name) that lacks more, with the report of what it lacks there.
    pub channels: Vec<(u64, String, String)>,
    /// Channels that lack more but were not named, past `CHANNELS_NAMED`.
    pub more_channels: usize,
    /// Channels where agents can start.
    pub channels_checked: usize,
    /// The lines a person reads: one for the server, one for each channel named.
    pub lines: Vec<ReportLine>,
}

/// One line of a report, and whether it says that something is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportLine {
    pub lacking: Lacking,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lacking {
    Nothing,
    /// Something is missing, and cards still work.
    Features,
    /// Something is missing without which `/agent start` refuses.
    Cards,
}

fn severity(lacks: &[&Needed]) -> Lacking {
    if lacks.iter().any(|n| n.need == Need::Cards) {
        Lacking::Cards
    } else if lacks.is_empty() {
        Lacking::Nothing
    } else {
        Lacking::Features
    }
}

/// The report for one server, from the permissions its roles give (`base`) and those in each of
/// its channels where agents start.
fn report(
    guild_id: u64,
    name: &str,
    base: Permissions,
    channels: Vec<(&GuildChannel, Permissions)>,
) -> ServerReport {
    let server_lacks = lacking(base);
    let server = format!("{name} (server {guild_id})");
    let mut lines = vec![ReportLine {
        lacking: severity(&server_lacks),
        text: match server_lacks.is_empty() {
            true => format!("{server}: the bot's roles give it every permission agents use"),
            false => format!("{server}: the bot's roles lack {}", describe(&server_lacks)),
        },
    }];
    let channels_checked = channels.len();
    let mut named = Vec::new();
    let mut more_channels = 0;
    for (channel, granted) in channels {
        let lacks: Vec<&Needed> = lacking(granted)
            .into_iter()
            .filter(|n| !server_lacks.iter().any(|s| s.name == n.name))
            .collect();
        if lacks.is_empty() {
            continue;
        }
        if named.len() == CHANNELS_NAMED {
            more_channels += 1;
            continue;
        }
        let text = describe(&lacks);
        lines.push(ReportLine {
            lacking: severity(&lacks),
            text: format!(
                "{server}: in #{} (channel {}) the bot also lacks {text}{}",
                channel.name,
                channel.id.get(),
                match severity(&lacks) {
                    Lacking::Cards => "; /agent start is refused there",
                    _ => "",
                }
            ),
        });
        named.push((channel.id.get(), channel.name.clone(), text));
    }
    if more_channels > 0 {
        lines.push(ReportLine {
            lacking: Lacking::Features,
            text: format!(
                "{server}: {more_channels} more channels take permissions away from the bot"
            ),
        });
    }
    ServerReport {
        guild_id,
        name: name.to_string(),
        server_lacks: server_lacks.iter().map(|n| n.name).collect(),
        channels: named,
        more_channels,
        channels_checked,
        lines,
    }
}

/// The report for a server in the gateway's cache, with the bot's member; `None` when the cache
/// does not hold the bot's member.
pub fn report_server(guild: &Guild, bot: serenity::UserId) -> Option<ServerReport> {
    let member = guild.members.get(&bot)?;
    let mut channels: Vec<&GuildChannel> = guild
        .channels
        .values()
        .filter(|c| starts_agents(c))
        .collect();
    channels.sort_by_key(|c| (c.position, c.id));
    let granted = channels
        .into_iter()
        .map(|c| (c, guild.user_permissions_in(c, member)))
        .collect();
    Some(report(
        guild.id.get(),
        &guild.name,
        guild.member_permissions(member),
        granted,
    ))
}

/// Why the servers could not be read over REST.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("Discord did not answer {what}: {source}")]
    Unreachable {
        what: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("Discord answered {what} with HTTP {status}")]
    Refused { what: String, status: u16 },
    #[error("Discord's answer to {what} is not a member: {source}")]
    Malformed {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("Discord's answer to {what} could not be read: {source}")]
    Unreadable {
        what: String,
        #[source]
        source: reqwest::Error,
    },
}

/// What `audit_servers` found: a report per server read, and how many were left unread.
#[derive(Debug)]
pub struct Audit {
    pub servers: Vec<ServerReport>,
    pub unread: usize,
}

/// Reads every server the bot is in over REST (`base` is Discord's API root, without `/api`) and
/// reports what the bot lacks in each, for `autothread check`.
pub async fn audit_servers(base: &str, token: &str) -> Result<Audit, AuditError> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|source| AuditError::Unreachable {
            what: "a client".into(),
            source,
        })?;
    let get = |path: String| {
        let request = client
            .get(format!("{base}/api/v10{path}"))
            .header("Authorization", format!("Bot {token}"));
        async move {
            let response = request
                .send()
                .await
                .map_err(|source| AuditError::Unreachable {
                    what: path.clone(),
                    source,
                })?;
            if !response.status().is_success() {
                return Err(AuditError::Refused {
                    what: path,
                    status: response.status().as_u16(),
                });
            }
            Ok((response, path))
        }
    };
    async fn read<T: serde::de::DeserializeOwned>(
        answered: (reqwest::Response, String),
    ) -> Result<T, AuditError> {
        let (response, what) = answered;
        response
            .json()
            .await
            .map_err(|source| AuditError::Unreadable { what, source })
    }
    let me: serenity::CurrentUser = read(get("/users/@me".into()).await?).await?;
    let guilds: Vec<serenity::GuildInfo> = read(get("/users/@me/guilds".into()).await?).await?;
    let unread = guilds.len().saturating_sub(SERVERS_READ);
    let mut servers = Vec::new();
    for info in guilds.into_iter().take(SERVERS_READ) {
        let id = info.id.get();
        let guild: PartialGuild = read(get(format!("/guilds/{id}")).await?).await?;
        let what = format!("/guilds/{id}/members/{}", me.id.get());
        let mut member: serde_json::Value = read(get(what.clone()).await?).await?;
        // REST leaves the server's id out of a member, which serenity's `Member` holds.
        member["guild_id"] = serde_json::json!(id.to_string());
        let member: Member = serde_json::from_value(member)
            .map_err(|source| AuditError::Malformed { what, source })?;
        let mut channels: Vec<GuildChannel> =
            read(get(format!("/guilds/{id}/channels")).await?).await?;
        channels.retain(starts_agents);
        channels.sort_by_key(|c| (c.position, c.id));
        let granted = channels
            .iter()
            .map(|c| (c, guild.user_permissions_in(c, &member)))
            .collect();
        servers.push(report(
            id,
            &guild.name,
            guild.member_permissions(&member),
            granted,
        ));
    }
    Ok(Audit { servers, unread })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_permission_is_named_once_and_pinning_accepts_manage_messages() {
        let mut names: Vec<&str> = NEEDED.iter().map(|n| n.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NEEDED.len());
        let all: Permissions = NEEDED
            .iter()
            .fold(Permissions::empty(), |all, n| all | n.permission);
        assert!(lacking(all).is_empty());
        let old_server = all.difference(PIN_MESSAGES) | Permissions::MANAGE_MESSAGES;
        assert!(lacking(old_server).is_empty());
        let no_pins = all.difference(PIN_MESSAGES);
        assert_eq!(
            lacking(no_pins).iter().map(|n| n.name).collect::<Vec<_>>(),
            ["Pin Messages"]
        );
        // Only what the cards need refuses a start.
        assert_eq!(refusal(no_pins), None);
        let refused = refusal(all.difference(Permissions::EMBED_LINKS)).unwrap();
        assert!(refused.contains("lacks Embed Links here"), "{refused}");
        assert!(refused.contains("Discord drops every embed"), "{refused}");
    }
}
