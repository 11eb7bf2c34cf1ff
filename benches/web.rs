//! Benchmark (prints figures; not a test): the web path of `read_webpage` without the model.
//! Readable-text extraction (dom_smoothie) on article pages of 100 KB, 1 MB and 2 MB; a guarded
//! fetch of those pages from a loopback server (name resolved and checked by the guard, body read
//! under the cap); and how many model calls the map-reduce makes for pages of growing size with
//! the default chunk size and cap, counted with the real tokenizer.
//!
//! Run with `cargo bench --bench web`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use autothread::config::WebConfig;
use autothread::core::message::{Message, TokenCounter};
use autothread::llm::tokens::TiktokenCounter;
use autothread::tools::{ToolModel, ToolReply};
use autothread::web::extract::readable;
use autothread::web::fetch::{Page, PageKind};
use autothread::web::Web;

fn article(bytes: usize) -> String {
    let paragraph =
        "<p>The Brimfjell glacier has retreated nine hundred metres since 1990, and surveyors \
        record its front every spring with GPS and drones; <a href=\"/notes/1\">field notes</a> \
        and <a href=\"https://example.org/data\">open data</a> are published each year.</p>\n";
    let mut body = String::from(
        "<html><head><title>Glacier survey</title><script>var tracking = 1;</script></head><body>\
         <nav><a href=\"/\">Home</a> <a href=\"/about\">About</a></nav><article><h1>Glacier survey</h1>",
    );
    while body.len() < bytes {
        body.push_str(paragraph);
    }
    body.push_str("</article><footer>© survey</footer></body></html>");
    body
}

/// A fetched HTML page holding `html`, as the fetcher would hand it over.
fn html_page(html: String) -> Page {
    Page {
        url: "https://example.org/survey".parse().unwrap(),
        kind: PageKind::Html,
        body: html,
        truncated: false,
    }
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    format!(
        "mean {:.2} ms, p50 {:.2} ms, p99 {:.2} ms",
        mean.as_secs_f64() * 1e3,
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3
    )
}

/// Counts with the real tokenizer and answers every call with one short line.
struct CountingModel {
    counter: TiktokenCounter,
    calls: std::sync::Mutex<usize>,
}

#[async_trait]
impl ToolModel for CountingModel {
    async fn complete(
        &self,
        _what: &str,
        _messages: Vec<Message>,
        _max_tokens: u32,
    ) -> Result<ToolReply, autothread::tools::ToolModelError> {
        *self.calls.lock().unwrap() += 1;
        Ok(ToolReply {
            text: "The front retreated 900 m since 1990.".into(),
            cost: autothread::core::budget::Micros::ZERO,
        })
    }

    fn count(&self, messages: &[Message]) -> usize {
        self.counter.count_messages(messages)
    }

    fn context_tokens(&self) -> u32 {
        128_000
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    println!("## Extraction (readable text and links), single thread");
    let sizes = [100 * 1024, 1024 * 1024, 2 * 1024 * 1024];
    for size in sizes {
        let html = article(size);
        let page = html_page(html);
        let rounds = if size > 1_000_000 { 5 } else { 20 };
        let mut samples = Vec::new();
        let mut text_len = 0;
        for _ in 0..rounds {
            let started = Instant::now();
            let out = readable(&page, 20);
            samples.push(started.elapsed());
            text_len = out.text.len();
        }
        println!(
            "{:>5} KB page → {:>5} KB text: {}",
            size / 1024,
            text_len / 1024,
            summary(samples)
        );
    }

    println!("\n## Guarded fetch from loopback (allowlisted name, body read under the cap)");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let pages: Vec<(usize, String)> = sizes.iter().map(|&s| (s, article(s))).collect();
    let mut app = axum::Router::new();
    for (size, html) in pages.clone() {
        app = app.route(
            &format!("/{size}"),
            axum::routing::get(move || {
                let html = html.clone();
                async move { ([(axum::http::header::CONTENT_TYPE, "text/html")], html) }
            }),
        );
    }
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    // The 2 MB article is a little over the default 2 MiB cap; the cap is raised so that every
    // size is read whole.
    let config = WebConfig {
        allow_hosts: vec![format!("localhost:{port}")],
        max_page_bytes: 4 * 1024 * 1024,
        ..WebConfig::default()
    };
    let web = Arc::new(Web::from_config(&config).unwrap());
    for (size, _) in &pages {
        let url = format!("http://localhost:{port}/{size}");
        let mut samples = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let page = web.fetcher.fetch(&url).await.unwrap();
            samples.push(started.elapsed());
            assert!(!page.truncated);
        }
        let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
        println!(
            "{:>5} KB: {} ({:.0} MB/s)",
            size / 1024,
            summary(samples),
            *size as f64 / mean.as_secs_f64() / 1e6
        );
    }

    println!("\n## Map-reduce model calls per page (chunk_tokens {}, max_model_chars {}), gpt-4o-mini tokenizer", config.chunk_tokens, config.max_model_chars);
    let model = CountingModel {
        counter: TiktokenCounter::for_model("gpt-4o-mini"),
        calls: std::sync::Mutex::new(0),
    };
    for size in [10 * 1024, 50 * 1024, 100 * 1024, 1024 * 1024] {
        let html = article(size);
        let page = html_page(html);
        let text_chars = readable(&page, 20).text.chars().count();
        *model.calls.lock().unwrap() = 0;
        let started = Instant::now();
        let out = autothread::tools::web::read_text_with_model(
            &model,
            &web,
            &readable(&page, 20),
            "How far has the glacier retreated?",
        )
        .await
        .unwrap();
        let elapsed = started.elapsed();
        println!(
            "{:>5} KB page ({:>7} chars of text): {} calls, {:.1} ms outside the model{}",
            size / 1024,
            text_chars,
            model.calls.lock().unwrap(),
            elapsed.as_secs_f64() * 1e3,
            if out.contains("Read the first") {
                ", text capped"
            } else {
                ""
            }
        );
    }
}
