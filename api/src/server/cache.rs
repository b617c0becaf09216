//! A bounded cache of optimize answers.
//!
//! Optimization is deterministic: the same program (inputs, nodes, outputs,
//! cluster) under the same server limits always gives the same answer, so a
//! front-end that asks again — a notebook re-running a cell, a page asking for
//! the plan it just showed — gets the stored answer without a new saturation.
//! The key is the program re-serialized from its parsed form (so whitespace
//! and field order in the request do not matter); the value holds the answer,
//! its JSON and that JSON already encoded. Least recently used entries go
//! first; `capacity` 0 turns the cache off.

use axum::body::Bytes;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tra_optimizer::optimize::OptimizeAnswer;

/// One optimize answer, ready to send.
pub struct CachedAnswer {
    /// The answer.
    pub answer: OptimizeAnswer,
    /// The answer as JSON, with the per-operator reports.
    pub json: Value,
    /// `json` encoded, the body of a `/v1/optimize` response.
    pub body: Bytes,
}

/// Hits, misses and size, for the log and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Answers served from the cache.
    pub hits: u64,
    /// Answers computed.
    pub misses: u64,
    /// Entries held.
    pub entries: usize,
}

/// The cache (a mutex around a map: lookups are a hash of a few KiB of text).
pub struct AnswerCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tick: u64,
    map: HashMap<String, (u64, Arc<CachedAnswer>)>,
    hits: u64,
    misses: u64,
}

impl AnswerCache {
    /// A cache of at most `capacity` answers.
    pub fn new(capacity: usize) -> AnswerCache {
        AnswerCache { capacity, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every update is one insert or remove), so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored answer for `key`, if any (counts a hit or a miss).
    pub fn get(&self, key: &str) -> Option<Arc<CachedAnswer>> {
        if self.capacity == 0 {
            return None;
        }
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        let found = g.map.get_mut(key).map(|e| {
            e.0 = tick;
            e.1.clone()
        });
        match found {
            Some(_) => g.hits += 1,
            None => g.misses += 1,
        }
        found
    }

    /// Store an answer, evicting the least recently used one when full.
    pub fn put(&self, key: String, answer: Arc<CachedAnswer>) {
        if self.capacity == 0 {
            return;
        }
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        if !g.map.contains_key(&key) && g.map.len() >= self.capacity {
            if let Some(oldest) = g.map.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| k.clone()) {
                g.map.remove(&oldest);
            }
        }
        g.map.insert(key, (tick, answer));
    }

    /// Current figures.
    pub fn stats(&self) -> CacheStats {
        let g = self.lock();
        CacheStats { hits: g.hits, misses: g.misses, entries: g.map.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: &str) -> Arc<CachedAnswer> {
        let program = tra_optimizer::Program::from_json(include_str!("../../../examples/matmul.json")).unwrap();
        let answer =
            tra_optimizer::optimize::optimize(&program, &tra_rules::all(), &Default::default()).expect("optimizes");
        Arc::new(CachedAnswer { answer, json: Value::String(tag.into()), body: Bytes::from(tag.to_string()) })
    }

    #[test]
    fn least_recently_used_goes_first_and_capacity_zero_is_off() {
        let e = entry("a");
        let c = AnswerCache::new(2);
        c.put("a".into(), e.clone());
        c.put("b".into(), e.clone());
        assert!(c.get("a").is_some()); // a is now newer than b
        c.put("c".into(), e.clone());
        assert!(c.get("b").is_none(), "b was the least recently used");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        assert_eq!(c.stats(), CacheStats { hits: 3, misses: 1, entries: 2 });

        let off = AnswerCache::new(0);
        off.put("a".into(), e);
        assert!(off.get("a").is_none());
        assert_eq!(off.stats().entries, 0);
    }
}
