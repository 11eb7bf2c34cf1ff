//! Opens a store written by the previous schema (from a fixture) and checks that the migrations
//! runner brings it to the current schema without losing anything.

use crate::support;

use autothread::core::state::{PauseReason, Phase};
use autothread::store::migrate::SCHEMA_VERSION;
use autothread::store::Store;
use serde_json::Value;

/// Writes the fixture's trees into a real sled store, as schema-1 code would have left them.
fn write_v1_store(dir: &std::path::Path) {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/store_v1.json")).unwrap();
    let db = sled::open(dir).unwrap();
    let version = fixture["schema_version"].as_u64().unwrap() as u32;
    db.insert("schema_version", &version.to_be_bytes()).unwrap();
    for (tree_name, records) in fixture["trees"].as_object().unwrap() {
        let tree = db.open_tree(tree_name).unwrap();
        for (key, value) in records.as_object().unwrap() {
            let bytes = match value {
                Value::String(raw) => raw.as_bytes().to_vec(),
                other => serde_json::to_vec(other).unwrap(),
            };
            tree.insert(key.as_bytes(), bytes).unwrap();
        }
    }
    db.flush().unwrap();
}

/// A file whose own bytes start like a zstd frame (a `.zst` an agent downloaded), as older code
/// stored it: as it was.
const LOOKS_LIKE_A_FRAME: &[u8] = &[
    0x28, 0xb5, 0x2f, 0xfd, b'n', b'o', b't', b' ', b'o', b'n', b'e',
];

#[test]
fn a_schema_1_store_is_migrated_on_open() {
    let dir = tempfile::tempdir().unwrap();
    write_v1_store(dir.path());
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("workspace")
            .unwrap()
            .insert("0f1e2d3c4b5a/data.zst", LOOKS_LIKE_A_FRAME)
            .unwrap();
        db.flush().unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store
            .read_file("0f1e2d3c4b5a", "data.zst")
            .unwrap()
            .as_deref(),
        Some(LOOKS_LIKE_A_FRAME)
    );
    assert_eq!(
        store.file_size("0f1e2d3c4b5a", "data.zst").unwrap(),
        Some(LOOKS_LIKE_A_FRAME.len() as u64)
    );
    assert_eq!(store.schema_version().unwrap(), Some(SCHEMA_VERSION));
    let agent = store.load_agent("0f1e2d3c4b5a").unwrap().unwrap();
    assert_eq!(agent.name(), "PoetGPT");
    assert_eq!(
        agent.progress.phase,
        Phase::Paused(PauseReason::Denied {
            by: autothread::core::person::Person::name_only("alice")
        })
    );
    assert_eq!(agent.money.usage.calls, 0);
    assert_eq!(agent.progress.cycles_since_resume, 0);
    assert_eq!(agent.progress.episodes.len(), 1);
    assert_eq!(
        agent.progress.episodes[0].summary.as_deref(),
        Some("Wrote the poem to poem.txt.")
    );
    assert_eq!(
        agent.progress.pending.as_ref().unwrap().command.name,
        "read_file"
    );
    assert_eq!(
        store
            .read_file("0f1e2d3c4b5a", "poem.txt")
            .unwrap()
            .as_deref(),
        Some(&b"roses are red"[..])
    );
    drop(store);
    // Opening again is a no-op: the migration is recorded. sled's flusher thread lets go of the
    // store's lock a moment after the store is dropped (later on a busy machine), as
    // `Store::open` knows: it waits for the lock, and so does this raw open.
    let db = (0..60)
        .find_map(|_| {
            sled::open(dir.path())
                .map_err(|_| std::thread::sleep(std::time::Duration::from_millis(50)))
                .ok()
        })
        .expect("the store's lock is released");
    assert!(!db.tree_names().iter().any(|n| n.as_ref() == b"files"));
    // Schema 6: the old store's proposals tree is gone; the pending proposal lives on in the
    // agent's record (checked above).
    assert!(!db.tree_names().iter().any(|n| n.as_ref() == b"proposals"));
    drop(db);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.list_agents().unwrap().len(), 1);
}

#[tokio::test]
async fn the_migrate_command_reports_the_schema_and_list_shows_the_migrated_agent() {
    let env = support::TestEnv::new("http://127.0.0.1:9/v1", "");
    write_v1_store(&env.data_dir());
    let (ok, stdout, stderr) = env.run(&["migrate"]).await;
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout.trim(),
        format!("store schema version {SCHEMA_VERSION}")
    );
    let (ok, stdout, _) = env.run(&["list"]).await;
    assert!(ok);
    assert!(
        stdout.contains("0f1e2d3c4b5a") && stdout.contains("PoetGPT") && stdout.contains("paused"),
        "{stdout}"
    );
}

/// Writes a file record, reopens the store and reads it back; returns what sled recorded about
/// compression when the store was created.
fn round_trip(dir: &std::path::Path, contents: &[u8]) -> String {
    let store = Store::open(dir).unwrap();
    let state = support::inproc::agent("packed000001", "keep notes", "test-model", false);
    store
        .commit(&autothread::store::Commit {
            state: Some(&state),
            workspace: vec![autothread::store::WorkspaceOp::Put {
                path: "notes.txt".into(),
                contents: contents.to_vec(),
            }],
            ..Default::default()
        })
        .unwrap();
    store.flush_blocking().unwrap();
    drop(store);
    let store = Store::open(dir).unwrap();
    assert_eq!(
        store
            .read_file("packed000001", "notes.txt")
            .unwrap()
            .as_deref(),
        Some(contents)
    );
    String::from_utf8_lossy(&std::fs::read(dir.join("conf")).unwrap()).into_owned()
}

#[test]
fn new_stores_compress_record_by_record_and_stores_sled_compressed_still_open_as_they_are() {
    let text = "the ferry to Skye leaves at 7:40 from pier 3; ".repeat(200);
    // New stores leave sled's compression off: their records are compressed one by one.
    let new = tempfile::tempdir().unwrap();
    let settings = round_trip(new.path(), text.as_bytes());
    assert!(settings.contains("use_compression: false"), "{settings}");

    // A store sled compressed keeps its setting: sled refuses to open a store with the other one.
    let old = tempfile::tempdir().unwrap();
    drop(
        sled::Config::new()
            .path(old.path())
            .use_compression(true)
            .open()
            .unwrap(),
    );
    let settings = round_trip(old.path(), text.as_bytes());
    assert!(settings.contains("use_compression: true"), "{settings}");
}
