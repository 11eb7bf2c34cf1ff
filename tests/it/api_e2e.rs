//! End to end: the real `autothread serve` binary, driven over HTTP with a plain client as any
//! Agent Protocol client would, against the scripted fake model: tasks, steps mapped onto the
//! approval loop (approve, feedback, a question answered), artifacts down and up, paging, and
//! access (401, another caller's task a 404, 422 for bad input), under the same policy.

use crate::support;

use serde_json::{json, Value};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::{Running, TestEnv, WAIT};

const CI_TOKEN: &str = "ci-token-for-the-tests-0001";
const DASH_TOKEN: &str = "dash-token-for-the-tests-0002";

/// A test's `serve`: its process, its base URL and a client.
struct Served {
    // Held so that the server lives (and is killed) with the test's handle.
    _process: Running,
    base: String,
    http: reqwest::Client,
}

/// `autothread serve` on a free port, with two callers (`ci` and `dash`) and `extra` config.
async fn serve(env: &TestEnv, extra: &str) -> Served {
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!(
        "\n{extra}\n[api]\nstep_wait_secs = 20\n\n[[api.tokens]]\nname = \"ci\"\ntoken_env = \"TEST_API_TOKEN_CI\"\n\n[[api.tokens]]\nname = \"dash\"\ntoken_env = \"TEST_API_TOKEN_DASH\"\n"
    ));
    std::fs::write(&path, config).unwrap();
    let mut command = env.command(&["serve", "--listen", "127.0.0.1:0"]);
    command
        .env("TEST_API_TOKEN_CI", CI_TOKEN)
        .env("TEST_API_TOKEN_DASH", DASH_TOKEN);
    let running = Running::new_public(command.spawn().expect("serve starts"));
    running.wait_for("Agent Protocol: http://", 1, WAIT).await;
    let base = running
        .stdout()
        .lines()
        .find_map(|line| line.strip_prefix("Agent Protocol: "))
        .and_then(|url| url.strip_suffix("/ap/v1/agent/tasks"))
        .expect("serve prints its address")
        .to_string();
    Served {
        _process: running,
        base,
        http: reqwest::Client::new(),
    }
}

impl Served {
    fn url(&self, path: &str) -> String {
        format!("{}/ap/v1/agent{path}", self.base)
    }

    /// A request as `token` (none: no Authorization header): the status and the JSON answer.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, self.url(path));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body);
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn get(&self, path: &str) -> Value {
        let (status, value) = self
            .call(reqwest::Method::GET, path, Some(CI_TOKEN), None)
            .await;
        assert_eq!(status, 200, "GET {path}: {value}");
        value
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let (status, value) = self
            .call(
                reqwest::Method::POST,
                path,
                Some(CI_TOKEN),
                Some(body.to_string()),
            )
            .await;
        assert_eq!(status, 200, "POST {path}: {value}");
        value
    }

    async fn create_task(&self, task: &str) -> String {
        let created = self
            .post(
                "/tasks",
                json!({"input": task, "additional_input": {"name": "Scribe", "role": "writes files"}}),
            )
            .await;
        assert_eq!(created["input"], task);
        created["task_id"].as_str().unwrap().to_string()
    }

    async fn step(&self, task: &str, input: Option<&str>) -> Value {
        let body = match input {
            Some(input) => json!({"input": input}),
            None => json!({}),
        };
        self.post(&format!("/tasks/{task}/steps"), body).await
    }

    /// Uploads `contents` as `name` into `folder`, as multipart: the status and the answer.
    async fn upload(
        &self,
        task: &str,
        name: &str,
        folder: Option<&str>,
        contents: &[u8],
    ) -> (u16, Value) {
        let boundary = "autothread-test-boundary";
        let mut body = Vec::new();
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes());
        body.extend_from_slice(contents);
        body.extend_from_slice(b"\r\n");
        if let Some(folder) = folder {
            body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"relative_path\"\r\n\r\n{folder}\r\n").as_bytes());
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        let response = self
            .http
            .post(self.url(&format!("/tasks/{task}/artifacts")))
            .header("Authorization", format!("Bearer {CI_TOKEN}"))
            .header(
                "Content-Type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn download(&self, task: &str, artifact: &str) -> Vec<u8> {
        let response = self
            .http
            .get(self.url(&format!("/tasks/{task}/artifacts/{artifact}")))
            .header("Authorization", format!("Bearer {CI_TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "application/octet-stream"
        );
        response.bytes().await.unwrap().to_vec()
    }
}

fn push(fake: &FakeOpenAi, command: &str, args: Value) {
    fake.push_content(agent_reply(command, args));
}

/// The artifact of `path` in a task's list.
fn artifact_of<'a>(listed: &'a Value, path: &str) -> &'a Value {
    let (folder, name) = path.rsplit_once('/').unwrap_or(("", path));
    listed["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["file_name"] == name && a["relative_path"] == folder)
        .unwrap_or_else(|| panic!("no artifact {path} in {listed}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_steps_through_feedback_a_write_an_upload_read_a_question_and_finish() {
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&fake.base_url, "");
    let api = serve(&env, "").await;
    let poem = "Ferris scuttles on\nborrowed memory — ünïcode\n\u{1F980} no data races\n";
    push(
        &fake,
        "write_file",
        json!({"filename": "haiku.txt", "contents": "draft"}),
    );
    push(
        &fake,
        "write_file",
        json!({"filename": "haiku.txt", "contents": poem}),
    );
    push(&fake, "read_file", json!({"filename": "inbox/notes.txt"}));
    push(&fake, "ask_user", json!({"question": "Which colour?"}));
    push(&fake, "finish", json!({"reason": "written and read"}));

    let task = api.create_task("Write a haiku into haiku.txt").await;
    // The first step shows the first proposal and approves nothing.
    let first = api.step(&task, None).await;
    assert_eq!(first["step_id"], "1");
    assert_eq!(first["task_id"], task.as_str());
    assert_eq!(first["status"], "completed");
    assert_eq!(first["name"], "write_file");
    assert_eq!(first["is_last"], false);
    assert!(first["output"].as_str().unwrap().contains("write_file"));
    assert_eq!(
        first["additional_output"]["command"]["args"]["contents"],
        "draft"
    );
    assert_eq!(first["additional_output"]["class"], "write");

    // Text is feedback: nothing is written, and the agent proposes again.
    let second = api.step(&task, Some("A real haiku, please.")).await;
    assert_eq!(second["step_id"], "2");
    let last = &second["additional_output"]["last_command"];
    assert_eq!(last["status"], "interrupted_by_human");
    assert_eq!(
        api.get(&format!("/tasks/{task}/artifacts")).await["artifacts"],
        json!([])
    );

    // No input approves the write.
    let third = api.step(&task, None).await;
    assert_eq!(third["step_id"], "3");
    assert_eq!(third["name"], "read_file");
    assert_eq!(
        third["additional_output"]["last_command"]["command"]["name"],
        "write_file"
    );
    assert_eq!(
        third["additional_output"]["last_command"]["status"],
        "success"
    );
    let listed = api.get(&format!("/tasks/{task}/artifacts")).await;
    let haiku = artifact_of(&listed, "haiku.txt");
    assert_eq!(haiku["agent_created"], true);
    let id = haiku["artifact_id"].as_str().unwrap();
    assert_eq!(api.download(&task, id).await, poem.as_bytes());

    // A file uploaded now is what the approved read_file reads.
    let notes = "line one\r\nline two, with ü and \u{1F980}\n".as_bytes();
    let (status, uploaded) = api.upload(&task, "notes.txt", Some("inbox"), notes).await;
    assert_eq!(status, 200, "{uploaded}");
    assert_eq!(uploaded["agent_created"], false);
    assert_eq!(uploaded["relative_path"], "inbox");
    let up_id = uploaded["artifact_id"].as_str().unwrap();
    assert_eq!(api.download(&task, up_id).await, notes);
    // The listing tells the person's file from the agent's.
    let listed = api.get(&format!("/tasks/{task}/artifacts")).await;
    assert_eq!(
        artifact_of(&listed, "inbox/notes.txt")["agent_created"],
        false
    );
    assert_eq!(artifact_of(&listed, "haiku.txt")["agent_created"], true);
    let fourth = api.step(&task, Some("y")).await;
    assert_eq!(fourth["step_id"], "4");
    assert_eq!(fourth["name"], "ask_user");
    let read = &fourth["additional_output"]["last_command"];
    assert!(
        read["result"].as_str().unwrap().contains("line two"),
        "{read}"
    );

    // Approving ask_user shows its question; the next step's input is the answer.
    let asked = api.step(&task, None).await;
    assert_eq!(asked["step_id"], "4");
    assert_eq!(asked["additional_output"]["question"], "Which colour?");
    let answered = api.step(&task, Some("Blue, like the sea")).await;
    assert_eq!(answered["step_id"], "5");
    assert_eq!(answered["name"], "finish");
    let answer = &answered["additional_output"]["last_command"];
    assert!(
        answer["result"]
            .as_str()
            .unwrap()
            .contains("Blue, like the sea"),
        "{answer}"
    );

    let done = api.step(&task, None).await;
    assert_eq!(done["step_id"], "5");
    assert_eq!(done["is_last"], true);
    assert_eq!(done["status"], "completed");

    // A finished agent rests, and still takes a file.
    let (status, late) = api.upload(&task, "late.txt", None, b"after the end").await;
    assert_eq!(status, 200, "{late}");
    let listed = api.get(&format!("/tasks/{task}/artifacts")).await;
    assert_eq!(artifact_of(&listed, "late.txt")["agent_created"], false);

    // Every step is listed, paged.
    let page = api
        .get(&format!("/tasks/{task}/steps?current_page=2&page_size=2"))
        .await;
    assert_eq!(
        page["pagination"],
        json!({"total_items": 5, "total_pages": 3, "current_page": 2, "page_size": 2})
    );
    let ids: Vec<&str> = page["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["3", "4"]);
    let one = api.get(&format!("/tasks/{task}/steps/5")).await;
    assert_eq!(one["is_last"], true);
    let tasks = api.get("/tasks").await;
    assert_eq!(tasks["pagination"]["total_items"], 1);
    assert_eq!(tasks["tasks"][0]["task_id"], task.as_str());

    // The trail names the caller by its token's name, through the running server.
    let (ok, trail, err) = env.run(&["audit", &task]).await;
    assert!(ok, "{trail}{err}");
    assert!(trail.contains("API token ci"), "{trail}");
    assert!(trail.contains("uploaded `inbox/notes.txt`"), "{trail}");
    fake.assert_clean();
    drop(api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_alone_cannot_bind_a_task_to_discord_and_creates_nothing() {
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&fake.base_url, "");
    let api = serve(&env, "").await;
    let (status, answer) = api
        .call(
            reqwest::Method::POST,
            "/tasks",
            Some(CI_TOKEN),
            Some(
                json!({"input": "x", "additional_input": {"discord_channel": "3000000000000000001"}})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("runs without Discord"),
        "{answer}"
    );
    let tasks = api.get("/tasks").await;
    assert_eq!(tasks["pagination"]["total_items"], 0, "{tasks}");
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_known_token_gets_in_and_another_callers_task_does_not_exist() {
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&fake.base_url, "");
    let api = serve(&env, "").await;
    push(
        &fake,
        "write_file",
        json!({"filename": "a.txt", "contents": "a"}),
    );
    let task = api.create_task("Write a.txt").await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;

    for token in [None, Some("not-a-token-at-all-00000"), Some("")] {
        let (status, answer) = api.call(get.clone(), "/tasks", token, None).await;
        assert_eq!(status, 401, "{token:?}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains("bearer token"));
    }
    let (status, _) = api
        .call(
            post.clone(),
            "/tasks",
            None,
            Some(json!({"input": "x"}).to_string()),
        )
        .await;
    assert_eq!(status, 401);

    // The other caller sees no such task, and lists none.
    for path in [
        format!("/tasks/{task}"),
        format!("/tasks/{task}/steps"),
        format!("/tasks/{task}/artifacts"),
    ] {
        let (status, answer) = api.call(get.clone(), &path, Some(DASH_TOKEN), None).await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains("No task"));
    }
    let (status, _) = api
        .call(
            post.clone(),
            &format!("/tasks/{task}/steps"),
            Some(DASH_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (_, theirs) = api
        .call(get.clone(), "/tasks", Some(DASH_TOKEN), None)
        .await;
    assert_eq!(theirs["pagination"]["total_items"], 0);

    // Bad bodies and pages are 422s that say why; unknown things are 404s.
    let bad = [
        (
            "/tasks".to_string(),
            "{not json".to_string(),
            "not the JSON",
        ),
        (
            "/tasks".to_string(),
            json!({"input": "  "}).to_string(),
            "input",
        ),
        (
            "/tasks".to_string(),
            json!({"input": "x", "additional_input": {"budget_usd": "lots"}}).to_string(),
            "budget_usd",
        ),
        (
            "/tasks".to_string(),
            json!({"input": "x", "additional_input": {"model": "gpt-unheard-of"}}).to_string(),
            "not one of the models",
        ),
        (
            format!("/tasks/{task}/steps"),
            json!({"input": 5}).to_string(),
            "not the JSON",
        ),
    ];
    for (path, body, why) in bad {
        let (status, answer) = api
            .call(post.clone(), &path, Some(CI_TOKEN), Some(body.clone()))
            .await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(why),
            "{body}: {answer}"
        );
    }
    let (status, answer) = api
        .call(get.clone(), "/tasks?page_size=0", Some(CI_TOKEN), None)
        .await;
    assert_eq!(status, 422, "{answer}");
    let (status, _) = api
        .call(get.clone(), "/tasks/nope", Some(CI_TOKEN), None)
        .await;
    assert_eq!(status, 404);
    let (status, _) = api
        .call(
            get.clone(),
            &format!("/tasks/{task}/steps/99"),
            Some(CI_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = api
        .call(
            get.clone(),
            &format!("/tasks/{task}/artifacts/zz"),
            Some(CI_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 404);

    // An upload outside the workspace, with a direction-changing name or over the cap is
    // refused saying why, and nothing is written.
    for (name, folder, size, why) in [
        ("escape.txt", Some("../.."), 3, "leaves the workspace"),
        ("a.txt", Some("docs\u{202e}txt"), 3, "U+202E"),
        ("big.bin", None, 1024 * 1024 + 1, "limited to"),
    ] {
        let (status, answer) = api.upload(&task, name, folder, &vec![b'x'; size]).await;
        assert_eq!(status, 422, "{name}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(why),
            "{name}: {answer}"
        );
    }
    assert_eq!(
        api.get(&format!("/tasks/{task}/artifacts")).await["artifacts"],
        json!([])
    );
    drop(api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_policy_denies_is_refused_over_the_api_and_nothing_is_written() {
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&fake.base_url, "");
    let api = serve(&env, "[policy]\nwrite = \"deny\"\n").await;
    // The model names write_file although it is not offered; then it finishes.
    push(
        &fake,
        "write_file",
        json!({"filename": "a.txt", "contents": "a"}),
    );
    push(&fake, "finish", json!({"reason": "could not write"}));
    let task = api.create_task("Write a.txt").await;
    let shown = api.step(&task, None).await;
    assert_eq!(shown["name"], "finish", "{shown}");
    let refused = &shown["additional_output"]["last_command"];
    assert_eq!(refused["command"]["name"], "write_file");
    assert_eq!(refused["status"], "error", "{refused}");
    let done = api.step(&task, None).await;
    assert_eq!(done["is_last"], true);
    assert_eq!(
        api.get(&format!("/tasks/{task}/artifacts")).await["artifacts"],
        json!([])
    );
    fake.assert_clean();
    drop(api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_five_steps_are_paged_ten_at_a_time() {
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&fake.base_url, "");
    let api = serve(&env, "").await;
    for n in 1..=25 {
        push(
            &fake,
            "write_file",
            json!({"filename": format!("f{n}.txt"), "contents": "x"}),
        );
    }
    let task = api.create_task("Write files").await;
    api.step(&task, None).await;
    for n in 1..25 {
        let step = api.step(&task, Some(&format!("try again, {n}"))).await;
        assert_eq!(step["step_id"], (n + 1).to_string());
    }
    let mut seen = Vec::new();
    for page in 1..=3 {
        let listed = api
            .get(&format!(
                "/tasks/{task}/steps?current_page={page}&page_size=10"
            ))
            .await;
        assert_eq!(listed["pagination"]["total_items"], 25);
        assert_eq!(listed["pagination"]["total_pages"], 3);
        for step in listed["steps"].as_array().unwrap() {
            seen.push(step["step_id"].as_str().unwrap().parse::<u32>().unwrap());
        }
    }
    assert_eq!(seen, (1..=25).collect::<Vec<_>>());
    fake.assert_clean();
    drop(api);
}

/// The Python interpreter with agent-protocol-client 1.1.0 that `scripts/agent-protocol-client.sh`
/// installs (`.ci/run` exports it).
fn agent_protocol_python() -> Result<String, String> {
    std::env::var("AGENT_PROTOCOL_PYTHON").map_err(|_| {
        "AGENT_PROTOCOL_PYTHON is not set: run scripts/agent-protocol-client.sh and export the line it prints".to_string()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_protocol_client_drives_a_whole_task_and_pages_its_steps() {
    let Some(python) = support::needs::needs(agent_protocol_python()) else {
        return;
    };
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&fake.base_url, "");
    let api = serve(&env, "").await;
    let poem =
        "Ferris scuttles on\nborrowed memory \u{2014} \u{fc}n\u{ef}code\n\u{1F980} no data races\n";
    push(
        &fake,
        "write_file",
        json!({"filename": "haiku.txt", "contents": poem}),
    );
    push(&fake, "read_file", json!({"filename": "inbox/notes.txt"}));
    push(&fake, "ask_user", json!({"question": "Which colour?"}));
    push(
        &fake,
        "write_file",
        json!({"filename": "draft.txt", "contents": "more"}),
    );
    push(&fake, "finish", json!({"reason": "written and read"}));
    for n in 1..=25 {
        push(
            &fake,
            "write_file",
            json!({"filename": format!("f{n}.txt"), "contents": "x"}),
        );
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agent_protocol_e2e.py");
    let ran = tokio::process::Command::new(&python)
        .args([script, &api.base, CI_TOKEN, DASH_TOKEN])
        .kill_on_drop(true)
        .output();
    let ran = tokio::time::timeout(WAIT * 3, ran)
        .await
        .expect("the client finishes")
        .expect("the client's Python runs");
    let out = String::from_utf8_lossy(&ran.stdout);
    let err = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "the client failed:\n{out}\n{err}");
    assert!(
        out.contains("whole task: ok") && out.contains("paging: ok"),
        "{out}"
    );
    fake.assert_clean();
    drop(api);
}
