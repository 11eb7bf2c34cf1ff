//! autothread: AutoGPT-style autonomous agents that live in Discord threads, and in a terminal.
//!
//! ARCHITECTURE.md is the map (the cycle, the invariants with their tests, the recipes); each
//! module's own documentation describes its mechanism. The top-level modules:
//! - [`core`]: the pure agent loop: state, events, `step`, prompts, reply repair, policy, taint,
//!   rules. It is a crate of its own (`crates/core`, with no I/O crate among its dependencies),
//!   re-exported here.
//! - [`runtime`]: one actor per live agent; carries out the effects `step` returns.
//! - [`surface`]: where people see and decide: the console and Discord.
//! - [`service`]: the rules both surfaces apply: rights, caps, budgets, forks and rewinds.
//! - [`store`]: sled trees, versioned records, the write path, migrations, the command journal.
//! - [`budget`]: the spend ledger (reserve before a call, settle after), limits and pacing.
//! - [`memory`]: embedded memories in sled and the per-agent vector index derived from them.
//! - [`llm`]: the chat, embeddings and images clients, retries, token counting.
//! - [`tools`]: the `Command` trait, the registry and the commands agents run.
//! - [`mcp`]: MCP servers' tools as commands.
//! - `sandbox`: confined code execution (Linux only).
//! - [`web`]: search, Wikipedia, the guarded page fetcher, git clones.
//! - [`config`]: `bot.toml` plus environment, validated once; secrets redacted.
//! - [`app`]: the composition root every entry point builds its services with.
//! - [`cli`], [`check`], [`inspect`], [`export`], [`charts`], [`ops`]: the command line and what it
//!   and the bot show operators.
//! - [`clock`]: the one place the wall clock is read.
//! - [`locks`]: taking a lock whose holder panicked.
//!
//! Outside services sit behind small traits (`ChatModel`, `Embedder`, `ImageModel`, `Surface`,
//! `Clock`, `TokenCounter`, `SearchBackend`, `WikiBackend`, `ToolModel`, `AskUser`, the guard's
//! `Lookup`), so tests put fakes in their place; the page fetcher has none, and tests run the real
//! client against a loopback server with a `Lookup` that maps names to it.

pub mod app;
pub mod budget;
pub mod charts;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
/// The pure core lives in its own crate so the compiler keeps it free of I/O; the rest of the
/// code names it as `crate::core` as before.
pub use autothread_core as core;
pub mod export;
pub mod inspect;
pub mod llm;
pub mod locks;
pub mod mcp;
pub mod memory;
pub mod ops;
pub mod runtime;
#[cfg(target_os = "linux")]
pub mod sandbox;
pub mod service;
pub mod store;
pub mod surface;
pub mod tools;
pub mod web;
