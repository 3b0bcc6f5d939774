//! KV page allocation with real page ids, as sglang's paged allocator hands them out: page 0 is
//! the padding sink and never allocated; a request's pages need not be contiguous once the pool
//! has churned, which is what decides how many contiguous runs (and RDMA writes) a transfer has.

/// Free-list page allocator of one instance (ids are per rank-group: every TP rank of an
/// instance uses the same page ids for a request).
#[derive(Clone, Debug)]
pub struct PageAllocator {
    /// Free page ids; allocation pops from the end, so a fresh pool hands out 1, 2, 3, …
    free: Vec<u32>,
    total: u32,
}

impl PageAllocator {
    /// A pool of `total` usable pages, ids `1..=total` (0 is the sink).
    pub fn new(total: u32) -> Self {
        Self {
            free: (1..=total).rev().collect(),
            total,
        }
    }

    /// Usable pages.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Pages free now.
    pub fn available(&self) -> u32 {
        self.free.len() as u32
    }

    /// Pages in use now.
    pub fn used(&self) -> u32 {
        self.total - self.available()
    }

    /// Takes `n` pages, or `None` (taking nothing) when fewer are free.
    pub fn alloc(&mut self, n: u32) -> Option<Vec<u32>> {
        let n = n as usize;
        if n > self.free.len() {
            return None;
        }
        let at = self.free.len() - n;
        let mut pages = self.free.split_off(at);
        pages.reverse();
        Some(pages)
    }

    /// Returns `pages` to the pool, so that the next allocation of the same size gets them back
    /// in the same order.
    pub fn free(&mut self, pages: &[u32]) {
        self.free.extend(pages.iter().rev());
        debug_assert!(
            self.free.len() <= self.total as usize,
            "double free of KV pages"
        );
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
    }
}
