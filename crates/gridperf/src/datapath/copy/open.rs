//! The files a copy holds open, at either end: a few at a time, whatever
//! the number of files. A copy of 2,000 files held 1 to 3 descriptors per
//! file for its whole run and ran out of them under a soft limit of 1024;
//! now past [`MAX_OPEN`] the file used longest ago (and in use by no
//! stream) is closed, and opened again, and checked again, when a block of
//! it is next read or written.

use super::lock;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Files of one kind (sources, or sinks) held open at once in this process.
pub const MAX_OPEN: usize = 64;

/// Where one file's open handle lives while it is open.
pub type Slot<T> = Arc<Mutex<Option<Arc<T>>>>;

/// The open files of one kind, in the order of their last use.
pub struct OpenFiles<T> {
    cap: usize,
    lru: Mutex<VecDeque<(u64, Slot<T>)>>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A number for a file that will be held here (its place in the order).
pub fn new_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl<T> OpenFiles<T> {
    pub const fn new(cap: usize) -> OpenFiles<T> {
        OpenFiles { cap, lru: Mutex::new(VecDeque::new()) }
    }

    /// The file's handle: the one open, or `open`'s (held in `slot`); then,
    /// past the cap, the files used longest ago and in use by no one are closed.
    pub fn get(&self, id: u64, slot: &Slot<T>, open: impl FnOnce() -> io::Result<T>) -> io::Result<Arc<T>> {
        let h = {
            let mut g = lock(slot);
            match &*g {
                Some(h) => h.clone(),
                None => {
                    let h = Arc::new(open()?);
                    *g = Some(h.clone());
                    h
                }
            }
        };
        self.touch(id, slot);
        Ok(h)
    }

    /// Puts an open handle in place (the one a file was prepared with).
    pub fn put(&self, id: u64, slot: &Slot<T>, h: T) -> Arc<T> {
        let h = Arc::new(h);
        *lock(slot) = Some(h.clone());
        self.touch(id, slot);
        h
    }

    fn touch(&self, id: u64, slot: &Slot<T>) {
        let mut lru = lock(&self.lru);
        if let Some(pos) = lru.iter().position(|(i, _)| *i == id) {
            let e = lru.remove(pos).expect("found");
            lru.push_back(e);
        } else {
            lru.push_back((id, slot.clone()));
        }
        // close the oldest that no one uses; a slot busy at this moment is
        // skipped (never waited for: its owner may be waiting for this list)
        let mut k = 0;
        while lru.len() > self.cap && k < lru.len() {
            let idle = match lru[k].1.try_lock() {
                Ok(mut g) if g.as_ref().is_none_or(|h| Arc::strong_count(h) == 1) => {
                    g.take();
                    true
                }
                _ => false,
            };
            if idle {
                lru.remove(k);
            } else {
                k += 1;
            }
        }
    }

    /// Closes a file's handle and forgets it (its owner is done, or dropped).
    pub fn forget(&self, id: u64, slot: &Slot<T>) {
        lock(&self.lru).retain(|(i, _)| *i != id);
        lock(slot).take();
    }

    /// Files held open now.
    pub fn len(&self) -> usize {
        lock(&self.lru).iter().filter(|(_, s)| lock(s).is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_the_oldest_unused_file_is_closed_and_opened_again_when_needed() {
        let files: OpenFiles<u32> = OpenFiles::new(3);
        let slots: Vec<(u64, Slot<u32>)> = (0..5).map(|_| (new_id(), Slot::default())).collect();
        let opened = std::cell::Cell::new(0);
        let open = |v: u32| {
            opened.set(opened.get() + 1);
            Ok(v)
        };
        for (k, (id, s)) in slots.iter().enumerate() {
            files.get(*id, s, || open(k as u32)).expect("open");
        }
        assert_eq!(files.len(), 3);
        assert!(lock(&slots[0].1).is_none() && lock(&slots[1].1).is_none(), "the two oldest closed");
        // one in use by a stream is never closed under it
        let held = files.get(slots[2].0, &slots[2].1, || open(99)).expect("still open");
        assert_eq!(*held, 2);
        for (k, (id, s)) in slots.iter().enumerate().take(2) {
            assert_eq!(*files.get(*id, s, || open(k as u32)).expect("again"), k as u32);
        }
        assert!(lock(&slots[2].1).is_some(), "in use: kept past the cap");
        assert_eq!(opened.get(), 7);
        drop(held);
        for (id, s) in &slots {
            files.forget(*id, s);
        }
        assert!(files.is_empty());
    }
}
