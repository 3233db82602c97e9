//! The unread output of one stream of a background process: at most `capacity` bytes,
//! the newest kept. When a process writes faster than anyone polls, the oldest unread
//! bytes go and are counted, so memory stays bounded and the reader learns how much
//! it missed.
//!
//! Pure: no I/O.

use std::collections::VecDeque;

/// Unread bytes of one stream, capped.
#[derive(Debug)]
pub struct OutputRing {
    unread: VecDeque<u8>,
    capacity: usize,
    /// Bytes dropped at the cap since the last [`OutputRing::take`].
    dropped: u64,
    /// Every byte ever pushed.
    total: u64,
}

/// What one [`OutputRing::take`] hands over.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The unread bytes, oldest first.
    pub bytes: Vec<u8>,
    /// Bytes that were dropped before they could be read.
    pub dropped: u64,
}

impl OutputRing {
    /// An empty ring keeping at most `capacity` unread bytes (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            unread: VecDeque::new(),
            capacity: capacity.max(1),
            dropped: 0,
            total: 0,
        }
    }

    /// Appends `data`, dropping the oldest unread bytes beyond the capacity.
    pub fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        // Only the newest `capacity` bytes of `data` can survive; skip the rest at once.
        let skip = data.len().saturating_sub(self.capacity);
        self.dropped += skip as u64;
        let data = &data[skip..];
        let overflow = (self.unread.len() + data.len()).saturating_sub(self.capacity);
        self.unread.drain(..overflow);
        self.dropped += overflow as u64;
        self.unread.extend(data);
    }

    /// Hands over the unread bytes and the dropped count, and starts both afresh.
    pub fn take(&mut self) -> Taken {
        Taken {
            bytes: self.unread.drain(..).collect(),
            dropped: std::mem::take(&mut self.dropped),
        }
    }

    /// Every byte ever pushed, read or not.
    pub fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_returns_only_what_came_since_the_last_take() {
        let mut ring = OutputRing::new(16);
        ring.push(b"first ");
        assert_eq!(
            ring.take(),
            Taken {
                bytes: b"first ".to_vec(),
                dropped: 0
            }
        );
        ring.push(b"second");
        assert_eq!(ring.take().bytes, b"second");
        assert_eq!(ring.take(), Taken::default());
        assert_eq!(ring.total(), 12);
    }

    #[test]
    fn overflow_keeps_the_newest_bytes_and_counts_the_dropped_ones() {
        let mut ring = OutputRing::new(4);
        ring.push(b"abc");
        ring.push(b"def");
        assert_eq!(
            ring.take(),
            Taken {
                bytes: b"cdef".to_vec(),
                dropped: 2
            }
        );
        // One push longer than the whole ring.
        ring.push(b"0123456789");
        assert_eq!(
            ring.take(),
            Taken {
                bytes: b"6789".to_vec(),
                dropped: 6
            }
        );
        assert_eq!(
            ring.take().dropped,
            0,
            "the count starts afresh after a take"
        );
        assert_eq!(ring.total(), 16);
    }
}
