//! The private-network guard: which addresses a fetch may connect to, the operator's allowlist, and
//! the DNS resolver that hands the HTTP client only addresses it has checked, so that a name cannot
//! resolve to a public address for the check and a private one for the connection.
//!
//! `Guard::check_url` checks the scheme, literal addresses and ports; `Guard::resolve` is the
//! reqwest resolver that hands the client only checked addresses; `is_public` is the address rule.
//! Tests replace DNS through the `Lookup` trait.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

pub use crate::config::AllowedHost;

/// Why a URL or an address was not fetched; the text is what the model and the user read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Blocked {
    #[error("only http and https URLs can be read (got {0}:)")]
    Scheme(String),
    #[error("the URL has no host")]
    NoHost,
    #[error(
        "{host} is a private or reserved address ({addr}); fetches never reach private networks"
    )]
    PrivateAddress { host: String, addr: IpAddr },
    // The addresses themselves are left out: a prompt-injected agent must not learn the layout of
    // the operator's network from refusals.
    #[error("{host} resolves only to private or reserved addresses; fetches never reach private networks")]
    PrivateName { host: String },
    #[error("{host} is allowed only on port {allowed}, not {port}")]
    WrongPort {
        host: String,
        allowed: u16,
        port: u16,
    },
    #[error("{host} could not be resolved: {why}")]
    Unresolved { host: String, why: String },
}

/// Whether an address is on the public internet. Everything a fetch must never reach is refused:
/// loopback, private (RFC 1918, carrier-grade NAT, IPv6 unique local), link-local (cloud metadata
/// at 169.254.169.254 included), multicast, broadcast, unspecified, documentation, benchmarking and
/// reserved ranges, and IPv6 forms that carry one of those IPv4 addresses inside.
pub fn is_public(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let reserved = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240; // reserved
    !reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let segments = ip.segments();
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) reach the IPv4 address they embed.
    if segments[0] == 0x64 && segments[1] == 0xff9b && segments[2..6] == [0, 0, 0, 0] {
        let [.., hi, lo] = segments;
        return is_public_v4(Ipv4Addr::from(((hi as u32) << 16) | lo as u32));
    }
    if segments[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::from(
            ((segments[1] as u32) << 16) | segments[2] as u32,
        ));
    }
    let reserved = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (segments[0] == 0x64 && segments[1] == 0xff9b && segments[2] == 1) // local-use NAT64
        || (segments[0] == 0x2001 && segments[1] == 0) // Teredo hides the IPv4 address it reaches
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
        || (segments[0] & 0xffc0) == 0xfec0 // deprecated site-local
        || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation
        || (segments[0] == 0x0100 && segments[1..4] == [0, 0, 0]) // discard-only
        || segments[..6] == [0, 0, 0, 0, 0, 0]; // IPv4-compatible (deprecated)
    !reserved
}

/// Looks names up; the system resolver in production, a fixed table in tests.
pub trait Lookup: Send + Sync {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;
}

/// The operating system's resolver, through tokio.
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host, 0))
                .await?
                .map(|addr| addr.ip())
                .collect())
        })
    }
}

/// The allowlist and the resolver behind it.
#[derive(Clone)]
pub struct Guard {
    allowed: Arc<Vec<AllowedHost>>,
    lookup: Arc<dyn Lookup>,
}

impl Guard {
    pub fn new(allow_hosts: &[String], lookup: Arc<dyn Lookup>) -> Self {
        Guard {
            allowed: Arc::new(
                allow_hosts
                    .iter()
                    .filter_map(|h| AllowedHost::parse(h))
                    .collect(),
            ),
            lookup,
        }
    }

    fn allowed_entry(&self, host: &str) -> Option<&AllowedHost> {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        self.allowed.iter().find(|entry| entry.host == host)
    }

    /// Whether the operator allow-listed `host` (on some port).
    pub fn is_allow_listed(&self, host: &str) -> bool {
        self.allowed_entry(host).is_some()
    }

    /// Checks one URL before it is requested (the first one and every redirect target): the
    /// scheme, an address written into the URL, and the allowlist's port. Names are checked again
    /// when the client resolves them, against the addresses it will connect to.
    pub fn check_url(&self, url: &Url) -> Result<(), Blocked> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Blocked::Scheme(url.scheme().to_string()));
        }
        let host = url.host_str().ok_or(Blocked::NoHost)?.to_string();
        let port = url.port_or_known_default().unwrap_or(80);
        if let Some(entry) = self.allowed_entry(&host) {
            return match entry.port {
                Some(allowed) if allowed != port => Err(Blocked::WrongPort {
                    host,
                    allowed,
                    port,
                }),
                _ => Ok(()),
            };
        }
        let literal = match url.host() {
            Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            _ => None,
        };
        match literal {
            Some(addr) if !is_public(addr) => Err(Blocked::PrivateAddress { host, addr }),
            _ => Ok(()),
        }
    }

    /// Resolves a name to the addresses a fetch may connect to: all of them for an allowlisted
    /// name, the public ones otherwise; an error when none is left.
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, Blocked> {
        let addrs = self
            .lookup
            .lookup(host)
            .await
            .map_err(|e| Blocked::Unresolved {
                host: host.to_string(),
                why: e.to_string(),
            })?;
        if self.allowed_entry(host).is_some() {
            return Ok(addrs);
        }
        let public: Vec<IpAddr> = addrs.iter().copied().filter(|a| is_public(*a)).collect();
        if public.is_empty() {
            tracing::debug!(host, ?addrs, "a fetch was refused: only private addresses");
            return Err(Blocked::PrivateName {
                host: host.to_string(),
            });
        }
        Ok(public)
    }
}

impl Resolve for Guard {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.clone();
        Box::pin(async move {
            let addrs = Guard::resolve(&guard, name.as_str()).await?;
            let addrs: Addrs = Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// The guard's refusal somewhere inside an HTTP client error, if that is what failed.
pub fn blocked_in(error: &(dyn std::error::Error + 'static)) -> Option<Blocked> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(blocked) = e.downcast_ref::<Blocked>() {
            return Some(blocked.clone());
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_reserved_addresses_are_refused() {
        let refused = [
            "127.0.0.1",
            "127.8.9.10",
            "10.0.0.1",
            "172.16.5.4",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "192.0.2.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::1",
            "2001:db8::1",
            "::127.0.0.1",
            "64:ff9b:1::a00:1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        ];
        for addr in refused {
            assert!(!is_public(addr.parse().unwrap()), "{addr} must be refused");
        }
        let public = [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ];
        for addr in public {
            assert!(is_public(addr.parse().unwrap()), "{addr} is public");
        }
    }

    #[test]
    fn allowlist_entries_parse_with_and_without_ports() {
        assert_eq!(
            AllowedHost::parse("LocalHost:8080"),
            Some(AllowedHost {
                host: "localhost".into(),
                port: Some(8080)
            })
        );
        assert_eq!(
            AllowedHost::parse("10.1.2.3"),
            Some(AllowedHost {
                host: "10.1.2.3".into(),
                port: None
            })
        );
        assert_eq!(
            AllowedHost::parse("[::1]:9000"),
            Some(AllowedHost {
                host: "::1".into(),
                port: Some(9000)
            })
        );
        assert_eq!(AllowedHost::parse("http://x/y"), None);
        assert_eq!(AllowedHost::parse(""), None);
    }

    struct Table;
    impl Lookup for Table {
        fn lookup<'a>(
            &'a self,
            host: &'a str,
        ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
            Box::pin(async move {
                Ok(match host {
                    "intranet.test" => vec!["10.0.0.1".parse().unwrap()],
                    "mixed.test" => vec![
                        "192.168.0.9".parse().unwrap(),
                        "93.184.216.34".parse().unwrap(),
                    ],
                    _ => return Err(io::Error::other("no such host")),
                })
            })
        }
    }

    #[tokio::test]
    async fn names_resolve_to_checked_addresses_only() {
        let guard = Guard::new(&["wiki.test".into()], Arc::new(Table));
        assert!(matches!(
            guard.resolve("intranet.test").await,
            Err(Blocked::PrivateName { .. })
        ));
        assert_eq!(
            guard.resolve("mixed.test").await.unwrap(),
            vec!["93.184.216.34".parse::<IpAddr>().unwrap()]
        );
        assert!(matches!(
            guard.resolve("nowhere.test").await,
            Err(Blocked::Unresolved { .. })
        ));
        let open = Guard::new(&["intranet.test".into()], Arc::new(Table));
        assert_eq!(open.resolve("intranet.test").await.unwrap().len(), 1);
    }

    #[test]
    fn urls_are_checked_for_scheme_literal_addresses_and_ports() {
        let guard = Guard::new(&["127.0.0.1:8080".into()], Arc::new(Table));
        let check = |u: &str| guard.check_url(&Url::parse(u).unwrap());
        assert!(matches!(
            check("file:///etc/passwd"),
            Err(Blocked::Scheme(_))
        ));
        assert!(matches!(
            check("http://169.254.169.254/latest/meta-data/"),
            Err(Blocked::PrivateAddress { .. })
        ));
        assert!(matches!(
            check("http://[::ffff:7f00:1]/"),
            Err(Blocked::PrivateAddress { .. })
        ));
        assert!(check("http://127.0.0.1:8080/page").is_ok());
        assert!(matches!(
            check("http://127.0.0.1:9090/"),
            Err(Blocked::WrongPort { .. })
        ));
        assert!(check("https://example.com/").is_ok());
    }
}
