//! An indexed binary min-heap of `(due time, flow)`: one entry per flow, updated in place.
//!
//! Why: when one flow of a big component ends, most of the others change rate, so their due
//! times move. An event queue with lazy deletion would keep every superseded time as a stale
//! entry (millions of them with 10,000 flows in one component); updating in place keeps the
//! heap at one entry per flow. Ties are broken by flow id, so the order is deterministic.

use crate::engine::Nanos;

/// Position marker of a flow that has no entry.
const NONE: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
pub(crate) struct Timers {
    /// `(at, flow)`, heap-ordered.
    heap: Vec<(Nanos, u32)>,
    /// Per flow, its index in `heap` or `NONE`.
    pos: Vec<u32>,
}

impl Timers {
    /// Sets (or replaces) the entry of `flow`.
    pub(crate) fn set(&mut self, flow: u32, at: Nanos) {
        let f = flow as usize;
        if f >= self.pos.len() {
            self.pos.resize(f + 1, NONE);
        }
        let i = self.pos[f];
        if i == NONE {
            self.heap.push((at, flow));
            let i = self.heap.len() - 1;
            self.pos[f] = i as u32;
            self.up(i);
        } else {
            let i = i as usize;
            let old = self.heap[i];
            self.heap[i].0 = at;
            if (at, flow) < old {
                self.up(i);
            } else {
                self.down(i);
            }
        }
    }

    /// Removes the entry of `flow`, if any.
    pub(crate) fn remove(&mut self, flow: u32) {
        let Some(&i) = self.pos.get(flow as usize) else {
            return;
        };
        if i == NONE {
            return;
        }
        let i = i as usize;
        self.pos[flow as usize] = NONE;
        let last = self.heap.pop().expect("an entry");
        if i < self.heap.len() {
            self.heap[i] = last;
            self.pos[last.1 as usize] = i as u32;
            if i > 0 && self.heap[i] < self.heap[(i - 1) / 2] {
                self.up(i);
            } else {
                self.down(i);
            }
        }
    }

    /// The earliest entry.
    pub(crate) fn peek(&self) -> Option<(Nanos, u32)> {
        self.heap.first().copied()
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[i] < self.heap[parent] {
                self.swap(i, parent);
                i = parent;
            } else {
                break;
            }
        }
    }

    fn down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.heap[l] < self.heap[m] {
                m = l;
            }
            if r < n && self.heap[r] < self.heap[m] {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a sorted map: random sets, removals and pops keep the same minimum.
        #[test]
        fn behaves_like_a_sorted_set(ops in prop::collection::vec((0u32..50, 0u64..100, 0u8..3), 1..400)) {
            let mut t = Timers::default();
            let mut model = std::collections::BTreeMap::new();
            for (flow, at, op) in ops {
                match op {
                    0 | 1 => { t.set(flow, at); model.insert(flow, at); }
                    _ => { t.remove(flow); model.remove(&flow); }
                }
                let want = model.iter().map(|(&f, &a)| (a, f)).min();
                prop_assert_eq!(t.peek(), want);
            }
            while let Some((at, f)) = t.peek() {
                prop_assert_eq!(model.remove(&f), Some(at));
                t.remove(f);
                let want = model.iter().map(|(&f, &a)| (a, f)).min();
                prop_assert_eq!(t.peek(), want);
            }
            prop_assert!(model.is_empty());
        }
    }
}
