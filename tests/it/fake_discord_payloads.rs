//! Every payload the fake Discord sends deserialises with serenity's own model types, so a test
//! can never pass because serenity silently dropped a malformed event.

use crate::support;

use poise::serenity_prelude as serenity;
use serde_json::{json, Value};
use support::fake_discord::{
    guild_payload, guild_payload_of, member, ready_payload, role, FakeDiscord, ALICE, CHANNEL,
    GUILD, GUILD_B, ROLE_TEAM,
};

fn assert_dispatch_parses(frame: &Value) {
    let event: serenity::GatewayEvent =
        serde_json::from_value(frame.clone()).unwrap_or_else(|e| panic!("{e}: {frame}"));
    match event {
        serenity::GatewayEvent::Dispatch(_, event) => {
            assert!(
                !matches!(event, serenity::Event::Unknown(_)),
                "serenity would drop this event: {frame}"
            );
        }
        other => panic!("not a dispatch: {other:?}"),
    }
}

#[test]
fn ready_guild_member_and_role_parse() {
    assert_dispatch_parses(
        &json!({"op": 0, "s": 1, "t": "READY", "d": ready_payload(1234, 0, 1, &[GUILD])}),
    );
    assert_dispatch_parses(&json!({"op": 0, "s": 2, "t": "GUILD_CREATE", "d": guild_payload()}));
    assert_dispatch_parses(
        &json!({"op": 0, "s": 2, "t": "GUILD_CREATE", "d": guild_payload_of(GUILD_B)}),
    );
    assert_dispatch_parses(
        &json!({"op": 0, "s": 1, "t": "READY", "d": ready_payload(1234, 1, 2, &[GUILD, GUILD_B])}),
    );
    let _: serenity::Member = serde_json::from_value(member(ALICE, &[ROLE_TEAM], "0")).unwrap();
    let _: serenity::Role = serde_json::from_value(role(ROLE_TEAM, "team")).unwrap();
}

#[tokio::test]
async fn every_injected_interaction_and_message_parses() {
    let discord = FakeDiscord::start().await;
    // Nothing is connected, so these are queued; the sent list is what a bot would receive.
    discord.slash(
        ALICE,
        &[ROLE_TEAM],
        CHANNEL,
        "start",
        json!([{"name": "task", "type": 3, "value": "t"}, {"name": "share_role", "type": 8, "value": ROLE_TEAM.to_string()}]),
        json!({"roles": {ROLE_TEAM.to_string(): role(ROLE_TEAM, "team")}}),
    );
    let message = json!({"id": "8000000000000000001", "channel_id": CHANNEL.to_string(), "author": {"id": "1000000000000000001", "username": "fakebot", "bot": true},
        "content": "", "timestamp": "2024-01-01T00:00:00Z", "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": false, "type": 0,
        "components": [{"type": 1, "components": [{"type": 2, "style": 3, "custom_id": "at1:ok:abc:1", "label": "Approve"}]}]});
    let _: serenity::Message = serde_json::from_value(message.clone()).unwrap();
    discord.click(ALICE, &[], &message, "at1:ok:abc:1");
    discord.say(ALICE, &[ROLE_TEAM], CHANNEL, "hello @everyone");
    discord.submit_form(ALICE, &[], CHANNEL, "at1:fb-m:abc:1", "text", "feedback");
    let queued = discord.queued_payloads();
    assert_eq!(queued.len(), 4);
    for (seq, mut frame) in queued.into_iter().enumerate() {
        frame["s"] = json!(seq + 1);
        assert_dispatch_parses(&frame);
    }
}

/// The fake computes the bot's permissions as Discord does (and as serenity's helper does from
/// the GUILD_CREATE the fake sends), and drops a message's embeds where the bot lacks Embed Links.
#[tokio::test]
async fn the_fake_computes_permissions_as_discord_does_and_drops_embeds_without_embed_links() {
    use support::fake_discord::{
        Overwrite, ADMINISTRATOR, APP, ATTACH_FILES, BOT_ROLE, CREATE_PUBLIC_THREADS, EMBED_LINKS,
        OVERWRITE_MEMBER, OVERWRITE_ROLE, SEND_MESSAGES, VIEW_CHANNEL,
    };
    let discord = FakeDiscord::start().await;
    let everyone = |allow, deny| Overwrite {
        id: GUILD,
        kind: OVERWRITE_ROLE,
        allow,
        deny,
    };
    let bot_role = |allow, deny| Overwrite {
        id: BOT_ROLE,
        kind: OVERWRITE_ROLE,
        allow,
        deny,
    };
    let bot_itself = |allow, deny| Overwrite {
        id: APP,
        kind: OVERWRITE_MEMBER,
        allow,
        deny,
    };
    // serenity's computation from what the fake sends the bot, for the same channel. serenity
    // 0.12 drops the bits it does not name when it reads a role (Pin Messages among them), so
    // the two are compared on the bits it names.
    let named = |bits: u64| bits & serenity::Permissions::all().bits();
    let serenity_says = |discord: &FakeDiscord| {
        let guild: serenity::Guild = serde_json::from_value(discord.guild_payload(GUILD)).unwrap();
        let channel = guild.channels[&serenity::ChannelId::new(CHANNEL)].clone();
        let bot = guild.members[&serenity::UserId::new(APP)].clone();
        guild.user_permissions_in(&channel, &bot).bits()
    };
    let has = |bits: u64, permission: u64| bits & permission == permission;

    // By default the bot holds what agents need.
    let granted = discord.bot_permissions_in(CHANNEL);
    assert!(has(
        granted,
        VIEW_CHANNEL | EMBED_LINKS | CREATE_PUBLIC_THREADS
    ));
    assert_eq!(serenity_says(&discord), named(granted));

    // @everyone's overwrite takes Embed Links away; the bot's role's overwrite gives it back; the
    // bot's own overwrite, applied last, wins over both.
    discord.set_overwrites(CHANNEL, vec![everyone(0, EMBED_LINKS)]);
    assert!(!has(discord.bot_permissions_in(CHANNEL), EMBED_LINKS));
    assert_eq!(
        serenity_says(&discord),
        named(discord.bot_permissions_in(CHANNEL))
    );
    discord.set_overwrites(
        CHANNEL,
        vec![
            everyone(0, EMBED_LINKS),
            bot_role(EMBED_LINKS, ATTACH_FILES),
        ],
    );
    let granted = discord.bot_permissions_in(CHANNEL);
    assert!(has(granted, EMBED_LINKS) && !has(granted, ATTACH_FILES));
    assert_eq!(serenity_says(&discord), named(granted));
    discord.set_overwrites(
        CHANNEL,
        vec![bot_role(EMBED_LINKS, 0), bot_itself(0, EMBED_LINKS)],
    );
    assert!(!has(discord.bot_permissions_in(CHANNEL), EMBED_LINKS));

    // Without View Channel nothing else counts; an Administrator role gets everything back,
    // overwrites or not.
    discord.set_overwrites(CHANNEL, vec![everyone(0, VIEW_CHANNEL)]);
    assert_eq!(discord.bot_permissions_in(CHANNEL), 0);
    discord.set_role_permissions(GUILD, BOT_ROLE, ADMINISTRATOR);
    assert!(has(
        discord.bot_permissions_in(CHANNEL),
        VIEW_CHANNEL | EMBED_LINKS
    ));
    discord.set_role_permissions(GUILD, BOT_ROLE, 0);

    // A message with an embed, posted where the bot lacks Embed Links, is kept without it; where
    // a role gives it back, with it.
    let client = reqwest::Client::new();
    let post = |content: &'static str| {
        client
            .post(format!("{}/api/v10/channels/{CHANNEL}/messages", discord.base_url))
            .json(&json!({"content": content, "embeds": [{"title": "a card"}], "allowed_mentions": {"parse": []}}))
            .send()
    };
    discord.set_overwrites(CHANNEL, vec![everyone(0, EMBED_LINKS)]);
    assert!(has(discord.bot_permissions_in(CHANNEL), SEND_MESSAGES));
    let stored: Value = post("without").await.unwrap().json().await.unwrap();
    assert_eq!(stored["embeds"], json!([]), "{stored}");
    discord.set_overwrites(
        CHANNEL,
        vec![everyone(0, EMBED_LINKS), bot_role(EMBED_LINKS, 0)],
    );
    let stored: Value = post("with").await.unwrap().json().await.unwrap();
    assert_eq!(stored["embeds"][0]["title"], "a card", "{stored}");
    let kept: Vec<Value> = discord.messages_in(CHANNEL);
    assert_eq!(kept[0]["embeds"], json!([]));
    assert_eq!(kept[1]["embeds"].as_array().map(Vec::len), Some(1));
}
