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
