//! `autothread export` always completes: a file with the longest name the workspace accepts is
//! exported under it, and a file that cannot be read is named (on stderr and in the export's
//! notes) while the transcript, the audit trail and every other file are still written.

use crate::support;

use serde_json::json;
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::{created_agent_id, TestEnv};

/// The first bytes of a zstd frame, which a packed stored value starts with.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_writes_everything_it_can_and_names_what_it_could_not() {
    let long = format!("{}.txt", "n".repeat(251));
    assert_eq!(long.len(), 255);
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for (name, text) in [
        (long.as_str(), "the longest name".to_string()),
        ("notes.txt", "kept".to_string()),
        // Long enough to be stored compressed, so that cutting it short damages it.
        ("broken.txt", "word ".repeat(120)),
    ] {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": name, "contents": text}),
        ));
    }
    openai.push_content(agent_reply("finish", json!({"reason": "done"})));
    let env = TestEnv::new(&openai.base_url, "");
    let (ok, out, err) = env.console_approving("Keep notes", "NoteGPT", 1).await;
    assert!(ok, "{out}{err}");
    let id = created_agent_id(&out);

    // The store is closed once the console ends: damage one file in it.
    {
        // Opened with the segment size the store was made with, which sled keeps for good.
        let db = sled::Config::new()
            .path(env.data_dir())
            .segment_size(8 << 20)
            .open()
            .unwrap();
        let tree = db.open_tree("workspace").unwrap();
        let key = format!("{id}/broken.txt");
        let stored = tree.get(&key).unwrap().expect("the file is stored");
        assert!(stored.starts_with(&ZSTD_MAGIC), "stored compressed");
        tree.insert(&key, &stored[..stored.len() / 2]).unwrap();
        db.flush().unwrap();
    }

    let dir = env.dir.path().join("export");
    let (ok, shown, err) = env
        .run(&["export", &id, "--out", dir.to_str().unwrap()])
        .await;
    assert!(!ok, "a file was left out: the exit says so\n{shown}{err}");
    assert!(
        err.contains("workspace/broken.txt could not be read"),
        "{err}"
    );
    assert!(err.contains("1 file could not be exported"), "{err}");
    assert!(
        shown.contains("transcript.md, audit.md and 2 workspace file(s)"),
        "{shown}"
    );
    // Everything else is there.
    let transcript = std::fs::read_to_string(dir.join("transcript.md")).unwrap();
    assert!(transcript.contains("notes.txt"), "{transcript}");
    assert!(dir.join("audit.md").is_file());
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace").join(&long)).unwrap(),
        "the longest name"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace/notes.txt")).unwrap(),
        "kept"
    );
    assert!(!dir.join("workspace/broken.txt").exists());
    let notes = std::fs::read_to_string(dir.join("EXPORT-NOTES.md")).unwrap();
    assert!(
        notes.contains("- Left out: workspace/broken.txt could not be read"),
        "{notes}"
    );

    // Written again into the same folder with a folder in the way of one file: that file is
    // named, and the others are written over as before.
    std::fs::remove_file(dir.join("workspace/notes.txt")).unwrap();
    std::fs::create_dir_all(dir.join("workspace/notes.txt/in-the-way")).unwrap();
    std::fs::remove_file(dir.join("transcript.md")).unwrap();
    let (ok, shown, err) = env
        .run(&["export", &id, "--out", dir.to_str().unwrap()])
        .await;
    assert!(!ok, "{shown}{err}");
    assert!(
        err.contains("workspace/notes.txt could not be written"),
        "{err}"
    );
    assert!(err.contains("2 files could not be exported"), "{err}");
    assert!(dir.join("transcript.md").is_file());
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace").join(&long)).unwrap(),
        "the longest name"
    );
    openai.assert_clean();
}
