//! A streamable-HTTP MCP server on 127.0.0.1 for the tests of URL servers: it answers
//! `initialize`, `tools/list` (`echo`, and `big`, which answers `bytes` bytes of text as a JSON body,
//! or as an event stream when `stream` is true; `research`, which runs only as a task) and
//! `tools/call`, refuses a request without the
//! `Authorization` it expects (401), and fails the client's event-stream GET with a 400, so that
//! the MCP library writes its own ERROR line naming the whole URL. It records what each request carried.

use std::sync::{Arc, Mutex};

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// What one request to the fake carried.
#[derive(Debug, Clone)]
pub struct Seen {
    pub http_method: String,
    pub rpc_method: Option<String>,
    pub authorization: Option<String>,
    pub query: Option<String>,
}

#[derive(Clone)]
struct Shared {
    /// The `Authorization` a request must carry; `None` takes any.
    authorization: Option<String>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

pub struct FakeMcpHttp {
    /// `http://127.0.0.1:<port>`; the endpoint is `/mcp`.
    pub base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeMcpHttp {
    /// Starts the server, which expects `authorization` as the `Authorization` header.
    pub async fn start(authorization: &str) -> FakeMcpHttp {
        FakeMcpHttp::serve(Some(authorization.to_string())).await
    }

    /// Starts the server, which takes any request.
    pub async fn start_open() -> FakeMcpHttp {
        FakeMcpHttp::serve(None).await
    }

    async fn serve(authorization: Option<String>) -> FakeMcpHttp {
        let shared = Shared {
            authorization,
            seen: Arc::new(Mutex::new(Vec::new())),
        };
        let seen = shared.seen.clone();
        let app = Router::new()
            .route("/mcp", post(on_post).get(on_get).delete(on_delete))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeMcpHttp { base_url, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn record(
    shared: &Shared,
    method: &str,
    rpc: Option<String>,
    headers: &HeaderMap,
    query: Option<String>,
) {
    shared.seen.lock().unwrap().push(Seen {
        http_method: method.to_string(),
        rpc_method: rpc,
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        query,
    });
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    shared.authorization.is_none()
        || headers.get("authorization").and_then(|v| v.to_str().ok())
            == shared.authorization.as_deref()
}

async fn on_post(
    State(shared): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: String,
) -> Response {
    let message: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let method = message["method"].as_str().map(str::to_string);
    record(&shared, "POST", method.clone(), &headers, query);
    if !authorized(&shared, &headers) {
        return (StatusCode::UNAUTHORIZED, "no valid Authorization header").into_response();
    }
    let Some(id) = message.get("id").cloned() else {
        // A notification or a response: accepted, nothing to say.
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_deref() {
        Some("initialize") => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake-mcp-http", "version": "1.0.0"}
        }),
        Some("tools/list") => json!({"tools": [{
            "name": "echo",
            "description": "Says the text back",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        }, {
            "name": "big",
            "description": "Answers `bytes` bytes of text, in an event stream when `stream` is true",
            "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}, "stream": {"type": "boolean"}}, "required": ["bytes"]}
        }, {
            "name": "research",
            "description": "Runs only as a task",
            "execution": {"taskSupport": "required"},
            "inputSchema": {"type": "object", "properties": {}}
        }]}),
        Some("tools/call") if message["params"]["name"] == "big" => {
            let arguments = &message["params"]["arguments"];
            let bytes = arguments["bytes"].as_u64().unwrap_or(0) as usize;
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": "x".repeat(bytes)}]
            }});
            let mut response = if arguments["stream"].as_bool() == Some(true) {
                (
                    [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                    format!("data: {answer}\n\n"),
                )
                    .into_response()
            } else {
                Json(answer).into_response()
            };
            response
                .headers_mut()
                .insert("mcp-session-id", "fake-session-1".parse().unwrap());
            return response;
        }
        Some("tools/call") => json!({
            "content": [{"type": "text", "text": message["params"]["arguments"]["text"]}]
        }),
        _ => {
            return Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}))
                .into_response()
        }
    };
    let mut response = Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
    response
        .headers_mut()
        .insert("mcp-session-id", "fake-session-1".parse().unwrap());
    response
}

async fn on_get(
    State(shared): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    record(&shared, "GET", None, &headers, query);
    // A client error (not a 5xx, which the library reports by status alone): the HTTP client's
    // error names the whole URL, and the library logs it at ERROR.
    (StatusCode::BAD_REQUEST, "no event stream here").into_response()
}

async fn on_delete(
    State(shared): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    record(&shared, "DELETE", None, &headers, query);
    StatusCode::OK.into_response()
}
