//! A fake Discord on 127.0.0.1 that the real serenity/poise stack talks to unmodified: the REST
//! routes the bot uses under /api/v10 and a WebSocket gateway (HELLO, IDENTIFY, READY,
//! GUILD_CREATE, heartbeats, numbered dispatches). It stores threads and messages, applies
//! Discord's validation rules and records every violation, and lets a test act as users:
//! slash commands, button clicks, modal submits and messages. It has two servers, and routes each
//! server's events to the gateway shard Discord would, `(guild_id >> 22) % total_shards`, so that
//! bots running shards in separate processes can be tested together.
//!
//! Like Discord, it checks the intents an IDENTIFY asks for against the application's flags
//! (`set_application_flags`; by default Message Content is switched on): a privileged intent the
//! application lacks closes the connection with 4014. A connection without the Message Content
//! intent gets MESSAGE_CREATE and MESSAGE_UPDATE with `content`, `embeds`, `attachments` and
//! `components` empty (and no `poll`), except for the bot's own messages, messages that mention it
//! (a reply mentions the author it answers unless sent with `reply_quietly`) and DMs; REST reads
//! of messages are blanked the same way for an application without the flag.
//!
//! Like Discord, it computes the bot's permissions in a channel from its servers' roles and the
//! channel's overwrites (`Servers`): @everyone's permissions and the member's roles', everything
//! for the owner or an Administrator, then the @everyone overwrite, the member's roles' overwrites
//! (their denials together, then their grants), and the member's own overwrite; without View
//! Channel nothing else counts, and a thread takes its parent channel's. It sends them with each
//! interaction (`app_permissions`) and in GUILD_CREATE (roles, the bot's member, overwrites),
//! serves them over REST (a channel with its overwrites, a server's roles, a member's roles), and
//! acts on them: no thread without Create Public Threads, no post
//! without Send Messages (in Threads), and a message's embeds dropped without Embed Links.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub const APP: u64 = 1_000_000_000_000_000_001;
pub const GUILD: u64 = 2_000_000_000_000_000_001;
pub const CHANNEL: u64 = 3_000_000_000_000_000_001;
/// A second server, on the other shard of two: its id differs from `GUILD` by one in the bits
/// Discord shards by.
pub const GUILD_B: u64 = GUILD + (1 << 22);
pub const CHANNEL_B: u64 = 3_000_000_000_000_000_002;
pub const ALICE: u64 = 4_000_000_000_000_000_001;
pub const BOB: u64 = 4_000_000_000_000_000_002;
pub const CAROL: u64 = 4_000_000_000_000_000_003;
pub const ROLE_TEAM: u64 = 5_000_000_000_000_000_001;
/// The bot's own role in each server (the one Discord makes for its integration).
pub const BOT_ROLE: u64 = 5_000_000_000_000_000_101;
pub const BOT_ROLE_B: u64 = 5_000_000_000_000_000_102;
/// Discord's permission bits the fake acts on or grants.
pub const VIEW_CHANNEL: u64 = 1 << 10;
pub const SEND_MESSAGES: u64 = 1 << 11;
pub const MANAGE_MESSAGES: u64 = 1 << 13;
pub const EMBED_LINKS: u64 = 1 << 14;
pub const ATTACH_FILES: u64 = 1 << 15;
pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
pub const ADMINISTRATOR: u64 = 1 << 3;
pub const MANAGE_THREADS: u64 = 1 << 34;
pub const CREATE_PUBLIC_THREADS: u64 = 1 << 35;
pub const SEND_MESSAGES_IN_THREADS: u64 = 1 << 38;
pub const PIN_MESSAGES: u64 = 1 << 51;
/// Every permission bit Discord has defined so far.
const ALL_PERMISSIONS: u64 = (1 << 52) - 1;
/// @everyone's permissions in the fake's servers: reading and writing, threads, embeds, files.
pub const EVERYONE_PERMS: u64 = 1071698660929;
/// What the bot's own role adds: pinning and archiving.
pub const BOT_ROLE_PERMS: u64 = MANAGE_MESSAGES | PIN_MESSAGES | MANAGE_THREADS;
/// Overwrite kinds.
pub const OVERWRITE_ROLE: u64 = 0;
pub const OVERWRITE_MEMBER: u64 = 1;
/// Permissions of an ordinary member (no Manage Threads).
pub const MEMBER_PERMS: &str = "2147483648";
/// A member's permissions plus Manage Server (a server admin).
pub const ADMIN_PERMS: &str = "2147483680";
/// Application flags (Discord's `application.flags`): the Message Content intent switched on for
/// an application that is verified (`GATEWAY_MESSAGE_CONTENT`) or not (`…_LIMITED`, the Developer
/// Portal's switch); the same pairs exist for Server Members and Presence.
pub const FLAG_GATEWAY_PRESENCE: u64 = 1 << 12;
pub const FLAG_GATEWAY_PRESENCE_LIMITED: u64 = 1 << 13;
pub const FLAG_GATEWAY_GUILD_MEMBERS: u64 = 1 << 14;
pub const FLAG_GATEWAY_GUILD_MEMBERS_LIMITED: u64 = 1 << 15;
pub const FLAG_GATEWAY_MESSAGE_CONTENT: u64 = 1 << 18;
pub const FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED: u64 = 1 << 19;
/// Gateway intents (the IDENTIFY's `intents` bits) that are privileged.
pub const INTENT_GUILD_MEMBERS: u64 = 1 << 1;
pub const INTENT_GUILD_PRESENCES: u64 = 1 << 8;
pub const INTENT_MESSAGE_CONTENT: u64 = 1 << 15;
/// Each privileged intent with the application flags that allow it.
const PRIVILEGED_INTENTS: [(u64, u64); 3] = [
    (
        INTENT_GUILD_MEMBERS,
        FLAG_GATEWAY_GUILD_MEMBERS | FLAG_GATEWAY_GUILD_MEMBERS_LIMITED,
    ),
    (
        INTENT_GUILD_PRESENCES,
        FLAG_GATEWAY_PRESENCE | FLAG_GATEWAY_PRESENCE_LIMITED,
    ),
    (
        INTENT_MESSAGE_CONTENT,
        FLAG_GATEWAY_MESSAGE_CONTENT | FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED,
    ),
];
/// Discord's close code for an IDENTIFY asking for privileged intents the application lacks.
pub const CLOSE_DISALLOWED_INTENTS: u16 = 4014;
const ACK_DEADLINE: Duration = Duration::from_secs(3);
/// How long Discord remembers an enforced nonce by default here ("the past few minutes").
const NONCE_WINDOW: Duration = Duration::from_secs(300);

#[derive(Clone, Debug)]
pub struct Callback {
    pub kind: u64,
    pub data: Value,
    pub latency: Duration,
}

/// One gateway connection, once it has identified as a shard.
struct ShardLink {
    tx: Option<mpsc::UnboundedSender<Value>>,
    seq: u64,
    /// The intents this connection identified with.
    intents: u64,
}

/// A channel's permission overwrite: for a role (the server's id: @everyone) or a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overwrite {
    pub id: u64,
    pub kind: u64,
    pub allow: u64,
    pub deny: u64,
}

impl Overwrite {
    fn payload(&self) -> Value {
        json!({"id": self.id.to_string(), "type": self.kind, "allow": self.allow.to_string(), "deny": self.deny.to_string()})
    }
}

/// The servers' permissions as Discord keeps them: each role's permissions (a server's
/// @everyone role has the server's id), each member's roles, each channel's overwrites.
struct Servers {
    roles: HashMap<u64, Vec<(u64, u64)>>,
    member_roles: HashMap<(u64, u64), Vec<u64>>,
    overwrites: HashMap<u64, Vec<Overwrite>>,
}

impl Default for Servers {
    fn default() -> Servers {
        let mut servers = Servers {
            roles: HashMap::new(),
            member_roles: HashMap::new(),
            overwrites: HashMap::new(),
        };
        for (guild, bot_role) in [(GUILD, BOT_ROLE), (GUILD_B, BOT_ROLE_B)] {
            servers.roles.insert(
                guild,
                vec![
                    (guild, EVERYONE_PERMS),
                    (ROLE_TEAM, 0),
                    (bot_role, BOT_ROLE_PERMS),
                ],
            );
            servers.member_roles.insert((guild, APP), vec![bot_role]);
        }
        servers
    }
}

impl Servers {
    /// Discord's computation of `user`'s permissions in `channel` (a channel of `guild`, never a
    /// thread: a thread is looked at through its parent), with `roles` as the member's roles.
    fn permissions(&self, guild: u64, user: u64, roles: &[u64], channel: u64) -> u64 {
        if user == ALICE {
            // The owner of both servers.
            return ALL_PERMISSIONS;
        }
        let role_permissions = self.roles.get(&guild).cloned().unwrap_or_default();
        let of_role = |role: u64| {
            role_permissions
                .iter()
                .find(|(id, _)| *id == role)
                .map_or(0, |(_, p)| *p)
        };
        let mut permissions = of_role(guild);
        for role in roles {
            permissions |= of_role(*role);
        }
        if permissions & ADMINISTRATOR != 0 {
            return ALL_PERMISSIONS;
        }
        let overwrites = self.overwrites.get(&channel).cloned().unwrap_or_default();
        if let Some(everyone) = overwrites
            .iter()
            .find(|o| o.kind == OVERWRITE_ROLE && o.id == guild)
        {
            permissions = (permissions & !everyone.deny) | everyone.allow;
        }
        let (mut denied, mut allowed) = (0, 0);
        for overwrite in overwrites
            .iter()
            .filter(|o| o.kind == OVERWRITE_ROLE && roles.contains(&o.id))
        {
            denied |= overwrite.deny;
            allowed |= overwrite.allow;
        }
        permissions = (permissions & !denied) | allowed;
        if let Some(own) = overwrites
            .iter()
            .find(|o| o.kind == OVERWRITE_MEMBER && o.id == user)
        {
            permissions = (permissions & !own.deny) | own.allow;
        }
        // Without View Channel, Discord counts nothing else in the channel.
        if permissions & VIEW_CHANNEL == 0 {
            return 0;
        }
        permissions
    }

    fn roles_of(&self, guild: u64, user: u64) -> Vec<u64> {
        self.member_roles
            .get(&(guild, user))
            .cloned()
            .unwrap_or_default()
    }

    fn role_payloads(&self, guild: u64) -> Vec<Value> {
        self.roles
            .get(&guild)
            .into_iter()
            .flatten()
            .map(|&(id, permissions)| {
                let name = match id {
                    ROLE_TEAM => "team",
                    BOT_ROLE | BOT_ROLE_B => "fakebot",
                    _ if id == guild => "@everyone",
                    _ => "a role",
                };
                let mut r = role(id, name);
                r["permissions"] = json!(permissions.to_string());
                r["position"] = json!(match id == guild {
                    true => 0,
                    false => 1,
                });
                if matches!(id, BOT_ROLE | BOT_ROLE_B) {
                    r["managed"] = json!(true);
                }
                r
            })
            .collect()
    }

    /// The server's one text channel, with its overwrites.
    fn channel_payload(&self, guild: u64) -> Value {
        let channel = match guild {
            GUILD_B => CHANNEL_B,
            _ => CHANNEL,
        };
        let overwrites: Vec<Value> = self
            .overwrites
            .get(&channel)
            .into_iter()
            .flatten()
            .map(Overwrite::payload)
            .collect();
        json!({"id": channel.to_string(), "type": 0, "name": "general", "guild_id": guild.to_string(),
               "position": 0, "permission_overwrites": overwrites, "parent_id": null, "topic": null, "nsfw": false})
    }

    /// The bot's member in `guild`, as REST returns it (no permissions; no server id).
    fn bot_member(&self, guild: u64) -> Value {
        let mut found = member(APP, &self.roles_of(guild, APP), "0");
        found["user"]["bot"] = json!(true);
        if let Some(fields) = found.as_object_mut() {
            fields.remove("permissions");
        }
        found
    }

    /// GUILD_CREATE for one of the fake's servers: its roles, its one text channel with its
    /// overwrites, and the members Discord sends without the members intent (the bot's own).
    fn guild_payload(&self, guild: u64) -> Value {
        let name = match guild {
            GUILD_B => "Second Guild",
            _ => "Fake Guild",
        };
        json!({"id": guild.to_string(), "name": name, "icon": null, "owner_id": ALICE.to_string(),
            "verification_level": 0, "default_message_notifications": 0, "explicit_content_filter": 0, "mfa_level": 0,
            "premium_tier": 0, "nsfw_level": 0, "system_channel_flags": 0, "preferred_locale": "en-US",
            "premium_progress_bar_enabled": false, "features": [], "emojis": [], "stickers": [],
            "roles": self.role_payloads(guild),
            "joined_at": "2024-01-01T00:00:00.000000+00:00", "large": false, "unavailable": false, "member_count": 3,
            "voice_states": [], "presences": [], "stage_instances": [], "guild_scheduled_events": [], "threads": [],
            "members": [member(ALICE, &[], MEMBER_PERMS), self.bot_member(guild)],
            "channels": [self.channel_payload(guild)]})
    }
}

#[derive(Default)]
struct Inner {
    servers: Servers,
    next_id: u64,
    /// The identified connections by shard id.
    shards: HashMap<u32, ShardLink>,
    /// As the bot identified (0 before it has).
    total_shards: u32,
    /// Dispatches for a shard not yet identified.
    queued: Vec<Value>,
    /// Every message, in the order (and so the id order) they were stored.
    messages: Vec<Value>,
    /// Positions in `messages` by channel, so that a bench with a thousand busy threads reads
    /// one thread without scanning them all.
    by_channel: HashMap<u64, Vec<usize>>,
    threads: Vec<Value>,
    commands: Vec<Value>,
    /// Interactions injected: id → (token, when).
    interactions: HashMap<u64, (String, Instant)>,
    callbacks: HashMap<u64, Vec<Callback>>,
    followups: Vec<(String, Value)>,
    errors: Vec<String>,
    sent_payloads: Vec<Value>,
    identifies: usize,
    /// The application's flags, which say which privileged intents it may ask for.
    application_flags: u64,
    /// IDENTIFYs closed with 4014 for asking for a privileged intent the application lacks.
    refused_identifies: usize,
    /// Interactions deferred, by token: whether the deferral was ephemeral. Discord turns the
    /// first follow-up into the deferred response, with the deferral's visibility whatever the
    /// follow-up's own flags say.
    deferred: HashMap<String, bool>,
    /// How the next cards (posts with buttons) fail: (status, whether the message is stored
    /// anyway).
    failing_posts: VecDeque<(u16, bool)>,
    /// Messages by (channel, nonce) with when they were posted, for posts that ask Discord to
    /// enforce their nonce.
    nonces: HashMap<(u64, String), (usize, Instant)>,
    /// How long an enforced nonce is remembered ("the past few minutes", Discord says).
    nonce_window: Option<Duration>,
    /// Cards (posts with buttons or embeds) stored so far, counted as they are stored.
    card_posts: usize,
    /// How long the answer to a stored card is held back, so that a test can kill the bot after
    /// Discord stored the card and before the bot learnt of it.
    card_answer_delay: Duration,
    /// The bot may not create threads (its role lacks Create Public Threads).
    threads_forbidden: bool,
    /// Pinned messages by channel, in the order they were pinned.
    pins: HashMap<u64, Vec<u64>>,
    /// When each channel's recent message edits were made, for the edit rate rule.
    edits: HashMap<u64, VecDeque<Instant>>,
    /// Edits beyond the edit rate rule, by channel. Discord would answer them with a 429 that
    /// serenity waits out; the fake counts them, so a test can show a loop stays within it.
    edit_bursts: HashMap<u64, usize>,
    /// Typing indicators started, by channel.
    typing: HashMap<u64, usize>,
    /// Every uploaded file's bytes, by its attachment URL.
    files: HashMap<String, Vec<u8>>,
    /// Set by benchmarks that run for hours: what only tests read back (dispatches sent,
    /// follow-ups) is not recorded, and a channel keeps the bodies of its latest messages only.
    bounded_history: bool,
    /// Users who changed their user name since the fake started, by id: what Discord sends
    /// about them from then on carries the new name under the same id.
    renamed: HashMap<u64, String>,
}

/// With bounded history, how many of a channel's latest messages keep their bodies; older ones
/// keep only their id and channel, so positions and ids stay as they were.
const MESSAGES_KEPT_PER_CHANNEL: usize = 32;

/// Discord allows about five message edits per channel in five seconds; more are counted.
const EDITS_PER_WINDOW: usize = 5;
const EDIT_WINDOW: Duration = Duration::from_secs(5);
/// Discord keeps at most 250 pins per channel.
const MAX_PINS: usize = 250;

/// Whether a reply mentions the author of the message it answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ping {
    On,
    Off,
}

/// One text input of a form the bot opened: (custom id, label, prefilled value).
pub type FormInput = (String, String, String);

#[derive(Clone)]
pub struct FakeDiscord {
    inner: Arc<Mutex<Inner>>,
    pub base_url: String,
}

type Shared = Arc<Mutex<Inner>>;

fn user(id: u64, name: &str, bot: bool) -> Value {
    json!({"id": id.to_string(), "username": name, "discriminator": "0", "global_name": name, "avatar": null, "bot": bot, "flags": 0})
}

fn name_of(id: u64) -> &'static str {
    match id {
        ALICE => "alice",
        BOB => "bob",
        CAROL => "carol",
        APP => "fakebot",
        _ => "someone",
    }
}

pub fn role(id: u64, name: &str) -> Value {
    json!({"id": id.to_string(), "name": name, "color": 0, "colors": {"primary_color": 0, "secondary_color": null, "tertiary_color": null},
           "hoist": false, "managed": false, "mentionable": true, "permissions": "0", "position": 1, "icon": null, "unicode_emoji": null, "flags": 0})
}

pub fn member(id: u64, roles: &[u64], permissions: &str) -> Value {
    json!({"user": user(id, name_of(id), false), "nick": null,
           "roles": roles.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
           "joined_at": "2024-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0,
           "pending": false, "permissions": permissions})
}

/// READY for shard `shard` of `total`, which serves `guilds`.
pub fn ready_payload(port: u16, shard: u32, total: u32, guilds: &[u64]) -> Value {
    let guilds: Vec<Value> = guilds
        .iter()
        .map(|g| json!({"id": g.to_string(), "unavailable": true}))
        .collect();
    json!({"v": 10, "user": user(APP, "fakebot", true), "guilds": guilds,
           "session_id": "fake-session", "resume_gateway_url": format!("ws://127.0.0.1:{port}/ws"), "shard": [shard, total],
           "application": {"id": APP.to_string(), "flags": FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED}})
}

/// Whether a message keeps its content for a reader without the Message Content intent: the
/// bot's own messages, messages that mention it, and DMs (no server) do.
fn content_visible_without_intent(message: &Value) -> bool {
    let app = APP.to_string();
    message["author"]["id"] == app.as_str()
        || message["guild_id"].is_null()
        || message["mentions"]
            .as_array()
            .is_some_and(|users| users.iter().any(|u| u["id"] == app.as_str()))
}

/// Empties what Discord empties for a reader without the Message Content intent.
fn blank_content(message: &mut Value) {
    if content_visible_without_intent(message) {
        return;
    }
    message["content"] = json!("");
    message["embeds"] = json!([]);
    message["attachments"] = json!([]);
    message["components"] = json!([]);
    if let Some(fields) = message.as_object_mut() {
        fields.remove("poll");
    }
}

/// Whether `flags` let an application read message content.
fn has_message_content(flags: u64) -> bool {
    flags & (FLAG_GATEWAY_MESSAGE_CONTENT | FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED) != 0
}

pub fn guild_payload() -> Value {
    guild_payload_of(GUILD)
}

/// GUILD_CREATE for one of the fake's servers as it starts, with its one text channel.
pub fn guild_payload_of(guild: u64) -> Value {
    Servers::default().guild_payload(guild)
}

fn now_stamp() -> String {
    chrono::Utc::now().to_rfc3339()
}

fn chars(v: &Value) -> usize {
    v.as_str().map(|s| s.chars().count()).unwrap_or(0)
}

/// Discord's validation of a message body; each problem is a violation the test will see.
pub fn validate_message(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if chars(&body["content"]) > 2000 {
        problems.push(format!(
            "content is {} characters (max 2000)",
            chars(&body["content"])
        ));
    }
    let embeds = body["embeds"].as_array().cloned().unwrap_or_default();
    if embeds.len() > 10 {
        problems.push("more than 10 embeds".into());
    }
    let mut total = 0;
    for embed in &embeds {
        let limits = [("title", 256), ("description", 4096)];
        for (key, max) in limits {
            if chars(&embed[key]) > max {
                problems.push(format!(
                    "embed {key} is {} characters (max {max})",
                    chars(&embed[key])
                ));
            }
            total += chars(&embed[key]);
        }
        if chars(&embed["footer"]["text"]) > 2048 {
            problems.push("embed footer over 2048".into());
        }
        total += chars(&embed["footer"]["text"]);
        let fields = embed["fields"].as_array().cloned().unwrap_or_default();
        if fields.len() > 25 {
            problems.push("more than 25 fields".into());
        }
        for field in &fields {
            if chars(&field["name"]) > 256 || chars(&field["name"]) == 0 {
                problems.push(format!(
                    "field name of {} characters",
                    chars(&field["name"])
                ));
            }
            if chars(&field["value"]) > 1024 || chars(&field["value"]) == 0 {
                problems.push(format!(
                    "field value of {} characters",
                    chars(&field["value"])
                ));
            }
            total += chars(&field["name"]) + chars(&field["value"]);
        }
    }
    if total > 6000 {
        problems.push(format!("embeds hold {total} characters (max 6000)"));
    }
    let rows = body["components"].as_array().cloned().unwrap_or_default();
    if rows.len() > 5 {
        problems.push("more than 5 component rows".into());
    }
    let mut ids = Vec::new();
    for row in &rows {
        let items = row["components"].as_array().cloned().unwrap_or_default();
        if items.len() > 5 {
            problems.push("more than 5 buttons in a row".into());
        }
        let selects = items.iter().filter(|item| item["type"] == 3).count();
        if selects > 0 && items.len() > 1 {
            problems.push("a select menu shares its row".into());
        }
        for select in items.iter().filter(|item| item["type"] == 3) {
            problems.extend(select_problems(select));
        }
        for item in items {
            if let Some(id) = item["custom_id"].as_str() {
                if id.chars().count() > 100 {
                    problems.push(format!("custom_id longer than 100: {id}"));
                }
                if ids.contains(&id.to_string()) {
                    problems.push(format!("duplicate custom_id {id}"));
                }
                ids.push(id.to_string());
            }
            if chars(&item["label"]) > 80 {
                problems.push("button label over 80".into());
            }
        }
    }
    problems
}

/// Discord's rules for a string select menu: 1 to 25 options, each with a label, value and
/// description of at most 100 characters, values unique, a placeholder of at most 150.
fn select_problems(select: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let options = select["options"].as_array().cloned().unwrap_or_default();
    if options.is_empty() || options.len() > 25 {
        problems.push(format!("a select menu with {} options", options.len()));
    }
    if chars(&select["placeholder"]) > 150 {
        problems.push("select placeholder over 150".into());
    }
    let mut values = Vec::new();
    for option in &options {
        for key in ["label", "value", "description"] {
            if chars(&option[key]) > 100 {
                problems.push(format!("select option {key} over 100"));
            }
        }
        if chars(&option["label"]) == 0 || chars(&option["value"]) == 0 {
            problems.push("select option without a label or value".into());
        }
        if values.contains(&option["value"]) {
            problems.push(format!("duplicate select value {}", option["value"]));
        }
        values.push(option["value"].clone());
    }
    problems
}

/// The bot promises to mention nobody: every message must say so explicitly.
fn check_mentions(body: &Value) -> Option<String> {
    let parse = body.pointer("/allowed_mentions/parse");
    match parse.and_then(Value::as_array) {
        Some(list) if list.is_empty() => None,
        _ => Some(format!(
            "message sent without mentions disabled: allowed_mentions = {}",
            body["allowed_mentions"]
        )),
    }
}

impl FakeDiscord {
    pub async fn start() -> FakeDiscord {
        let inner: Shared = Arc::new(Mutex::new(Inner {
            next_id: 9_000_000_000_000_000_000,
            // An application whose owner switched Message Content on in the Developer Portal.
            application_flags: FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED,
            ..Default::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app =
            Router::new()
                .route(
                    "/api/v10/gateway",
                    get(move || async move {
                        Json(json!({"url": format!("ws://127.0.0.1:{port}/ws")}))
                    }),
                )
                .route(
                    "/ws",
                    get(
                        move |ws: WebSocketUpgrade, State(state): State<Shared>| async move {
                            ws.on_upgrade(move |socket| gateway(socket, state, port))
                        },
                    ),
                )
                .route(
                    "/api/v10/applications/{app}/guilds/{guild}/commands",
                    put(put_commands),
                )
                .route("/api/v10/applications/{app}/commands", put(put_commands))
                .route("/api/v10/users/@me", get(current_user))
                .route("/api/v10/applications/@me", get(current_application))
                .route("/api/v10/guilds/{guild}/members/{user}", get(guild_member))
                .route("/api/v10/users/@me/guilds", get(current_user_guilds))
                .route("/api/v10/guilds/{guild}", get(get_guild))
                .route("/api/v10/guilds/{guild}/channels", get(get_guild_channels))
                .route("/api/v10/channels/{channel}/threads", post(create_thread))
                .route(
                    "/api/v10/channels/{channel}",
                    get(get_channel).patch(edit_channel),
                )
                .route(
                    "/api/v10/channels/{channel}/messages",
                    post(create_message).get(list_messages),
                )
                .route(
                    "/api/v10/channels/{channel}/messages/{message}",
                    patch(edit_message).get(get_message),
                )
                .route("/api/v10/channels/{channel}/typing", post(typing))
                .route(
                    "/api/v10/channels/{channel}/pins/{message}",
                    put(pin_message),
                )
                .route("/api/v10/channels/{channel}/pins", get(list_pins))
                .route(
                    "/api/v10/interactions/{id}/{token}/callback",
                    post(callback),
                )
                .route("/api/v10/webhooks/{app}/{token}", post(followup))
                .route(
                    "/api/v10/webhooks/{app}/{token}/messages/{message}",
                    patch(edit_followup),
                )
                .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeDiscord {
            inner,
            base_url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    /// Sends a dispatch to the shard serving its server (queued until that shard has identified).
    pub fn dispatch(&self, t: &str, d: Value) {
        let mut inner = self.lock();
        let payload = json!({"op": 0, "t": t, "d": d});
        let shard = inner.shard_of_payload(&payload);
        if inner.shards.contains_key(&shard) {
            send_dispatch(&mut inner, shard, payload);
        } else {
            inner.queued.push(payload);
        }
    }

    /// Sets a channel's permission overwrites, as a server admin would, and tells the bot
    /// (CHANNEL_UPDATE).
    pub fn set_overwrites(&self, channel: u64, overwrites: Vec<Overwrite>) {
        let payload = {
            let mut inner = self.lock();
            inner.servers.overwrites.insert(channel, overwrites);
            let guild = inner.guild_of(channel);
            inner.servers.channel_payload(guild)
        };
        self.dispatch("CHANNEL_UPDATE", payload);
    }

    /// Sets a role's permissions in a server (adding the role if it is new), and tells the bot
    /// (GUILD_ROLE_UPDATE).
    pub fn set_role_permissions(&self, guild: u64, role_id: u64, permissions: u64) {
        let payload = {
            let mut inner = self.lock();
            let roles = inner.servers.roles.entry(guild).or_default();
            match roles.iter_mut().find(|(id, _)| *id == role_id) {
                Some(found) => found.1 = permissions,
                None => roles.push((role_id, permissions)),
            }
            inner
                .servers
                .role_payloads(guild)
                .into_iter()
                .find(|r| r["id"] == role_id.to_string().as_str())
                .unwrap()
        };
        self.dispatch(
            "GUILD_ROLE_UPDATE",
            json!({"guild_id": guild.to_string(), "role": payload}),
        );
    }

    /// GUILD_CREATE for one of the fake's servers as it is now.
    pub fn guild_payload(&self, guild: u64) -> Value {
        self.lock().servers.guild_payload(guild)
    }

    /// The bot's permissions in a channel or thread, as the fake computes them.
    pub fn bot_permissions_in(&self, channel: u64) -> u64 {
        self.lock().bot_permissions_in(channel)
    }

    fn new_id(&self) -> u64 {
        let mut inner = self.lock();
        inner.next_id += 1;
        inner.next_id
    }

    fn interaction_base(
        &self,
        kind: u64,
        user_id: u64,
        roles: &[u64],
        perms: &str,
        channel: u64,
    ) -> (u64, Value) {
        // A real snowflake: its top bits are the creation time, which the bot reads to measure
        // how long a user waited for the acknowledgement.
        const DISCORD_EPOCH_MS: u128 = 1_420_070_400_000;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let id = (((now_ms - DISCORD_EPOCH_MS) as u64) << 22) | (self.new_id() & 0x3f_ffff);
        let token = format!("itok{id}");
        let guild = {
            let mut inner = self.lock();
            // Discord's interaction tokens last 15 minutes; a benchmark's fake forgets older ones.
            let count = inner.interactions.len();
            if inner.bounded_history && count >= 1024 && count.is_power_of_two() {
                inner
                    .interactions
                    .retain(|_, (_, at)| at.elapsed() < Duration::from_secs(15 * 60));
            }
            inner
                .interactions
                .insert(id, (token.clone(), Instant::now()));
            (
                inner.guild_of(channel),
                inner.renamed.get(&user_id).cloned(),
                inner.bot_permissions_in(channel),
            )
        };
        let (guild, renamed, app_permissions) = guild;
        let mut member = member(user_id, roles, perms);
        if let Some(name) = renamed {
            member["user"]["username"] = json!(name);
            member["user"]["global_name"] = json!(name);
        }
        let value = json!({"id": id.to_string(), "application_id": APP.to_string(), "type": kind, "token": token,
            "version": 1, "locale": "en-US", "guild_locale": "en-US", "entitlements": [], "attachment_size_limit": 26214400,
            "app_permissions": app_permissions.to_string(), "context": 0, "authorizing_integration_owners": {"0": guild.to_string()},
            "guild_id": guild.to_string(), "channel_id": channel.to_string(),
            "member": member});
        (id, value)
    }

    /// `/agent <sub> …` typed by `user` in `channel`; returns the interaction id.
    pub fn slash(
        &self,
        user_id: u64,
        roles: &[u64],
        channel: u64,
        sub: &str,
        options: Value,
        resolved: Value,
    ) -> u64 {
        let sub = json!([{"name": sub, "type": 1, "options": options}]);
        self.slash_options(user_id, roles, MEMBER_PERMS, channel, sub, resolved)
    }

    /// `/agent <sub>` without options, typed by a member with these permissions.
    pub fn slash_with(&self, user_id: u64, permissions: &str, channel: u64, sub: &str) -> u64 {
        let sub = json!([{"name": sub, "type": 1, "options": []}]);
        self.slash_options(user_id, &[], permissions, channel, sub, json!({}))
    }

    /// `/agent <group> <sub> …` typed by a member with these permissions.
    #[allow(clippy::too_many_arguments)]
    pub fn slash_group(
        &self,
        user_id: u64,
        roles: &[u64],
        permissions: &str,
        channel: u64,
        group: &str,
        sub: &str,
        options: Value,
        resolved: Value,
    ) -> u64 {
        let path = json!([{"name": group, "type": 2, "options": [{"name": sub, "type": 1, "options": options}]}]);
        self.slash_options(user_id, roles, permissions, channel, path, resolved)
    }

    /// A member typing in an autocompleted option of `/agent <sub>`: `options` holds what is
    /// typed so far, the option being typed marked `"focused": true`. Discord expects a type-8
    /// callback with at most 25 choices.
    pub fn autocomplete(&self, user_id: u64, channel: u64, sub: &str, options: Value) -> u64 {
        let sub = json!([{"name": sub, "type": 1, "options": options}]);
        let (id, payload) =
            self.command_interaction(4, user_id, &[], MEMBER_PERMS, channel, sub, json!({}));
        self.dispatch("INTERACTION_CREATE", payload);
        id
    }

    fn slash_options(
        &self,
        user_id: u64,
        roles: &[u64],
        permissions: &str,
        channel: u64,
        options: Value,
        resolved: Value,
    ) -> u64 {
        let (id, payload) =
            self.command_interaction(2, user_id, roles, permissions, channel, options, resolved);
        self.dispatch("INTERACTION_CREATE", payload);
        id
    }

    /// `/<command> <sub> …` (a top-level command other than `/agent`) typed by a member with
    /// these roles and permissions.
    #[allow(clippy::too_many_arguments)]
    pub fn slash_command(
        &self,
        command: &str,
        user_id: u64,
        roles: &[u64],
        permissions: &str,
        channel: u64,
        sub: &str,
        options: Value,
        resolved: Value,
    ) -> u64 {
        let sub = json!([{"name": sub, "type": 1, "options": options}]);
        let (id, mut payload) =
            self.command_interaction(2, user_id, roles, permissions, channel, sub, resolved);
        payload["data"]["name"] = json!(command);
        self.dispatch("INTERACTION_CREATE", payload);
        id
    }

    #[allow(clippy::too_many_arguments)]
    fn command_interaction(
        &self,
        kind: u64,
        user_id: u64,
        roles: &[u64],
        permissions: &str,
        channel: u64,
        options: Value,
        resolved: Value,
    ) -> (u64, Value) {
        let (id, mut payload) = self.interaction_base(kind, user_id, roles, permissions, channel);
        let guild = payload["guild_id"].clone();
        payload["data"] = json!({"id": "7000000000000000001", "name": "agent", "type": 1, "guild_id": guild,
            "options": options, "resolved": resolved});
        (id, payload)
    }

    /// `user_id` changes their user name: their later interactions carry `name`, their id stays.
    pub fn rename(&self, user_id: u64, name: &str) {
        self.lock().renamed.insert(user_id, name.to_string());
    }

    /// A click on a button of a message the bot posted.
    pub fn click(&self, user_id: u64, roles: &[u64], message: &Value, custom_id: &str) -> u64 {
        let data = json!({"custom_id": custom_id, "component_type": 2});
        self.component_interaction(user_id, roles, MEMBER_PERMS, message, data)
    }

    /// An interaction with a component of `message` (a button, a menu), carrying `data`.
    fn component_interaction(
        &self,
        user_id: u64,
        roles: &[u64],
        permissions: &str,
        message: &Value,
        data: Value,
    ) -> u64 {
        let channel: u64 = message["channel_id"].as_str().unwrap().parse().unwrap();
        let (id, mut payload) = self.interaction_base(3, user_id, roles, permissions, channel);
        payload["data"] = data;
        payload["message"] = message.clone();
        self.dispatch("INTERACTION_CREATE", payload);
        id
    }

    /// A click by a member with these permissions (`ADMIN_PERMS`: Manage Server).
    pub fn click_with(
        &self,
        user_id: u64,
        permissions: &str,
        message: &Value,
        custom_id: &str,
    ) -> u64 {
        let data = json!({"custom_id": custom_id, "component_type": 2});
        self.component_interaction(user_id, &[], permissions, message, data)
    }

    /// A choice in the select menu `custom_id` of a message, as Discord sends it; the value must
    /// be one of the menu's options.
    pub fn select(
        &self,
        user_id: u64,
        permissions: &str,
        message: &Value,
        custom_id: &str,
        value: &str,
    ) -> u64 {
        let menu = message["components"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|row| row["components"].as_array())
            .flatten()
            .find(|item| item["type"] == 3 && item["custom_id"] == custom_id)
            .unwrap_or_else(|| panic!("no select menu {custom_id} on {message}"));
        assert!(
            menu["options"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["value"] == value),
            "{value} is not an option of {menu}"
        );
        let data = json!({"custom_id": custom_id, "component_type": 3, "values": [value]});
        self.component_interaction(user_id, &[], permissions, message, data)
    }

    /// Submits the modal the bot opened in answer to `opened_by`, filling its one text input.
    pub fn submit_modal(
        &self,
        user_id: u64,
        roles: &[u64],
        channel: u64,
        opened_by: u64,
        value: &str,
    ) -> u64 {
        let modal = self
            .callbacks(opened_by)
            .into_iter()
            .find(|c| c.kind == 9)
            .expect("a modal was opened");
        let custom_id = modal.data["custom_id"].as_str().unwrap().to_string();
        let input_id = modal
            .data
            .pointer("/components/0/components/0/custom_id")
            .and_then(Value::as_str)
            .unwrap_or("x")
            .to_string();
        self.submit_form(user_id, roles, channel, &custom_id, &input_id, value)
    }

    /// The form the bot opened in answer to `opened_by`: its custom id and its inputs.
    pub fn opened_form(&self, opened_by: u64) -> Option<(String, Vec<FormInput>)> {
        let modal = self
            .callbacks(opened_by)
            .into_iter()
            .find(|c| c.kind == 9)?;
        let inputs = modal.data["components"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|row| row["components"].get(0))
            .map(|input| {
                let text = |key: &str| input[key].as_str().unwrap_or("").to_string();
                (text("custom_id"), text("label"), text("value"))
            })
            .collect();
        Some((modal.data["custom_id"].as_str()?.to_string(), inputs))
    }

    /// Submits the form the bot opened in answer to `opened_by` with these (input id, value)
    /// pairs, as Discord sends a form with several inputs.
    pub fn submit_form_fields(
        &self,
        user_id: u64,
        channel: u64,
        opened_by: u64,
        fields: &[(&str, &str)],
    ) -> u64 {
        let (custom_id, _) = self.opened_form(opened_by).expect("a modal was opened");
        let rows: Vec<Value> = fields
            .iter()
            .map(|(id, value)| json!({"type": 1, "components": [{"type": 4, "custom_id": id, "value": value}]}))
            .collect();
        let (id, mut payload) = self.interaction_base(5, user_id, &[], MEMBER_PERMS, channel);
        payload["data"] = json!({"custom_id": custom_id, "components": rows});
        self.dispatch("INTERACTION_CREATE", payload);
        id
    }

    /// A modal submit with one text input, as Discord sends it.
    pub fn submit_form(
        &self,
        user_id: u64,
        roles: &[u64],
        channel: u64,
        custom_id: &str,
        input_id: &str,
        value: &str,
    ) -> u64 {
        let (id, mut payload) = self.interaction_base(5, user_id, roles, MEMBER_PERMS, channel);
        payload["data"] = json!({"custom_id": custom_id, "components": [{"type": 1, "components": [{"type": 4, "custom_id": input_id, "value": value}]}]});
        self.dispatch("INTERACTION_CREATE", payload);
        id
    }

    /// A plain message typed by a user.
    pub fn say(&self, user_id: u64, roles: &[u64], channel: u64, content: &str) {
        self.user_message(user_id, roles, channel, content, None);
    }

    /// Stores `count` plain messages by a user in `channel` as Discord would while the bot is
    /// away: they are in the channel's history, and no event announces them.
    pub fn store_missed_messages(&self, user_id: u64, channel: u64, count: usize) {
        for n in 0..count {
            let id = self.new_id();
            let mut inner = self.lock();
            let message = json!({"id": id.to_string(), "channel_id": channel.to_string(),
                "author": user(user_id, name_of(user_id), false), "content": format!("chatter {n}"),
                "timestamp": now_stamp(), "edited_timestamp": null, "tts": false,
                "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
                "embeds": [], "pinned": false, "type": 0});
            let at = inner.messages.len();
            inner.messages.push(message);
            inner.by_channel.entry(channel).or_default().push(at);
        }
    }

    /// A message typed by a user as Discord's reply to message `to` (it carries a reference to it),
    /// with the client's default of mentioning the author it answers.
    pub fn reply_to(&self, user_id: u64, roles: &[u64], channel: u64, to: u64, content: &str) {
        self.user_message(user_id, roles, channel, content, Some((to, Ping::On)));
    }

    /// A reply with the mention of the author it answers turned off (the client's "@ OFF").
    pub fn reply_quietly(&self, user_id: u64, roles: &[u64], channel: u64, to: u64, content: &str) {
        self.user_message(user_id, roles, channel, content, Some((to, Ping::Off)));
    }

    fn user_message(
        &self,
        user_id: u64,
        roles: &[u64],
        channel: u64,
        content: &str,
        reply_to: Option<(u64, Ping)>,
    ) {
        let id = self.new_id();
        let guild = self.lock().guild_of(channel);
        // Discord lists the users a message mentions by `<@id>` (or `<@!id>`) in its text.
        let mut mentioned: Vec<u64> = content
            .split("<@")
            .skip(1)
            .filter_map(|rest| rest.trim_start_matches('!').split('>').next()?.parse().ok())
            .collect();
        let mut message = json!({"id": id.to_string(), "channel_id": channel.to_string(), "guild_id": guild.to_string(),
            "author": user(user_id, name_of(user_id), false),
            "member": {"roles": roles.iter().map(|r| r.to_string()).collect::<Vec<_>>(), "joined_at": "2024-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0},
            "content": content, "timestamp": now_stamp(), "edited_timestamp": null, "tts": false, "mention_everyone": false,
            "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": false, "type": 0});
        if let Some((to, ping)) = reply_to {
            // Discord's reply: type 19, with a reference to the message it answers, whose author
            // it mentions unless the replier turned that off.
            message["type"] = json!(19);
            message["message_reference"] = json!({"type": 0, "message_id": to.to_string(),
                "channel_id": channel.to_string(), "guild_id": guild.to_string()});
            let inner = self.lock();
            let answered = find_message(&inner, channel, to)
                .and_then(|at| inner.messages[at]["author"]["id"].as_str()?.parse().ok());
            if let (Ping::On, Some(author)) = (ping, answered) {
                mentioned.push(author);
            }
        }
        mentioned.sort_unstable();
        mentioned.dedup();
        message["mentions"] = Value::Array(
            mentioned
                .into_iter()
                .map(|id| user(id, name_of(id), id == APP))
                .collect(),
        );
        self.dispatch("MESSAGE_CREATE", message);
    }

    /// Sets the application's flags (`FLAG_…`), which say which privileged intents the bot may
    /// ask for; takes effect at the next IDENTIFY.
    pub fn set_application_flags(&self, flags: u64) {
        self.lock().application_flags = flags;
    }

    /// IDENTIFYs refused with 4014 for a privileged intent the application lacks.
    pub fn refused_identifies(&self) -> usize {
        self.lock().refused_identifies
    }

    /// Makes the next `times` posts of cards (messages with buttons) fail with `status` (503:
    /// Discord is having a bad moment; 429: rate limited, with `Retry-After`). With `stored`,
    /// Discord keeps the message but still answers with the error, as a 5xx after the write does.
    pub fn fail_card_posts(&self, times: usize, status: u16, stored: bool) {
        let mut inner = self.lock();
        for _ in 0..times {
            inner.failing_posts.push_back((status, stored));
        }
    }

    /// How long an enforced nonce is remembered (default: five minutes). Zero makes every post
    /// new, as after an outage longer than Discord's window.
    pub fn set_nonce_window(&self, window: Duration) {
        self.lock().nonce_window = Some(window);
    }

    /// For a benchmark that runs for hours: keeps the fake's own memory bounded (see
    /// `bounded_history`), so the harness cannot starve the bot it measures of memory.
    pub fn keep_history_bounded(&self) {
        self.lock().bounded_history = true;
    }

    /// Holds back the answer to every stored card by `delay`.
    pub fn delay_card_answers(&self, delay: Duration) {
        self.lock().card_answer_delay = delay;
    }

    /// Cards (messages with an embed) stored so far.
    pub fn card_posts(&self) -> usize {
        self.lock().card_posts
    }

    /// Takes away (or gives back) the bot's right to create threads.
    pub fn forbid_threads(&self, forbidden: bool) {
        self.lock().threads_forbidden = forbidden;
    }

    /// Posts still set to fail.
    pub fn failing_posts_left(&self) -> usize {
        self.lock().failing_posts.len()
    }

    pub fn callbacks(&self, interaction: u64) -> Vec<Callback> {
        self.lock()
            .callbacks
            .get(&interaction)
            .cloned()
            .unwrap_or_default()
    }

    /// The message the bot's response of `kind` to `interaction` shows in `channel` (4: a new
    /// message, 7: the clicked message updated), as a client receives it, ready for a click on its
    /// buttons; `None` before that response.
    pub fn response_message(&self, interaction: u64, kind: u64, channel: u64) -> Option<Value> {
        let inner = self.lock();
        let data = &inner
            .callbacks
            .get(&interaction)?
            .iter()
            .find(|c| c.kind == kind)?
            .data;
        Some(
            json!({"id": interaction.to_string(), "channel_id": channel.to_string(),
            "guild_id": inner.guild_of(channel).to_string(), "author": user(APP, "fakebot", true),
            "content": data["content"].as_str().unwrap_or(""), "timestamp": now_stamp(),
            "edited_timestamp": null, "tts": false, "mention_everyone": false, "mentions": [],
            "mention_roles": [], "attachments": [], "embeds": data["embeds"].as_array().cloned().unwrap_or_default(),
            "components": data["components"].as_array().cloned().unwrap_or_default(),
            "pinned": false, "type": 0, "flags": data["flags"].as_u64().unwrap_or(0)}),
        )
    }

    pub fn followups_for(&self, interaction: u64) -> Vec<Value> {
        let inner = self.lock();
        let Some((token, _)) = inner.interactions.get(&interaction) else {
            return Vec::new();
        };
        inner
            .followups
            .iter()
            .filter(|(t, _)| t == token)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn messages_in(&self, channel: u64) -> Vec<Value> {
        let inner = self.lock();
        inner
            .by_channel
            .get(&channel)
            .into_iter()
            .flatten()
            .map(|&at| inner.messages[at].clone())
            .collect()
    }

    /// The newest message in a channel, without copying the others (a load benchmark polls it).
    /// The messages pinned in `channel`, in the order they were pinned.
    pub fn pinned_in(&self, channel: u64) -> Vec<u64> {
        self.lock().pins.get(&channel).cloned().unwrap_or_default()
    }

    /// How many edits in `channel` went past five within five seconds.
    pub fn edit_bursts_in(&self, channel: u64) -> usize {
        self.lock().edit_bursts.get(&channel).copied().unwrap_or(0)
    }

    /// How many times the bot showed typing in `channel`.
    pub fn typing_in(&self, channel: u64) -> usize {
        self.lock().typing.get(&channel).copied().unwrap_or(0)
    }

    pub fn newest_in(&self, channel: u64) -> Option<Value> {
        let inner = self.lock();
        let at = *inner.by_channel.get(&channel)?.last()?;
        Some(inner.messages[at].clone())
    }

    /// Whether thread `id` is archived now.
    pub fn is_archived(&self, id: u64) -> bool {
        self.lock()
            .thread(id)
            .is_some_and(|t| t["thread_metadata"]["archived"] == true)
    }

    pub fn threads(&self) -> Vec<Value> {
        self.lock().threads.clone()
    }

    pub fn commands(&self) -> Vec<Value> {
        self.lock().commands.clone()
    }

    pub fn identifies(&self) -> usize {
        self.lock().identifies
    }

    /// Dispatches waiting for the bot to identify.
    pub fn queued_payloads(&self) -> Vec<Value> {
        self.lock().queued.clone()
    }

    pub fn sent_payloads(&self) -> Vec<Value> {
        self.lock().sent_payloads.clone()
    }

    /// The newest `count` messages of every channel, a line each (channel, content or embed
    /// title, and whether it was edited), so that a timed-out wait says what the bot did say.
    fn last_messages_summary(&self, count: usize) -> String {
        let inner = self.lock();
        let start = inner.messages.len().saturating_sub(count);
        inner.messages[start..]
            .iter()
            .map(|m| {
                let title = m["embeds"][0]["title"].as_str().unwrap_or_default();
                let content = m["content"].as_str().unwrap_or_default();
                let text: String = format!("{title} {content}").chars().take(120).collect();
                format!(
                    "  #{} {}{}",
                    m["channel_id"].as_str().unwrap_or("?"),
                    text.trim(),
                    if m["edited_timestamp"].is_string() {
                        " (edited)"
                    } else {
                        ""
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The bytes of an uploaded file, by its attachment record.
    pub fn attachment_bytes(&self, attachment: &Value) -> Vec<u8> {
        let url = attachment["url"].as_str().unwrap_or_default();
        self.lock().files.get(url).cloned().unwrap_or_default()
    }

    pub fn errors(&self) -> Vec<String> {
        self.lock().errors.clone()
    }

    pub fn assert_clean(&self) {
        let errors = self.errors();
        assert!(
            errors.is_empty(),
            "the fake Discord saw violations:\n{}",
            errors.join("\n")
        );
    }

    /// Closes the gateway as Discord does for a bad token, which ends the bot's client.
    pub fn disconnect(&self) {
        let mut inner = self.lock();
        for (_, link) in inner.shards.drain() {
            if let Some(tx) = link.tx {
                let _ = tx.send(json!({"close": 4004}));
            }
        }
    }

    /// The shards that have identified, each with the total it gave.
    pub fn identified_shards(&self) -> Vec<(u32, u32)> {
        let inner = self.lock();
        let mut shards: Vec<(u32, u32)> = inner
            .shards
            .keys()
            .map(|&shard| (shard, inner.total_shards))
            .collect();
        shards.sort();
        shards
    }

    /// Waits (bounded) until `probe` returns something.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut(&FakeDiscord) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = probe(self) {
                return found;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; violations: {:?}; the last messages:\n{}",
                    self.errors(),
                    self.last_messages_summary(12)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Inner {
    fn thread(&self, id: u64) -> Option<&Value> {
        self.threads
            .iter()
            .find(|t| t["id"] == id.to_string().as_str())
    }

    fn thread_mut(&mut self, id: u64) -> Option<&mut Value> {
        self.threads
            .iter_mut()
            .find(|t| t["id"] == id.to_string().as_str())
    }

    /// The bot's permissions in a channel or thread (a thread's are its parent channel's).
    fn bot_permissions_in(&self, channel: u64) -> u64 {
        let guild = self.guild_of(channel);
        let parent = self
            .thread(channel)
            .and_then(|t| t["parent_id"].as_str()?.parse().ok())
            .unwrap_or(channel);
        self.servers
            .permissions(guild, APP, &self.servers.roles_of(guild, APP), parent)
    }

    /// Whether the bot holds `permission` in a channel or thread.
    fn bot_may(&self, channel: u64, permission: u64) -> bool {
        self.bot_permissions_in(channel) & permission == permission
    }

    /// The server a channel or thread belongs to.
    fn guild_of(&self, channel: u64) -> u64 {
        if channel == CHANNEL_B {
            return GUILD_B;
        }
        self.thread(channel)
            .and_then(|t| t["guild_id"].as_str()?.parse().ok())
            .unwrap_or(GUILD)
    }

    /// The shard Discord sends a server's events to.
    fn shard_of(&self, guild: u64) -> u32 {
        ((guild >> 22) % u64::from(self.total_shards.max(1))) as u32
    }

    fn shard_of_payload(&self, payload: &Value) -> u32 {
        let guild = payload["d"]["guild_id"]
            .as_str()
            .and_then(|g| g.parse().ok())
            .unwrap_or(GUILD);
        self.shard_of(guild)
    }
}

/// Sends on one shard's connection with that connection's own sequence numbers.
fn send_dispatch(inner: &mut Inner, shard: u32, mut payload: Value) {
    let Some(link) = inner.shards.get_mut(&shard) else {
        inner.queued.push(payload);
        return;
    };
    link.seq += 1;
    payload["s"] = json!(link.seq);
    let message_event = matches!(
        payload["t"].as_str(),
        Some("MESSAGE_CREATE" | "MESSAGE_UPDATE")
    );
    if message_event && link.intents & INTENT_MESSAGE_CONTENT == 0 {
        blank_content(&mut payload["d"]);
    }
    if let Some(tx) = &link.tx {
        let _ = tx.send(payload.clone());
    }
    if !inner.bounded_history {
        inner.sent_payloads.push(payload);
    }
}

async fn gateway(mut socket: WebSocket, state: Shared, port: u16) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 5000}});
    if socket
        .send(WsMessage::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    // Bounded: the connection ends when the bot goes away or the test drops the fake.
    loop {
        tokio::select! {
            outgoing = rx.recv() => match outgoing {
                Some(payload) if payload.get("close").is_some() => {
                    let frame = axum::extract::ws::CloseFrame { code: 4004, reason: "Authentication failed".into() };
                    let _ = socket.send(WsMessage::Close(Some(frame))).await;
                    return;
                }
                Some(payload) => {
                    if socket.send(WsMessage::Text(payload.to_string().into())).await.is_err() { return; }
                }
                None => return,
            },
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { return };
                let WsMessage::Text(text) = message else { continue };
                let Ok(frame) = serde_json::from_str::<Value>(&text) else { continue };
                match frame["op"].as_u64() {
                    Some(1) => {
                        let ack = json!({"op": 11}).to_string();
                        if socket.send(WsMessage::Text(ack.into())).await.is_err() { return; }
                    }
                    Some(2) => {
                        // Without a `shard` field the bot is Discord's one shard.
                        let shard = frame["d"]["shard"][0].as_u64().unwrap_or(0) as u32;
                        let total = frame["d"]["shard"][1].as_u64().unwrap_or(1) as u32;
                        let intents = frame["d"]["intents"].as_u64().unwrap_or(0);
                        let flags = {
                            let mut inner = state.lock().unwrap();
                            inner.identifies += 1;
                            inner.application_flags
                        };
                        let disallowed = PRIVILEGED_INTENTS
                            .iter()
                            .any(|&(intent, allowed_by)| intents & intent != 0 && flags & allowed_by == 0);
                        if disallowed {
                            // Discord's answer to a privileged intent the application lacks.
                            state.lock().unwrap().refused_identifies += 1;
                            let frame = axum::extract::ws::CloseFrame {
                                code: CLOSE_DISALLOWED_INTENTS,
                                reason: "Disallowed intent(s).".into(),
                            };
                            let _ = socket.send(WsMessage::Close(Some(frame))).await;
                            return;
                        }
                        let mut inner = state.lock().unwrap();
                        inner.total_shards = total;
                        inner.shards.insert(shard, ShardLink { tx: Some(tx.clone()), seq: 0, intents });
                        let guilds: Vec<u64> = [GUILD, GUILD_B].into_iter().filter(|&g| inner.shard_of(g) == shard).collect();
                        let mut ready = ready_payload(port, shard, total, &guilds);
                        ready["application"]["flags"] = json!(flags);
                        send_dispatch(&mut inner, shard, json!({"op": 0, "t": "READY", "d": ready}));
                        for guild in guilds {
                            let payload = inner.servers.guild_payload(guild);
                            send_dispatch(&mut inner, shard, json!({"op": 0, "t": "GUILD_CREATE", "d": payload}));
                        }
                        let (mine, others): (Vec<Value>, Vec<Value>) = std::mem::take(&mut inner.queued)
                            .into_iter()
                            .partition(|p| inner.shard_of_payload(p) == shard);
                        inner.queued = others;
                        for payload in mine {
                            send_dispatch(&mut inner, shard, payload);
                        }
                    }
                    Some(6) => {
                        // No resume support: ask for a fresh IDENTIFY.
                        let _ = socket.send(WsMessage::Text(json!({"op": 9, "d": false}).to_string().into())).await;
                    }
                    _ => {}
                }
            }
        }
    }
}

async fn put_commands(State(state): State<Shared>, Json(body): Json<Value>) -> Json<Value> {
    let mut inner = state.lock().unwrap();
    let mut out = Vec::new();
    for (i, mut command) in body
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        command["id"] = json!((7_000_000_000_000_000_001u64 + i as u64).to_string());
        command["application_id"] = json!(APP.to_string());
        command["version"] = json!("1");
        if command.get("type").is_none() {
            command["type"] = json!(1);
        }
        if command.get("description").is_none() {
            command["description"] = json!("");
        }
        out.push(command);
    }
    inner.commands = out.clone();
    Json(Value::Array(out))
}

async fn create_thread(
    State(state): State<Shared>,
    Path(channel): Path<u64>,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = state.lock().unwrap();
    if inner.threads_forbidden || !inner.bot_may(channel, VIEW_CHANNEL | CREATE_PUBLIC_THREADS) {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"code": 50013, "message": "Missing Permissions"})),
        )
            .into_response();
    }
    let name_len = chars(&body["name"]);
    if name_len == 0 || name_len > 100 {
        inner
            .errors
            .push(format!("thread name of {name_len} characters"));
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"code": 50035, "message": "Invalid Form Body"})),
        )
            .into_response();
    }
    if body["type"] != 11 {
        inner.errors.push(format!(
            "thread created with type {} (a public thread is 11)",
            body["type"]
        ));
    }
    inner.next_id += 1;
    let guild = inner.guild_of(channel);
    let thread = json!({"id": inner.next_id.to_string(), "type": 11, "guild_id": guild.to_string(), "parent_id": channel.to_string(),
        "name": body["name"], "owner_id": APP.to_string(), "rate_limit_per_user": 0, "flags": 0, "message_count": 0, "member_count": 1,
        "thread_metadata": {"archived": false, "auto_archive_duration": 1440, "archive_timestamp": now_stamp(), "locked": false}});
    inner.threads.push(thread.clone());
    Json(thread).into_response()
}

/// Reads a JSON body or a multipart one (`payload_json` plus `files[n]`), returning the payload
/// and the attached files as (name, bytes).
async fn read_body(
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> (Value, Vec<(String, Vec<u8>)>) {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("multipart/form-data") {
        return (
            serde_json::from_slice(&body).unwrap_or(Value::Null),
            Vec::new(),
        );
    }
    let boundary = content_type
        .split("boundary=")
        .nth(1)
        .unwrap_or("")
        .trim_matches('"')
        .to_string();
    let stream = futures_stream(body);
    let mut multipart = multer_like(stream, boundary);
    let mut payload = Value::Null;
    let mut files = Vec::new();
    while let Ok(Some(field)) = multipart.next_field().await {
        let name = field.name().unwrap_or("").to_string();
        let file_name = field.file_name().map(str::to_string);
        let data = field.bytes().await.unwrap_or_default().to_vec();
        if name == "payload_json" {
            payload = serde_json::from_slice(&data).unwrap_or(Value::Null);
        } else {
            files.push((file_name.unwrap_or(name), data));
        }
    }
    (payload, files)
}

fn futures_stream(body: axum::body::Bytes) -> axum::body::Body {
    axum::body::Body::from(body)
}

fn multer_like(body: axum::body::Body, boundary: String) -> Multipart {
    // axum's Multipart extractor needs a request; build one around the buffered body.
    let request = axum::http::Request::builder()
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .unwrap();
    futures_block_on_multipart(request)
}

fn futures_block_on_multipart(request: axum::http::Request<axum::body::Body>) -> Multipart {
    use axum::extract::FromRequest;
    let future = Multipart::from_request(request, &());
    // The extractor only inspects headers, so it is ready at once.
    match futures_now(future) {
        Some(Ok(multipart)) => multipart,
        _ => panic!("a multipart body without a valid boundary"),
    }
}

fn futures_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// The attachment records of `files` uploaded with message `id`, each with an id of its own.
fn new_attachments(
    inner: &mut Inner,
    id: u64,
    files: &[(String, Vec<u8>)],
    port_hint: &str,
) -> Vec<Value> {
    let first_attachment = inner.next_id + 1;
    inner.next_id += files.len() as u64;
    files
        .iter()
        .enumerate()
        .map(|(i, (name, data))| {
            let url = format!("{port_hint}/att/{id}/{i}");
            // A long benchmark uploads many files: the oldest bytes go (this bounds the fake).
            if inner.files.len() >= 4_096 {
                inner.files.clear();
            }
            inner.files.insert(url.clone(), data.clone());
            let mut record = json!({"id": (first_attachment + i as u64).to_string(), "filename": name, "size": data.len(),
                "url": url, "proxy_url": url});
            // Discord reports an image's type and size; the text of other files is kept for
            // tests to read (not a field Discord has).
            match png_size(data) {
                Some((width, height)) => {
                    record["content_type"] = json!("image/png");
                    record["width"] = json!(width);
                    record["height"] = json!(height);
                }
                None => {
                    record["content_type"] = json!("text/plain");
                    record["text"] = json!(String::from_utf8_lossy(data));
                }
            }
            record
        })
        .collect()
}

/// A PNG's width and height, from its signature and header chunk.
fn png_size(data: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if !data.starts_with(SIGNATURE) || data.get(12..16) != Some(b"IHDR") {
        return None;
    }
    let number = |at: usize| Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?));
    Some((number(16)?, number(20)?))
}

fn stored_message(
    inner: &mut Inner,
    channel: u64,
    body: &Value,
    files: &[(String, Vec<u8>)],
    port_hint: &str,
) -> Value {
    inner.next_id += 1;
    let id = inner.next_id;
    let attachments = new_attachments(inner, id, files, port_hint);
    json!({"id": id.to_string(), "channel_id": channel.to_string(), "guild_id": inner.guild_of(channel).to_string(),
        "author": user(APP, "fakebot", true), "content": body["content"].as_str().unwrap_or(""),
        "timestamp": now_stamp(), "edited_timestamp": null, "tts": false, "mention_everyone": false,
        "mentions": [], "mention_roles": [], "attachments": attachments, "embeds": body["embeds"].as_array().cloned().unwrap_or_default(),
        "components": body["components"].as_array().cloned().unwrap_or_default(),
        "pinned": false, "type": 0, "flags": body["flags"].as_u64().unwrap_or(0),
        // Not part of a message as Discord returns it: kept so tests can see whom a post notified.
        "allowed_mentions": body["allowed_mentions"].clone()})
}

/// Validates a message body the bot sent (limits and disabled mentions); the rejection to answer
/// with when it breaks a rule.
fn reject_invalid(inner: &mut Inner, what: &str, payload: &Value) -> Option<Response> {
    reject(inner, what, message_problems(payload))
}

fn message_problems(payload: &Value) -> Vec<String> {
    let mut problems = validate_message(payload);
    problems.extend(check_mentions(payload));
    problems
}

fn reject(inner: &mut Inner, what: &str, problems: Vec<String>) -> Option<Response> {
    if problems.is_empty() {
        return None;
    }
    for p in &problems {
        inner.errors.push(format!("{what}: {p}"));
    }
    Some(
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"code": 50035, "message": problems.join("; ")})),
        )
            .into_response(),
    )
}

async fn create_message(
    State(state): State<Shared>,
    Path(channel): Path<u64>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (payload, files) = read_body(&headers, body).await;
    let (response, delay) = store_message(&state, channel, &payload, &files);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    response
}

/// Edits a thread as Discord does for the fields the bot sets (`archived`, `locked`), and answers
/// with the thread; anything else is an error of the test's.
/// A channel as REST returns it: a server's text channel with its overwrites, or a thread.
async fn get_channel(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(channel): Path<u64>,
) -> Response {
    if !authorised(&headers) {
        return unauthorised();
    }
    let inner = state.lock().unwrap();
    let found = match channel {
        CHANNEL => Some(inner.servers.channel_payload(GUILD)),
        CHANNEL_B => Some(inner.servers.channel_payload(GUILD_B)),
        _ => inner.thread(channel).cloned(),
    };
    match found {
        Some(payload) => Json(payload).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "Unknown Channel", "code": 10003})),
        )
            .into_response(),
    }
}

async fn edit_channel(
    State(state): State<Shared>,
    Path(channel): Path<u64>,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = state.lock().unwrap();
    let Some(thread) = inner.thread_mut(channel) else {
        inner
            .errors
            .push(format!("edit of unknown channel {channel}"));
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"code": 10003, "message": "Unknown Channel"})),
        )
            .into_response();
    };
    for field in ["archived", "locked"] {
        if let Some(value) = body.get(field) {
            thread["thread_metadata"][field] = value.clone();
        }
    }
    let answer = thread.clone();
    let unknown: Vec<String> = body
        .as_object()
        .map(|fields| {
            fields
                .keys()
                .filter(|k| !["archived", "locked"].contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if !unknown.is_empty() {
        inner
            .errors
            .push(format!("thread edit with fields {unknown:?}"));
    }
    Json(answer).into_response()
}

/// Stores a posted message as Discord would; returns the answer and how long to hold it back.
fn store_message(
    state: &Shared,
    channel: u64,
    payload: &Value,
    files: &[(String, Vec<u8>)],
) -> (Response, Duration) {
    let mut inner = state.lock().unwrap();
    let in_thread = inner.thread(channel).is_some();
    let send = match in_thread {
        true => SEND_MESSAGES_IN_THREADS,
        false => SEND_MESSAGES,
    };
    if !inner.bot_may(channel, VIEW_CHANNEL | send) {
        return (missing_permissions(), Duration::ZERO);
    }
    let payload = &without_embeds_unless_allowed(&inner, channel, payload);
    let mut problems = message_problems(payload);
    let known = channel == CHANNEL || channel == CHANNEL_B || inner.thread(channel).is_some();
    // A message in an archived (not locked) thread opens it again, as in Discord.
    if let Some(thread) = inner.thread_mut(channel) {
        if thread["thread_metadata"]["locked"] != true {
            thread["thread_metadata"]["archived"] = json!(false);
        }
    }
    if !known {
        problems.push(format!("message to unknown channel {channel}"));
    }
    if let Some(nonce) = payload.get("nonce") {
        let length = nonce
            .as_str()
            .map_or(nonce.to_string().len(), |n| n.chars().count());
        if length > 25 {
            problems.push(format!("a nonce of {length} characters (at most 25)"));
        }
    }
    if let Some(rejected) = reject(&mut inner, "create message", problems) {
        return (rejected, Duration::ZERO);
    }
    // With enforce_nonce, a second post under the same nonce within the window gets the first
    // message back.
    let nonce_key = (payload["enforce_nonce"] == true)
        .then(|| payload["nonce"].as_str().map(|n| (channel, n.to_string())))
        .flatten();
    let window = inner.nonce_window.unwrap_or(NONCE_WINDOW);
    if let Some((existing, _)) = nonce_key
        .as_ref()
        .and_then(|k| inner.nonces.get(k))
        .filter(|(_, at)| at.elapsed() < window)
    {
        return (
            Json(inner.messages[*existing].clone()).into_response(),
            Duration::ZERO,
        );
    }
    let is_card = payload["components"]
        .as_array()
        .is_some_and(|rows| !rows.is_empty());
    let failure = if is_card {
        inner.failing_posts.pop_front()
    } else {
        None
    };
    if let Some((_, false)) = failure {
        return (
            discord_failure(failure.map_or(500, |(status, _)| status)),
            Duration::ZERO,
        );
    }
    let message = stored_message(&mut inner, channel, payload, files, "http://127.0.0.1");
    let at = inner.messages.len();
    inner.messages.push(message.clone());
    inner.by_channel.entry(channel).or_default().push(at);
    if inner.bounded_history {
        let positions = &inner.by_channel[&channel];
        if let Some(&old) = positions
            .len()
            .checked_sub(MESSAGES_KEPT_PER_CHANNEL + 1)
            .map(|i| &positions[i])
        {
            let skeleton =
                json!({"id": inner.messages[old]["id"], "channel_id": channel.to_string()});
            inner.messages[old] = skeleton;
        }
    }
    if let Some(key) = nonce_key {
        // Discord forgets a nonce after its window; so does the fake, a few times a window.
        if inner.nonces.len() >= 1024 && inner.nonces.len().is_power_of_two() {
            inner.nonces.retain(|_, (_, at)| at.elapsed() < window);
        }
        inner.nonces.insert(key, (at, Instant::now()));
    }
    let is_embed = payload["embeds"]
        .as_array()
        .is_some_and(|embeds| !embeds.is_empty());
    let delay = if is_embed {
        inner.card_posts += 1;
        inner.card_answer_delay
    } else {
        Duration::ZERO
    };
    let response = match failure {
        Some((status, true)) => discord_failure(status),
        _ => Json(message).into_response(),
    };
    (response, delay)
}

/// Discord's answer to a request the bot's permissions do not allow.
fn missing_permissions() -> Response {
    (
        StatusCode::FORBIDDEN,
        Json(json!({"code": 50013, "message": "Missing Permissions"})),
    )
        .into_response()
}

/// A message as Discord keeps it from a bot without Embed Links in the channel: its embeds
/// dropped, silently.
fn without_embeds_unless_allowed(inner: &Inner, channel: u64, payload: &Value) -> Value {
    let mut kept = payload.clone();
    if !inner.bot_may(channel, EMBED_LINKS) && kept.get("embeds").is_some() {
        kept["embeds"] = json!([]);
    }
    kept
}

/// Discord's answer when it is rate limiting (429, with how long to wait) or failing (5xx).
fn discord_failure(status: u16) -> Response {
    if status == 429 {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "0.2")],
            Json(json!({"message": "You are being rate limited.", "retry_after": 0.2, "global": false})),
        )
            .into_response();
    }
    (
        StatusCode::from_u16(status).unwrap(),
        Json(json!({"message": format!("{status}: Service Unavailable"), "code": 0})),
    )
        .into_response()
}

async fn edit_message(
    State(state): State<Shared>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (payload, files) = read_body(&headers, body).await;
    let mut inner = state.lock().unwrap();
    let payload = without_embeds_unless_allowed(&inner, channel, &payload);
    if let Some(rejected) = reject_invalid(&mut inner, "edit message", &payload) {
        return rejected;
    }
    let now = Instant::now();
    let recent = inner.edits.entry(channel).or_default();
    while recent
        .front()
        .is_some_and(|at| now.duration_since(*at) > EDIT_WINDOW)
    {
        recent.pop_front();
    }
    recent.push_back(now);
    if recent.len() > EDITS_PER_WINDOW {
        *inner.edit_bursts.entry(channel).or_default() += 1;
    }
    // An edit that lists `attachments` keeps the existing ones it names by id and adds the files
    // uploaded with it; one that does not list them leaves them as they are.
    let uploaded = new_attachments(&mut inner, message, &files, "http://127.0.0.1");
    let Some(stored) = find_message(&inner, channel, message).map(|at| &mut inner.messages[at])
    else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"code": 10008, "message": "Unknown Message"})),
        )
            .into_response();
    };
    for key in ["content", "embeds", "components"] {
        if let Some(v) = payload.get(key) {
            stored[key] = v.clone();
        }
    }
    if let Some(listed) = payload.get("attachments").and_then(Value::as_array) {
        let kept_ids: Vec<String> = listed
            .iter()
            .map(|a| match &a["id"] {
                Value::String(id) => id.clone(),
                other => other.to_string(),
            })
            .collect();
        let mut attachments: Vec<Value> = stored["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| kept_ids.iter().any(|id| a["id"] == id.as_str()))
            .cloned()
            .collect();
        attachments.extend(uploaded);
        stored["attachments"] = Value::Array(attachments);
    }
    stored["edited_timestamp"] = json!(now_stamp());
    Json(stored.clone()).into_response()
}

/// `PUT /channels/{id}/pins/{message}`: pins a message of that channel (204), as Discord does;
/// an unknown message is 404 and a full channel 400.
async fn pin_message(
    State(state): State<Shared>,
    Path((channel, message)): Path<(u64, u64)>,
) -> Response {
    let mut inner = state.lock().unwrap();
    if find_message(&inner, channel, message).is_none() {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"code": 10008, "message": "Unknown Message"})),
        )
            .into_response();
    }
    let pins = inner.pins.entry(channel).or_default();
    if !pins.contains(&message) {
        if pins.len() >= MAX_PINS {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"code": 30003, "message": "Maximum number of pins reached"})),
            )
                .into_response();
        }
        pins.push(message);
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /channels/{id}/pins`: the channel's pinned messages, the latest pinned first; a deleted
/// message is no longer among them.
async fn list_pins(State(state): State<Shared>, Path(channel): Path<u64>) -> Response {
    let inner = state.lock().unwrap();
    let pinned: Vec<Value> = inner
        .pins
        .get(&channel)
        .into_iter()
        .flatten()
        .rev()
        .filter_map(|&id| find_message(&inner, channel, id))
        .map(|at| inner.messages[at].clone())
        .collect();
    Json(pinned).into_response()
}

/// `POST /channels/{id}/typing`: counted per channel.
async fn typing(State(state): State<Shared>, Path(channel): Path<u64>) -> Response {
    *state.lock().unwrap().typing.entry(channel).or_default() += 1;
    StatusCode::NO_CONTENT.into_response()
}

/// Where message `id` of `channel` is in `messages`: ids grow as messages are stored, so the
/// list is sorted by id.
fn find_message(inner: &Inner, channel: u64, id: u64) -> Option<usize> {
    let id_of = |m: &Value| m["id"].as_str().and_then(|i| i.parse::<u64>().ok());
    let at = inner.messages.binary_search_by_key(&Some(id), id_of).ok()?;
    (inner.messages[at]["channel_id"] == channel.to_string().as_str()).then_some(at)
}

/// `GET /channels/{id}/messages`: the newest `limit` messages (1–100, default 50), newest first.
async fn list_messages(
    State(state): State<Shared>,
    Path(channel): Path<u64>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => 50,
        Some(Ok(limit)) if (1..=100).contains(&limit) => limit,
        Some(_) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"code": 50035, "message": "Invalid Form Body: limit"})),
            )
                .into_response()
        }
    };
    let inner = state.lock().unwrap();
    let newest: Vec<Value> = inner
        .by_channel
        .get(&channel)
        .into_iter()
        .flatten()
        .rev()
        .take(limit)
        .map(|&at| as_read(&inner, &inner.messages[at]))
        .collect();
    Json(newest).into_response()
}

/// A stored message as the bot reads it over REST: blanked as Discord does for an application
/// without the Message Content intent.
fn as_read(inner: &Inner, message: &Value) -> Value {
    let mut read = message.clone();
    if !has_message_content(inner.application_flags) {
        blank_content(&mut read);
    }
    read
}

async fn get_message(
    State(state): State<Shared>,
    Path((channel, message)): Path<(u64, u64)>,
) -> Response {
    let inner = state.lock().unwrap();
    match find_message(&inner, channel, message) {
        Some(at) => Json(as_read(&inner, &inner.messages[at])).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"code": 10008, "message": "Unknown Message"})),
        )
            .into_response(),
    }
}

async fn callback(
    State(state): State<Shared>,
    Path((id, token)): Path<(u64, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (payload, _) = read_body(&headers, body).await;
    let mut inner = state.lock().unwrap();
    let Some((known_token, injected)) = inner.interactions.get(&id).cloned() else {
        inner
            .errors
            .push(format!("callback for unknown interaction {id}"));
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"code": 10062, "message": "Unknown interaction"})),
        )
            .into_response();
    };
    if known_token != token {
        inner
            .errors
            .push(format!("callback for {id} with the wrong token"));
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"code": 50027, "message": "Invalid Webhook Token"})),
        )
            .into_response();
    }
    let latency = injected.elapsed();
    if latency > ACK_DEADLINE {
        inner.errors.push(format!(
            "interaction {id} acknowledged after {latency:?} (deadline 3 s)"
        ));
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"code": 10062, "message": "Unknown interaction"})),
        )
            .into_response();
    }
    if inner.callbacks.get(&id).is_some_and(|c| !c.is_empty()) {
        // A second acknowledgement is a client bug Discord reports with 40060.
        inner
            .errors
            .push(format!("interaction {id} acknowledged twice"));
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"code": 40060, "message": "Interaction has already been acknowledged."})),
        )
            .into_response();
    }
    let kind = payload["type"].as_u64().unwrap_or(0);
    let data = payload["data"].clone();
    if kind == 5 {
        let ephemeral = data["flags"].as_u64().unwrap_or(0) & 64 != 0;
        inner.deferred.insert(token.clone(), ephemeral);
    }
    if kind == 9 {
        let title = chars(&data["title"]);
        let inputs = data["components"].as_array().map(Vec::len).unwrap_or(0);
        if title == 0 || title > 45 || !(1..=5).contains(&inputs) {
            inner.errors.push(format!(
                "invalid modal: title {title} characters, {inputs} inputs"
            ));
        }
        // Each row holds one text input: a custom id of 1 to 100 characters, a label of 1 to
        // 45, a value and a max_length of at most 4,000.
        for row in data["components"].as_array().into_iter().flatten() {
            let input = &row["components"][0];
            let value = chars(&input["value"]);
            let max = input["max_length"].as_u64().unwrap_or(4000) as usize;
            if row["components"].as_array().map_or(0, Vec::len) != 1
                || !(1..=100).contains(&chars(&input["custom_id"]))
                || !(1..=45).contains(&chars(&input["label"]))
                || max > 4000
                || value > max
            {
                inner.errors.push(format!("invalid modal input: {input}"));
            }
        }
    } else if kind == 8 {
        // APPLICATION_COMMAND_AUTOCOMPLETE_RESULT: at most 25 choices, names and string values
        // of 1 to 100 characters.
        let choices = data["choices"].as_array().cloned().unwrap_or_default();
        let bad = choices.iter().any(|c| {
            !(1..=100).contains(&chars(&c["name"]))
                || c["value"].as_str().is_some_and(|v| v.chars().count() > 100)
        });
        if choices.len() > 25 || bad {
            inner
                .errors
                .push(format!("invalid autocomplete result: {data}"));
        }
    } else if kind == 4 || kind == 7 {
        if let Some(rejected) = reject_invalid(&mut inner, "interaction response", &data) {
            return rejected;
        }
    }
    // A benchmark reads only how long an answer took.
    let data = if inner.bounded_history {
        Value::Null
    } else {
        data
    };
    inner.callbacks.entry(id).or_default().push(Callback {
        kind,
        data,
        latency,
    });
    StatusCode::NO_CONTENT.into_response()
}

async fn followup(
    State(state): State<Shared>,
    Path((_app, token)): Path<(u64, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (payload, files) = read_body(&headers, body).await;
    let mut inner = state.lock().unwrap();
    if let Some(rejected) = reject_invalid(&mut inner, "follow-up", &payload) {
        return rejected;
    }
    let mut message = stored_message(&mut inner, CHANNEL, &payload, &files, "http://127.0.0.1");
    let first = !inner.followups.iter().any(|(t, _)| *t == token);
    if let (true, Some(&ephemeral)) = (first, inner.deferred.get(&token)) {
        // The first follow-up fills the deferred response: its visibility was fixed when the
        // interaction was deferred, and the follow-up's own flags cannot change it.
        message["flags"] = json!(if ephemeral { 64 } else { 0 });
    }
    if !inner.bounded_history {
        inner.followups.push((token, message.clone()));
    }
    Json(message).into_response()
}

async fn edit_followup(
    State(state): State<Shared>,
    Path((_app, token, _message)): Path<(u64, String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (payload, files) = read_body(&headers, body).await;
    let mut inner = state.lock().unwrap();
    let message = stored_message(&mut inner, CHANNEL, &payload, &files, "http://127.0.0.1");
    if !inner.bounded_history {
        inner.followups.push((token, message.clone()));
    }
    Json(message).into_response()
}

/// GET /users/@me: the bot's own user, for the token the tests give it ("Bot fake-token").
/// A member of one of the fake's servers, as Discord's REST API returns one (no permissions,
/// which only interactions carry); 404 "Unknown Member" for anyone the fake does not know.
async fn guild_member(
    State(state): State<Shared>,
    Path((guild, user_id)): Path<(u64, u64)>,
) -> Response {
    if user_id == APP {
        return Json(state.lock().unwrap().servers.bot_member(guild)).into_response();
    }
    if name_of(user_id) == "someone" {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "Unknown Member", "code": 10007})),
        )
            .into_response();
    }
    let roles = state.lock().unwrap().servers.roles_of(guild, user_id);
    let mut found = member(user_id, &roles, "0");
    if let Some(fields) = found.as_object_mut() {
        fields.remove("permissions");
    }
    Json(found).into_response()
}

/// Whether a request carries the token the tests give the bot.
fn authorised(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bot fake-token")
}

fn unauthorised() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"message": "401: Unauthorized", "code": 0})),
    )
        .into_response()
}

/// `GET /users/@me/guilds`: the servers the bot is in.
async fn current_user_guilds(headers: HeaderMap) -> Response {
    if !authorised(&headers) {
        return unauthorised();
    }
    let guilds: Vec<Value> = [(GUILD, "Fake Guild"), (GUILD_B, "Second Guild")]
        .iter()
        .map(|(id, name)| json!({"id": id.to_string(), "name": name, "icon": null, "owner": false, "permissions": "0", "features": []}))
        .collect();
    Json(json!(guilds)).into_response()
}

/// `GET /guilds/{guild}`: the server with its roles (REST carries no channels or members).
async fn get_guild(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(guild): Path<u64>,
) -> Response {
    if !authorised(&headers) {
        return unauthorised();
    }
    let mut payload = state.lock().unwrap().servers.guild_payload(guild);
    if let Some(fields) = payload.as_object_mut() {
        for live_only in [
            "channels",
            "members",
            "threads",
            "joined_at",
            "large",
            "unavailable",
            "member_count",
            "voice_states",
            "presences",
            "stage_instances",
            "guild_scheduled_events",
        ] {
            fields.remove(live_only);
        }
    }
    Json(payload).into_response()
}

/// `GET /guilds/{guild}/channels`: the server's channels with their overwrites.
async fn get_guild_channels(
    State(state): State<Shared>,
    headers: HeaderMap,
    Path(guild): Path<u64>,
) -> Response {
    if !authorised(&headers) {
        return unauthorised();
    }
    Json(json!([state
        .lock()
        .unwrap()
        .servers
        .channel_payload(guild)]))
    .into_response()
}

/// `GET /applications/@me`: the bot's application, with the flags that say which privileged
/// intents it has.
async fn current_application(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let authorised =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bot fake-token");
    if !authorised {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "401: Unauthorized", "code": 0})),
        )
            .into_response();
    }
    let flags = state.lock().unwrap().application_flags;
    Json(
        json!({"id": APP.to_string(), "name": "fakebot", "description": "", "icon": null,
        "bot_public": true, "bot_require_code_grant": false, "verify_key": "0", "flags": flags}),
    )
    .into_response()
}

async fn current_user(headers: HeaderMap) -> Response {
    let authorised =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bot fake-token");
    if authorised {
        Json(user(APP, "fakebot", true)).into_response()
    } else {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "401: Unauthorized", "code": 0})),
        )
            .into_response()
    }
}
