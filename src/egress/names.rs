//! The proxy's name lookups, and a small cache of their answers.
//!
//! A new connection through the proxy used to pay a lookup in the engine's
//! resolver each time (getaddrinfo on tokio's blocking pool, a round trip to
//! the engine's DNS): most of what the proxy added to it. The answers are now
//! kept for `TTL`. What is checked per connection does not change: the
//! allowlist is on the name, checked before any lookup; and every address,
//! cached or fresh, goes through `policy::reachable` for that connection's
//! match, so a name whose address moves into a refused range is refused as
//! soon as its answer is looked up again (at most `TTL` later: until then the
//! proxy connects to the address it checked before, which it may).
//!
//! Names are the agent's to choose (any name under an allowed glob), so the
//! cache holds at most `CAPACITY` of them. A failed lookup is not kept.

use std::collections::HashMap;
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer is used: short, since the engine's resolver gives no
/// record TTL through getaddrinfo and a name's addresses may move.
pub const TTL: Duration = Duration::from_secs(10);
/// The most names kept; one more pushes out the one that expires first.
pub const CAPACITY: usize = 1024;

/// Resolved names and when each answer stops being used.
#[derive(Debug, Default)]
pub struct Cache {
    entries: HashMap<String, (Vec<Ipv4Addr>, Instant)>,
}

impl Cache {
    /// The addresses of `name` if they were looked up less than `TTL` before `now`.
    pub fn get(&self, name: &str, now: Instant) -> Option<Vec<Ipv4Addr>> {
        self.entries.get(name).filter(|(_, until)| now < *until).map(|(a, _)| a.clone())
    }

    /// Keeps `addresses` for `name` until `now + TTL`, within `CAPACITY`.
    pub fn put(&mut self, name: &str, addresses: Vec<Ipv4Addr>, now: Instant) {
        if self.entries.len() >= CAPACITY && !self.entries.contains_key(name) {
            self.entries.retain(|_, (_, until)| now < *until);
            if self.entries.len() >= CAPACITY {
                // With one TTL for all, the first to expire is the oldest.
                let oldest = self.entries.iter().min_by_key(|(_, (_, until))| *until).map(|(n, _)| n.clone());
                if let Some(oldest) = oldest {
                    self.entries.remove(&oldest);
                }
            }
        }
        self.entries.insert(name.to_owned(), (addresses, now + TTL));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The proxy's resolver: the cache in front of a lookup.
#[derive(Debug, Default)]
pub struct Names {
    cache: Mutex<Cache>,
}

impl Names {
    /// The IPv4 addresses of `name` (port `port` only matters to getaddrinfo),
    /// from the cache or the engine's resolver; the lookup's error as text.
    pub async fn resolve(&self, name: &str, port: u16) -> Result<Vec<Ipv4Addr>, std::io::Error> {
        self.resolve_with(name, Instant::now(), || async move {
            let found = tokio::net::lookup_host((name, port)).await?;
            Ok(found.filter_map(super::proxy::v4).collect())
        })
        .await
    }

    /// `resolve`, at `now`, with `lookup` for a name not cached (tests give
    /// their own). An answer with no IPv4 address is not kept.
    pub async fn resolve_with<F, Fut>(
        &self,
        name: &str,
        now: Instant,
        lookup: F,
    ) -> Result<Vec<Ipv4Addr>, std::io::Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Ipv4Addr>, std::io::Error>>,
    {
        if let Some(hit) = self.lock().get(name, now) {
            return Ok(hit);
        }
        let found = lookup().await?;
        if !found.is_empty() {
            self.lock().put(name, found.clone(), now);
        }
        Ok(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::egress::policy::{reachable, Match};

    const A: Ipv4Addr = Ipv4Addr::new(93, 184, 215, 14);

    #[test]
    fn an_answer_is_used_until_its_ttl_and_not_after() {
        let (mut c, t0) = (Cache::default(), Instant::now());
        c.put("a.test", vec![A], t0);
        assert_eq!(c.get("a.test", t0 + TTL - Duration::from_millis(1)), Some(vec![A]));
        assert_eq!(c.get("a.test", t0 + TTL), None);
        assert_eq!(c.get("b.test", t0), None);
    }

    #[test]
    fn the_cache_never_holds_more_than_its_capacity() {
        let (mut c, t0) = (Cache::default(), Instant::now());
        for i in 0..CAPACITY + 500 {
            c.put(&format!("n{i}.test"), vec![A], t0 + Duration::from_micros(i as u64));
        }
        assert_eq!(c.len(), CAPACITY);
        let last = t0 + Duration::from_micros((CAPACITY + 499) as u64);
        assert_eq!(c.get("n0.test", last), None, "the oldest went first");
        assert_eq!(c.get(&format!("n{}.test", CAPACITY + 499), last), Some(vec![A]));
        // Expired answers go before any live one is pushed out.
        c.put("late.test", vec![A], last + TTL + Duration::from_secs(1));
        assert_eq!(c.len(), 1);
    }

    /// What the proxy does per connection: resolve, then check every address.
    async fn usable(
        names: &Names,
        now: Instant,
        answer: Ipv4Addr,
        lookups: &Cell<u32>,
    ) -> Result<Vec<Ipv4Addr>, String> {
        let found = names
            .resolve_with("moves.test", now, || async {
                lookups.set(lookups.get() + 1);
                Ok(vec![answer])
            })
            .await
            .unwrap();
        found.into_iter().map(|ip| reachable(ip, Match::Glob).map(|()| ip)).collect()
    }

    #[test]
    fn a_name_that_moves_into_a_refused_range_is_refused_once_looked_up_again() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (names, t0, lookups) = (Names::default(), Instant::now(), Cell::new(0));
        let private = Ipv4Addr::new(10, 0, 0, 7);
        rt.block_on(async {
            assert_eq!(usable(&names, t0, A, &lookups).await, Ok(vec![A]));
            // Within the TTL the checked answer is used, not looked up again.
            assert_eq!(usable(&names, t0 + Duration::from_secs(1), private, &lookups).await, Ok(vec![A]));
            assert_eq!(lookups.get(), 1);
            let refused = usable(&names, t0 + TTL, private, &lookups).await;
            assert!(refused.as_ref().is_err_and(|e| e.contains("10.0.0.7")), "{refused:?}");
            assert_eq!(lookups.get(), 2);
            // The refused answer is cached, and still refused from the cache.
            assert!(usable(&names, t0 + TTL + Duration::from_secs(1), A, &lookups).await.is_err());
            assert_eq!(lookups.get(), 2);
        });
    }

    #[test]
    fn a_failed_or_empty_lookup_is_not_kept() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (names, t0) = (Names::default(), Instant::now());
        rt.block_on(async {
            let failed =
                names.resolve_with("x.test", t0, || async { Err(std::io::Error::other("no such name")) }).await;
            assert!(failed.is_err());
            assert!(names.resolve_with("x.test", t0, || async { Ok(vec![]) }).await.unwrap().is_empty());
            assert_eq!(names.resolve_with("x.test", t0, || async { Ok(vec![A]) }).await.unwrap(), vec![A]);
        });
        assert_eq!(names.lock().len(), 1);
    }
}
