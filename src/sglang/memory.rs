//! KV page allocation with real page ids, as sglang's paged allocator hands them out: page 0 is
//! the padding sink and never allocated; a request's pages need not be contiguous once the pool
//! has churned, which is what decides how many contiguous runs (and RDMA writes) a transfer has.

use crate::config::KvAllocator;
use crate::vocab::requests::Holding;

/// Free-list page allocator of one instance (ids are per rank-group: every TP rank of an
/// instance uses the same page ids for a request), with sglang's two free-list disciplines
/// (`mem_cache/allocator.py::PagedTokenToKVPoolAllocator` @ 02e29cb1; `docs/sglang-pd.md` §22):
///
/// * **unsorted** (`need_sort = False`): `free` puts the freed pages, sorted (`torch.unique`),
///   at the front of the free list, and `alloc` takes from the front: the pages a request just
///   gave back are the next ones handed out, so after churn a new request's pages are the
///   scattered leftovers of several finished ones.
/// * **sorted** (`need_sort = True`): `free` appends to a separate `release_pages` list that
///   `alloc` does not look at; only when the free list is shorter than an allocation does
///   `merge_and_sort_free` join the two and sort them, so pages are handed out in ascending
///   id order and a request's pages are contiguous wherever the pool has a free stretch.
///
/// Both count the release list as available, as sglang's `available_size` does: the policy
/// decides which ids a request gets, never whether it gets them.
#[derive(Clone, Debug)]
pub struct PageAllocator {
    /// Free page ids, the front of sglang's list at the end (a stack: taking `n` is a
    /// truncate), so a fresh pool hands out 1, 2, 3, …
    free: Vec<u32>,
    /// sglang's `release_pages` as a bitset over page ids (sorted policy only; empty
    /// otherwise): a set, because the merge only needs them in id order, which a bitset gives
    /// in one linear pass instead of a sort.
    release: Vec<u64>,
    /// Pages in `release`.
    released: u32,
    /// Whether freed pages wait in `release` (sglang's `need_sort`).
    sort: bool,
    /// Merges so far (how often `merge_and_sort_free` ran).
    merges: u64,
    total: u32,
    /// Emptied page lists of requests that ended ([`PageAllocator::recycle`]), reused by
    /// [`PageAllocator::alloc`]: every request takes a list and gives it back, and a list
    /// from the allocator's own spares costs no trip to the heap. At most [`SPARE_LISTS`].
    spare: Vec<Vec<u32>>,
}

/// The most emptied page lists an allocator keeps for reuse: enough for the requests that end
/// between two that start, without holding a peak's worth of lists for the rest of a run.
const SPARE_LISTS: usize = 64;

impl PageAllocator {
    /// A pool of `total` usable pages, ids `1..=total` (0 is the sink), with the unsorted
    /// free list of a plain sglang server.
    pub fn new(total: u32) -> Self {
        Self::with_policy(total, KvAllocator::Unsorted)
    }

    /// A pool of `total` usable pages whose freed pages return as `policy` says.
    pub fn with_policy(total: u32, policy: KvAllocator) -> Self {
        let sort = policy == KvAllocator::Sorted;
        Self {
            free: (1..=total).rev().collect(),
            release: if sort {
                vec![0; (total as usize + 1).div_ceil(64)]
            } else {
                Vec::new()
            },
            released: 0,
            sort,
            merges: 0,
            total,
            spare: Vec::new(),
        }
    }

    /// Usable pages.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Pages free now (the release list included).
    pub fn available(&self) -> u32 {
        self.free.len() as u32 + self.released
    }

    /// Pages in use now.
    pub fn used(&self) -> u32 {
        self.total - self.available()
    }

    /// How many times the release list was merged and sorted into the free list.
    pub fn merges(&self) -> u64 {
        self.merges
    }

    /// sglang's `merge_and_sort_free`, run by `alloc` when the free list alone is short of
    /// `n` pages: the free list and the release list joined, in ascending id order. The
    /// release list only grows between merges, so this runs about once per pass through the
    /// pool, linear in the pool's size (the bitset's words) then, nothing on the allocation
    /// path.
    #[inline]
    fn merge_if_short(&mut self, n: usize) {
        if self.sort && n > self.free.len() && self.released > 0 {
            self.merge();
        }
    }

    #[cold]
    fn merge(&mut self) {
        for &p in &self.free {
            self.release[p as usize / 64] |= 1 << (p % 64);
        }
        self.free.clear();
        // Highest id first, so the end of the stack (the front sglang allocates from) holds
        // the lowest. Each run of set bits is one range copy, not a bit extraction per page:
        // a churned pool's free pages are long runs with the odd hole (a grown page still
        // held), so the merge costs about a copy of the free list, as sglang's sort of an
        // almost sorted tensor does.
        for (w, word) in self.release.iter_mut().enumerate().rev() {
            let mut x = std::mem::take(word);
            let base = (w * 64) as u32;
            while x != 0 {
                // The highest set bit and the run of set bits below it, `lo..=hi`.
                let hi = 63 - x.leading_zeros();
                let len = (!(x << (63 - hi))).leading_zeros();
                let lo = hi + 1 - len;
                self.free.extend((base + lo..base + hi + 1).rev());
                x &= !((u64::MAX >> (63 - hi)) & (u64::MAX << lo));
            }
        }
        self.released = 0;
        self.merges += 1;
    }

    /// Marks pages `lo..hi` as released (sorted policy): one mask per bitset word the run
    /// covers, so freeing a request's contiguous pages costs per word, not per page.
    #[inline]
    fn release_run(&mut self, lo: u32, hi: u32) {
        let (mut p, end) = (lo as usize, hi as usize);
        while p < end {
            let (w, from) = (p / 64, p % 64);
            let to = (end - w * 64).min(64);
            let mask = if to - from == 64 {
                u64::MAX
            } else {
                ((1u64 << (to - from)) - 1) << from
            };
            debug_assert!(self.release[w] & mask == 0, "double free of KV pages");
            self.release[w] |= mask;
            p = w * 64 + to;
        }
    }

    /// Takes `n` pages, or `None` (taking nothing) when fewer are free.
    pub fn alloc(&mut self, n: u32) -> Option<Vec<u32>> {
        let mut pages = self
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(n as usize));
        if self.alloc_into(n, &mut pages) {
            Some(pages)
        } else {
            self.spare.push(pages);
            None
        }
    }

    /// Keeps `pages`, a list [`PageAllocator::alloc`] gave whose pages were freed, for the next
    /// allocation's ids (its contents are dropped; only the room is kept).
    #[inline]
    pub fn recycle(&mut self, mut pages: Vec<u32>) {
        if self.spare.len() < SPARE_LISTS && pages.capacity() > 0 {
            pages.clear();
            self.spare.push(pages);
        }
    }

    /// One page, the one `alloc(1)` takes, without a list to hold it (a request's slot).
    #[inline]
    pub fn alloc_one(&mut self) -> Option<u32> {
        self.merge_if_short(1);
        self.free.pop()
    }

    /// Takes `n` pages onto the end of `out` (the order [`PageAllocator::alloc`] gives), or
    /// returns `false` taking nothing. No allocation: decode grows every step.
    pub fn alloc_into(&mut self, n: u32, out: &mut Vec<u32>) -> bool {
        let n = n as usize;
        self.merge_if_short(n);
        if n > self.free.len() {
            return false;
        }
        let at = self.free.len() - n;
        out.extend(self.free[at..].iter().rev());
        self.free.truncate(at);
        true
    }

    /// Returns one page to the pool, as `free(&[page])` does: decode gives its grown pages
    /// back one at a time (`Store::shrink`), where the run detection of [`Self::free`] would
    /// cost more than the page.
    #[inline]
    pub fn free_page(&mut self, page: u32) {
        if self.sort {
            let (w, bit) = (page as usize / 64, 1u64 << (page % 64));
            debug_assert!(self.release[w] & bit == 0, "double free of KV pages");
            self.release[w] |= bit;
            self.released += 1;
        } else {
            self.free.push(page);
        }
    }

    /// Returns `pages` to the pool: to the release list (sorted), or to the front of the free
    /// list in ascending order (unsorted: sglang frees `torch.unique(indices // page_size)`).
    pub fn free(&mut self, pages: &[u32]) {
        if self.sort {
            // A request's pages are mostly one run of consecutive ids (the sorted policy
            // hands them out so). The test is a branch-free fold, which the compiler turns
            // into SIMD; a run is then set word by word, not page by page.
            if let Some(&lo) = pages.first() {
                let off = pages
                    .iter()
                    .zip(lo..)
                    .fold(0u32, |acc, (&p, want)| acc | (p ^ want));
                if off == 0 {
                    self.release_run(lo, lo + pages.len() as u32);
                    self.released += pages.len() as u32;
                    return;
                }
            }
            // Otherwise each run of consecutive ids is set on its own.
            let mut i = 0;
            while i < pages.len() {
                let lo = pages[i];
                let mut j = i + 1;
                while j < pages.len() && pages[j] == pages[j - 1] + 1 {
                    j += 1;
                }
                self.release_run(lo, lo + (j - i) as u32);
                i = j;
            }
            self.released += pages.len() as u32;
        } else if pages.is_sorted() {
            // The common case (pages handed out in order): the sorted pages need no sort, and
            // the front of the list is the end of the stack.
            self.free.extend(pages.iter().rev());
        } else {
            let at = self.free.len();
            self.free.extend_from_slice(pages);
            self.free[at..].sort_unstable_by(|a, b| b.cmp(a));
        }
        debug_assert!(self.available() <= self.total, "double free of KV pages");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_pools_hand_out_ascending_ids_and_reuse_freed_ones() {
        let mut a = PageAllocator::new(10);
        assert_eq!(a.alloc(3).unwrap(), vec![1, 2, 3]);
        let b = a.alloc(2).unwrap();
        assert_eq!(b, vec![4, 5]);
        assert!(a.alloc(6).is_none());
        assert_eq!(a.available(), 5);
        a.free(&b);
        assert_eq!(a.alloc(2).unwrap(), vec![4, 5]);
        assert_eq!(a.used(), 5);
        // Growing in place takes the same ids in the same order.
        let mut grown = vec![99];
        assert!(a.alloc_into(2, &mut grown));
        assert_eq!(grown, [99, 6, 7]);
        assert!(!a.alloc_into(4, &mut grown), "3 free");
        assert_eq!(grown.len(), 3);
    }

    /// Contiguous runs of one page list, counted the way a transfer groups them
    /// (`group_concurrent_contiguous` of the list against itself).
    fn runs(pages: &[u32]) -> usize {
        crate::layout::plan::contiguous_runs(pages, pages).len()
    }

    #[test]
    fn sorted_and_unsorted_free_lists_by_hand() {
        // Ten pages; A, B, C take two each (1-2, 3-4, 5-6), 7-10 stay free. A and C finish.
        // Unsorted: the free list's front is C's then A's pages, 5 6 1 2 | 7 8 9 10, so D (4
        // pages) gets 5 6 1 2: two runs. Sorted: A's and C's pages wait in the release list
        // and the free list still holds 7-10, so D gets 7 8 9 10: one run.
        // Then B and D finish and E takes 6. Unsorted: the front is D's pages sorted (1 2 5 6),
        // then B's (3 4): E gets 1 2 5 6 3 4, three runs. Sorted: the free list is empty, so
        // the release list (1 2 5 6 3 4 7 8 9 10) is merged and sorted: E gets 1-6, one run.
        let mut want = Vec::new();
        for policy in [KvAllocator::Unsorted, KvAllocator::Sorted] {
            let mut a = PageAllocator::with_policy(10, policy);
            let (ra, rb, rc) = (
                a.alloc(2).unwrap(),
                a.alloc(2).unwrap(),
                a.alloc(2).unwrap(),
            );
            assert_eq!(
                (ra.clone(), rb.clone(), rc.clone()),
                (vec![1, 2], vec![3, 4], vec![5, 6])
            );
            a.free(&ra);
            a.free(&rc);
            assert_eq!(a.available(), 8, "the release list counts as free");
            let d = a.alloc(4).unwrap();
            a.free(&rb);
            a.free(&d);
            let e = a.alloc(6).unwrap();
            want.push((d.clone(), runs(&d), e.clone(), runs(&e), a.merges()));
            assert_eq!(a.available(), 4);
        }
        assert_eq!(
            want,
            [
                (vec![5, 6, 1, 2], 2, vec![1, 2, 5, 6, 3, 4], 3, 0),
                (vec![7, 8, 9, 10], 1, vec![1, 2, 3, 4, 5, 6], 1, 1),
            ]
        );
    }

    /// `alloc_one` takes the very page `alloc(1)` takes, merges included, under both
    /// policies.
    #[test]
    fn one_page_is_what_a_list_of_one_would_hold() {
        for policy in [KvAllocator::Sorted, KvAllocator::Unsorted] {
            let (mut a, mut b) = (
                PageAllocator::with_policy(8, policy),
                PageAllocator::with_policy(8, policy),
            );
            let mut held = Vec::new();
            for i in 0..40u32 {
                if i % 3 == 2 && !held.is_empty() {
                    let p: u32 = held.remove((i as usize * 7) % held.len());
                    a.free(&[p]);
                    b.free(&[p]);
                    continue;
                }
                let one = a.alloc_one();
                assert_eq!(one, b.alloc(1).map(|v| v[0]), "{policy:?} step {i}");
                held.extend(one);
                assert_eq!(a.merges(), b.merges());
            }
        }
    }

    /// A list given back for reuse changes no page id: the same allocations and frees hand
    /// out the same pages with and without recycling, under both policies.
    #[test]
    fn recycled_lists_hand_out_the_same_pages() {
        for policy in [KvAllocator::Sorted, KvAllocator::Unsorted] {
            let (mut a, mut b) = (
                PageAllocator::with_policy(64, policy),
                PageAllocator::with_policy(64, policy),
            );
            let (mut held_a, mut held_b): (Vec<Vec<u32>>, Vec<Vec<u32>>) = (vec![], vec![]);
            for i in 0..200usize {
                if i % 3 == 1 && !held_a.is_empty() {
                    let k = (i * 7) % held_a.len();
                    let (x, y) = (held_a.remove(k), held_b.remove(k));
                    a.free(&x);
                    a.recycle(x);
                    b.free(&y);
                    continue;
                }
                let n = 1 + (i * 5 % 9) as u32;
                let (x, y) = (a.alloc(n), b.alloc(n));
                assert_eq!(x, y, "{policy:?} step {i}");
                if let (Some(x), Some(y)) = (x, y) {
                    held_a.push(x);
                    held_b.push(y);
                }
            }
            assert!(!a.spare.is_empty(), "lists were kept for reuse");
        }
    }

    #[test]
    fn a_sorted_pool_merges_only_when_the_free_list_runs_short() {
        let mut a = PageAllocator::with_policy(4, KvAllocator::Sorted);
        let x = a.alloc(3).unwrap();
        a.free(&x);
        // One page is free in the list, three wait: one page comes from the list unmerged.
        assert_eq!(a.alloc(1).unwrap(), [4]);
        assert_eq!(a.merges(), 0);
        assert!(a.alloc(4).is_none(), "three are free");
        assert_eq!(
            a.merges(),
            1,
            "a failed allocation still merged, as sglang's does"
        );
        let mut grown = Vec::new();
        assert!(a.alloc_into(3, &mut grown));
        assert_eq!(grown, [1, 2, 3]);
        assert_eq!(a.available(), 0);
    }

    /// sglang's two lists as the Python keeps them (`free_pages`, `release_pages`; the front
    /// of `free_pages` is index 0), written the obvious way: the reference the bitset and the
    /// stack must agree with, id for id.
    struct Reference {
        free: Vec<u32>,
        release: Vec<u32>,
        sort: bool,
    }

    impl Reference {
        fn alloc(&mut self, n: usize) -> Option<Vec<u32>> {
            if self.sort && n > self.free.len() && !self.release.is_empty() {
                self.free.append(&mut self.release);
                self.free.sort_unstable();
            }
            (n <= self.free.len()).then(|| self.free.drain(..n).collect())
        }

        fn free(&mut self, pages: &[u32]) {
            if self.sort {
                self.release.extend_from_slice(pages);
            } else {
                let mut front = pages.to_vec();
                front.sort_unstable();
                front.append(&mut self.free);
                self.free = front;
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]

        /// Random allocations and out-of-order frees (whole requests, single grown pages) on
        /// a pool of 1–300 pages give the same ids, in the same order, as the reference.
        #[test]
        fn both_policies_hand_out_the_ids_sglang_s_lists_would(
            total in 1u32..300,
            sort in proptest::bool::ANY,
            ops in proptest::collection::vec((0u8..3, 0usize..80), 1..200),
        ) {
            let policy = if sort { KvAllocator::Sorted } else { KvAllocator::Unsorted };
            let mut a = PageAllocator::with_policy(total, policy);
            let mut r = Reference { free: (1..=total).collect(), release: Vec::new(), sort };
            let mut held: Vec<Vec<u32>> = Vec::new();
            for (op, k) in ops {
                match op {
                    0 => {
                        let (got, want) = (a.alloc(k as u32), r.alloc(k));
                        proptest::prop_assert_eq!(&got, &want);
                        held.extend(got);
                    }
                    1 if !held.is_empty() => {
                        let pages = held.swap_remove(k % held.len());
                        a.free(&pages);
                        r.free(&pages);
                    }
                    _ if !held.is_empty() => {
                        // One page out of the middle of a holding (a grown page given back).
                        let h = k % held.len();
                        let len = held[h].len();
                        if len > 0 {
                            let p = held[h].remove(k % len);
                            // Both single-page paths must give back the same ids.
                            if k % 2 == 0 {
                                a.free_page(p);
                            } else {
                                a.free(&[p]);
                            }
                            r.free(&[p]);
                        }
                    }
                    _ => {}
                }
                proptest::prop_assert_eq!(
                    a.available() as usize,
                    r.free.len() + r.release.len()
                );
            }
        }
    }

    #[test]
    fn a_unified_pool_shares_one_budget_between_pages_and_slots() {
        // 100 bytes; a page costs 10, a slot 30: the id stores alone would allow 10 pages and
        // 3 slots at once, the shared budget does not.
        let store = Store::Plain {
            pages: PageAllocator::new(10),
            slots: PageAllocator::new(3),
            grown: Vec::new(),
        };
        let shared = Shared {
            budget: 100.0,
            page_bytes: 10.0,
            slot_bytes: 30.0,
            used: 0.0,
        };
        let mut pool = KvPool::new(store, Some(shared));
        let a = pool.alloc(1, 2, true).unwrap(); // 50 bytes
        let b = pool.alloc(2, 2, true).unwrap(); // 100 bytes
        assert!(pool.alloc(3, 1, false).is_none(), "the budget is spent");
        assert_eq!(pool.available(), 0);
        assert!(!pool.grow(1));
        pool.free(1, &a);
        assert_eq!(pool.available(), 5, "freed slot bytes become pages");
        assert!(pool.grow(5));
        assert!(
            pool.alloc(4, 0, true).is_none(),
            "pages now fill what the slot used"
        );
        pool.shrink(5);
        pool.free(2, &b);
        assert_eq!(pool.shared.unwrap().used, 0.0);
        // Without sharing the same stores hold 10 pages and 3 slots together.
        let mut plain = KvPool::new(
            Store::Plain {
                pages: PageAllocator::new(10),
                slots: PageAllocator::new(3),
                grown: Vec::new(),
            },
            None,
        );
        assert!(plain.alloc(1, 4, true).is_some() && plain.alloc(2, 6, true).is_some());
    }
}

/// Where an instance's ids come from: plain allocators where no write can land wrong, or the
/// corruption oracle ([`crate::layout::DecodeMemory`]) for a decode instance that receives from
/// a prefill whose plan is not exact (or whose pool is unified, so that page ids follow the
/// unified pool's high-end allocation).
// One per instance: boxing the oracle would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Store {
    /// Counting allocators with real ids.
    Plain {
        /// KV pages.
        pages: PageAllocator,
        /// State slots (ids from 1; 0 is the sink).
        slots: PageAllocator,
        /// Pages decode took for generated tokens, not tied to one request's id list.
        grown: Vec<u32>,
    },
    /// The oracle, which allocates and tracks ownership itself.
    Oracle {
        /// Decode memory as the oracle sees it.
        mem: crate::layout::DecodeMemory,
        /// Pages in use.
        used: u32,
        /// Usable pages.
        total: u32,
    },
}

impl Store {
    /// Usable pages.
    pub fn total(&self) -> u32 {
        match self {
            Store::Plain { pages, .. } => pages.total(),
            Store::Oracle { total, .. } => *total,
        }
    }

    /// Pages in use.
    pub fn used(&self) -> u32 {
        match self {
            Store::Plain { pages, .. } => pages.used(),
            Store::Oracle { used, .. } => *used,
        }
    }

    /// Reserves `n` pages (and a slot if `slot`) for request `id`, or `None` taking nothing.
    pub fn alloc(&mut self, id: u64, n: u32, slot: bool) -> Option<Holding> {
        self.alloc_split(id, n, n, slot)
    }

    /// [`Store::alloc`] where, on the oracle, only the first `transferred` pages become the
    /// request's watched units (the KV the prefill will write); the rest is the room decode
    /// keeps for the tokens it generates, counted but not watched.
    pub fn alloc_split(
        &mut self,
        id: u64,
        n: u32,
        transferred: u32,
        slot: bool,
    ) -> Option<Holding> {
        match self {
            Store::Plain { pages, slots, .. } => {
                if pages.available() < n || (slot && slots.available() == 0) {
                    return None;
                }
                let p = pages.alloc(n)?;
                let s = if slot { Some(slots.alloc_one()?) } else { None };
                Some(Holding {
                    pages: p,
                    slot: s,
                    aux: 0,
                    reserved: n,
                })
            }
            Store::Oracle { mem, used, total } => {
                if *total - *used < n {
                    return None;
                }
                let (p, s, a) = mem.alloc_fresh(
                    crate::layout::RequestId(id),
                    transferred.min(n) as usize,
                    slot,
                )?;
                *used += n;
                Some(Holding {
                    pages: p,
                    slot: s,
                    aux: a,
                    reserved: n,
                })
            }
        }
    }

    /// Gives back what request `id` held; the oracle also gives its verdict on the request.
    pub fn free(&mut self, id: u64, h: &Holding) -> Option<crate::layout::RequestReport> {
        match self {
            Store::Plain { pages, slots, .. } => {
                pages.free(&h.pages);
                if let Some(s) = h.slot {
                    slots.free(&[s]);
                }
                None
            }
            Store::Oracle { mem, used, .. } => {
                *used -= h.reserved;
                Some(mem.release(crate::layout::RequestId(id), None))
            }
        }
    }

    /// Keeps `pages`, the list of a holding [`Store::free`] gave back, for the next
    /// allocation (the oracle's pages are its own: nothing to keep).
    pub fn recycle(&mut self, pages: Vec<u32>) {
        if let Store::Plain { pages: alloc, .. } = self {
            alloc.recycle(pages);
        }
    }

    /// Pages free now.
    pub fn available(&self) -> u32 {
        self.total() - self.used()
    }

    /// Takes `n` pages for tokens decode generates (the KV of each step's input token), or
    /// returns `false` taking nothing.
    pub fn grow(&mut self, n: u32) -> bool {
        match self {
            Store::Plain { pages, grown, .. } => pages.alloc_into(n, grown),
            Store::Oracle { used, total, .. } => {
                if *total - *used < n {
                    return false;
                }
                *used += n;
                true
            }
        }
    }

    /// Gives back `n` pages taken by [`Store::grow`], as a request leaving the batch gives
    /// back the pages it grew.
    ///
    /// Which ids those are decides how scattered the free list gets (§22). sglang's
    /// `alloc_decode` hands each step's new pages out in batch order, one per request, so a
    /// request's own grown pages lie one in every batch-size of the pages decode took while it
    /// ran. Decode coalesces its steps and does not know which request opened which page, so
    /// the pages given back are the same pattern drawn from the pool: `n` of them at a stride
    /// of `grown / n` back from the newest (a request that ran with `B` others of like length
    /// holds about one in `B`). `swap_remove` keeps it O(n); it only shuffles the order of
    /// the pages still held, which is itself no more than this approximation of time.
    pub fn shrink(&mut self, n: u32) {
        match self {
            Store::Plain { pages, grown, .. } => {
                let (n, len) = (n as usize, grown.len());
                debug_assert!(n <= len, "shrinking more pages than were grown");
                let stride = (len / n.max(1)).max(1);
                // `(n − 1) · ⌊len / n⌋ < len`, and each removal leaves every later index in range.
                for k in 0..n {
                    let p = grown.swap_remove(len - 1 - k * stride);
                    pages.free_page(p);
                }
            }
            Store::Oracle { used, .. } => *used -= n,
        }
    }

    /// The oracle, if this instance has one.
    pub fn oracle(&mut self) -> Option<&mut crate::layout::DecodeMemory> {
        match self {
            Store::Oracle { mem, .. } => Some(mem),
            Store::Plain { .. } => None,
        }
    }
}

/// A unified pool's one byte budget, shared by KV pages (growing down from the high end) and
/// state slots (growing up from the low end): a page costs `page_bytes`, a slot `slot_bytes`,
/// and together they never exceed `budget` (`docs/sglang-pd.md` §1.6).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shared {
    /// Bytes per rank for pages and slots together.
    pub budget: f64,
    /// One page envelope, bytes per rank.
    pub page_bytes: f64,
    /// One slot envelope, bytes per rank.
    pub slot_bytes: f64,
    /// Bytes in use.
    pub used: f64,
}

/// The memory of one instance: its id store, and for a unified pool the byte budget pages and
/// slots share.
pub struct KvPool {
    /// Where ids come from.
    pub store: Store,
    /// The shared budget of a unified pool (`None`: separate, fixed pools).
    pub shared: Option<Shared>,
}

impl KvPool {
    /// A pool over `store`, optionally under a shared budget.
    pub fn new(store: Store, shared: Option<Shared>) -> Self {
        Self { store, shared }
    }

    /// Usable pages (the most that fit when nothing else is held).
    pub fn total(&self) -> u32 {
        self.store.total()
    }

    /// Pages in use.
    pub fn used(&self) -> u32 {
        self.store.used()
    }

    /// Pages that could be taken now.
    pub fn available(&self) -> u32 {
        let free = self.store.available();
        match &self.shared {
            Some(sh) => free.min(((sh.budget - sh.used).max(0.0) / sh.page_bytes) as u32),
            None => free,
        }
    }

    fn cost(&self, pages: u32, slot: bool) -> f64 {
        self.shared.map_or(0.0, |sh| {
            f64::from(pages) * sh.page_bytes + if slot { sh.slot_bytes } else { 0.0 }
        })
    }

    fn fits(&self, bytes: f64) -> bool {
        self.shared.is_none_or(|sh| sh.used + bytes <= sh.budget)
    }

    /// See [`Store::alloc_split`]; a unified pool also checks its shared budget.
    pub fn alloc_split(
        &mut self,
        id: u64,
        n: u32,
        transferred: u32,
        slot: bool,
    ) -> Option<Holding> {
        let bytes = self.cost(n, slot);
        if !self.fits(bytes) {
            return None;
        }
        let h = self.store.alloc_split(id, n, transferred, slot)?;
        if let Some(sh) = &mut self.shared {
            sh.used += bytes;
        }
        Some(h)
    }

    /// See [`Store::alloc`].
    pub fn alloc(&mut self, id: u64, n: u32, slot: bool) -> Option<Holding> {
        self.alloc_split(id, n, n, slot)
    }

    /// See [`Store::free`].
    pub fn free(&mut self, id: u64, h: &Holding) -> Option<crate::layout::RequestReport> {
        let bytes = self.cost(h.reserved, h.slot.is_some());
        if let Some(sh) = &mut self.shared {
            sh.used -= bytes;
        }
        self.store.free(id, h)
    }

    /// [`KvPool::free`] of a holding the request gives up for good: its page list is kept for
    /// the next allocation ([`Store::recycle`]).
    pub fn free_owned(&mut self, id: u64, h: Holding) -> Option<crate::layout::RequestReport> {
        let report = self.free(id, &h);
        self.store.recycle(h.pages);
        report
    }

    /// See [`Store::grow`].
    pub fn grow(&mut self, n: u32) -> bool {
        // Most decode steps open no page: nothing to take (the budget holds 0 bytes more).
        if n == 0 {
            return true;
        }
        let bytes = self.cost(n, false);
        if !self.fits(bytes) || !self.store.grow(n) {
            return false;
        }
        if let Some(sh) = &mut self.shared {
            sh.used += bytes;
        }
        true
    }

    /// See [`Store::shrink`].
    pub fn shrink(&mut self, n: u32) {
        let bytes = self.cost(n, false);
        if let Some(sh) = &mut self.shared {
            sh.used -= bytes;
        }
        self.store.shrink(n);
    }

    /// Takes `n` pages onto `out` for a decode's radix tree (`sglang::decode_radix`), or
    /// returns `false` taking nothing. Tree pages belong to no request; a pool the oracle
    /// watches is never given a tree (the scenario refuses it), so only the plain store has
    /// ids to hand out.
    pub fn take_for_tree(&mut self, n: u32, out: &mut Vec<u32>) -> bool {
        if self.available() < n {
            return false;
        }
        match &mut self.store {
            Store::Plain { pages, .. } => pages.alloc_into(n, out),
            Store::Oracle { .. } => unreachable!("a decode radix tree on an oracle-watched pool"),
        }
    }

    /// Gives back pages a decode's radix tree evicted.
    pub fn give_from_tree(&mut self, ids: &[u32]) {
        match &mut self.store {
            Store::Plain { pages, .. } => pages.free(ids),
            Store::Oracle { .. } => unreachable!("a decode radix tree on an oracle-watched pool"),
        }
    }

    /// The oracle, if this instance has one.
    pub fn oracle(&mut self) -> Option<&mut crate::layout::DecodeMemory> {
        self.store.oracle()
    }

    /// Whether the oracle watches this instance.
    pub fn is_oracle(&self) -> bool {
        matches!(self.store, Store::Oracle { .. })
    }
}
