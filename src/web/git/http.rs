//! gitoxide's HTTP seam for a clone, served by the guarded web client: each request checked
//! (scheme, credentials, the private-network guard, redirects), its answer read within the
//! clone's download allowance and deadline, and a POST sent when its answer is first read.

use std::io::{BufRead, Cursor, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gix::protocol::transport::client::blocking_io::http::{
    self as git_http, GetResponse, PostBodyDataKind, PostResponse,
};
use reqwest::header::LOCATION;
use reqwest::{Method, Url};

use super::{check_git_url, limits_timeout, CloneError};
use crate::locks::LockRecovered;
use crate::web::fetch::{network_error, FetchError, WebClient};

/// What the HTTP side of a clone shares: the guarded client, the async runtime its requests run
/// on, the deadline, the download allowance left, and the first reason a request failed.
#[derive(Clone)]
pub(super) struct Exchanger {
    pub(super) web: WebClient,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) deadline: Instant,
    pub(super) timeout_secs: u64,
    pub(super) remaining: Arc<AtomicU64>,
    pub(super) max_download: u64,
    pub(super) failure: Arc<Mutex<Option<CloneError>>>,
}

/// One answer of the server: its headers as `name: value` lines (as gitoxide reads them), its
/// body, and the URL that answered (after redirects).
struct Answer {
    headers: Vec<u8>,
    body: Vec<u8>,
    url: String,
}

/// What a clone may post in one request (its wants and haves), at most.
const MAX_POST_BYTES: usize = 1024 * 1024;

impl Exchanger {
    /// Sends one request from gitoxide, from the blocking pool, and reads the whole answer
    /// within the download allowance. A failure is recorded for the clone's error, and handed to
    /// gitoxide as an I/O error.
    fn exchange(
        &self,
        method: Method,
        url: &str,
        headers: &[String],
        body: Option<Vec<u8>>,
    ) -> std::io::Result<Answer> {
        let result = self.runtime.block_on(self.send(method, url, headers, body));
        result.map_err(|error| {
            let text = error.to_string();
            let mut failure = self.failure.lock_recovered();
            failure.get_or_insert(error);
            std::io::Error::other(text)
        })
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[String],
        body: Option<Vec<u8>>,
    ) -> Result<Answer, CloneError> {
        let mut url = Url::parse(url).map_err(|_| CloneError::BadUrl(url.to_string()))?;
        let mut redirects = 0;
        loop {
            check_git_url(&self.web, &url)?;
            let left = limits_timeout(self.deadline);
            if left.is_zero() {
                return Err(CloneError::TimedOut {
                    secs: self.timeout_secs,
                });
            }
            let mut request = self
                .web
                .http()
                .request(method.clone(), url.clone())
                .timeout(left);
            for line in headers {
                if let Some((name, value)) = line.split_once(':') {
                    request = request.header(name.trim(), value.trim());
                }
            }
            if let Some(body) = &body {
                request = request.body(body.clone());
            }
            let response = request.send().await.map_err(|e| network_error(&url, &e))?;
            let status = response.status();
            if status.is_redirection() && method == Method::GET {
                let location = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|location| url.join(location).ok());
                redirects += 1;
                match location {
                    Some(next) if redirects <= self.web.max_redirects() => {
                        url = next;
                        continue;
                    }
                    Some(_) => {
                        return Err(FetchError::TooManyRedirects {
                            url: url.to_string(),
                            max: self.web.max_redirects(),
                        }
                        .into())
                    }
                    None => {}
                }
            }
            if status.as_u16() == 401 || status.as_u16() == 403 {
                return Err(CloneError::Private {
                    url: url.to_string(),
                });
            }
            if !status.is_success() {
                return Err(FetchError::Status {
                    url: url.to_string(),
                    status: status.as_u16(),
                }
                .into());
            }
            let mut header_lines = Vec::new();
            for (name, value) in response.headers() {
                header_lines.extend_from_slice(name.as_str().as_bytes());
                header_lines.extend_from_slice(b": ");
                header_lines.extend_from_slice(value.as_bytes());
                header_lines.push(b'\n');
            }
            let body = self.read_within_allowance(response, &url).await?;
            return Ok(Answer {
                headers: header_lines,
                body,
                url: url.to_string(),
            });
        }
    }

    /// Reads a body, taking its bytes from the clone's download allowance.
    async fn read_within_allowance(
        &self,
        mut response: reqwest::Response,
        url: &Url,
    ) -> Result<Vec<u8>, CloneError> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| network_error(url, &e))? {
            let taken = chunk.len() as u64;
            let left = self.remaining.load(Ordering::SeqCst);
            if taken > left {
                self.remaining.store(0, Ordering::SeqCst);
                return Err(CloneError::TooLarge {
                    max: self.max_download,
                });
            }
            self.remaining.fetch_sub(taken, Ordering::SeqCst);
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    pub(super) fn take_failure(&self) -> Option<CloneError> {
        self.failure.lock_recovered().take()
    }
}

/// gitoxide's HTTP seam, served by the guarded client.
pub(super) struct GuardedHttp {
    pub(super) exchanger: Exchanger,
    pub(super) redirected_base: Option<String>,
}

fn io_to_git(error: std::io::Error) -> gix::Error {
    gix::Error::from_error(error)
}

impl git_http::Http for GuardedHttp {
    type Headers = Reply;
    type ResponseBody = Reply;
    type PostBody = PostBuffer;

    fn get(
        &mut self,
        url: &str,
        base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> gix::Result<GetResponse<Reply, Reply>> {
        let headers: Vec<String> = headers
            .into_iter()
            .map(|h| h.as_ref().to_string())
            .collect();
        let answer = self
            .exchanger
            .exchange(Method::GET, url, &headers, None)
            .map_err(io_to_git)?;
        // After a redirect the requests that follow go to the new place: the part of the URL
        // after the repository's base stays as it was.
        if answer.url != url {
            if let Some(tail) = url.strip_prefix(base_url) {
                if let Some(base) = answer.url.strip_suffix(tail) {
                    self.redirected_base = Some(base.to_string());
                }
            }
        }
        let Answer { headers, body, .. } = answer;
        Ok(GetResponse {
            headers: Reply::ready(headers),
            body: Reply::ready(body),
        })
    }

    fn post(
        &mut self,
        url: &str,
        _base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
        _body: PostBodyDataKind,
    ) -> gix::Result<PostResponse<Reply, Reply, PostBuffer>> {
        let pending = Arc::new(Mutex::new(PendingPost {
            exchanger: self.exchanger.clone(),
            url: url.to_string(),
            headers: headers
                .into_iter()
                .map(|h| h.as_ref().to_string())
                .collect(),
            body: Vec::new(),
            answer: None,
        }));
        Ok(PostResponse {
            post_body: PostBuffer(pending.clone()),
            headers: Reply::pending(pending.clone(), Part::Headers),
            body: Reply::pending(pending, Part::Body),
        })
    }

    fn configure(&mut self, _config: &dyn std::any::Any) -> gix::Result {
        Ok(())
    }

    fn redirected_base_url(&self) -> Option<String> {
        self.redirected_base.clone()
    }
}

/// A POST whose body gitoxide writes first; it is sent when the answer is first read.
pub(super) struct PendingPost {
    exchanger: Exchanger,
    url: String,
    headers: Vec<String>,
    body: Vec<u8>,
    /// The answer's headers and body once sent, or why it failed.
    answer: Option<std::io::Result<Answer>>,
}

impl PendingPost {
    fn answer(&mut self, part: Part) -> std::io::Result<Vec<u8>> {
        if self.answer.is_none() {
            let body = std::mem::take(&mut self.body);
            self.answer =
                Some(
                    self.exchanger
                        .exchange(Method::POST, &self.url, &self.headers, Some(body)),
                );
        }
        match &mut self.answer {
            Some(Ok(answer)) => Ok(match part {
                Part::Headers => answer.headers.clone(),
                Part::Body => std::mem::take(&mut answer.body),
            }),
            // Each read of a failed answer gets the failure again, as gitoxide reads it.
            Some(Err(why)) => Err(std::io::Error::new(why.kind(), why.to_string())),
            None => Err(std::io::Error::other("the request was not sent")),
        }
    }
}

/// Where gitoxide writes what it posts.
pub(super) struct PostBuffer(Arc<Mutex<PendingPost>>);

impl Write for PostBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut pending = self.0.lock_recovered();
        if pending.body.len() + bytes.len() > MAX_POST_BYTES {
            return Err(std::io::Error::other(
                "the clone's request grew past its limit",
            ));
        }
        pending.body.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Part {
    Headers,
    Body,
}

/// Headers or a body: read at once for a GET, sent for when first read for a POST.
pub(super) struct Reply {
    pending: Option<(Arc<Mutex<PendingPost>>, Part)>,
    bytes: Cursor<Vec<u8>>,
}

impl Reply {
    fn ready(bytes: Vec<u8>) -> Reply {
        Reply {
            pending: None,
            bytes: Cursor::new(bytes),
        }
    }

    fn pending(post: Arc<Mutex<PendingPost>>, part: Part) -> Reply {
        Reply {
            pending: Some((post, part)),
            bytes: Cursor::new(Vec::new()),
        }
    }

    fn arrive(&mut self) -> std::io::Result<()> {
        if let Some((post, part)) = self.pending.take() {
            let bytes = post.lock_recovered().answer(part)?;
            self.bytes = Cursor::new(bytes);
        }
        Ok(())
    }
}

impl Read for Reply {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.arrive()?;
        self.bytes.read(buf)
    }
}

impl BufRead for Reply {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.arrive()?;
        self.bytes.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.bytes.consume(amount);
    }
}
