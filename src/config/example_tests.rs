//! `bot.toml.example` against the typed config: every key the config has appears in it (live or
//! commented out), everything it shows (commented lines included) is read by the config, and the
//! values it shows live are the defaults.
//!
//! The config's keys are found by serializing a config that has one entry in each table keyed by
//! the operator (models, prices, servers, classes), so a new field fails the test until the
//! example shows it. Those tables' own keys are written `*` on both sides.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::*;
use crate::core::commands::Risk;
use crate::core::expiry::ExpiryRule;
use crate::core::policy::ClassAction;

const EXAMPLE: &str = include_str!("../../bot.toml.example");

/// The tables whose keys are the operator's (a model, a server id, a class, a size, a variable):
/// the example shows one entry of each.
const KEYED_BY_THE_OPERATOR: &[&str] = &[
    "llm.models",
    "budget.prices",
    "policy.guilds",
    "discord.guild_models",
    "approvals.quorum",
    "approvals.expiry",
    "approvals.guilds",
    "approvals.guilds.*.quorum",
    "approvals.guilds.*.expiry",
    "images.usd_per_image",
    "mcp.servers.env",
];

/// The key of `child` under `parent`, `*` where the table is keyed by the operator.
fn child_path(parent: &str, child: &str) -> String {
    if KEYED_BY_THE_OPERATOR.contains(&parent) {
        format!("{parent}.*")
    } else if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

/// Every key path of a serialized config: the leaves, and tables left empty.
fn json_paths(value: &serde_json::Value, path: &str, paths: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                json_paths(child, &child_path(path, key), paths);
            }
        }
        // An array of tables (`[[mcp.servers]]`): its entries' keys, under its own path.
        serde_json::Value::Array(items) if items.iter().any(|item| item.is_object()) => {
            for item in items {
                json_paths(item, path, paths);
            }
        }
        _ => {
            paths.insert(path.to_string());
        }
    }
}

/// Every key path the example shows, and every path above one.
fn toml_paths(value: &toml::Value, path: &str, paths: &mut BTreeSet<String>) {
    if !path.is_empty() {
        paths.insert(path.to_string());
    }
    match value {
        toml::Value::Table(table) => {
            for (key, child) in table {
                toml_paths(child, &child_path(path, key), paths);
            }
        }
        toml::Value::Array(items) if items.iter().any(|item| item.is_table()) => {
            for item in items {
                toml_paths(item, path, paths);
            }
        }
        _ => {}
    }
}

/// The example with its commented-out keys and tables (`# key = value`, `# [table]`) put back,
/// as an operator would uncomment them; prose stays a comment.
fn uncommented(example: &str) -> String {
    example
        .lines()
        .map(|line| {
            let line = line.trim_end();
            let text = line
                .strip_prefix('#')
                .map(|rest| rest.strip_prefix(' ').unwrap_or(rest));
            match text {
                Some(text) if is_table(text) || is_key(text) => text,
                _ => line,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `[a.b."c"]` or `[[a.b]]`.
fn is_table(text: &str) -> bool {
    text.starts_with('[')
        && text.ends_with(']')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "[]._-\"".contains(c))
}

/// `key = value` or `"key" = value`, the key at the start of the line.
fn is_key(text: &str) -> bool {
    let Some((key, value)) = text.split_once('=') else {
        return false;
    };
    let key = key.trim_end();
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let quoted = key.len() > 2 && key.starts_with('"') && key.ends_with('"');
    (bare || quoted) && !value.trim().is_empty()
}

/// A default config with one entry in every table the operator keys, so that their fields count.
fn sample() -> Config {
    let mut config = Config::default();
    config.llm.models.insert(
        "m".into(),
        ModelSpec {
            context_tokens: 4096,
            max_tokens: 600,
            reasoning: Some(false),
        },
    );
    config.budget.prices.insert(
        "m".into(),
        PriceConfig {
            input_per_million: 0.1,
            cached_input_per_million: Some(0.05),
            cache_write_per_million: Some(0.125),
            output_per_million: 0.2,
        },
    );
    config.policy.guilds.insert(
        "1".into(),
        BTreeMap::from([(Risk::Network, ClassAction::Deny)]),
    );
    config
        .discord
        .guild_models
        .insert("1".into(), vec!["m".into()]);
    config.approvals.quorum.insert(Risk::External, 2);
    config
        .approvals
        .expiry
        .insert(Risk::Write, ExpiryRule::DEFAULT);
    config.approvals.guilds.insert(
        "1".into(),
        GuildApprovals {
            quorum: BTreeMap::from([(Risk::External, 2)]),
            expiry: BTreeMap::from([(Risk::Write, ExpiryRule::DEFAULT)]),
            approvers_role: Some(1),
        },
    );
    config.api.tokens.push(ApiToken {
        name: "ci".into(),
        token_env: "AUTOTHREAD_API_TOKEN_CI".into(),
        discord_user: Some(1),
        token: None,
    });
    config.images.usd_per_image.insert("1024x1024".into(), 0.04);
    config.mcp.servers.push(
        toml::from_str("name = \"time\"\ncommand = \"x\"\nenv = { TZ = \"UTC\" }\n").unwrap(),
    );
    config
}

#[test]
fn the_example_shows_every_key_of_the_config() {
    let mut wanted = BTreeSet::new();
    json_paths(&serde_json::to_value(sample()).unwrap(), "", &mut wanted);
    let shown: toml::Value = toml::from_str(&uncommented(EXAMPLE))
        .unwrap_or_else(|e| panic!("bot.toml.example, uncommented, is not TOML: {e}"));
    let mut present = BTreeSet::new();
    toml_paths(&shown, "", &mut present);
    let missing: Vec<&String> = wanted.difference(&present).collect();
    assert!(
        missing.is_empty(),
        "bot.toml.example does not show these keys of the config: {missing:#?}"
    );
    // The walk itself sees the tables the operator keys, and a key the example lacks.
    assert!(wanted.contains("mcp.servers.env.*") && wanted.contains("llm.models.*.max_tokens"));
    let mut without_sandbox = present.clone();
    without_sandbox.retain(|path| !path.starts_with("sandbox"));
    assert!(!wanted.is_subset(&without_sandbox));
}

#[test]
fn the_example_uncommented_is_read_by_the_config_and_its_live_values_are_the_defaults() {
    let uncommented = uncommented(EXAMPLE);
    // Every line shown commented out is a key the config reads (unknown keys are refused).
    let everything = Config::from_toml(&uncommented, Path::new("bot.toml.example"));
    assert!(everything.is_ok(), "{everything:?}");
    let everything = everything.unwrap();
    assert!(everything.mcp.servers.len() == 1 && everything.llm.models.len() == 1);
    // As it is, it is the default config: copying it changes nothing by surprise.
    let as_is = Config::from_toml(EXAMPLE, Path::new("bot.toml.example")).unwrap();
    assert_eq!(
        serde_json::to_value(&as_is).unwrap(),
        serde_json::to_value(Config::default()).unwrap()
    );
}

#[test]
fn a_serialized_config_shows_no_secret() {
    let mut config = sample();
    config.apply_env(&|name: &str| {
        ["OPENAI_API_KEY", "DISCORD_TOKEN", "BRAVE_SEARCH_API_KEY"]
            .contains(&name)
            .then(|| "sk-very-secret".to_string())
    });
    config.mcp.servers[0]
        .env
        .insert("GITHUB_TOKEN".into(), "ghp_secret".into());
    let shown = serde_json::to_string(&config).unwrap();
    assert!(config.llm.api_key.is_some());
    assert!(
        !shown.contains("sk-very-secret") && !shown.contains("ghp_secret"),
        "{shown}"
    );
    assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
}
