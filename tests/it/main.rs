//! The integration tests, as one binary so `support/` compiles once: a module per theme.

// A test stops at the first failure; its helpers may unwrap like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod api_discord;
mod api_e2e;
mod approvals_e2e;
mod architecture;
mod audit_e2e;
mod budget_e2e;
mod budget_ledger;
mod console_e2e;
mod crash_cards;
mod discord_contact;
mod discord_e2e;
mod export_e2e;
mod fake_discord_payloads;
mod fork_e2e;
mod intents_e2e;
mod leases;
mod live_status_e2e;
mod llm_client;
mod mcp;
mod mcp_box;
mod mcp_edge;
mod mcp_registry;
mod mcp_scope;
mod memory;
mod memory_e2e;
mod memory_joined;
mod ops_e2e;
mod pacing;
mod parked_e2e;
mod policy_e2e;
mod postgres_store;
mod providers_e2e;
mod real_peer;
mod repository;
mod rules_e2e;
mod sandbox;
mod shards;
mod snapshots;
mod store_migration;
mod stuck_e2e;
mod subagents;
mod supervisor;
mod taint_e2e;
mod team_memory_e2e;
mod web;
