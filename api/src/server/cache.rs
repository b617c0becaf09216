//! A cache of optimize answers, bounded by bytes.
//!
//! Optimization is deterministic: the same program (inputs, nodes, outputs,
//! cluster) under the same server limits always gives the same answer, so a
//! front-end that asks again — a notebook re-running a cell, a page asking for
//! the plan it just showed — gets the stored answer without a new saturation.
//! The key is the program re-serialized from its parsed form (so whitespace
//! and field order in the request do not matter); the value is the answer's
//! JSON, encoded, exactly the body `/v1/optimize` sends (callers that need
//! the plan parse it back).
//!
//! The bound is on bytes, not entries: one entry costs its key, its body and
//! [`ENTRY_OVERHEAD`], and the least recently used entries go until the new
//! one fits. A thousand-node program and its answer are megabytes, so a
//! count of entries bounds nothing. An answer larger than the whole budget is
//! not kept; a budget of 0 turns the cache off.

use axum::body::Bytes;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tra_optimizer::Plan;

/// Bytes counted for one entry besides its key and body: the map slots, the
/// recency index, the `Arc`s.
pub const ENTRY_OVERHEAD: usize = 160;

/// One optimize answer, ready to send: the JSON of `/v1/optimize` (the
/// answer plus a per-operator `report` of the chosen plan and of each
/// alternative), encoded.
pub struct CachedAnswer {
    /// The body of a `/v1/optimize` response.
    pub body: Bytes,
}

impl CachedAnswer {
    /// The answer as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("an answer the server encoded")
    }

    /// The chosen plan of an answer's JSON.
    pub fn plan_of(json: &Value) -> Plan {
        Plan::from_json(&json["plan"].to_string()).expect("a plan the optimizer built")
    }
}

/// Hits, misses and size, for `/healthz`, the log and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Answers served from the cache.
    pub hits: u64,
    /// Answers computed.
    pub misses: u64,
    /// Entries held.
    pub entries: usize,
    /// Bytes held (keys, bodies and [`ENTRY_OVERHEAD`] per entry).
    pub bytes: usize,
    /// The budget, in bytes (0: the cache is off).
    pub budget_bytes: usize,
}

/// The cache (a mutex around a map and a recency index).
pub struct AnswerCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tick: u64,
    map: HashMap<Arc<str>, (u64, Arc<CachedAnswer>)>,
    /// Last use → key: the first entry is the least recently used.
    recency: BTreeMap<u64, Arc<str>>,
    bytes: usize,
    hits: u64,
    misses: u64,
}

fn cost(key: &str, answer: &CachedAnswer) -> usize {
    key.len() + answer.body.len() + ENTRY_OVERHEAD
}

impl AnswerCache {
    /// A cache of at most `budget` bytes.
    pub fn new(budget: usize) -> AnswerCache {
        AnswerCache { budget, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent
        // in a way that matters (at worst a byte count is off until the
        // entry goes), so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored answer for `key`, if any (counts a hit or a miss).
    pub fn get(&self, key: &str) -> Option<Arc<CachedAnswer>> {
        if self.budget == 0 {
            return None;
        }
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        let found = g.map.get_mut(key).map(|e| {
            let old = std::mem::replace(&mut e.0, tick);
            (old, e.1.clone())
        });
        match found {
            Some((old, answer)) => {
                g.hits += 1;
                if let Some(k) = g.recency.remove(&old) {
                    g.recency.insert(tick, k);
                }
                Some(answer)
            }
            None => {
                g.misses += 1;
                None
            }
        }
    }

    /// Store an answer, evicting the least recently used ones until it fits.
    pub fn put(&self, key: String, answer: Arc<CachedAnswer>) {
        let size = cost(&key, &answer);
        if self.budget == 0 || size > self.budget {
            return;
        }
        let key: Arc<str> = Arc::from(key);
        let mut g = self.lock();
        if let Some((t, old)) = g.map.remove(&key) {
            g.recency.remove(&t);
            g.bytes -= cost(&key, &old);
        }
        while g.bytes + size > self.budget {
            let Some((_, oldest)) = g.recency.pop_first() else { break };
            if let Some((_, old)) = g.map.remove(&oldest) {
                g.bytes -= cost(&oldest, &old);
            }
        }
        g.tick += 1;
        let tick = g.tick;
        g.recency.insert(tick, key.clone());
        g.map.insert(key, (tick, answer));
        g.bytes += size;
    }

    /// Current figures.
    pub fn stats(&self) -> CacheStats {
        let g = self.lock();
        CacheStats { hits: g.hits, misses: g.misses, entries: g.map.len(), bytes: g.bytes, budget_bytes: self.budget }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body_len: usize) -> Arc<CachedAnswer> {
        Arc::new(CachedAnswer { body: Bytes::from(vec![b' '; body_len]) })
    }

    #[test]
    fn least_recently_used_goes_first_and_budget_zero_is_off() {
        // Room for two entries of 1 + 100 + overhead bytes, not three.
        let c = AnswerCache::new(2 * (101 + ENTRY_OVERHEAD) + 50);
        c.put("a".into(), entry(100));
        c.put("b".into(), entry(100));
        assert!(c.get("a").is_some()); // a is now newer than b
        c.put("c".into(), entry(100));
        assert!(c.get("b").is_none(), "b was the least recently used");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (3, 1, 2));
        assert_eq!(s.bytes, 2 * (101 + ENTRY_OVERHEAD));

        let off = AnswerCache::new(0);
        off.put("a".into(), entry(1));
        assert!(off.get("a").is_none());
        assert_eq!(off.stats().entries, 0);
    }

    #[test]
    fn bytes_bound_the_cache_whatever_the_entry_count() {
        let budget = 1 << 20;
        let c = AnswerCache::new(budget);
        for i in 0..500 {
            c.put(format!("program {i}"), entry(10_000 + i));
            assert!(c.stats().bytes <= budget, "entry {i}: {:?}", c.stats());
        }
        let s = c.stats();
        assert!(s.entries < 110 && s.entries > 90, "{s:?}");
        assert!(c.get("program 499").is_some() && c.get("program 0").is_none());
        // Bigger than the whole budget: not kept, nothing evicted for it.
        c.put("huge".into(), entry(budget));
        assert!(c.get("huge").is_none());
        assert_eq!(c.stats().entries, s.entries);
        // The same key again replaces its entry (its bytes counted once).
        let before = c.stats().bytes;
        c.put("program 499".into(), entry(10_499));
        assert_eq!(c.stats().bytes, before);
    }
}
