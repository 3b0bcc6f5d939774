//! The event queue's future-event list of (time, sequence) entries: a sorted array while it is
//! short, a binary min-heap when it grows. Sequence numbers are unique, so the order is total:
//! either form pops the same sequence.
//!
//! **Why two forms.** A cluster keeps a few events per server pending (a step's end, the
//! fabric's next change, the next arrival): a handful to a few dozen. There a heap's pop walks
//! its levels every time, while an array sorted latest-first pops its last entry, and a push
//! shifts only the entries due before the new one: most new events are due soon, and the
//! cancelled ones still held (a cut decode run's end) are late and never moved. Past
//! [`SORTED_MAX`] entries (under overload, or with client deadlines) a push could shift many,
//! so the array becomes a heap (reversed, a sorted array is one) and stays one until it
//! shrinks below [`SORTED_MIN`]. The heap's order is one 128-bit comparison of the entry's
//! `(at, seq)` (branch-free), and its pop walks the hole to the bottom and back up, as `std`'s
//! does.

use super::Entry;

/// The order key of an entry: time, then sequence number.
#[inline(always)]
pub(super) fn key(e: &Entry) -> u128 {
    (u128::from(e.at) << 64) | u128::from(e.seq)
}

/// Entries past which the sorted array becomes a heap.
const SORTED_MAX: usize = 64;
/// Entries below which a heap becomes the sorted array again (half of [`SORTED_MAX`], so a
/// queue near one size does not switch back and forth).
const SORTED_MIN: usize = 32;

/// A min-queue of entries by [`key`].
pub(super) struct MinHeap {
    /// Sorted latest-first (the earliest last) while `sorted`, else a binary min-heap.
    v: Vec<Entry>,
    sorted: bool,
}

impl Default for MinHeap {
    fn default() -> Self {
        Self {
            v: Vec::new(),
            sorted: true,
        }
    }
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
        if self.sorted {
            self.v.last()
        } else {
            self.v.first()
        }
    }

    /// Adds `e`.
    #[inline(always)]
    pub(super) fn push(&mut self, e: Entry) {
        if self.sorted {
            if self.v.len() < SORTED_MAX {
                // The entries due before `e` (at the end) move up one place.
                let k = key(&e);
                let mut pos = self.v.len();
                self.v.push(e);
                let v = self.v.as_mut_slice();
                while pos > 0 && key(&v[pos - 1]) < k {
                    v[pos] = v[pos - 1];
                    pos -= 1;
                }
                v[pos] = e;
                return;
            }
            self.switch_to_heap();
        }
        self.v.push(e);
        let pos = self.v.len() - 1;
        rise(self.v.as_mut_slice(), pos, e);
    }

    /// The sorted array becomes a heap: earliest-first, a sorted array is one.
    #[cold]
    fn switch_to_heap(&mut self) {
        self.v.reverse();
        self.sorted = false;
    }

    /// The heap becomes the sorted array.
    #[cold]
    fn switch_to_sorted(&mut self) {
        self.v.sort_unstable_by_key(|e| std::cmp::Reverse(key(e)));
        self.sorted = true;
    }

    /// Removes the earliest entry.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<Entry> {
        if self.sorted {
            return self.v.pop();
        }
        let top = self.pop_heap();
        if self.v.len() < SORTED_MIN {
            self.switch_to_sorted();
        }
        top
    }

    /// Removes the heap's earliest entry.
    fn pop_heap(&mut self) -> Option<Entry> {
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

    /// Keeps the entries `keep` accepts, and restores the order (a sorted array stays sorted).
    pub(super) fn retain(&mut self, keep: impl FnMut(&Entry) -> bool) {
        self.v.retain(keep);
        if self.sorted {
            return;
        }
        if self.v.len() < SORTED_MIN {
            self.switch_to_sorted();
            return;
        }
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

    /// Random pushes, pops and retains pop exactly what a sorted list of the live keys gives,
    /// through phases that grow the queue past [`SORTED_MAX`] (a heap) and shrink it below
    /// [`SORTED_MIN`] (sorted again).
    #[test]
    fn pops_in_key_order() {
        let mut h = MinHeap::default();
        let mut reference: Vec<(u64, u64)> = Vec::new();
        let mut x: u64 = 99;
        let mut seq = 0;
        let (mut heap_steps, mut switches, mut was_sorted) = (0, 0, true);
        for step in 0..60_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Growing phases push more than they pop; shrinking ones fewer.
            let pushes = if (step / 3_000) % 2 == 0 { 160 } else { 90 };
            match x >> 56 {
                r if r < pushes => {
                    // Few distinct times: ties broken by the sequence number.
                    let at = (x >> 20) % 64;
                    h.push(Entry { at, seq, slot: 0 });
                    reference.push((at, seq));
                    seq += 1;
                }
                255 => {
                    let m = x % 3;
                    h.retain(|e| e.seq % 3 != m);
                    reference.retain(|&(_, s)| s % 3 != m);
                }
                _ => {
                    reference.sort_unstable();
                    let want = (!reference.is_empty()).then(|| reference.remove(0));
                    assert_eq!(h.pop().map(|e| (e.at, e.seq)), want, "step {step}");
                }
            }
            assert_eq!(h.len(), reference.len());
            let min = reference.iter().min().copied();
            assert_eq!(h.peek().map(|e| (e.at, e.seq)), min, "step {step}");
            heap_steps += usize::from(!h.sorted);
            switches += usize::from(h.sorted != was_sorted);
            was_sorted = h.sorted;
        }
        assert!(
            heap_steps > 10_000 && heap_steps < 50_000 && switches >= 10,
            "{heap_steps} steps as a heap, {switches} switches"
        );
    }
}
