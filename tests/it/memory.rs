//! Long-term memory: the HNSW path against exact search on clustered data, recall of an old fact
//! when the task turns to it, isolation between agents, forget, pin, restart, and the queue that
//! keeps memories through an embeddings outage.

use crate::support;
use autothread::core::budget::Micros;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use autothread::budget::Budgets;
use autothread::clock::SystemClock;
use autothread::config::Config;
use autothread::core::event::Event;
use autothread::core::memory::MemorySource;
use autothread::core::state::{Phase, Spender};
use autothread::llm::tokens::TiktokenCounter;
use autothread::memory::index::{clustered_unit_vectors, GraphOrigin, HnswParams, VectorIndex};
use autothread::memory::{Memory, MemoryPlace, Payer, Pin};
use autothread::runtime::{self, Deps};
use autothread::store::Store;
use autothread::tools::Registry;
use serde_json::json;
use support::inproc::{reply, HashEmbedder, Recorder, ScriptedModel, SteppedClock};

#[test]
fn hnsw_recall_at_10_against_exact_search_on_20k_clustered_vectors() {
    let dim = 384;
    let data = clustered_unit_vectors(20_000, dim, 7);
    let queries = clustered_unit_vectors(100, dim, 8);
    let items: Vec<(u64, Vec<f32>)> = data
        .into_iter()
        .enumerate()
        .map(|(i, v)| (i as u64, v))
        .collect();
    let params = HnswParams {
        m: 16,
        ef_construction: 200,
        ef_search: 64,
    };
    let graph = VectorIndex::build(dim, items, params, 0);
    assert!(graph.is_graph());
    let none = HashSet::new();
    let mut found = 0;
    for query in &queries {
        let truth: HashSet<u64> = graph.exact(query, 10, &none).iter().map(|s| s.id).collect();
        found += graph
            .search(query, 10, &none)
            .iter()
            .filter(|s| truth.contains(&s.id))
            .count();
    }
    let recall = found as f64 / (queries.len() * 10) as f64;
    println!("recall@10 of the HNSW path on 20k clustered vectors: {recall:.4}");
    assert!(recall >= 0.95, "recall@10 {recall}");
}

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    pub(crate) memory: Arc<Memory>,
    pub(crate) embedder: Arc<HashEmbedder>,
    clock: Arc<SteppedClock>,
    pub(crate) budgets: Arc<Budgets>,
}

pub(crate) fn fixture_in(dir: tempfile::TempDir) -> Fixture {
    fixture_with(dir, Config::default().memory.exact_below)
}

/// A fixture whose agents search a graph once they hold `exact_below` memories.
fn fixture_with(dir: tempfile::TempDir, exact_below: usize) -> Fixture {
    fixture_meeting(dir, exact_below, None)
}

/// A fixture whose index loads meet `rendezvous` (see `Memory::with_load_rendezvous`).
fn fixture_meeting(
    dir: tempfile::TempDir,
    exact_below: usize,
    rendezvous: Option<Arc<tokio::sync::Barrier>>,
) -> Fixture {
    let store = Store::open(dir.path()).unwrap();
    let mut config = Config::default();
    config.memory.exact_below = exact_below;
    config.budget.free_models = vec!["hash-passage".into(), "hash-query".into()];
    let budgets = Arc::new(Budgets::new(&store, &config.budget).unwrap());
    let embedder = Arc::new(HashEmbedder::default());
    let clock = Arc::new(SteppedClock::default());
    let mut memory = Memory::new(
        &store,
        embedder.clone(),
        budgets.clone(),
        Arc::new(TiktokenCounter::for_model("gpt-4o-mini")),
        &config.memory,
    )
    .unwrap()
    .with_clock(clock.clone());
    if let Some(barrier) = rendezvous {
        memory = memory.with_load_rendezvous(barrier);
    }
    let memory = Arc::new(memory);
    Fixture {
        _dir: dir,
        store,
        memory,
        embedder,
        clock,
        budgets,
    }
}

pub(crate) fn payer(agent: &str, guild: &str) -> Payer {
    Payer {
        agent: agent.into(),
        spender: Spender {
            user: Some("u".into()),
            guild: Some(guild.into()),
        },
        agent_limit: Micros(1_000_000),
    }
}

/// The memory the tests look for: cycle 3's launch password.
pub(crate) async fn remember_password(f: &Fixture, payer: &Payer) -> u64 {
    f.memory
        .remember(
            payer,
            3,
            MemorySource::Cycle,
            "The launch password is heliotrope",
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn agents_never_see_each_others_memories_and_forget_pin_and_restart_behave() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    let (a, b) = (payer("agent-a", "g1"), payer("agent-b", "g1"));
    let secret = remember_password(&f, &a).await;
    f.memory
        .remember(&a, 4, MemorySource::Cycle, "Lunch is at noon")
        .await
        .unwrap();
    f.memory
        .remember(&b, 1, MemorySource::Command, "Agent B likes tea")
        .await
        .unwrap();
    let found = f.memory.search(&a, "launch password", 10).await.unwrap();
    assert_eq!(found[0].id, secret);
    assert_eq!(found.len(), 2);
    // B searching for A's secret finds only its own memory.
    let theirs = f
        .memory
        .search(&b, "launch password heliotrope", 10)
        .await
        .unwrap();
    assert_eq!(theirs.len(), 1);
    assert!(theirs.iter().all(|h| h.text == "Agent B likes tea"));
    // Another agent cannot forget or pin what is not its own.
    assert!(f.memory.forget("agent-b", secret).is_err());

    // Pinned memories come back whatever the query.
    let lunch = found[1].id;
    f.memory.pin("agent-a", lunch, Pin::On).unwrap();
    let pinned = f.memory.search(&a, "heliotrope", 1).await.unwrap();
    assert!(pinned.iter().any(|h| h.id == lunch && h.pinned));

    f.memory.forget("agent-a", secret).unwrap();
    let after = f
        .memory
        .search(&a, "launch password heliotrope", 10)
        .await
        .unwrap();
    assert!(after.iter().all(|h| h.id != secret), "{after:?}");

    // Restart: a new store handle and memory service; the index is rebuilt lazily from sled.
    let f = fixture_in(shut_down(f));
    assert!(!f.memory.is_cached("agent-a"));
    let again = f.memory.search(&a, "lunch noon", 10).await.unwrap();
    assert!(f.memory.is_cached("agent-a"));
    assert_eq!(again.len(), 1, "the forgotten memory stays gone: {again:?}");
    assert_eq!(again[0].id, lunch);
    assert!(again[0].pinned);
    assert_eq!(f.memory.count("agent-b"), 1);
    drop(f.store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_stored_or_forgotten_while_an_index_loads_is_not_lost() {
    let rendezvous = Arc::new(tokio::sync::Barrier::new(2));
    let f = fixture_meeting(
        tempfile::tempdir().unwrap(),
        Config::default().memory.exact_below,
        Some(rendezvous.clone()),
    );
    let agent = "agent-a";
    let a = payer(agent, "g1");
    let lunch = f
        .memory
        .remember(&a, 1, MemorySource::Cycle, "Lunch is at noon")
        .await
        .unwrap();
    assert!(!f.memory.is_cached(agent));
    // The first search of an agent reads its index from the store; the load is held after its
    // read, which has passed every key there is.
    let first = tokio::spawn({
        let (memory, a) = (f.memory.clone(), a.clone());
        async move { memory.search(&a, "lunch", 10).await }
    });
    rendezvous.wait().await;
    assert!(f.memory.is_loading(agent));
    assert!(!f.memory.is_cached(agent));
    // Meanwhile a cycle's memory is written, and one forgotten.
    let secret = remember_password(&f, &a).await;
    f.memory.forget(agent, lunch).unwrap();
    rendezvous.wait().await;
    first.await.unwrap().unwrap();
    assert!(f.memory.is_cached(agent));
    assert!(!f.memory.is_loading(agent));
    let found = f
        .memory
        .search(&a, "launch password heliotrope", 10)
        .await
        .unwrap();
    let ids: Vec<u64> = found.iter().map(|hit| hit.id).collect();
    assert_eq!(
        ids,
        vec![secret],
        "stored during the load, and forgotten during it"
    );
}

#[tokio::test]
async fn a_deleted_agents_memories_are_removed_and_no_one_elses() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    let (a, b) = (payer("agent-a", "g1"), payer("agent-b", "g1"));
    remember_password(&f, &a).await;
    let lunch = f
        .memory
        .remember(&a, 4, MemorySource::Cycle, "Lunch is at noon")
        .await
        .unwrap();
    f.memory.pin("agent-a", lunch, Pin::On).unwrap();
    remember_password(&f, &b).await;
    f.memory.search(&a, "lunch", 10).await.unwrap();
    assert!(f.memory.is_cached("agent-a"));
    assert_eq!(f.memory.remove_agent("agent-a").unwrap(), 2);
    assert!(!f.memory.is_cached("agent-a"));
    assert_eq!(f.memory.count("agent-a"), 0);
    assert!(f.memory.search(&a, "lunch", 10).await.unwrap().is_empty());
    assert_eq!(f.memory.count("agent-b"), 1);
    let theirs = f.memory.search(&b, "password", 10).await.unwrap();
    assert_eq!(theirs.len(), 1);
}

#[tokio::test]
async fn a_fork_gets_the_memories_of_its_cycles_and_a_rewind_forgets_the_later_ones() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    let a = payer("agent-a", "g1");
    let password = remember_password(&f, &a).await;
    let lunch = f
        .memory
        .remember(&a, 4, MemorySource::Cycle, "Lunch is at noon")
        .await
        .unwrap();
    f.memory.pin("agent-a", password, Pin::On).unwrap();
    let forgotten = f
        .memory
        .remember(&a, 2, MemorySource::Cycle, "The old code was 1234")
        .await
        .unwrap();
    f.memory.forget("agent-a", forgotten).unwrap();
    f.memory.search(&a, "password", 10).await.unwrap();

    // A fork from cycle 3 gets cycle 3's memory (pinned still), not cycle 4's, not a forgotten one.
    let copied = f
        .memory
        .copy_to_fork("agent-a", 3, "fork-1", Some("g2".into()))
        .unwrap();
    assert_eq!(copied, 1);
    let fork = payer("fork-1", "g2");
    let found = f
        .memory
        .search(&fork, "lunch noon password code", 10)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].text, "The launch password is heliotrope");
    assert!(found[0].pinned);
    assert_ne!(found[0].id, password, "the fork's memory is its own");

    // Rewinding the source to cycle 3 forgets cycle 4's memory; the fork keeps its own.
    assert_eq!(f.memory.forget_after("agent-a", 3).unwrap(), 1);
    let left = f.memory.search(&a, "lunch noon", 10).await.unwrap();
    assert!(left.iter().all(|h| h.id != lunch), "{left:?}");
    assert_eq!(left.len(), 1);
    assert_eq!(
        f.memory.search(&fork, "password", 10).await.unwrap().len(),
        1
    );
}

#[tokio::test]
async fn recalled_memories_get_their_texts_back_and_forgotten_ones_drop_out() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    let a = payer("agent-a", "g1");
    let kept = remember_password(&f, &a).await;
    let gone = f
        .memory
        .remember(&a, 4, MemorySource::Cycle, "The launch is at noon")
        .await
        .unwrap();
    let found = f.memory.search(&a, "launch password", 10).await.unwrap();
    assert_eq!(found.len(), 2);
    // As an agent's record keeps them: by reference.
    let by_reference: Vec<_> = found
        .iter()
        .map(|hit| autothread::core::memory::MemoryHit {
            text: String::new(),
            ..hit.clone()
        })
        .collect();
    f.memory.forget("agent-a", gone).unwrap();
    let back = f.memory.with_texts("agent-a", by_reference.clone());
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0].id, kept);
    assert_eq!(back[0].text, "The launch password is heliotrope");
    // Another agent's ids find nothing of agent-a's.
    assert!(f.memory.with_texts("agent-b", by_reference).is_empty());
}

/// Closes the fixture's memory service and store, keeping their folder for a restart.
fn shut_down(f: Fixture) -> tempfile::TempDir {
    let Fixture {
        _dir,
        store,
        memory,
        ..
    } = f;
    drop(memory);
    drop(store);
    _dir
}

fn restart(f: Fixture, exact_below: usize) -> Fixture {
    fixture_with(shut_down(f), exact_below)
}

/// The origin of the agent's graph once it is attached (it is loaded or built in the
/// background); waits at most `WAIT`, as the other tests do: on two busy cores (the 20k-vector
/// test builds its graph at the same time) 10 s was once not enough.
async fn graph_settled(f: &Fixture, agent: &str) -> GraphOrigin {
    let deadline = std::time::Instant::now() + support::WAIT;
    while std::time::Instant::now() < deadline {
        if let Some(origin) = f.memory.graph_origin(agent) {
            return origin;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{agent} has no graph after {:?}", support::WAIT);
}

#[tokio::test]
async fn a_graph_is_loaded_from_its_saved_files_at_restart_with_what_changed_since() {
    let f = fixture_with(tempfile::tempdir().unwrap(), 20);
    let a = payer("agent-a", "g1");
    for i in 0..40u64 {
        f.memory
            .remember(
                &a,
                i,
                MemorySource::Cycle,
                &format!("fact item{i} about topic{}", i % 5),
            )
            .await
            .unwrap();
    }
    // The first search is answered at once; the graph is built meanwhile, then saved.
    let before = f
        .memory
        .search(&a, "fact item7 about topic2", 5)
        .await
        .unwrap();
    assert_eq!(before.len(), 5);
    assert_eq!(graph_settled(&f, "agent-a").await, GraphOrigin::Built);
    let saved = f.store.dir().join("hnsw").join("6167656e742d61");
    for _ in 0..1000 {
        if saved.join("manifest.json").exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(saved.join("manifest.json").exists());
    // (The fake embedder hashes words of three letters or more. The late memory sits beside one
    // already in the graph, as real ones sit in topics: a point far from all others may end up
    // with no link to it, in any HNSW graph.)
    // After the save: one memory added, one forgotten, then a crash (nothing saved again).
    let zebras = f
        .memory
        .remember(
            &a,
            50,
            MemorySource::Cycle,
            "fact item7 about topic2: zebras",
        )
        .await
        .unwrap();
    let forgotten = before[0].id;
    f.memory.forget("agent-a", forgotten).unwrap();
    let f = restart(f, 20);
    for round in ["before the graph is attached", "with the loaded graph"] {
        let found = f
            .memory
            .search(&a, "zebras item7 topic2", 41)
            .await
            .unwrap();
        assert_eq!(
            found[0].id, zebras,
            "{round}: the memory added after the save"
        );
        assert!(found.iter().all(|h| h.id != forgotten), "{round}");
        assert_eq!(graph_settled(&f, "agent-a").await, GraphOrigin::Loaded);
    }

    // Stopping saves what the files lack; a damaged file means a rebuild, not an error.
    f.memory.save_indexes();
    let f = restart(f, 20);
    f.memory.search(&a, "zebras", 1).await.unwrap();
    assert_eq!(graph_settled(&f, "agent-a").await, GraphOrigin::Loaded);
    let data = saved.join("graph.hnsw.data");
    let mut raw = std::fs::read(&data).unwrap();
    raw[64] ^= 0x55;
    std::fs::write(&data, raw).unwrap();
    let f = restart(f, 20);
    f.memory.search(&a, "zebras", 1).await.unwrap();
    assert_eq!(graph_settled(&f, "agent-a").await, GraphOrigin::Built);
    let rebuilt = f
        .memory
        .search(&a, "zebras item7 topic2", 41)
        .await
        .unwrap();
    assert_eq!(rebuilt[0].id, zebras);
    assert!(rebuilt.iter().all(|h| h.id != forgotten));
    drop(f.store);
}

#[tokio::test]
async fn an_embeddings_outage_queues_memories_and_loses_none() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    let a = payer("agent-a", "g1");
    f.embedder.down.store(true, Ordering::SeqCst);
    assert!(f
        .memory
        .remember(&a, 1, MemorySource::Cycle, "The ferry leaves at 7:40")
        .await
        .is_err());
    assert!(f
        .memory
        .remember(&a, 2, MemorySource::Cycle, "The museum closes on Mondays")
        .await
        .is_err());
    assert_eq!(f.memory.pending_count("agent-a"), 2);
    // Recall during the outage returns nothing rather than failing the cycle. Its attempt to
    // write the queue is the third failure in a row, so memory turns off and the search itself
    // is not even tried.
    let calls = f.embedder.calls.load(Ordering::SeqCst);
    assert!(f
        .memory
        .recall(&a, vec![MemoryPlace::agent(&a.agent)], "ferry")
        .await
        .is_empty());
    assert_eq!(f.embedder.calls.load(Ordering::SeqCst), calls + 1);
    let off = f
        .memory
        .off()
        .expect("three failures in a row turn memory off");
    assert!(!off.refused, "{off:?}");
    f.embedder.down.store(false, Ordering::SeqCst);
    // Until the cooldown is over, nothing is sent even though the endpoint is back.
    assert!(f
        .memory
        .recall(&a, vec![MemoryPlace::agent(&a.agent)], "ferry")
        .await
        .is_empty());
    assert_eq!(f.embedder.calls.load(Ordering::SeqCst), calls + 1);
    f.clock.advance(chrono::Duration::seconds(31));
    let hits = f
        .memory
        .recall(
            &a,
            vec![MemoryPlace::agent(&a.agent)],
            "when does the ferry leave",
        )
        .await;
    assert_eq!(f.memory.pending_count("agent-a"), 0);
    assert_eq!(hits[0].text, "The ferry leaves at 7:40");
    assert_eq!(hits[0].cycle, 1);
    assert_eq!(hits.len(), 2);
    assert_eq!(f.memory.off(), None, "the probe worked: memory is back on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_from_cycle_3_is_recalled_at_cycle_40_when_the_task_turns_to_it() {
    fact_from_cycle_3_recalled_at_cycle_40(false).await;
}

/// Runs 39 cycles of an inventory whose cycle 3 writes a vault code, then asks for the code at
/// cycle 40 and checks that memory brings it back; `one_model` embeds memories and queries with
/// one model.
pub(crate) async fn fact_from_cycle_3_recalled_at_cycle_40(one_model: bool) -> Fixture {
    let f = fixture_in(tempfile::tempdir().unwrap());
    f.embedder.one_model.store(one_model, Ordering::SeqCst);
    let mut config = Config::default();
    config.llm.model = "local-model".into();
    config.budget.free_models = vec!["local-model".into()];
    config.budget.guild_calls_per_minute = 0;
    // The hashed test embeddings are not calibrated like a real model's: no relevance floor.
    config.memory.min_relevance = -1.0;
    // A small window, so that by cycle 40 the Progress section has dropped cycle 3 altogether
    // (a step it shows, even as a line, is not recalled again).
    config.llm.models.insert(
        "local-model".into(),
        autothread::config::ModelSpec {
            context_tokens: 1536,
            max_tokens: 400,
            reasoning: None,
        },
    );
    let mut replies = Vec::new();
    for cycle in 1..=38 {
        replies.push(if cycle == 3 {
            reply(
                "write_file",
                json!({"filename": "vault.txt", "contents": "The vault access code for the zebra orchid greenhouse is 7319."}),
            )
        } else {
            reply("list_folder", json!({"folder": format!("shelf{cycle}")}))
        });
    }
    replies.push(reply("finish", json!({"reason": "inventory done"})));
    replies.push(reply("finish", json!({"reason": "answered"})));
    let model = Arc::new(ScriptedModel::new(replies));
    let counter = Arc::new(TiktokenCounter::for_model("gpt-4o-mini"));
    let budgets = Arc::new(Budgets::new(&f.store, &config.budget).unwrap());
    let deps = Deps {
        store: f.store.clone(),
        model: model.clone(),
        tools: Arc::new(Registry::for_config(&config)),
        surface: Arc::new(Recorder::default()),
        config: Arc::new(config),
        counter,
        clock: Arc::new(SystemClock),
        budgets,
        memory: Some(f.memory.clone()),
        web: None,
        drain: Default::default(),
        runtime: tokio::runtime::Handle::current(),
    };
    let state = support::inproc::agent(
        "recall000001",
        "Take an inventory of the shelves",
        "local-model",
        true,
    );
    let (_handle, done) = runtime::start(state, Event::Start, deps.clone());
    let state = done.await.unwrap().unwrap();
    assert!(
        matches!(state.progress.phase, Phase::Finished { .. }),
        "{:?}",
        state.progress.phase
    );
    // 39 cycles ran; the next one is 40.
    assert_eq!(state.progress.cycle, 40);
    assert!(f.memory.count("recall000001") >= 30);

    let (_handle, done) = runtime::start(
        state,
        Event::Resume {
            by: autothread::core::person::Person::console("tester"),
            follow_up: Some("What is the vault access code of the zebra orchid greenhouse?".into()),
        },
        deps,
    );
    let state = done.await.unwrap().unwrap();
    assert_eq!(state.progress.episodes.last().unwrap().cycle, 40);
    let prompts = model.cycle_prompts.lock().unwrap();
    let last = prompts.last().unwrap();
    let memories = last
        .messages
        .iter()
        .find(|m| m.content.starts_with("## Memories"))
        .expect("a memory section at cycle 40");
    let first = memories.content.lines().nth(2).unwrap_or("");
    assert!(
        first.contains("Cycle 3:") && first.contains("7319"),
        "the most relevant memory comes first:\n{}",
        memories.content
    );
    // The Progress section no longer shows cycle 3 in full, so only memory brings the code back.
    let progress = last
        .messages
        .iter()
        .find(|m| m.content.starts_with("## Progress"))
        .unwrap();
    assert!(!progress.content.contains("7319"));
    drop(prompts);
    f
}

/// A place's pins are bounded (every pinned memory is recalled in every cycle), a pin or unpin
/// that changes nothing says so, and the place's notes count only live notes: forgetting one
/// makes room again.
#[tokio::test]
async fn pins_are_bounded_per_place_and_a_change_that_changes_nothing_says_so() {
    use autothread::memory::team::MAX_PINS;
    let f = fixture_in(tempfile::tempdir().unwrap());
    let server = MemoryPlace::server(&"g1".into());
    let person = payer(&server.key, "g1");
    let mut ids = Vec::new();
    for n in 0..=MAX_PINS {
        let note = f
            .memory
            .add_note(
                &person,
                &server,
                0,
                &format!("House rule {n}"),
                &autothread::core::person::Person::discord(1, "alice"),
            )
            .await
            .unwrap();
        ids.push(note.id);
    }
    for id in &ids[..MAX_PINS] {
        f.memory.pin(&server.key, *id, Pin::On).unwrap();
    }
    let over = f
        .memory
        .pin(&server.key, ids[MAX_PINS], Pin::On)
        .unwrap_err();
    assert!(
        over.to_string()
            .starts_with(&format!("{MAX_PINS} memories are pinned here already")),
        "{over}"
    );
    let again = f.memory.pin(&server.key, ids[0], Pin::On).unwrap_err();
    assert_eq!(again.to_string(), "it is pinned already");
    f.memory.pin(&server.key, ids[0], Pin::Off).unwrap();
    let again = f.memory.pin(&server.key, ids[0], Pin::Off).unwrap_err();
    assert_eq!(again.to_string(), "it is not pinned");
    f.memory.pin(&server.key, ids[MAX_PINS], Pin::On).unwrap();
    assert_eq!(f.memory.live_notes(&server), MAX_PINS + 1);
    f.memory.forget(&server.key, ids[1]).unwrap();
    assert_eq!(f.memory.live_notes(&server), MAX_PINS);
    // An agent's own memories are not notes.
    let agent = payer("agent-a", "g1");
    remember_password(&f, &agent).await;
    assert_eq!(f.memory.live_notes(&MemoryPlace::agent("agent-a")), 0);
}
