//! Throttles keyed by who or where a request comes from, for what happens before (or
//! instead of) a principal's own quota: unauthenticated requests per client address at
//! every door, and console sign-ins per principal and per client address.
//!
//! A [`Throttle`] is a token bucket per key. A door verifies the credential first and
//! charges the address only for a failure ([`Throttle::charge`]): a valid credential is
//! never refused by the unauthenticated throttle, so failures from one address (a NAT, a
//! proxy that is not a configured `trustedProxies` entry, a neighbour guessing keys) slow
//! only themselves and never deny another principal. A failure past the budget answers
//! `429` with `Retry-After` instead of `401`. [`Throttle::exhausted`] looks at a bucket
//! without spending a token. The number of keys is bounded ([`MAX_KEYS`]): past it, full
//! buckets are forgotten first, then the oldest.
//!
//! [`ClientAddresses`] says which address a request comes from: the connection's peer, or,
//! only when that peer is a configured trusted proxy, the last address in
//! `X-Forwarded-For` that is not itself a trusted proxy.

use axum::http::{Extensions, HeaderMap};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Instant;

/// The most keys one throttle tracks.
pub const MAX_KEYS: usize = 100_000;

pub use capgate_core::defaults::door::{
    DEFAULT_UNAUTHENTICATED_BURST, DEFAULT_UNAUTHENTICATED_PER_MINUTE,
};

/// A sustained rate per minute with a burst; both positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerMinute {
    per_minute: u32,
    burst: u32,
}

impl PerMinute {
    /// `None` when either is zero (the throttle is off).
    pub fn new(per_minute: u32, burst: u32) -> Option<PerMinute> {
        (per_minute > 0 && burst > 0).then_some(PerMinute { per_minute, burst })
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A token bucket per key (see the module docs).
#[derive(Debug)]
pub struct Throttle {
    rate: PerMinute,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Throttle {
    /// A throttle at `rate`.
    pub fn new(rate: PerMinute) -> Self {
        Throttle {
            rate,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The rate this throttle was built for: what a serving process compares to keep its
    /// buckets across a reload that does not change it.
    pub fn rate(&self) -> PerMinute {
        self.rate
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bucket>> {
        // Every operation leaves the map consistent: keep serving after a panic.
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn refilled(&self, b: Bucket, now: Instant) -> Bucket {
        let per_second = f64::from(self.rate.per_minute) / 60.0;
        let gained = now.saturating_duration_since(b.at).as_secs_f64() * per_second;
        Bucket {
            tokens: (b.tokens + gained).min(f64::from(self.rate.burst)),
            at: now,
        }
    }

    /// Seconds until `key` has a token again, when it has none now; spends nothing.
    pub fn exhausted(&self, key: &str) -> Option<u64> {
        let now = Instant::now();
        let map = self.lock();
        let b = self.refilled(*map.get(key)?, now);
        (b.tokens < 1.0).then(|| self.wait(b))
    }

    /// Spend one token of `key`: `Err` carries the seconds to wait when there is none.
    pub fn charge(&self, key: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut map = self.lock();
        if map.len() >= MAX_KEYS && !map.contains_key(key) {
            self.forget(&mut map, now);
        }
        let full = Bucket {
            tokens: f64::from(self.rate.burst),
            at: now,
        };
        let b = map.entry(key.to_owned()).or_insert(full);
        *b = self.refilled(*b, now);
        if b.tokens < 1.0 {
            return Err(self.wait(*b));
        }
        b.tokens -= 1.0;
        Ok(())
    }

    fn wait(&self, b: Bucket) -> u64 {
        let per_second = f64::from(self.rate.per_minute) / 60.0;
        let secs = ((1.0 - b.tokens) / per_second).ceil();
        if secs.is_finite() && secs >= 1.0 {
            secs as u64
        } else {
            1
        }
    }

    /// Make room: drop full buckets, then (if that was not enough) the oldest half.
    fn forget(&self, map: &mut HashMap<String, Bucket>, now: Instant) {
        let burst = f64::from(self.rate.burst);
        map.retain(|_, b| self.refilled(*b, now).tokens < burst);
        if map.len() >= MAX_KEYS {
            let mut ages: Vec<Instant> = map.values().map(|b| b.at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            map.retain(|_, b| b.at > cut);
        }
    }
}

/// The most `X-Forwarded-For` entries looked at (a longer header is read from its end).
const MAX_FORWARDED_HOPS: usize = 32;

/// Which address a request comes from (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientAddresses {
    /// Peers whose `X-Forwarded-For` is believed (the deployment's reverse proxies).
    pub trusted_proxies: Vec<IpAddr>,
}

impl ClientAddresses {
    /// The client address of a request served with connection info
    /// (`into_make_service_with_connect_info::<SocketAddr>()`); `None` without it.
    pub fn client(&self, extensions: &Extensions, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())?;
        Some(self.forwarded(peer, headers))
    }

    /// `peer`, or the address its trusted proxies say they forwarded for.
    pub fn forwarded(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let trusted = |ip: &IpAddr| self.trusted_proxies.contains(&canonical(*ip));
        if !trusted(&peer) {
            return peer;
        }
        let hops: Vec<IpAddr> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .take(MAX_FORWARDED_HOPS)
            .map_while(|hop| hop.trim().parse::<IpAddr>().ok())
            .collect();
        // From the nearest hop outwards: the first address that is not a trusted proxy is
        // the client; an unreadable hop stops the walk (it was written by someone
        // untrusted), leaving the last trusted address.
        let mut client = peer;
        for hop in hops {
            client = hop;
            if !trusted(&hop) {
                break;
            }
        }
        canonical(client)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_bucket_spends_its_burst_then_refuses_and_others_are_untouched() {
        let t = Throttle::new(PerMinute::new(1, 3).expect("a rate"));
        assert_eq!(t.exhausted("a"), None);
        for _ in 0..3 {
            assert!(t.charge("a").is_ok());
        }
        assert!(t.exhausted("a").is_some_and(|s| s >= 1));
        assert!(t.charge("a").is_err());
        assert!(t.charge("b").is_ok());
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let proxy: IpAddr = "10.0.0.1".parse().expect("ip");
        let stranger: IpAddr = "203.0.113.9".parse().expect("ip");
        let c = ClientAddresses {
            trusted_proxies: vec![proxy],
        };
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("198.51.100.7, 192.0.2.1"),
        );
        // A stranger's header is ignored.
        assert_eq!(c.forwarded(stranger, &h), stranger);
        // The proxy's: the nearest hop it forwarded for (the client cannot forge past it).
        assert_eq!(
            c.forwarded(proxy, &h),
            "192.0.2.1".parse::<IpAddr>().expect("ip")
        );
        // Garbage stops the walk at the proxy itself.
        h.insert("x-forwarded-for", HeaderValue::from_static("not-an-ip"));
        assert_eq!(c.forwarded(proxy, &h), proxy);
    }
}
