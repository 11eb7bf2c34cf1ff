//! Agents follow their shard on a shared PostgreSQL store: each process (a `Supervisor` over its
//! own `Store` handle on one database) resumes only the agents of the servers its shards serve,
//! under their lease; a process whose lease was taken over stops the agent, and its late write is
//! refused; a process that stops renewing (as one killed would) leaves its agents to another
//! within the lease's expiry; an upload is written only by the process that runs the agent.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use autothread::core::audit::{AuditEntry, AuditEvent};
use autothread::core::budget::Micros;
use autothread::core::event::Event;
use autothread::core::person::{ActedBy, Person};
use autothread::core::state::{AgentState, Phase};
use autothread::llm::{ChatModel, ChatReply, ChatRequest, LlmError};
use autothread::runtime::supervisor::{SendError, Supervisor};
use autothread::runtime::uploads::{Upload, UploadError};
use autothread::store::{Commit, Fence, Store, ThreadBinding};
use autothread::surface::discord::shards::Shards;
use support::inproc::{agent, deps, Recorder, SteppedClock};
use support::postgres::fresh_database;

/// A model that never answers within a test, so that a resumed agent stays running.
struct Silent;

#[async_trait]
impl ChatModel for Silent {
    async fn complete(&self, _request: ChatRequest) -> Result<ChatReply, LlmError> {
        tokio::time::sleep(Duration::from_secs(120)).await;
        Err(LlmError::BadResponse("silent".into()))
    }
}

/// The shortest lease the config accepts, renewed every second.
const LEASE_SECS: u64 = 3;

/// A server on shard 0 and one on shard 1, of two.
const GUILD_ON_0: u64 = 1;
const GUILD_ON_1: u64 = 1 << 22;

/// A process: its own handle on the shared database, and its supervisor with `clock`.
fn process(
    url: &str,
    dir: &tempfile::TempDir,
    clock: Option<Arc<dyn autothread::clock::Clock>>,
) -> (Supervisor, Store) {
    let store = Store::open_postgres(url, dir.path()).unwrap();
    let mut config = autothread::config::Config::default();
    config.llm.model = "local-model".into();
    config.budget.free_models = vec!["local-model".into()];
    config.budget.guild_calls_per_minute = 0;
    config.store.lease_secs = LEASE_SECS;
    let mut deps = deps(
        &store,
        Arc::new(Silent),
        Arc::new(Recorder::default()),
        config,
        None,
    );
    if let Some(clock) = clock {
        deps.clock = clock;
    }
    (Supervisor::new(deps), store)
}

/// Stores an agent that was thinking when its process stopped, living in a thread of `guild`.
fn thinking_agent(store: &Store, id: &str, guild: u64) {
    let mut state = agent(id, "Think", "local-model", false);
    state.progress.phase = Phase::Thinking;
    store
        .commit(&Commit {
            state: Some(&state),
            ..Default::default()
        })
        .unwrap();
    store
        .save_binding(&ThreadBinding {
            agent_id: id.into(),
            guild_id: guild,
            parent_channel_id: 10,
            thread_id: guild + 100,
            owner_id: 9,
            shared_users: Vec::new(),
            shared_roles: Vec::new(),
            card: None,
        })
        .unwrap();
}

fn shard(first: u32, total: u32) -> Shards {
    Shards {
        first,
        end: first + 1,
        total,
    }
}

async fn eventually(what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_process_resumes_only_the_agents_of_its_shards_under_their_lease() {
    let Some((url, _)) = fresh_database().await else {
        return;
    };
    let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
    let (zero, store_zero) = process(&url, &dirs[0], None);
    let (one, store_one) = process(&url, &dirs[1], None);
    thinking_agent(&store_zero, "on_shard_0", GUILD_ON_0);
    thinking_agent(&store_zero, "on_shard_1", GUILD_ON_1);

    let resumed = zero
        .resume_where(|agent: &AgentState| shard(0, 2).serves_agent(&store_zero, agent))
        .unwrap();
    assert_eq!(resumed, 1);
    assert!(zero.is_running("on_shard_0") && !zero.is_running("on_shard_1"));
    let resumed = one
        .resume_where(|agent: &AgentState| shard(1, 2).serves_agent(&store_one, agent))
        .unwrap();
    assert_eq!(resumed, 1);
    assert!(one.is_running("on_shard_1") && !one.is_running("on_shard_0"));

    let (lease_0, lease_1) = (
        store_one.lease("on_shard_0").unwrap().unwrap(),
        store_one.lease("on_shard_1").unwrap().unwrap(),
    );
    assert_ne!(lease_0.owner, lease_1.owner, "two processes, two owners");
    assert_eq!((lease_0.fence, lease_1.fence), (Fence(1), Fence(1)));

    // A third process serving every shard finds both agents run elsewhere: it resumes none, and
    // an event for one is refused rather than starting a second actor.
    let (all, store_all) = process(&url, &dirs[2], None);
    let resumed = all
        .resume_where(|agent: &AgentState| shard(0, 1).serves_agent(&store_all, agent))
        .unwrap();
    assert_eq!(resumed, 0);
    let sent = all.send(
        "on_shard_0",
        Event::SetBudget {
            budget: Micros(5_000_000),
            by: Person::discord(9, "owner"),
        },
    );
    assert!(
        matches!(&sent, Err(SendError::Elsewhere(agent)) if agent == "on_shard_0"),
        "{sent:?}"
    );
    assert_eq!(all.actors_started(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_lease_was_taken_over_stops_the_agent_and_writes_nothing() {
    let Some((url, _)) = fresh_database().await else {
        return;
    };
    let dirs = [(); 2].map(|()| tempfile::tempdir().unwrap());
    let (old, store_old) = process(&url, &dirs[0], None);
    thinking_agent(&store_old, "written_late", GUILD_ON_0);
    thinking_agent(&store_old, "renewed_late", GUILD_ON_0);
    assert_eq!(old.resume_where(|_| true).unwrap(), 2);

    // A process whose clock is an hour ahead sees both leases expired and takes them over.
    let ahead = SteppedClock::default();
    ahead.advance(chrono::Duration::hours(1));
    let (new, store_new) = process(&url, &dirs[1], Some(Arc::new(ahead)));
    assert_eq!(new.resume_where(|_| true).unwrap(), 2);
    assert_eq!(
        store_new.lease("written_late").unwrap().unwrap().fence,
        Fence(2)
    );

    // The old process's actor applies a budget change, and its write is refused whole: the
    // actor stops, and the store keeps no trace of the change.
    old.send(
        "written_late",
        Event::SetBudget {
            budget: Micros(7_654_321),
            by: Person::discord(9, "owner"),
        },
    )
    .unwrap();
    eventually("the old actor stops", Duration::from_secs(10), || {
        !old.is_running("written_late")
    })
    .await;
    let stored = store_new
        .load_agent_record("written_late")
        .unwrap()
        .unwrap();
    assert_ne!(stored.brief.settings.budget, Some(Micros(7_654_321)));
    assert!(new.is_running("written_late"));

    // The other agent's renewal finds its lease gone, and the old process stops running it.
    old.keep_leases(Arc::new(|_: &AgentState| true));
    eventually(
        "the renewal stops the agent",
        Duration::from_secs(2 * LEASE_SECS),
        || !old.is_running("renewed_late"),
    )
    .await;
    assert!(new.is_running("renewed_late"));
    let lease = store_old.lease("renewed_late").unwrap().unwrap();
    assert_eq!(lease.fence, Fence(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_of_a_process_that_stopped_renewing_continue_in_another_within_the_lease() {
    let Some((url, _)) = fresh_database().await else {
        return;
    };
    let dirs = [(); 2].map(|()| tempfile::tempdir().unwrap());
    let (dead, store_dead) = process(&url, &dirs[0], None);
    thinking_agent(&store_dead, "orphan", GUILD_ON_1);
    thinking_agent(&store_dead, "elsewhere", GUILD_ON_0);
    // The first process runs both, then renews nothing, as a process killed with SIGKILL.
    assert_eq!(dead.resume_where(|_| true).unwrap(), 2);
    let killed_at = tokio::time::Instant::now();

    let (alive, store_alive) = process(&url, &dirs[1], None);
    let serves: autothread::runtime::supervisor::Serves = {
        let store = store_alive.clone();
        Arc::new(move |agent: &AgentState| shard(1, 2).serves_agent(&store, agent))
    };
    alive.keep_leases(serves);
    // Not before the lease expires...
    tokio::time::sleep(Duration::from_secs(LEASE_SECS) / 2).await;
    assert!(!alive.is_running("orphan"));
    // ...and within it and two renewal periods after: only the agent of a server it serves.
    eventually(
        "the orphan is adopted",
        Duration::from_secs(LEASE_SECS) + Duration::from_secs(2 * LEASE_SECS / 3 + 1),
        || alive.is_running("orphan"),
    )
    .await;
    assert!(killed_at.elapsed() >= Duration::from_secs(LEASE_SECS) - Duration::from_millis(500));
    assert!(!alive.is_running("elsewhere"));
    let lease = store_alive.lease("orphan").unwrap().unwrap();
    assert_eq!(lease.fence, Fence(2));
}

fn upload(path: &str, contents: &[u8]) -> Upload {
    Upload {
        path: path.into(),
        contents: contents.to_vec(),
        entry: AuditEntry {
            at: chrono::Utc::now(),
            by: ActedBy::from("ci"),
            event: AuditEvent::FileUploaded {
                path: path.into(),
                bytes: contents.len() as u64,
                digest: autothread::core::digest::sha256_tagged(contents),
            },
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_written_by_the_process_that_runs_the_agent_and_refused_by_any_other() {
    let Some((url, _)) = fresh_database().await else {
        return;
    };
    let dirs = [(); 2].map(|()| tempfile::tempdir().unwrap());
    let (runs, store_runs) = process(&url, &dirs[0], None);
    let (other, store_other) = process(&url, &dirs[1], None);
    thinking_agent(&store_runs, "live_one", GUILD_ON_0);
    assert_eq!(
        runs.resume_where(|agent| agent.id == "live_one").unwrap(),
        1
    );

    // The process that does not run the agent writes nothing, and says why.
    let refused = other
        .put_upload("live_one", upload("in/refused.txt", b"no"))
        .await;
    assert!(
        matches!(refused, Err(UploadError::Elsewhere)),
        "{refused:?}"
    );
    assert_eq!(
        store_other.read_file("live_one", "in/refused.txt").unwrap(),
        None
    );
    assert!(!other.is_running("live_one"));

    // The one that runs it writes through the agent's actor, fenced by its lease.
    runs.put_upload("live_one", upload("in/notes.txt", b"notes"))
        .await
        .unwrap();
    assert_eq!(
        store_other
            .read_file("live_one", "in/notes.txt")
            .unwrap()
            .as_deref(),
        Some(&b"notes"[..])
    );
    assert!(store_other
        .files_put_from_outside("live_one")
        .unwrap()
        .contains("in/notes.txt"));
    assert!(runs.is_running("live_one"));

    // A file over the cap is refused where it is written, and nothing lands.
    let cap = autothread::config::Config::default()
        .workspace
        .max_file_bytes as usize;
    let too_big = runs
        .put_upload("live_one", upload("in/big.bin", &vec![7; cap + 1]))
        .await;
    assert!(
        matches!(too_big, Err(UploadError::FileTooBig { .. })),
        "{too_big:?}"
    );
    assert_eq!(
        store_runs.read_file("live_one", "in/big.bin").unwrap(),
        None
    );

    // A resting agent (no process runs it) takes the upload from whichever process gets it, which
    // holds its lease only for the write and starts no actor.
    thinking_agent(&store_runs, "resting_one", GUILD_ON_1);
    other
        .put_upload("resting_one", upload("report.txt", b"report"))
        .await
        .unwrap();
    assert!(!other.is_running("resting_one"));
    assert_eq!(
        store_runs
            .read_file("resting_one", "report.txt")
            .unwrap()
            .as_deref(),
        Some(&b"report"[..])
    );
    let lease = store_runs.lease("resting_one").unwrap().unwrap();
    assert!(lease.expires_at <= chrono::Utc::now(), "{lease:?}");
    assert_eq!(
        runs.resume_where(|agent| agent.id == "resting_one")
            .unwrap(),
        1
    );
}

/// Makes the test's database refuse every write of `agent`'s records but its lease, as a disk
/// or a constraint failing that agent alone would.
async fn refuse_writes_of(url: &str, agent: &str) {
    use sqlx::Connection as _;
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    let function = format!(
        "CREATE FUNCTION refuse_{agent}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.tree <> 'leases' AND position(convert_to('{agent}', 'UTF8') in NEW.key) = 1 THEN \
         RAISE EXCEPTION 'the test refuses this write'; END IF; RETURN NEW; END $$"
    );
    let trigger = format!(
        "CREATE TRIGGER refuse_{agent} BEFORE INSERT OR UPDATE ON kv \
         FOR EACH ROW EXECUTE FUNCTION refuse_{agent}()"
    );
    for statement in [function, trigger] {
        sqlx::query(&statement)
            .execute(&mut connection)
            .await
            .unwrap();
    }
}

/// An agent whose actor dies on a store error each time it runs is adopted again, but each time
/// after twice the wait before (two lease periods first), not every period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_actor_keeps_failing_is_adopted_again_after_a_doubling_wait() {
    let Some((url, _)) = fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (keeper, store) = process(&url, &dir, None);
    thinking_agent(&store, "failing", GUILD_ON_0);
    refuse_writes_of(&url, "failing").await;
    let started = tokio::time::Instant::now();
    keeper.keep_leases(Arc::new(|_: &AgentState| true));
    // Periods of one second: adopted at about 1 s, failing at once; without the wait it would be
    // adopted about every second. With it: again after 2 s (about 3 s), then after 4 s (about 7 s).
    eventually(
        "the failing agent is adopted again",
        Duration::from_secs(6),
        || keeper.actors_started() >= 2,
    )
    .await;
    let again = started.elapsed();
    assert!(
        again >= Duration::from_secs(2),
        "adopted again after {again:?}"
    );
    tokio::time::sleep(Duration::from_secs(8) - started.elapsed().min(Duration::from_secs(8)))
        .await;
    let starts = keeper.actors_started();
    assert!((2..=4).contains(&starts), "{starts} starts in 8 s");
    // It was never stored as having moved on.
    let stored = store.load_agent_record("failing").unwrap().unwrap();
    assert_eq!(stored.progress.phase, Phase::Thinking);
}
