//! Max-min fair bandwidth sharing between flows over capacitated links, kept up to date
//! incrementally as flows start and end and links change capacity.
//!
//! # Model
//!
//! A link has a capacity in **bytes per nanosecond** (`f64`, finite, `>= 0`). A flow crosses a set
//! of links (its path) and may carry its own rate cap in bytes/ns (`f64::INFINITY` = none). The
//! rates are the max-min fair allocation, defined by *progressive filling*: raise the rates of all
//! unfrozen flows together; when a link saturates, freeze every flow on it; when a flow reaches its
//! cap, freeze it; repeat until every flow is frozen. The result is the unique allocation in which
//! every flow is either at its cap or crosses a saturated link on which no flow is faster
//! (its *bottleneck*).
//!
//! # Algorithm
//!
//! Progressive filling is run in its "bottleneck" form. If `C_l` is the capacity of link `l`,
//! `F_l` the summed rate of the flows already frozen on it and `n_l` the number of unfrozen flows
//! on it, then `l` saturates when the common level reaches `share_l = (C_l - F_l) / n_l`. The next
//! event is the smallest `share_l` or the smallest cap of an unfrozen flow; it freezes the flows
//! concerned, which lowers `F` and `n` on the other links of their paths. Each level is computed
//! from the capacities directly instead of by adding up increments, so there is no drift between
//! "the level" and "what the links carry" to absorb with a tolerance.
//!
//! Shares are kept in a binary min-heap with *lazy* keys: freezing a flow on link `m` only updates
//! `F_m` and `n_m`, not the heap. This is sound because a link's share never decreases while the
//! level rises (freezing a flow at level `t <= share_m` gives `(C-F-t)/(n-1) >= (C-F)/n`), so a
//! stale key is a lower bound; a popped link whose current share is above its key is pushed back
//! with the current share, otherwise it is the bottleneck. Flows with a finite cap are visited in
//! ascending `(cap, id)` order alongside the heap. When a link is the bottleneck, all its unfrozen
//! flows freeze at once and each other link is updated once per such batch (by `count * level`).
//!
//! # Incrementality
//!
//! Flows interact only through shared links, so the allocation of a connected component (links
//! and flows reachable from one another through shared links) depends on nothing else. A mutation
//! only marks the links it touches *dirty*; the next query that needs rates (`rate`, `link_load`,
//! `drain_changes`) finds the components of the dirty links by a breadth-first search and re-solves
//! each of them once, however many mutations hit it in between.
//!
//! # Complexity
//!
//! For a recomputed component with `F` flows, `L` links, `E` (flow, link) incidences and `K`
//! capped flows: `O(E + (L + R) log L + K log K)` where `R <= E` counts re-pushes of stale keys
//! (the search for the component is `O(E)`). Components not touched since the last query cost
//! nothing. A mutation itself costs `O(p * (log k + k))` for a path of `p` links holding up to `k`
//! flows each (sorted insertion or removal in the per-link flow lists, a `memmove` of `k` ids).
//! `drain_changes` costs `O(c log c)` for `c` changed flows (or a scan of the flow ids when `c`
//! is a large fraction of them).
//!
//! Note the limit of the approach: when many flows share links (a busy oversubscribed leaf/spine
//! fabric with random traffic) the whole fabric is one component and every mutation re-solves all
//! of it (about 0.6 ms for 10,000 flows). That is inherent to max-min fairness rather than to
//! this implementation: there, one flow ending genuinely changes the rates of a large part of the
//! others (about 45% of them in `benches/maxmin.rs`), so any exact method does `O(flows)` work
//! and so does the fabric recomputing their due times.
//!
//! # Determinism and numerics
//!
//! No hash containers are used. The result for a component depends only on its content (ids,
//! paths, caps, capacities), never on the history that produced it: per-link flow lists are kept
//! sorted by id, heap ties are broken by link index and capped flows are sorted by `(cap, id)`.
//! So recomputing an unchanged component gives bit-identical rates and reports no change.
//!
//! The solver uses no tolerance at all, which is possible because it never asks "is this link
//! saturated?" by comparing a load with a capacity (the usual place where a tolerance is needed);
//! it picks the bottleneck as the argmin of the shares, which is exact by construction. Two links
//! that saturate at the same level in exact arithmetic but whose computed shares differ by an ulp
//! are simply handled in two consecutive steps at (nearly) the same level. The remaining capacity
//! `C_l - F_l` is the one quantity prone to cancellation (a link nearly full of frozen flows), so
//! it is accumulated with a compensated (two-sum) subtraction, and clamped at zero so that
//! rounding can never produce a negative rate. Tolerances (1e-9 relative) appear only in tests,
//! which compare two solvers that round differently.
//!
//! The lazy recomputation happens behind `&self` in [`Sharing::rate`] and
//! [`Sharing::link_load`], through a `RefCell`: `Sharing` is `Send` but not `Sync`.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Index of a link (a NIC direction, a switch port...). Dense, 0-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkIdx(pub u32);

/// Handle of a live flow. Ids of removed flows are reused deterministically (lowest free id first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u32);

/// A rate change produced by the last mutation(s): the simulator uses `old_rate` to settle how many
/// bytes the flow moved up to now, then reschedules its completion with `new_rate`.
/// Both rates are in bytes per nanosecond.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateChange {
    pub flow: FlowId,
    /// Rate reported by the previous [`Sharing::drain_changes`] (0.0 for a flow added since).
    pub old_rate: f64,
    /// Current rate.
    pub new_rate: f64,
}

/// Max-min fair sharing of link capacities (bytes/ns) between flows, recomputed lazily and only
/// for the connected components touched by mutations. See the module documentation.
#[derive(Clone, Debug)]
pub struct Sharing {
    topo: Topology,
    sol: RefCell<Solution>,
}

/// Structure, maintained eagerly by every mutation.
#[derive(Clone, Debug, Default)]
struct Topology {
    /// Per link, bytes/ns.
    capacity: Vec<f64>,
    /// Per link, ids of the live flows crossing it, sorted ascending (canonical order).
    link_flows: Vec<Vec<u32>>,
    /// Per flow slot, sorted deduplicated link indices (empty for free slots).
    path: Paths,
    /// Scratch buffer for building a path.
    path_buf: Vec<u32>,
    /// Per flow slot, rate cap in bytes/ns.
    cap: Vec<f64>,
    live: Vec<bool>,
    /// Free flow slots, lowest first.
    free: BinaryHeap<Reverse<u32>>,
    live_count: usize,
}

/// Paths up to this many links are stored inline (one 32-byte record per flow), which covers
/// leaf/spine and three-tier fabrics.
const INLINE_LINKS: usize = 7;

/// Flow paths, indexed by flow slot. Storing short paths inline saves a dependent load (and a
/// likely cache miss) per flow in the solver's two hottest loops; longer paths spill to a `Vec`.
#[derive(Clone, Debug, Default)]
struct Paths {
    inline: Vec<(u32, [u32; INLINE_LINKS])>,
    spill: Vec<Vec<u32>>,
}

impl Paths {
    #[inline]
    fn get(&self, f: usize) -> &[u32] {
        let (len, links) = &self.inline[f];
        let len = *len as usize;
        if len <= INLINE_LINKS {
            &links[..len]
        } else {
            &self.spill[f]
        }
    }

    fn push_slot(&mut self) {
        self.inline.push((0, [0; INLINE_LINKS]));
        self.spill.push(Vec::new());
    }

    fn set(&mut self, f: usize, links: &[u32]) {
        self.inline[f].0 = links.len() as u32;
        if links.len() <= INLINE_LINKS {
            self.inline[f].1[..links.len()].copy_from_slice(links);
            if self.spill[f].capacity() > 0 {
                self.spill[f] = Vec::new();
            }
        } else {
            self.spill[f].clear();
            self.spill[f].extend_from_slice(links);
        }
    }
}

/// Rates and loads (valid for every link not marked dirty), change log and solver working state.
/// The working state is sized like the topology so that it can be indexed by link or flow id
/// directly, and is reused between solves to avoid allocation.
#[derive(Clone, Debug, Default)]
struct Solution {
    /// Per flow slot, bytes/ns.
    rate: Vec<f64>,
    /// Per link, bytes/ns.
    load: Vec<f64>,
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Per flow slot, the rate last reported by `drain_changes` (0.0 for a new flow).
    reported: Vec<f64>,
    /// Flows whose rate may differ from `reported`.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
    recomputations: u64,
    recomputed_flows: u64,

    /// Visit marks: `link_epoch[l] == epoch` iff `l` was reached during the current refresh.
    epoch: u32,
    link_epoch: Vec<u32>,
    flow_epoch: Vec<u32>,
    comp_links: Vec<u32>,
    comp_flows: Vec<u32>,
    /// Remaining capacity `C_l - F_l` as an unevaluated sum `rem_hi + rem_lo` (compensated).
    rem_hi: Vec<f64>,
    rem_lo: Vec<f64>,
    unfrozen: Vec<u32>,
    frozen: Vec<bool>,
    /// Per link, flows frozen on it by the current batch (zero between batches).
    batch_count: Vec<u32>,
    /// Links with a non-zero `batch_count`, in order of first touch.
    batch_links: Vec<u32>,
    /// `(cap bits, flow)` of the component's capped flows; for caps `>= +0.0` the bit pattern
    /// orders like the value.
    capped: Vec<(u64, u32)>,
    /// Lazy min-heap of `(share bits, link)`.
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Unfrozen flows left in the component being solved.
    left: usize,
    /// Solve every component with progressive filling, small ones included (tests compare the
    /// shortcuts of [`Solution::solve_small`] with it).
    general_only: bool,
}

fn check_capacity(capacity: f64) -> f64 {
    assert!(
        capacity.is_finite() && capacity >= 0.0,
        "link capacity must be finite and >= 0 bytes/ns, got {capacity}"
    );
    capacity + 0.0 // turns -0.0 into +0.0, so bit patterns order like values
}

/// Error-free transformation: `a + b == s + e` exactly (Knuth's two-sum).
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

impl Solution {
    fn grow_links(&mut self, n: usize) {
        self.load.resize(n, 0.0);
        self.is_dirty.resize(n, false);
        self.link_epoch.resize(n, 0);
        self.rem_hi.resize(n, 0.0);
        self.rem_lo.resize(n, 0.0);
        self.unfrozen.resize(n, 0);
        self.batch_count.resize(n, 0);
    }

    fn grow_flows(&mut self, n: usize) {
        self.rate.resize(n, 0.0);
        self.reported.resize(n, 0.0);
        self.is_touched.resize(n, false);
        self.flow_epoch.resize(n, 0);
        self.frozen.resize(n, false);
    }

    fn mark_dirty(&mut self, l: u32) {
        if !self.is_dirty[l as usize] {
            self.is_dirty[l as usize] = true;
            self.dirty.push(l);
        }
    }

    fn touch(&mut self, f: u32) {
        if !self.is_touched[f as usize] {
            self.is_touched[f as usize] = true;
            self.touched.push(f);
        }
    }

    /// Re-solves every component containing a dirty link, once each.
    #[inline]
    fn refresh(&mut self, topo: &Topology) {
        if !self.dirty.is_empty() {
            self.refresh_dirty(topo);
        }
    }

    /// [`Solution::refresh`] with dirty links.
    fn refresh_dirty(&mut self, topo: &Topology) {
        if self.epoch == u32::MAX {
            self.link_epoch.fill(0);
            self.flow_epoch.fill(0);
            self.epoch = 0;
        }
        self.epoch += 1;
        let mut dirty = std::mem::take(&mut self.dirty);
        for &start in &dirty {
            if self.link_epoch[start as usize] == self.epoch {
                continue; // its component was already solved in this refresh
            }
            self.collect_component(topo, start);
            if self.general_only || !self.solve_small(topo) {
                self.solve_component(topo);
            }
            self.recomputations += 1;
            self.recomputed_flows += self.comp_flows.len() as u64;
        }
        for &l in &dirty {
            self.is_dirty[l as usize] = false;
        }
        dirty.clear();
        self.dirty = dirty; // keep the allocation
    }

    /// Collects into `comp_links` / `comp_flows` the component of link `start` (breadth-first).
    fn collect_component(&mut self, topo: &Topology, start: u32) {
        let e = self.epoch;
        self.comp_links.clear();
        self.comp_flows.clear();
        self.link_epoch[start as usize] = e;
        self.comp_links.push(start);
        let mut next = 0;
        while next < self.comp_links.len() {
            let l = self.comp_links[next] as usize;
            next += 1;
            for &f in &topo.link_flows[l] {
                if self.flow_epoch[f as usize] == e {
                    continue;
                }
                self.flow_epoch[f as usize] = e;
                self.comp_flows.push(f);
                for &m in topo.path.get(f as usize) {
                    if self.link_epoch[m as usize] != e {
                        self.link_epoch[m as usize] = e;
                        self.comp_links.push(m);
                    }
                }
            }
        }
    }

    /// Solves a component of at most one flow directly, with the bits progressive filling gives
    /// (most components of a lightly loaded fabric: a flow alone on its NICs, or the links a
    /// flow just left); returns whether it did. Alone, the flow's share on each link is the
    /// link's capacity (`C / 1`, exact), the level is the smallest of them, and the flow's cap
    /// wins ties (`cap_level <= link_level`); each link then carries `0.0 + 1.0 × rate`, i.e.
    /// the rate. Capacities are `>= +0.0`, so `min` and the heap's bit order agree. The working
    /// state (`rem_*`, `unfrozen`, `frozen`) is only read inside a solve, after its own reset.
    fn solve_small(&mut self, topo: &Topology) -> bool {
        match self.comp_flows.len() {
            0 => {
                for &l in &self.comp_links {
                    self.load[l as usize] = 0.0;
                }
                true
            }
            1 => {
                // Links reached but not on the path cannot exist: the search starts on a link
                // of the flow's and only follows the flow's path.
                debug_assert_eq!(
                    self.comp_links.len(),
                    topo.path.get(self.comp_flows[0] as usize).len()
                );
                self.solve_alone(topo, self.comp_flows[0]);
                true
            }
            _ => false,
        }
    }

    /// Solves flow `f`, alone on every link of its (non-empty) path, as progressive filling
    /// would (see [`Solution::solve_small`]).
    fn solve_alone(&mut self, topo: &Topology, f: u32) {
        let path = topo.path.get(f as usize);
        let level = path
            .iter()
            .map(|&l| topo.capacity[l as usize])
            .fold(f64::INFINITY, f64::min);
        let cap = topo.cap[f as usize];
        let rate = if cap <= level { cap } else { level };
        for &l in path {
            self.load[l as usize] = rate;
        }
        if self.rate[f as usize] != rate {
            self.rate[f as usize] = rate;
            self.touch(f);
        }
    }

    /// Current fair share of link `l` (bytes/ns); requires `unfrozen[l] > 0`.
    fn share(&self, l: usize) -> f64 {
        let rem = self.rem_hi[l] + self.rem_lo[l];
        // Mathematically rem >= 0 here; rounding may leave a tiny negative, never a negative rate.
        let rem = if rem > 0.0 { rem } else { 0.0 };
        rem / f64::from(self.unfrozen[l])
    }

    /// Marks flow `f` frozen at `rate` (bytes/ns) and records whether its rate changed. The
    /// caller takes the flow off its links.
    fn set_frozen(&mut self, f: u32, rate: f64) {
        let fu = f as usize;
        self.frozen[fu] = true;
        self.left -= 1;
        if self.rate[fu] != rate {
            self.rate[fu] = rate;
            self.touch(f);
        }
    }

    /// Takes `count` flows frozen at `rate` (bytes/ns) off link `m`.
    fn take(&mut self, m: usize, count: u32, rate: f64) {
        let amount = f64::from(count) * rate;
        let (hi, err) = two_sum(self.rem_hi[m], -amount);
        self.rem_hi[m] = hi;
        self.rem_lo[m] += err;
        self.unfrozen[m] -= count;
        // Freeze order depends only on the component's content: the load is canonical too.
        self.load[m] += amount;
    }

    /// Freezes flow `f` at its cap `rate` (bytes/ns).
    fn freeze_capped(&mut self, topo: &Topology, f: u32, rate: f64) {
        self.set_frozen(f, rate);
        for &m in topo.path.get(f as usize) {
            self.take(m as usize, 1, rate);
        }
    }

    /// Freezes at `level` (bytes/ns) every unfrozen flow on link `l`, its bottleneck.
    fn freeze_link(&mut self, topo: &Topology, l: usize, level: f64) {
        // Count the frozen flows per link first, then update each link once: updating as we go
        // makes the hundreds of flows of a busy link a long chain of dependent floating-point
        // operations on that link's counters (and is less accurate).
        for &f in &topo.link_flows[l] {
            if self.frozen[f as usize] {
                continue;
            }
            self.set_frozen(f, level);
            for &m in topo.path.get(f as usize) {
                if self.batch_count[m as usize] == 0 {
                    self.batch_links.push(m);
                }
                self.batch_count[m as usize] += 1;
            }
        }
        for i in 0..self.batch_links.len() {
            let m = self.batch_links[i] as usize;
            let count = std::mem::take(&mut self.batch_count[m]);
            self.take(m, count, level);
        }
        self.batch_links.clear();
    }

    /// Progressive filling over the collected component; sets `rate` and `load`.
    fn solve_component(&mut self, topo: &Topology) {
        for &l in &self.comp_links {
            let l = l as usize;
            self.rem_hi[l] = topo.capacity[l];
            self.rem_lo[l] = 0.0;
            self.unfrozen[l] = topo.link_flows[l].len() as u32;
            self.load[l] = 0.0;
        }
        self.capped.clear();
        for &f in &self.comp_flows {
            self.frozen[f as usize] = false;
            let cap = topo.cap[f as usize];
            if cap.is_finite() {
                self.capped.push((cap.to_bits(), f));
            }
        }
        self.capped.sort_unstable();
        self.heap.clear();
        for i in 0..self.comp_links.len() {
            let l = self.comp_links[i];
            if self.unfrozen[l as usize] > 0 {
                let key = self.share(l as usize).to_bits();
                self.heap.push(Reverse((key, l)));
            }
        }
        self.left = self.comp_flows.len();
        let mut next_cap = 0;
        while self.left > 0 {
            while next_cap < self.capped.len() && self.frozen[self.capped[next_cap].1 as usize] {
                next_cap += 1;
            }
            let cap_level = self
                .capped
                .get(next_cap)
                .map_or(f64::INFINITY, |&(bits, _)| f64::from_bits(bits));
            // Every link with unfrozen flows has at least one entry in the heap (entries are
            // only dropped once their link has none), so the heap is empty only if the flows
            // left are all capped.
            let link_level = self
                .heap
                .peek()
                .map_or(f64::INFINITY, |&Reverse((bits, _))| f64::from_bits(bits));
            if cap_level <= link_level {
                // Keys are lower bounds of the current shares, so no link saturates below this
                // cap: the flow reaches its cap first (ties go to the cap; same level anyway).
                let f = self
                    .capped
                    .get(next_cap)
                    .expect("max-min solver: unfrozen flow without any unfrozen link")
                    .1;
                self.freeze_capped(topo, f, cap_level);
                next_cap += 1;
                continue;
            }
            let Reverse((key, l)) = self.heap.pop().expect("link_level is finite");
            let lu = l as usize;
            if self.unfrozen[lu] == 0 {
                continue; // duplicate entry of a link already done
            }
            let share = self.share(lu);
            if share > f64::from_bits(key) {
                self.heap.push(Reverse((share.to_bits(), l))); // stale key
                continue;
            }
            // `l` saturates at level `share`: freeze its unfrozen flows there.
            self.freeze_link(topo, lu, share);
        }
    }
}

impl Sharing {
    /// Creates links with the given capacities (bytes/ns, finite, `>= 0`); link `i` is `LinkIdx(i)`.
    pub fn new(capacities: Vec<f64>) -> Self {
        let capacity: Vec<f64> = capacities.into_iter().map(check_capacity).collect();
        let n = capacity.len();
        let mut sol = Solution::default();
        sol.grow_links(n);
        Sharing {
            topo: Topology {
                capacity,
                link_flows: vec![Vec::new(); n],
                ..Topology::default()
            },
            sol: RefCell::new(sol),
        }
    }

    /// Adds a link of `capacity` bytes/ns (finite, `>= 0`) and returns its index.
    pub fn add_link(&mut self, capacity: f64) -> LinkIdx {
        let idx = self.topo.capacity.len();
        let idx32 = u32::try_from(idx).expect("too many links");
        self.topo.capacity.push(check_capacity(capacity));
        self.topo.link_flows.push(Vec::new());
        self.sol.get_mut().grow_links(idx + 1);
        LinkIdx(idx32)
    }

    /// Starts a flow over `path` (duplicates are ignored) with a rate cap of `cap` bytes/ns
    /// (`f64::INFINITY` for none). Returns the lowest free id.
    ///
    /// # Panics
    /// If a link index is out of range, if `cap` is NaN or negative, or if `path` is empty and
    /// `cap` is infinite (such a flow would have an unbounded rate: a programming error). A flow
    /// with an empty path and a finite cap simply gets its cap.
    pub fn add_flow(&mut self, path: &[LinkIdx], cap: f64) -> FlowId {
        assert!(
            cap >= 0.0,
            "flow rate cap must be >= 0 bytes/ns or INFINITY, got {cap}"
        );
        assert!(
            !path.is_empty() || cap.is_finite(),
            "a flow with an empty path and no rate cap would have an unbounded rate"
        );
        let cap = cap + 0.0;
        let nlinks = self.topo.capacity.len();
        for l in path {
            assert!(
                (l.0 as usize) < nlinks,
                "link {} out of range ({nlinks} links)",
                l.0
            );
        }
        let topo = &mut self.topo;
        let sol = self.sol.get_mut();
        let id = match topo.free.pop() {
            Some(Reverse(id)) => id,
            None => {
                let id = u32::try_from(topo.live.len()).expect("too many flows");
                topo.live.push(false);
                topo.path.push_slot();
                topo.cap.push(0.0);
                sol.grow_flows(id as usize + 1);
                id
            }
        };
        let f = id as usize;
        topo.live[f] = true;
        topo.live_count += 1;
        topo.cap[f] = cap;
        let p = &mut topo.path_buf;
        p.clear();
        p.extend(path.iter().map(|l| l.0));
        if !p.is_sorted_by(|a, b| a < b) {
            p.sort_unstable();
            p.dedup();
        }
        topo.path.set(f, p);
        // A flow alone on links no pending mutation touched is a component of its own: solved
        // now, with nothing marked for the next refresh (the common case on a quiet fabric).
        let alone = !sol.general_only
            && !p.is_empty()
            && p.iter()
                .all(|&l| topo.link_flows[l as usize].is_empty() && !sol.is_dirty[l as usize]);
        for &l in p.iter() {
            let list = &mut topo.link_flows[l as usize];
            let pos = list.binary_search(&id).unwrap_err();
            list.insert(pos, id);
            if !alone {
                sol.mark_dirty(l);
            }
        }
        // New flows are reported against a baseline of 0.0.
        sol.reported[f] = 0.0;
        sol.rate[f] = if p.is_empty() { cap } else { 0.0 };
        sol.touch(id);
        if alone {
            sol.solve_alone(topo, id);
        }
        FlowId(id)
    }

    /// Ends a live flow; its id becomes free for reuse.
    ///
    /// # Panics
    /// If `flow` is not live.
    pub fn remove_flow(&mut self, flow: FlowId) {
        self.assert_live(flow);
        let f = flow.0 as usize;
        let topo = &mut self.topo;
        let sol = self.sol.get_mut();
        for &l in topo.path.get(f) {
            let list = &mut topo.link_flows[l as usize];
            let pos = list
                .binary_search(&flow.0)
                .expect("flow listed on its links");
            if pos + 1 == list.len() {
                // The last (often the only) flow: no shift, so no memmove call.
                list.pop();
            } else {
                list.remove(pos);
            }
            if list.is_empty() && !sol.is_dirty[l as usize] && !sol.general_only {
                // An empty link is a component of its own: it carries nothing.
                sol.load[l as usize] = 0.0;
            } else {
                sol.mark_dirty(l);
            }
        }
        topo.path.set(f, &[]);
        topo.live[f] = false;
        topo.live_count -= 1;
        topo.free.push(Reverse(flow.0));
        sol.rate[f] = 0.0;
    }

    /// Sets the capacity of `link` in bytes/ns (finite, `>= 0`; 0.0 models a link that is down:
    /// every flow crossing it gets rate 0.0).
    pub fn set_capacity(&mut self, link: LinkIdx, capacity: f64) {
        let capacity = check_capacity(capacity);
        let c = &mut self.topo.capacity[link.0 as usize];
        if c.to_bits() != capacity.to_bits() {
            *c = capacity;
            self.sol.get_mut().mark_dirty(link.0);
        }
    }

    /// Current max-min fair rate of a live flow, in bytes/ns.
    ///
    /// # Panics
    /// If `flow` is not live.
    pub fn rate(&self, flow: FlowId) -> f64 {
        self.assert_live(flow);
        let mut sol = self.sol.borrow_mut();
        sol.refresh(&self.topo);
        sol.rate[flow.0 as usize]
    }

    /// The rate cap of a live flow, bytes/ns (`INFINITY` for none), as given to `add_flow`.
    pub fn cap(&self, flow: FlowId) -> f64 {
        self.assert_live(flow);
        self.topo.cap[flow.0 as usize]
    }

    /// Capacity of `link` in bytes/ns.
    pub fn capacity(&self, link: LinkIdx) -> f64 {
        self.topo.capacity[link.0 as usize]
    }

    /// Sum of the rates of the flows crossing `link`, in bytes/ns.
    pub fn link_load(&self, link: LinkIdx) -> f64 {
        let mut sol = self.sol.borrow_mut();
        sol.refresh(&self.topo);
        sol.load[link.0 as usize]
    }

    /// Live flows crossing `link`, in ascending id order.
    pub fn flows_on(&self, link: LinkIdx) -> impl Iterator<Item = FlowId> + '_ {
        self.topo.link_flows[link.0 as usize]
            .iter()
            .map(|&f| FlowId(f))
    }

    /// Number of live flows.
    pub fn live_flows(&self) -> usize {
        self.topo.live_count
    }

    /// Number of links.
    pub fn num_links(&self) -> usize {
        self.topo.capacity.len()
    }

    /// Whether `flow` is a live flow.
    pub fn is_live(&self, flow: FlowId) -> bool {
        self.topo
            .live
            .get(flow.0 as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Path of a live flow: sorted, deduplicated link indices.
    pub fn path(&self, flow: FlowId) -> impl Iterator<Item = LinkIdx> + '_ {
        self.assert_live(flow);
        self.topo
            .path
            .get(flow.0 as usize)
            .iter()
            .map(|&l| LinkIdx(l))
    }

    /// Rate cap of a live flow in bytes/ns (`f64::INFINITY` if none).
    pub fn flow_cap(&self, flow: FlowId) -> f64 {
        self.assert_live(flow);
        self.topo.cap[flow.0 as usize]
    }

    /// Appends to `out` every flow whose rate changed since the last drain (new flows with
    /// old_rate 0.0), in ascending FlowId order, exactly once each; removed flows are not reported.
    ///
    /// "Changed" is exact `f64` inequality with the value reported last time; a new flow whose
    /// rate is 0.0 (e.g. on a link that is down) is therefore not reported until it gets a
    /// positive rate. Recomputing a component whose content did not change yields bit-identical
    /// rates, so such recomputations report nothing.
    pub fn drain_changes(&mut self, out: &mut Vec<RateChange>) {
        let topo = &self.topo;
        let sol = self.sol.get_mut();
        sol.refresh(topo);
        if sol.touched.len() <= 1 {
            // Nothing to order (one flow changed, the common case on a quiet fabric).
        } else if sol.touched.len() * 16 > sol.is_touched.len() {
            // Many changes (a big component): reading the marks in id order is cheaper than
            // sorting.
            let marks = &sol.is_touched;
            sol.touched.clear();
            sol.touched
                .extend((0..marks.len() as u32).filter(|&f| marks[f as usize]));
        } else {
            sol.touched.sort_unstable();
        }
        for &f in &sol.touched {
            let fu = f as usize;
            sol.is_touched[fu] = false;
            if !topo.live[fu] {
                continue;
            }
            let (old_rate, new_rate) = (sol.reported[fu], sol.rate[fu]);
            if old_rate != new_rate {
                out.push(RateChange {
                    flow: FlowId(f),
                    old_rate,
                    new_rate,
                });
                sol.reported[fu] = new_rate;
            }
        }
        sol.touched.clear();
    }

    /// Whether a mutation left something for [`Sharing::drain_changes`]: a component to
    /// re-solve, or a flow whose rate may have changed. A flow that leaves links it had alone
    /// leaves nothing.
    pub fn has_pending(&mut self) -> bool {
        let sol = self.sol.get_mut();
        !sol.dirty.is_empty() || !sol.touched.is_empty()
    }

    /// Number of component recomputations done so far (for the benchmark).
    pub fn recomputations(&self) -> u64 {
        self.sol.borrow().recomputations
    }

    /// Total number of flows over all component recomputations done so far; divided by
    /// [`Sharing::recomputations`] it gives the mean component size.
    pub fn recomputed_flows(&self) -> u64 {
        self.sol.borrow().recomputed_flows
    }

    /// Solves every component by progressive filling, without the shortcut for components of
    /// at most one flow (tests compare the two bit for bit).
    #[cfg(test)]
    pub(crate) fn general_only(&mut self) {
        self.sol.get_mut().general_only = true;
    }

    /// Marks every link dirty, so that the next query re-solves everything from scratch (a naive
    /// full recomputation, for benchmarks and debugging). Rates come out bit-identical.
    pub fn invalidate_all(&mut self) {
        let sol = self.sol.get_mut();
        for l in 0..self.topo.capacity.len() as u32 {
            sol.mark_dirty(l);
        }
    }

    fn assert_live(&self, flow: FlowId) {
        assert!(self.is_live(flow), "flow {} is not live", flow.0);
    }
}

/// Slow, obviously-correct reference: progressive filling over all flows from scratch.
///
/// `capacities` in bytes/ns per link; each flow is `(path, cap)` with `cap` in bytes/ns
/// (`f64::INFINITY` for none). Returns the rates in bytes/ns, in the order of `flows`.
/// Each round recomputes from scratch, for every link, the capacity left by frozen flows and the
/// number of unfrozen flows, takes the smallest level at which a link saturates or a flow hits its
/// cap, and freezes at that level every flow concerned. `O(flows * total path length)`.
///
/// # Panics
/// Like [`Sharing::add_flow`]: on an empty path with an infinite cap, a bad link index, a
/// negative cap or a bad capacity.
pub fn reference_rates(capacities: &[f64], flows: &[(Vec<LinkIdx>, f64)]) -> Vec<f64> {
    for &c in capacities {
        check_capacity(c);
    }
    let paths: Vec<Vec<usize>> = flows
        .iter()
        .map(|(path, cap)| {
            assert!(*cap >= 0.0, "flow rate cap must be >= 0, got {cap}");
            assert!(
                !path.is_empty() || cap.is_finite(),
                "a flow with an empty path and no rate cap would have an unbounded rate"
            );
            let mut p: Vec<usize> = path.iter().map(|l| l.0 as usize).collect();
            p.sort_unstable();
            p.dedup();
            assert!(p.iter().all(|&l| l < capacities.len()), "link out of range");
            p
        })
        .collect();
    let n = flows.len();
    let mut rate = vec![0.0; n];
    let mut frozen = vec![false; n];
    loop {
        let mut left = capacities.to_vec();
        let mut unfrozen = vec![0usize; capacities.len()];
        for f in 0..n {
            for &l in &paths[f] {
                if frozen[f] {
                    left[l] -= rate[f];
                } else {
                    unfrozen[l] += 1;
                }
            }
        }
        let share: Vec<f64> = (0..capacities.len())
            .map(|l| {
                if unfrozen[l] == 0 {
                    f64::INFINITY
                } else {
                    left[l].max(0.0) / unfrozen[l] as f64
                }
            })
            .collect();
        let mut level = f64::INFINITY;
        let mut any = false;
        for f in (0..n).filter(|&f| !frozen[f]) {
            any = true;
            level = level.min(flows[f].1);
            for &l in &paths[f] {
                level = level.min(share[l]);
            }
        }
        if !any {
            return rate;
        }
        for f in 0..n {
            if frozen[f] {
                continue;
            }
            if flows[f].1 <= level {
                rate[f] = flows[f].1;
                frozen[f] = true;
            } else if paths[f].iter().any(|&l| share[l] <= level) {
                rate[f] = level;
                frozen[f] = true;
            }
        }
    }
}

#[cfg(test)]
mod tests;
