//! Per-key caps on concurrent work: calls per session, connections per peer process
//! still in their handshake. A slot is held for as long as its guard lives.
//!
//! Pure bookkeeping in memory.

use parking_lot::Mutex;
use std::{collections::HashMap, sync::Arc};

/// At most `max` holders per key at once.
#[derive(Debug)]
pub struct KeyedSlots {
    max: usize,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// One held slot; released on drop.
#[derive(Debug)]
pub struct Slot {
    key: String,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl KeyedSlots {
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            held: Arc::default(),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Takes a slot for `key`, or `None` when `key` already holds `max`.
    pub fn acquire(&self, key: &str) -> Option<Slot> {
        let mut held = self.held.lock();
        let count = held.entry(key.to_owned()).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Slot {
            key: key.to_owned(),
            held: self.held.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.held.lock();
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_holds_at_most_max_and_slots_come_back_on_drop() {
        let slots = KeyedSlots::new(2);
        let first = slots.acquire("s-1").unwrap();
        let _second = slots.acquire("s-1").unwrap();
        assert!(slots.acquire("s-1").is_none());
        assert!(slots.acquire("s-2").is_some());
        drop(first);
        assert!(slots.acquire("s-1").is_some());
    }
}
