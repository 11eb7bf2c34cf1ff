//! The `[web]` section of `bot.toml`: the search services, page fetching and its limits, cloning,
//! and the hosts opened past the private-network guard.
//!
//! `AllowedHost` is defined here rather than in `web`, so that the config names nothing of the web
//! client.

use serde::Deserialize;

use super::Secret;

/// Which web search service `web_search` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum SearchBackendKind {
    /// DuckDuckGo's HTML results page, as AutoGPT uses: no key.
    Duckduckgo,
    /// A SearxNG instance's JSON API at `web.searxng_url` (its `json` format must be enabled).
    Searxng,
    /// Brave Search's API; the key comes from BRAVE_SEARCH_API_KEY.
    Brave,
}

/// The web commands: search, page fetching and its limits, and the hosts opened past the
/// private-network guard.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// Offer `web_search` and `read_webpage` to agents.
    pub enabled: bool,
    pub search_backend: SearchBackendKind,
    /// Results `web_search` returns.
    pub search_results: usize,
    pub duckduckgo_url: String,
    pub searxng_url: String,
    /// The MediaWiki API `wikipedia_search` asks (any wiki's `api.php`).
    pub wikipedia_url: String,
    pub brave_url: String,
    pub timeout_secs: u64,
    /// A page's body is read up to this size; the rest is dropped (and the result says so).
    pub max_page_bytes: usize,
    pub max_redirects: usize,
    /// How much of a page's text the model reads for a question or topics (map-reduce over chunks).
    pub max_model_chars: usize,
    /// Size of one chunk the model reads, in tokens (kept within the model's context).
    pub chunk_tokens: usize,
    /// Links returned with `include_links`.
    pub max_links: usize,
    /// Hosts (`name`, `name:port`, or an IP address) a fetch may reach even on a private network:
    /// an intranet wiki, a test server. Nothing else private is ever fetched.
    pub allow_hosts: Vec<String>,
    /// Offer `clone_repository` (with the web commands).
    pub clone_repositories: bool,
    /// What one clone may download in all, in bytes.
    pub clone_max_bytes: u64,
    /// One clone, from its first request to its last file read, in seconds.
    pub clone_timeout_secs: u64,
    pub user_agent: String,
    #[serde(skip)]
    pub brave_api_key: Option<Secret>,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            enabled: true,
            search_backend: SearchBackendKind::Duckduckgo,
            search_results: 8,
            duckduckgo_url: "https://html.duckduckgo.com/html/".into(),
            searxng_url: String::new(),
            wikipedia_url: "https://en.wikipedia.org/w/api.php".into(),
            brave_url: "https://api.search.brave.com/res/v1/web/search".into(),
            timeout_secs: 20,
            max_page_bytes: 2 * 1024 * 1024,
            max_redirects: 5,
            max_model_chars: 60_000,
            chunk_tokens: 3_000,
            max_links: 20,
            allow_hosts: Vec::new(),
            clone_repositories: true,
            clone_max_bytes: 32 * 1024 * 1024,
            clone_timeout_secs: 120,
            user_agent: concat!(
                "autothread/",
                env!("CARGO_PKG_VERSION"),
                " (+https://github.com/autothread)"
            )
            .into(),
            brave_api_key: None,
        }
    }
}

/// One entry of `web.allow_hosts`: a name or an address, optionally only on one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    /// Lower-case name, or an address without brackets.
    pub host: String,
    /// Only this port, when the entry names one.
    pub port: Option<u16>,
}

impl AllowedHost {
    pub fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.is_empty() || entry.contains('/') {
            return None;
        }
        // A bare IPv6 address has colons of its own; `[::1]:8080` carries a port.
        if let Ok(ip) = entry.parse::<std::net::IpAddr>() {
            return Some(AllowedHost {
                host: ip.to_string(),
                port: None,
            });
        }
        let url = url::Url::parse(&format!("http://{entry}/")).ok()?;
        let host = url.host_str()?.trim_matches(['[', ']']).to_string();
        let port = match entry.rsplit_once(':') {
            Some((_, port)) if !entry.ends_with(']') => Some(port.parse().ok()?),
            _ => None,
        };
        Some(AllowedHost { host, port })
    }
}
