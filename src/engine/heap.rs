//! The event queue's binary min-heap over (time, sequence) entries. `std`'s `BinaryHeap` pops
//! through `Ord::cmp` of a reversed tuple; here an order is one 128-bit comparison of the
//! entry's `(at, seq)` (branch-free), and the pop walks the hole to the bottom and back up, as
//! `std`'s does. Sequence numbers are unique, so the order is total: any correct heap pops the
//! same sequence.

use super::Entry;

/// The order key of an entry: time, then sequence number.
#[inline(always)]
pub(super) fn key(e: &Entry) -> u128 {
    (u128::from(e.at) << 64) | u128::from(e.seq)
}

/// A binary min-heap of entries by [`key`].
#[derive(Default)]
pub(super) struct MinHeap {
    v: Vec<Entry>,
}

/// Puts `e` into the hole at `pos`, moving later parents down until `e` is no earlier than its
/// parent (a push's new leaf, a pop's last entry from the bottom).
#[inline(always)]
fn rise(v: &mut [Entry], mut pos: usize, e: Entry) {
    let k = key(&e);
    while pos > 0 {
        let parent = (pos - 1) / 2;
        if k >= key(&v[parent]) {
            break;
        }
        v[pos] = v[parent];
        pos = parent;
    }
    v[pos] = e;
}

impl MinHeap {
    /// Entries held (cancelled ones included until they are dropped).
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.v.len()
    }

    /// The earliest entry.
    #[inline(always)]
    pub(super) fn peek(&self) -> Option<&Entry> {
        self.v.first()
    }

    /// Adds `e`.
    #[inline(always)]
    pub(super) fn push(&mut self, e: Entry) {
        self.v.push(e);
        let pos = self.v.len() - 1;
        rise(self.v.as_mut_slice(), pos, e);
    }

    /// Removes the earliest entry.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<Entry> {
        let last = self.v.pop()?;
        let n = self.v.len();
        if n == 0 {
            return Some(last);
        }
        let v = self.v.as_mut_slice();
        let top = v[0];
        // The hole left at the root goes down along the smaller children to the bottom...
        let mut pos = 0;
        let mut child = 1;
        while child + 1 < n {
            let right = key(&v[child + 1]) < key(&v[child]);
            let c = child + usize::from(right);
            v[pos] = v[c];
            pos = c;
            child = 2 * pos + 1;
        }
        if child < n {
            v[pos] = v[child];
            pos = child;
        }
        // ...and the last entry rises from there to its place.
        rise(v, pos, last);
        Some(top)
    }

    /// Keeps the entries `keep` accepts, and restores the heap order.
    pub(super) fn retain(&mut self, keep: impl FnMut(&Entry) -> bool) {
        self.v.retain(keep);
        for i in (0..self.v.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// Moves the entry at `pos` down to its place.
    fn sift_down(&mut self, mut pos: usize) {
        let e = self.v[pos];
        let (k, n) = (key(&e), self.v.len());
        loop {
            let mut c = 2 * pos + 1;
            if c >= n {
                break;
            }
            if c + 1 < n && key(&self.v[c + 1]) < key(&self.v[c]) {
                c += 1;
            }
            if k <= key(&self.v[c]) {
                break;
            }
            self.v[pos] = self.v[c];
            pos = c;
        }
        self.v[pos] = e;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random pushes, pops and retains pop exactly what a sorted list of the live keys gives.
    #[test]
    fn pops_in_key_order() {
        let mut h = MinHeap::default();
        let mut reference: Vec<(u64, u64)> = Vec::new();
        let mut x: u64 = 99;
        let mut seq = 0;
        for step in 0..50_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match (x >> 60) % 8 {
                0..=3 => {
                    // Few distinct times: ties broken by the sequence number.
                    let at = (x >> 20) % 64;
                    h.push(Entry { at, seq, slot: 0 });
                    reference.push((at, seq));
                    seq += 1;
                }
                4..=6 => {
                    reference.sort_unstable();
                    let want = (!reference.is_empty()).then(|| reference.remove(0));
                    assert_eq!(h.pop().map(|e| (e.at, e.seq)), want, "step {step}");
                }
                _ => {
                    let m = x % 3;
                    h.retain(|e| e.seq % 3 != m);
                    reference.retain(|&(_, s)| s % 3 != m);
                }
            }
            assert_eq!(h.len(), reference.len());
            let min = reference.iter().min().copied();
            assert_eq!(h.peek().map(|e| (e.at, e.seq)), min, "step {step}");
        }
    }
}
