//! autothread: AutoGPT-style autonomous agents that live in Discord threads, and in a terminal.
//!
//! Code map (see ARCHITECTURE.md for the invariants):
//! - [`core`]: the pure agent loop — state, events, `step`, prompt assembly, reply repair, watchdog.
//! - [`llm`]: the `ChatModel` trait, its OpenAI-compatible client with retries, token counting.
//! - [`tools`]: the `Command` trait, the registry and the commands (files, memory, web, sub-agents, control).
//! - [`web`]: search backends, the page fetcher behind the private-network guard, text extraction.
//! - [`budget`]: the spend ledger (reserve before a call, settle after), budgets and limits, pacing.
//! - [`memory`]: embedded memories in sled and the per-agent vector index derived from them.
//! - [`store`]: sled trees, versioned records, migrations, the command journal.
//! - [`runtime`]: one actor per live agent; carries out the effects `step` returns.
//! - [`surface`]: where humans see and decide: the console and Discord.
//! - [`export`]: transcripts and workspace archives for people.
//! - [`service`]: the rules both surfaces apply: caps, who may set which budget, policy narrowing.
//! - [`app`]: the composition root every entry point builds its services with.
//! - [`clock`]: the one place time is read.
//! - [`config`]: `bot.toml` plus environment, validated once; secrets redacted.
//! - [`cli`]: the `autothread` command line.

pub mod app;
pub mod budget;
pub mod charts;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod core;
pub mod export;
pub mod inspect;
pub mod llm;
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
