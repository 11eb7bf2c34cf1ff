//! Team memory end to end through the fake Discord: `/memory add` for an agent, its thread or its
//! server by those allowed (admins choose the server's writers), `/memory list` and `/memory
//! search` with Pin, Unpin and Forget buttons that record who and when, and an agent that recalls
//! its thread's and server's notes but never another server's.

use crate::support;

use serde_json::{json, Value};
use support::bot::{answer, button, card, response_shown, start_agent, start_bot, Start};
use support::fake_discord::{
    role, FakeDiscord, ADMIN_PERMS, ALICE, BOB, CAROL, CHANNEL, CHANNEL_B, MEMBER_PERMS, ROLE_TEAM,
};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use support::TestEnv;

/// `/memory <sub>` typed by `user` with `roles` and `permissions` in `channel`.
fn memory(
    discord: &FakeDiscord,
    user: (u64, &[u64], &str),
    channel: u64,
    sub: &str,
    options: Value,
) -> u64 {
    let (id, roles, permissions) = user;
    discord.slash_command(
        "memory",
        id,
        roles,
        permissions,
        channel,
        sub,
        options,
        // As Discord sends them: the roles an option may name, resolved.
        json!({"roles": {ROLE_TEAM.to_string(): role(ROLE_TEAM, "team")}}),
    )
}

/// The `scope` option as Discord sends a choice: the index of "this agent", "this thread" or
/// "the server".
fn scope_option(scope: &str) -> Value {
    let index = ["agent", "thread", "server"]
        .iter()
        .position(|s| *s == scope)
        .unwrap();
    json!({"name": "scope", "type": 4, "value": index})
}

fn note(text: &str, scope: Option<&str>) -> Value {
    let mut options = vec![json!({"name": "text", "type": 3, "value": text})];
    options.extend(scope.map(scope_option));
    json!(options)
}

fn scope(scope: &str) -> Value {
    json!([scope_option(scope)])
}

/// The id in a "Kept … note **#id**" answer.
fn kept_id(text: &str) -> String {
    text.split("**#")
        .nth(1)
        .and_then(|rest| rest.split("**").next())
        .unwrap_or_else(|| panic!("no note id in {text:?}"))
        .to_string()
}

/// The text of every message the model was sent in its newest cycle request.
fn newest_prompt(openai: &FakeOpenAi) -> String {
    openai
        .requests(Kind::Cycle)
        .last()
        .map(|request| request["messages"].to_string())
        .unwrap_or_default()
}

const MEMBER: &[u64] = &[];

/// `/memory list` typed by `user` in `channel`, and the private page it shows.
async fn list_page(
    discord: &FakeDiscord,
    user: (u64, &[u64], &str),
    channel: u64,
    options: Value,
) -> Value {
    let listed = memory(discord, user, channel, "list", options);
    response_shown(discord, channel, listed, 4).await
}

/// A click by `user` (with roles) on the button of `message` labelled `label`, and its answer.
async fn click_answer(
    discord: &FakeDiscord,
    user: (u64, &[u64]),
    message: &Value,
    label: &str,
) -> String {
    let click = discord.click(user.0, user.1, message, &button(message, label));
    answer(discord, click, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_notes_are_written_by_those_allowed_recalled_by_their_agents_and_never_across_servers()
{
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "ferry.txt", "contents": "pier 3"}),
    ));
    openai.push_content(agent_reply("finish", json!({"reason": "noted"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let _bot = start_bot(&env, &discord).await;
    let start = Start {
        task: "Plan the ferry trip",
        name: Some("FerryGPT"),
        ..Start::default()
    };
    let thread = start_agent(&discord, start).await;
    let first = card(&discord, thread, "FerryGPT · cycle 1").await;

    // A member may not write the server's memories until an admin names a role of theirs.
    let house_style = note(
        "House style: British spelling in every file",
        Some("server"),
    );
    let refused = memory(
        &discord,
        (BOB, MEMBER, MEMBER_PERMS),
        CHANNEL,
        "add",
        house_style.clone(),
    );
    let text = answer(&discord, refused, true).await;
    assert!(text.starts_with("Only the server's admins"), "{text}");
    let not_admin = memory(
        &discord,
        (BOB, MEMBER, MEMBER_PERMS),
        CHANNEL,
        "writers",
        json!([{"name": "role", "type": 8, "value": ROLE_TEAM.to_string()}]),
    );
    let text = answer(&discord, not_admin, true).await;
    assert!(
        text.starts_with("Only the server's admins (Manage Server)"),
        "{text}"
    );
    let named = memory(
        &discord,
        (CAROL, MEMBER, ADMIN_PERMS),
        CHANNEL,
        "writers",
        json!([{"name": "role", "type": 8, "value": ROLE_TEAM.to_string()}]),
    );
    assert_eq!(
        answer(&discord, named, true).await,
        format!("Server memories are written by the server's admins and <@&{ROLE_TEAM}>.")
    );
    let team = &[ROLE_TEAM][..];
    let added = memory(
        &discord,
        (BOB, team, MEMBER_PERMS),
        CHANNEL,
        "add",
        house_style,
    );
    let text = answer(&discord, added, true).await;
    assert!(text.starts_with("Kept a server note **#"), "{text}");
    let style_id = kept_id(&text);

    // Another server's note, pinned there: it must never reach this server's agent.
    let other = note("Server B vault code is 4242", None);
    let added_b = memory(
        &discord,
        (CAROL, MEMBER, ADMIN_PERMS),
        CHANNEL_B,
        "add",
        other,
    );
    let text = answer(&discord, added_b, true).await;
    assert!(text.starts_with("Kept a server note"), "{text}");
    let page_b = list_page(&discord, (CAROL, MEMBER, ADMIN_PERMS), CHANNEL_B, json!([])).await;
    let text_b = page_b["content"].as_str().unwrap();
    assert!(
        text_b.contains("vault code") && !text_b.contains("House style"),
        "{text_b}"
    );
    let pin_b = discord.click_with(CAROL, ADMIN_PERMS, &page_b, &button(&page_b, "Pin #"));
    assert!(answer(&discord, pin_b, true)
        .await
        .starts_with("Pinned memory #"));

    // In the thread: only the agent's deciders write its and its thread's notes.
    let ferry = note("The ferry leaves at 7:40 from pier 3", Some("thread"));
    let outsider = memory(
        &discord,
        (CAROL, MEMBER, MEMBER_PERMS),
        thread,
        "add",
        ferry.clone(),
    );
    let text = answer(&discord, outsider, true).await;
    assert!(text.starts_with("Only the agent's owner"), "{text}");
    let added = memory(
        &discord,
        (ALICE, MEMBER, MEMBER_PERMS),
        thread,
        "add",
        ferry,
    );
    let text = answer(&discord, added, true).await;
    assert!(text.starts_with("Kept a thread note **#"), "{text}");
    let ferry_id = kept_id(&text);
    let own = note("Cite the timetable you used", None);
    let added = memory(&discord, (ALICE, MEMBER, MEMBER_PERMS), thread, "add", own);
    let text = answer(&discord, added, true).await;
    assert!(text.starts_with("Kept an agent note **#"), "{text}");
    let own_id = kept_id(&text);
    let page = list_page(&discord, (ALICE, MEMBER, MEMBER_PERMS), thread, json!([])).await;
    assert_eq!(
        click_answer(&discord, (ALICE, MEMBER), &page, &format!("Pin #{own_id}")).await,
        format!("Pinned memory #{own_id}.")
    );

    // The server's list, read in the thread: pinning needs a writer; a writer's pin is stamped.
    let page = list_page(
        &discord,
        (ALICE, MEMBER, MEMBER_PERMS),
        thread,
        scope("server"),
    )
    .await;
    let text = page["content"].as_str().unwrap();
    assert!(
        text.contains(&format!("**#{style_id}** · server · added by bob on ")),
        "{text}"
    );
    assert!(
        !text.contains("vault code"),
        "another server's note is not listed: {text}"
    );
    let pin = button(&page, &format!("Pin #{style_id}"));
    let by_alice = discord.click(ALICE, MEMBER, &page, &pin);
    let text = answer(&discord, by_alice, true).await;
    assert!(text.starts_with("Only the server's admins"), "{text}");
    let by_bob = discord.click(BOB, team, &page, &pin);
    assert_eq!(
        answer(&discord, by_bob, true).await,
        format!("Pinned memory #{style_id}.")
    );
    let page = list_page(
        &discord,
        (ALICE, MEMBER, MEMBER_PERMS),
        thread,
        scope("thread"),
    )
    .await;
    assert_eq!(
        click_answer(
            &discord,
            (ALICE, MEMBER),
            &page,
            &format!("Pin #{ferry_id}")
        )
        .await,
        format!("Pinned memory #{ferry_id}.")
    );

    // The next cycle recalls the thread's and the server's pinned notes, named as such, and
    // nothing of the other server's.
    discord.click(ALICE, MEMBER, &first, &button(&first, "Approve"));
    card(&discord, thread, "FerryGPT · cycle 2").await;
    let prompt = newest_prompt(&openai);
    assert!(
        prompt.contains("Server note from bob: House style: British spelling in every file"),
        "{prompt}"
    );
    assert!(
        prompt.contains("Thread note from alice: The ferry leaves at 7:40 from pier 3"),
        "{prompt}"
    );
    assert!(
        prompt.contains("Note from alice: Cite the timetable you used"),
        "{prompt}"
    );
    assert!(!prompt.contains("vault code"), "{prompt}");

    // A search in the thread looks where the agent recalls from, and shows who pinned what.
    let searched = memory(
        &discord,
        (ALICE, MEMBER, MEMBER_PERMS),
        thread,
        "search",
        json!([{"name": "query", "type": 3, "value": "when does the ferry leave"}]),
    );
    let text = answer(&discord, searched, true).await;
    assert!(
        text.contains(&format!("**#{ferry_id}** · thread · added by alice on "))
            && text.contains("📌 pinned by alice on "),
        "{text}"
    );
    assert!(!text.contains("vault code"), "{text}");
    let results = discord.followups_for(searched)[0].clone();
    // Unpin and forget, each stamped and in the agent's audit trail.
    assert_eq!(
        click_answer(
            &discord,
            (ALICE, MEMBER),
            &results,
            &format!("Unpin #{ferry_id}")
        )
        .await,
        format!("Unpinned memory #{ferry_id}.")
    );
    let page = list_page(
        &discord,
        (ALICE, MEMBER, MEMBER_PERMS),
        thread,
        scope("thread"),
    )
    .await;
    let text = page["content"].as_str().unwrap();
    assert!(text.contains("· unpinned by alice on "), "{text}");
    assert_eq!(
        click_answer(
            &discord,
            (ALICE, MEMBER),
            &page,
            &format!("Forget #{ferry_id}")
        )
        .await,
        format!("Forgot memory #{ferry_id}.")
    );
    let page = list_page(
        &discord,
        (ALICE, MEMBER, MEMBER_PERMS),
        thread,
        scope("thread"),
    )
    .await;
    assert_eq!(
        page["content"],
        "This thread's notes: none yet. Add one with `/memory add`."
    );
    let trail = discord.slash(ALICE, &[], thread, "audit", json!([]), json!({}));
    let trail = response_shown(&discord, thread, trail, 4).await;
    let trail = trail["content"].as_str().unwrap();
    for entry in [
        format!("alice (<@{ALICE}>) · added a thread note #{ferry_id} (text digest "),
        format!("alice (<@{ALICE}>) · pinned memory #{ferry_id}"),
        format!("alice (<@{ALICE}>) · unpinned memory #{ferry_id}"),
        format!("alice (<@{ALICE}>) · forgot memory #{ferry_id}"),
    ] {
        assert!(trail.contains(&entry), "{entry} in {trail}");
    }

    // Someone who moderates another server cannot reach this agent's or thread's memories, even
    // with buttons made up from ids its cards show.
    let agent = button(&first, "Approve")
        .split(':')
        .nth(2)
        .unwrap()
        .to_string();
    let moderator_elsewhere = "19327352832";
    for made_up in [
        format!("at1:mpg:{agent}:0"),
        format!("at1:mp:{agent}:{own_id}"),
        format!("at1:mpg:thread-{thread}:0"),
        format!("at1:mf:server-{}:{style_id}", support::fake_discord::GUILD),
    ] {
        let click = discord.click_with(CAROL, moderator_elsewhere, &page_b, &made_up);
        assert_eq!(
            answer(&discord, click, true).await,
            "These memories belong to another server.",
            "{made_up}"
        );
    }

    // Taking the role back stops its members writing.
    let taken = memory(
        &discord,
        (CAROL, MEMBER, ADMIN_PERMS),
        CHANNEL,
        "writers",
        json!([{"name": "role", "type": 8, "value": ROLE_TEAM.to_string()}, {"name": "allow", "type": 5, "value": false}]),
    );
    assert_eq!(
        answer(&discord, taken, true).await,
        "Server memories are written by the server's admins only."
    );
    let again = note("Another house rule", Some("server"));
    let refused = memory(&discord, (BOB, team, MEMBER_PERMS), CHANNEL, "add", again);
    let text = answer(&discord, refused, true).await;
    assert!(text.starts_with("Only the server's admins"), "{text}");
    discord.assert_clean();
    openai.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_notes_are_listed_a_page_at_a_time_to_its_members_only() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let _bot = start_bot(&env, &discord).await;
    let admin = (CAROL, MEMBER, ADMIN_PERMS);
    for n in 1..=5 {
        let added = memory(
            &discord,
            admin,
            CHANNEL,
            "add",
            note(&format!("Rule {n} of the house"), None),
        );
        assert!(answer(&discord, added, true)
            .await
            .starts_with("Kept a server note"));
    }
    // Outside a thread, only the server's own memories exist: no agent's or thread's.
    let nowhere = memory(&discord, admin, CHANNEL, "list", scope("thread"));
    let text = answer(&discord, nowhere, true).await;
    assert!(text.starts_with("Use this in an agent's thread"), "{text}");

    let page = list_page(&discord, (BOB, MEMBER, MEMBER_PERMS), CHANNEL, json!([])).await;
    let text = page["content"].as_str().unwrap();
    assert!(
        text.starts_with("The server's shared memories, page 1:"),
        "{text}"
    );
    assert_eq!(
        text.matches("· server · added by carol on ").count(),
        4,
        "{text}"
    );
    assert!(
        text.find("Rule 5").unwrap() < text.find("Rule 2").unwrap(),
        "newest first: {text}"
    );
    assert!(!text.contains("Rule 1 "), "{text}");
    let older = discord.click(BOB, MEMBER, &page, &button(&page, "Older ▶"));
    let page2 = response_shown(&discord, CHANNEL, older, 7).await;
    let text2 = page2["content"].as_str().unwrap();
    assert!(
        text2.starts_with("The server's shared memories, page 2:") && text2.contains("Rule 1 "),
        "{text2}"
    );
    // A member may read but not forget.
    let forget = discord.click(BOB, MEMBER, &page2, &button(&page2, "Forget #"));
    let text = answer(&discord, forget, true).await;
    assert!(text.starts_with("Only the server's admins"), "{text}");
    // The other server sees none of them.
    let page_b = list_page(&discord, (BOB, MEMBER, MEMBER_PERMS), CHANNEL_B, json!([])).await;
    assert_eq!(
        page_b["content"],
        "The server's shared memories: none yet. Add one with `/memory add`."
    );
    // Five notes, five embeddings, each paid: nothing more was asked of the endpoint.
    assert_eq!(openai.embedded().len(), 5, "{:?}", openai.embedded());
    discord.assert_clean();
    openai.assert_clean();
}
