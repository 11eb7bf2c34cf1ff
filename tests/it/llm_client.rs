//! The OpenAI-compatible client against the fake server: retries on 429 (plain-text body) and
//! failed connections; a 5xx or a slow reply returned at once as possibly billed; immediate,
//! clear errors on refusals; structured-output modes; usage.

use crate::support;

use std::time::{Duration, Instant};

use autothread::config::{LlmConfig, ResponseFormatMode, Secret};
use autothread::core::message::Message;
use autothread::llm::openai::OpenAiChat;
use autothread::llm::{Billing, ChatModel, ChatRequest, LlmError};
use serde_json::json;
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind, Reply};

fn config(base_url: &str, format: ResponseFormatMode) -> LlmConfig {
    LlmConfig {
        base_url: base_url.to_string(),
        model: "test-model".into(),
        response_format: format,
        timeout_secs: 1,
        max_attempts: 3,
        retry_initial_ms: 10,
        retry_max_ms: 40,
        ..LlmConfig::default()
    }
}

fn request(schema: bool) -> ChatRequest {
    ChatRequest {
        purpose: "think",
        model: "test-model".into(),
        messages: vec![
            Message::system("You are X_GPT, a tester\n## Constraints\n## Resources\n## Commands\n## Best practices\n## Your Task"),
            Message::user("\"\"\"task\"\"\""),
            Message::system("The current time and date is now"),
            Message::user("Determine exactly one command"),
        ],
        max_tokens: 300,
        json_schema: schema.then(|| json!({"type": "object", "properties": {"command": {"type": "object"}}})),
        cache_key: None,
    }
}

async fn fake() -> FakeOpenAi {
    FakeOpenAi::start(Expect {
        max_tokens: Some(300),
        response_format: Some("json_schema"),
        context_tokens: Some(4096),
    })
    .await
}

#[tokio::test]
async fn a_plain_text_429_is_retried_and_a_5xx_is_returned_at_once_as_maybe_billed() {
    let fake = fake().await;
    fake.push(Reply::Status(429, "text/plain", "slow down".into()));
    fake.push(Reply::Content(agent_reply(
        "finish",
        json!({"reason": "ok"}),
    )));
    let chat = OpenAiChat::new(&config(&fake.base_url, ResponseFormatMode::JsonSchema)).unwrap();
    let reply = chat.complete(request(true)).await.unwrap();
    assert!(reply.content.contains("\"finish\""));
    assert_eq!(reply.usage.unwrap().prompt_tokens, 100);
    assert_eq!(fake.requests(Kind::Cycle).len(), 2);

    // A server error may come after the model generated: the transport does not send it again
    // (the caller charges it and retries under a new reservation).
    fake.push(Reply::Status(500, "text/html", "<html>oops</html>".into()));
    let err = chat.complete(request(true)).await.unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Unavailable {
                attempts: 1,
                billing: Billing::MayBeBilled,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.billing(), Billing::MayBeBilled);
    assert_eq!(fake.requests(Kind::Cycle).len(), 3);
    fake.assert_clean();
}

#[tokio::test]
async fn persistent_failures_end_in_a_clear_error_after_the_bounded_attempts() {
    let fake = fake().await;
    for _ in 0..3 {
        fake.push(Reply::Status(
            429,
            "text/plain",
            "rate limited, plain text".into(),
        ));
    }
    let chat = OpenAiChat::new(&config(&fake.base_url, ResponseFormatMode::JsonSchema)).unwrap();
    let err = chat.complete(request(true)).await.unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Unavailable {
                attempts: 3,
                billing: Billing::NotBilled,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("429") && text.contains("3 attempts"),
        "{text}"
    );
    assert_eq!(fake.requests(Kind::Cycle).len(), 3);
}

#[tokio::test]
async fn a_reply_slower_than_the_timeout_is_cut_short_and_not_sent_again() {
    let fake = fake().await;
    fake.push(Reply::Delay(
        Duration::from_millis(2500),
        Box::new(Reply::Content("late".into())),
    ));
    let chat = OpenAiChat::new(&config(&fake.base_url, ResponseFormatMode::JsonSchema)).unwrap();
    let started = Instant::now();
    let err = chat.complete(request(true)).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(2400),
        "the timeout cut the slow reply short"
    );
    // The request was sent: the model may be generating, and a provider bills that.
    assert_eq!(err.billing(), Billing::MayBeBilled, "{err:?}");
    assert_eq!(fake.requests(Kind::Cycle).len(), 1);
    assert_eq!(fake.billed_generations(), 1);

    // A connection that is never made cannot have been billed.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    };
    let chat = OpenAiChat::new(&config(&closed, ResponseFormatMode::JsonSchema)).unwrap();
    let err = chat.complete(request(true)).await.unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Unavailable {
                attempts: 3,
                billing: Billing::NotBilled,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn refusals_are_not_retried_and_say_why() {
    let fake = fake().await;
    fake.push(Reply::Status(
        401,
        "application/json",
        json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}).to_string(),
    ));
    let mut cfg = config(&fake.base_url, ResponseFormatMode::JsonSchema);
    cfg.api_key = Some(Secret::new("sk-test-secret-value"));
    let chat = OpenAiChat::new(&cfg).unwrap();
    let err = chat.complete(request(true)).await.unwrap_err();
    assert_eq!(
        err,
        LlmError::Rejected {
            status: 401,
            message: "Incorrect API key provided".into()
        }
    );
    assert!(!err.to_string().contains("sk-test-secret-value"));
    assert!(!format!("{chat:?}").contains("sk-test"));
    assert_eq!(fake.requests(Kind::Cycle).len(), 1);
}

#[tokio::test]
async fn a_body_that_is_not_a_completion_is_a_clear_error() {
    let fake = fake().await;
    fake.push(Reply::RawBody("{\"choices\": []}".into()));
    fake.push(Reply::RawBody("<html>proxy error</html>".into()));
    let chat = OpenAiChat::new(&config(&fake.base_url, ResponseFormatMode::JsonSchema)).unwrap();
    let err = chat.complete(request(true)).await.unwrap_err();
    assert!(
        matches!(err, LlmError::BadResponse(ref t) if t.contains("choices[0]")),
        "{err:?}"
    );
    let err = chat.complete(request(true)).await.unwrap_err();
    assert!(
        matches!(err, LlmError::BadResponse(ref t) if t.contains("proxy error")),
        "{err:?}"
    );
}

#[tokio::test]
async fn response_format_follows_the_endpoint_mode() {
    for (mode, expected) in [
        (ResponseFormatMode::JsonSchema, Some("json_schema")),
        (ResponseFormatMode::JsonObject, Some("json_object")),
        (ResponseFormatMode::None, None),
    ] {
        let fake = FakeOpenAi::start(Expect {
            max_tokens: Some(300),
            response_format: expected,
            context_tokens: None,
        })
        .await;
        fake.push(Reply::Content("{}".into()));
        let chat = OpenAiChat::new(&config(&fake.base_url, mode)).unwrap();
        chat.complete(request(true)).await.unwrap();
        fake.assert_clean();
        let body = &fake.requests(Kind::Cycle)[0];
        assert_eq!(body["model"], "test-model");
        assert_eq!(body["stream"], false);
    }
}

/// A server that takes `json_object` but refuses `json_schema` (llama-cpp-python's, with an HTTP
/// 500): the refusal is not retried or billed, the request goes again at once with the schema as
/// `json_object`, and every later request goes that way from the start, streamed or not.
#[tokio::test]
async fn a_server_that_refuses_the_json_schema_format_gets_the_schema_as_json_object() {
    let fake = FakeOpenAi::start(Expect {
        max_tokens: Some(300),
        response_format: Some("json_object"),
        context_tokens: None,
    })
    .await;
    fake.set_refuses_json_schema();
    for _ in 0..3 {
        fake.push(Reply::Content(agent_reply(
            "finish",
            json!({"reason": "ok"}),
        )));
    }
    let chat = OpenAiChat::new(&config(&fake.base_url, ResponseFormatMode::JsonSchema)).unwrap();
    chat.complete(request(true)).await.unwrap();
    assert_eq!(fake.schema_refusals(), 1);
    chat.complete(request(true)).await.unwrap();
    chat.complete_streaming(request(true), &|_| {})
        .await
        .unwrap();
    assert_eq!(
        fake.schema_refusals(),
        1,
        "only the first request was refused"
    );
    let answered = fake.requests(Kind::Cycle);
    assert_eq!(answered.len(), 3);
    for body in &answered {
        assert_eq!(body["response_format"]["type"], "json_object");
        assert!(
            body.pointer("/response_format/schema/properties/command")
                .is_some(),
            "the reply schema goes with json_object: {}",
            body["response_format"]
        );
    }
    assert_eq!(
        fake.billed_generations(),
        3,
        "the refusal generated nothing"
    );
    fake.assert_clean();

    // A client configured for json_object never sends the schema type at all.
    let plain = FakeOpenAi::start(Expect {
        max_tokens: Some(300),
        response_format: Some("json_object"),
        context_tokens: None,
    })
    .await;
    plain.set_refuses_json_schema();
    plain.push(Reply::Content(agent_reply(
        "finish",
        json!({"reason": "ok"}),
    )));
    let chat = OpenAiChat::new(&config(&plain.base_url, ResponseFormatMode::JsonObject)).unwrap();
    chat.complete(request(true)).await.unwrap();
    assert_eq!(plain.schema_refusals(), 0);
    plain.assert_clean();
}

/// A server whose concurrent requests share one context (llama.cpp with a unified KV cache) and
/// overflow it: the client then sends one request at a time, and no request is lost.
#[tokio::test]
async fn a_shared_context_that_overflows_makes_requests_take_turns() {
    let fake = fake().await;
    fake.set_shared_context();
    let finish = || {
        Reply::Delay(
            Duration::from_millis(300),
            Box::new(Reply::Content(agent_reply(
                "finish",
                json!({"reason": "ok"}),
            ))),
        )
    };
    for _ in 0..4 {
        fake.push(finish());
    }
    let chat = std::sync::Arc::new(
        OpenAiChat::new(&config(&fake.base_url, ResponseFormatMode::JsonSchema)).unwrap(),
    );
    let pair = || {
        let (a, b) = (chat.clone(), chat.clone());
        async move {
            let (a, b) = tokio::join!(a.complete(request(true)), b.complete(request(true)));
            a.unwrap();
            b.unwrap();
        }
    };
    pair().await;
    let overflowed = fake.overflows();
    assert!(overflowed >= 1, "the two requests never overlapped");
    // From now on they take turns: the next pair overlaps nothing.
    pair().await;
    assert_eq!(fake.overflows(), overflowed);
    assert_eq!(fake.requests(Kind::Cycle).len(), 4);
    fake.assert_clean();
}

#[tokio::test]
async fn a_streamed_reply_arrives_piece_by_piece_with_its_usage_and_a_broken_stream_is_an_error() {
    let fake = fake().await;
    let content = agent_reply("finish", json!({"reason": "streamed"}));
    fake.push(Reply::Content(content.clone()));
    let chat = OpenAiChat::new(&config(&fake.base_url, ResponseFormatMode::JsonSchema)).unwrap();
    let pieces = std::sync::Mutex::new(Vec::<String>::new());
    let reply = chat
        .complete_streaming(request(true), &|piece| {
            pieces.lock().unwrap().push(piece.to_string())
        })
        .await
        .unwrap();
    let pieces = pieces.into_inner().unwrap();
    assert!(pieces.len() > 10, "streamed in pieces: {}", pieces.len());
    assert_eq!(pieces.concat(), content);
    assert_eq!(reply.content, content);
    let usage = reply.usage.expect("the usage from the last event");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (100, 20));
    // The request asked to stream, with the usage.
    let body = fake.requests(Kind::Cycle).pop().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);

    // A body that is not an event stream (a proxy's page) ends without a reply: an error.
    fake.push(Reply::RawBody("<html>proxy error</html>".into()));
    let error = chat
        .complete_streaming(request(true), &|_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LlmError::BadResponse(detail) if detail.contains("ended before the reply did")),
        "{error}"
    );
    // The endpoint answered: whatever it generated may have been billed.
    assert_eq!(error.billing(), Billing::MayBeBilled);
    fake.assert_clean();
}
