//! A program's answers over stdio, with a bound on each: a message (one line) longer than
//! `MAX_MESSAGE_BYTES` is cut off from the MCP library, and when it answered a request, a small
//! error answer to the same request takes its place, saying how big it was (`OversizedAnswer`).
//!
//! The library itself drops a line over its own limit (16 MiB) without a word to the caller, so the
//! call would wait its whole timeout and the server be restarted for having "not answered" though it
//! did. `Bounded` reads the program's output before the library does: the bytes of a line within
//! the bound pass through as they come; at the bound it ends the line for the library (which then
//! ignores the truncated text as unparsable), and swallows the rest up to the newline, counting it
//! and following the top level of the JSON to find the message's `id` (which a server may write
//! after its result, as the TypeScript SDK does) and whether it has a `method` (a request or
//! notification of the server's, which is dropped with a warning). Then it hands the library an
//! error answer with that `id`, code `OVERSIZED_CODE`, and the size in its `data`, which
//! `McpServer::call` turns into words for the agent. The server is not restarted: it is alive.
//!
//! A URL's answers come through the MCP library's HTTP client, which refuses a JSON body over its
//! 16 MiB limit (`ResponseBodyTooLarge`) and ends an event stream at an event over it; either way
//! the library then fails the call as a broken transport, or as a stream closed before its answer,
//! and the session would be restarted. `BoundedHttp` wraps that client and puts the same stand-in
//! answer in their place, with the limit passed (`OVERSIZED_OVER_KEY`): the body is not read past
//! the limit, so its whole size is not known.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The largest message taken from a program, in bytes: below the library's own 16 MiB limit,
/// so that the library never drops a line itself.
pub const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH - 1024;

/// The JSON-RPC error code of the answer that stands in for one too big (in the range JSON-RPC
/// leaves to implementations).
pub const OVERSIZED_CODE: i32 = -32_099;

/// The key of `data` in that answer holding the size in bytes.
pub const OVERSIZED_BYTES_KEY: &str = "autothread_oversized_bytes";

/// The key of `data` holding the limit an answer was over, when its whole size is not known.
pub const OVERSIZED_OVER_KEY: &str = "autothread_oversized_over";

/// The answer standing in for one too big: an error to request `id`, with `data` saying its size
/// (`OVERSIZED_BYTES_KEY`) or the limit it was over (`OVERSIZED_OVER_KEY`).
fn stand_in_error(
    id: serde_json::Value,
    message: String,
    data: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": OVERSIZED_CODE, "message": message, "data": data},
    })
}

/// The program's output, each line bounded as the module says.
pub struct Bounded<R> {
    inner: R,
    /// Bytes of the current line passed through so far.
    line_bytes: usize,
    /// Set while the rest of a line over the bound is swallowed.
    swallowing: Option<TopLevel>,
    /// What the library is handed before anything more is read: the end of a cut line, or an
    /// answer standing in for it.
    queued: Vec<u8>,
    /// Follows the JSON of the current line from its start, to know the `id` of a line cut later.
    scanner: TopLevel,
    /// The current line while it is short enough to be a tool listing read whole, and where the
    /// tools it names as tasks only are noted (`answer::note_task_only`).
    line: Vec<u8>,
    task_only: Option<super::answer::TaskOnly>,
}

/// The longest line kept whole to be read for tools that must run as tasks: a listing is small.
const MAX_LISTING_BYTES: usize = 1 << 20;

impl<R> Bounded<R> {
    pub fn new(inner: R) -> Self {
        Bounded {
            inner,
            line_bytes: 0,
            swallowing: None,
            queued: Vec::new(),
            scanner: TopLevel::default(),
            line: Vec::new(),
            task_only: None,
        }
    }

    /// As `new`, noting in `task_only` the tools the program's listings say must run as tasks.
    pub fn noting(inner: R, task_only: super::answer::TaskOnly) -> Self {
        Bounded {
            task_only: Some(task_only),
            ..Bounded::new(inner)
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Bounded<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.queued.is_empty() {
                let given = this.queued.len().min(out.remaining());
                out.put_slice(&this.queued[..given]);
                this.queued.drain(..given);
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let bytes = read.filled();
            if bytes.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let passed = this.take(bytes);
            if !passed.is_empty() {
                this.queued.extend_from_slice(&passed);
            }
        }
    }
}

impl<R> Bounded<R> {
    /// Takes `bytes` read from the program; returns what the library is to read of them (and
    /// queues the stand-in answer when a cut line ends).
    fn take(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut passed = Vec::with_capacity(bytes.len());
        for &byte in bytes {
            if let Some(swallowed) = &mut self.swallowing {
                if byte == b'\n' {
                    let line = std::mem::take(swallowed);
                    self.swallowing = None;
                    self.line_bytes = 0;
                    self.scanner = TopLevel::default();
                    passed.extend_from_slice(&line.stand_in());
                } else {
                    swallowed.feed(byte);
                }
                continue;
            }
            if byte == b'\n' {
                if let Some(task_only) = &self.task_only {
                    if self.line.len() <= MAX_LISTING_BYTES {
                        super::answer::note_task_only(&self.line, task_only);
                    }
                }
                self.line.clear();
                self.line_bytes = 0;
                self.scanner = TopLevel::default();
                passed.push(byte);
                continue;
            }
            if self.task_only.is_some() && self.line.len() <= MAX_LISTING_BYTES {
                self.line.push(byte);
            }
            if self.line_bytes >= MAX_MESSAGE_BYTES {
                // The bound: the library gets the end of a line (unparsable, ignored) and the rest
                // is counted, not kept.
                let mut scanner = std::mem::take(&mut self.scanner);
                scanner.feed(byte);
                self.swallowing = Some(scanner);
                passed.push(b'\n');
                continue;
            }
            self.line_bytes += 1;
            self.scanner.feed(byte);
            passed.push(byte);
        }
        passed
    }
}

/// The top level of one JSON object read byte by byte: its size, the raw text of its `id`, and
/// whether it has a `method`. Only what is needed is kept (a key's first 16 bytes, an id's 200).
#[derive(Default)]
struct TopLevel {
    bytes: usize,
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The key being read at depth 1, or the last one read.
    key: Vec<u8>,
    /// Whether the string being read at depth 1 is a key (not a value).
    reading_key: bool,
    /// After a key's colon at depth 1, until the value ends.
    in_value: bool,
    /// The raw text of the value of `id`, as it is read.
    id: Vec<u8>,
    reading_id: bool,
    has_method: bool,
}

const MAX_ID_BYTES: usize = 200;

impl TopLevel {
    fn feed(&mut self, byte: u8) {
        self.bytes += 1;
        if self.reading_id {
            let ends = !self.in_string && self.depth == 1 && (byte == b',' || byte == b'}');
            if !ends
                && self.id.len() < MAX_ID_BYTES
                && (self.in_string || !byte.is_ascii_whitespace())
            {
                self.id.push(byte);
            }
            if ends {
                self.reading_id = false;
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
                if self.reading_key {
                    self.reading_key = false;
                }
            } else if self.reading_key && self.key.len() < 16 {
                self.key.push(byte);
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && !self.in_value {
                    self.reading_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 && !self.in_value => {
                self.in_value = true;
                if self.key == b"id" {
                    self.reading_id = true;
                    self.id.clear();
                }
                if self.key == b"method" {
                    self.has_method = true;
                }
            }
            b',' if self.depth == 1 => self.in_value = false,
            _ => {}
        }
    }

    /// What the library reads instead of the line: an error answer to its request, or nothing
    /// when it was not an answer (or its id is unknown).
    fn stand_in(&self) -> Vec<u8> {
        let id: Option<serde_json::Value> = serde_json::from_slice(&self.id).ok();
        match id {
            Some(id) if !self.has_method && (id.is_number() || id.is_string()) => {
                let answer = stand_in_error(
                    id,
                    format!(
                        "the answer was {} bytes, more than the {MAX_MESSAGE_BYTES} this client takes",
                        self.bytes_total()
                    ),
                    serde_json::json!({OVERSIZED_BYTES_KEY: self.bytes_total()}),
                );
                let mut line = answer.to_string().into_bytes();
                line.push(b'\n');
                line
            }
            _ => {
                tracing::warn!(
                    bytes = self.bytes_total(),
                    "an MCP server sent a message over {MAX_MESSAGE_BYTES} bytes that answers no call; it is dropped"
                );
                Vec::new()
            }
        }
    }

    fn bytes_total(&self) -> usize {
        self.bytes
    }
}

/// The guarded HTTP client of a URL server, with an answer over the library's limit replaced by
/// the stand-in error, as the module says.
#[derive(Clone)]
pub struct BoundedHttp {
    pub client: reqwest::Client,
    /// Where the tools a listing says must run as tasks are noted (`answer::note_task_only`).
    pub task_only: super::answer::TaskOnly,
}

type HttpError = StreamableHttpError<reqwest::Error>;
type Headers = std::collections::HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>;
type EventStream = futures_util::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>;

use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use std::sync::Arc;

impl StreamableHttpClient for BoundedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => serde_json::to_value(&request.id).ok(),
            _ => None,
        };
        let is_listing = matches!(&message, ClientJsonRpcMessage::Request(request)
            if matches!(request.request, rmcp::model::ClientRequest::ListToolsRequest(_)));
        if is_listing {
            let listed = self
                .listing(
                    &uri,
                    &message,
                    session_id.as_deref(),
                    auth_header.as_deref(),
                    &custom_headers,
                    limits.max_json_response_size,
                )
                .await;
            if let Some(listed) = listed {
                return Ok(listed);
            }
        }
        let posted = self
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        let Some(id) = request else {
            return posted;
        };

        match posted {
            Err(StreamableHttpError::ResponseBodyTooLarge { max_size }) => {
                match over_the_limit(id, max_size) {
                    Some(answer) => Ok(StreamableHttpPostResponse::Json(answer, None)),
                    None => Err(StreamableHttpError::ResponseBodyTooLarge { max_size }),
                }
            }
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                let events = bounded_events(events, id, limits.max_sse_event_size);
                Ok(StreamableHttpPostResponse::Sse(
                    noting_events(events, self.task_only.clone()),
                    session,
                ))
            }
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<(), HttpError> {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<EventStream, HttpError> {
        self.client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<EventStream, HttpError> {
        self.client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

impl BoundedHttp {
    /// A tool listing posted by this client itself, so that its raw JSON is read before the MCP
    /// library drops what it does not know; `None` for an answer left to the library (an event
    /// stream, an error, one too big), which then posts the listing again: a listing changes
    /// nothing on the server.
    async fn listing(
        &self,
        uri: &str,
        message: &ClientJsonRpcMessage,
        session_id: Option<&str>,
        auth_header: Option<&str>,
        custom_headers: &Headers,
        limit: usize,
    ) -> Option<StreamableHttpPostResponse> {
        use reqwest::header::{ACCEPT, CONTENT_TYPE};
        let mut request = self
            .client
            .post(uri)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(message).ok()?);
        if let Some(session) = session_id {
            request = request.header("mcp-session-id", session);
        }
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            request = request.header(name.clone(), value.clone());
        }
        let mut response = request.send().await.ok()?;
        let json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|kind| kind.starts_with("application/json"));
        if !response.status().is_success() || !json {
            return None;
        }
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.ok()? {
            body.extend_from_slice(&chunk);
            if body.len() > limit.min(MAX_LISTING_BYTES) {
                return None;
            }
        }
        super::answer::note_task_only(&body, &self.task_only);
        let answer: ServerJsonRpcMessage = serde_json::from_slice(&body).ok()?;
        Some(StreamableHttpPostResponse::Json(answer, session))
    }
}

/// The stand-in answer to request `id` for an answer over `limit` bytes.
fn over_the_limit(id: serde_json::Value, limit: usize) -> Option<ServerJsonRpcMessage> {
    let answer = stand_in_error(
        id,
        format!("the answer was more than the {limit} bytes this client takes"),
        serde_json::json!({OVERSIZED_OVER_KEY: limit}),
    );
    serde_json::from_value(answer).ok()
}

/// A request's event stream, where an event over the limit ends the stream with the stand-in
/// answer to request `id` (the library's bound reports itself only as an error in the stream).
fn bounded_events(events: EventStream, id: serde_json::Value, limit: usize) -> EventStream {
    use futures_util::StreamExt;
    let mut id = Some(id);
    events
        .scan(false, move |ended, event| {
            if *ended {
                return std::future::ready(None);
            }
            let event = match event {
                Err(error) if is_over_the_limit(&error) => {
                    *ended = true;
                    let answer = id.take().and_then(|id| {
                        serde_json::to_string(&stand_in_error(
                            id,
                            format!("the answer was more than the {limit} bytes this client takes"),
                            serde_json::json!({OVERSIZED_OVER_KEY: limit}),
                        ))
                        .ok()
                    });
                    match answer {
                        Some(answer) => Ok(sse_stream::Sse::default().data(answer)),
                        None => Err(error),
                    }
                }
                other => other,
            };
            std::future::ready(Some(event))
        })
        .boxed()
}

/// The events of `events`, each one's data read for tools that must run as tasks.
fn noting_events(events: EventStream, task_only: super::answer::TaskOnly) -> EventStream {
    use futures_util::StreamExt;
    events
        .inspect(move |event| {
            if let Ok(sse_stream::Sse {
                data: Some(data), ..
            }) = event
            {
                if data.len() <= MAX_LISTING_BYTES {
                    super::answer::note_task_only(data.as_bytes(), &task_only);
                }
            }
        })
        .boxed()
}

/// Whether an event stream's error is the library's event size bound (its error type is private:
/// it is known by its words, anywhere in the chain).
fn is_over_the_limit(error: &SseError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if current.to_string().contains("exceeded the maximum size") {
            return true;
        }
        source = current.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(text: &str) -> TopLevel {
        let mut scanner = TopLevel::default();
        text.bytes().for_each(|b| scanner.feed(b));
        scanner
    }

    #[test]
    fn the_id_is_found_before_or_after_the_result_and_not_inside_it() {
        let first =
            scanned(r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"id":99,"text":"a\"}"}]}}"#);
        assert_eq!(first.id, b"7");
        assert!(!first.has_method);
        let last = scanned(
            r#"{"result":{"content":[{"type":"text","text":"x,\"id\":3"}]},"jsonrpc":"2.0","id":"req-4"}"#,
        );
        assert_eq!(last.id, br#""req-4""#);
        let request =
            scanned(r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{}}"#);
        assert!(request.has_method);
        assert!(request.stand_in().is_empty());
    }

    #[test]
    fn a_line_over_the_bound_is_cut_and_answered_with_its_size() {
        let mut bounded = Bounded::new(tokio::io::empty());
        let head = br#"{"result":{"content":[{"type":"text","text":""#;
        let mut passed = bounded.take(head);
        let filler = vec![b'x'; MAX_MESSAGE_BYTES];
        passed.extend(bounded.take(&filler));
        passed.extend(bounded.take(br#""}]},"jsonrpc":"2.0","id":12}"#));
        passed.extend(bounded.take(b"\n{\"jsonrpc\":\"2.0\",\"id\":13,\"result\":{}}\n"));
        let lines: Vec<&[u8]> = passed.split(|b| *b == b'\n').collect();
        assert_eq!(
            lines[0].len(),
            MAX_MESSAGE_BYTES,
            "the cut line is at the bound"
        );
        let answer: serde_json::Value = serde_json::from_slice(lines[1]).unwrap();
        assert_eq!(answer["id"], 12);
        assert_eq!(answer["error"]["code"], OVERSIZED_CODE);
        let total = head.len() + MAX_MESSAGE_BYTES + br#""}]},"jsonrpc":"2.0","id":12}"#.len();
        assert_eq!(answer["error"]["data"][OVERSIZED_BYTES_KEY], total);
        // The next message passes whole.
        assert_eq!(lines[2], br#"{"jsonrpc":"2.0","id":13,"result":{}}"#);
    }
}
