//! A flow's life inside the fabric: its phases (latency, moving, retrying), lazy settling of its
//! bytes, path selection in Mooncake's NIC preference order, its next due time, and its end.
//! Everything here is private to the fabric; the driving API is in `mod.rs`.

use std::cmp::Reverse;

use super::maxmin::LinkIdx;
use super::topology::{GpuId, MAX_PATH, Path};
use super::{Fabric, FailReason, Flow, FlowEnd, FlowId, FlowOutcome, Kind, Phase};
use crate::engine::Nanos;

/// The contract's one hard failure, out of line: every call advances the clock first, so the
/// check stays a compare and a branch.
#[cold]
#[inline(never)]
fn time_went_backwards(now: Nanos, last: Nanos) -> ! {
    panic!("fabric called at {now} ns after a call at {last} ns: time went backwards")
}

impl<T: Copy> Fabric<T> {
    /// A live flow; panics with its id if it is not live (a simulator bug).
    pub(super) fn flow(&self, flow: FlowId) -> &Flow<T> {
        self.flows
            .get(flow.0 as usize)
            .and_then(Option::as_ref)
            .unwrap_or_else(|| panic!("flow {} is not live", flow.0))
    }

    /// Handles flow `fi`'s event, due at or before `now`: a phase change (latency paid: route
    /// it; failure seen: retry or give up) or its end, which is returned.
    // Inlinable across codegen units, whatever modules the crate gains (issue 39's callgrind:
    // left to the partitioning it was called out of line, +2 M instructions on the 30k case).
    #[inline]
    pub(super) fn fire_one(&mut self, now: Nanos, fi: usize) -> Option<FlowEnd<T>> {
        let f = self.flows[fi].as_ref().expect("a live flow");
        let (due, deadline, phase) = (f.due_ns, f.deadline_ns, f.phase);
        if due <= now && due <= deadline {
            return match phase {
                Phase::Latency { .. } => self.route(fi, now),
                Phase::Moving { .. } => Some(self.end(fi, now, FlowOutcome::Completed)),
                Phase::Retrying { .. } => {
                    if f.failures > self.params.retry_cnt {
                        let reason = if self.select_path(fi).is_some() {
                            FailReason::RetriesExhausted
                        } else {
                            FailReason::NoRoute
                        };
                        Some(self.end(fi, now, FlowOutcome::Failed(reason)))
                    } else {
                        self.route(fi, now)
                    }
                }
            };
        }
        if deadline <= now {
            return Some(self.end(fi, now, FlowOutcome::Failed(FailReason::Timeout)));
        }
        // Not due (cannot happen when the contract is followed): ask for a fresh event.
        self.mark_dirty(fi as u32);
        None
    }

    /// Stores a new flow under the lowest free id (deterministic reuse) and returns the id.
    pub(super) fn insert(&mut self, flow: Flow<T>) -> u32 {
        let id = match self.free.pop() {
            Some(Reverse(id)) => id,
            None => {
                let id = u32::try_from(self.flows.len()).expect("too many flows");
                self.flows.push(None);
                self.is_dirty.push(false);
                id
            }
        };
        self.flows[id as usize] = Some(flow);
        self.live += 1;
        self.stats.started += 1;
        id
    }

    /// Moves the clock to `now`: applies rate changes of mutations made earlier, and scheduled
    /// link-ups due by `now`.
    #[inline]
    pub(super) fn advance(&mut self, now: Nanos) {
        if now < self.now {
            time_went_backwards(now, self.now);
        }
        if self.pending.is_some_and(|t| t < now) {
            self.flush();
        }
        if !self.ups.is_empty() {
            self.raise_due_ups(now);
        }
        self.now = now;
    }

    /// Applies the scheduled link-ups due by `now` (ns).
    fn raise_due_ups(&mut self, now: Nanos) {
        while let Some(&Reverse((at, _, l))) = self.ups.peek() {
            if at > now {
                break;
            }
            self.ups.pop();
            self.raise(l);
        }
    }

    /// Applies the solver's rate changes at the time of the mutations that caused them: each
    /// changed flow moved at its old rate until then.
    #[inline]
    pub(super) fn flush(&mut self) {
        if let Some(t) = self.pending.take() {
            self.flush_at(t);
        }
    }

    /// [`Fabric::flush`] of mutations made at `t` (ns).
    fn flush_at(&mut self, t: Nanos) {
        let mut changes = std::mem::take(&mut self.changes);
        changes.clear();
        self.sharing.drain_changes(&mut changes);
        for ch in &changes {
            let fi = self.owner[ch.flow.0 as usize] as usize;
            self.settle(fi, t);
            self.flows[fi].as_mut().expect("owner is live").rate = ch.new_rate;
            self.mark_dirty(fi as u32);
        }
        self.changes = changes;
    }

    /// Computes the next event (ns) of every flow marked dirty and updates the timer heap.
    #[inline]
    pub(super) fn process_dirty(&mut self, now: Nanos) {
        if !self.dirty.is_empty() {
            self.process_dirty_now(now);
        }
    }

    /// [`Fabric::process_dirty`] with flows marked.
    fn process_dirty_now(&mut self, now: Nanos) {
        // Borrowed field by field: the list is walked in place, not taken and put back.
        let Self {
            dirty,
            is_dirty,
            flows,
            timers,
            ..
        } = self;
        if dirty.len() == 1 {
            // One flow (a quiet fabric): already in order.
        } else if dirty.len() * 16 > is_dirty.len() {
            // Many (a big component changed): reading the marks in id order beats sorting.
            dirty.clear();
            dirty.extend((0..is_dirty.len() as u32).filter(|&f| is_dirty[f as usize]));
        } else {
            dirty.sort_unstable();
        }
        for &fi in dirty.iter() {
            is_dirty[fi as usize] = false;
            let Some(f) = flows[fi as usize].as_mut() else {
                continue;
            };
            let due = match f.phase {
                Phase::Latency { until } | Phase::Retrying { until } => until,
                Phase::Moving { .. } => {
                    let goodput = f.rate * f.keep;
                    if f.remaining <= 0.0 {
                        f.settled_ns
                    } else if goodput > 0.0 {
                        // Rounded up: the event never comes before the last byte.
                        f.settled_ns
                            .saturating_add(crate::engine::ceil_ns(f.remaining / goodput))
                    } else {
                        Nanos::MAX
                    }
                }
            };
            f.due_ns = due;
            let at = due.min(f.deadline_ns);
            if at == Nanos::MAX {
                timers.remove(fi);
                continue;
            }
            timers.set(fi, at.max(now));
        }
        dirty.clear();
    }

    /// Lists the flow for the next `process_dirty`: its next event (or its rate) changed.
    pub(super) fn mark_dirty(&mut self, fi: u32) {
        if !self.is_dirty[fi as usize] {
            self.is_dirty[fi as usize] = true;
            self.dirty.push(fi);
        }
    }

    /// Brings a flow's bytes up to `now` at its current rate.
    pub(super) fn settle(&mut self, fi: usize, now: Nanos) {
        let slice = self.params.slice_bytes as f64;
        let Self { flows, links, .. } = self;
        let f = flows[fi].as_mut().expect("settle a live flow");
        if matches!(f.phase, Phase::Moving { .. }) && now > f.settled_ns && f.rate > 0.0 {
            let goodput = f.rate * f.keep;
            let dt = (now - f.settled_ns) as f64;
            // A flow past its (rounded-up) due time has landed everything, whatever the float
            // product says: otherwise a flow due at the very instant another one ends would be
            // left a residue and pushed 1 ns later.
            let due = f
                .settled_ns
                .saturating_add(crate::engine::ceil_ns(f.remaining / goodput));
            let good = if now >= due {
                f.remaining
            } else {
                (goodput * dt).min(f.remaining)
            };
            let wire = good / f.keep;
            let resent = wire - good;
            f.remaining -= good;
            f.delivered_on_path += good;
            f.retransmitted += resent;
            for &l in f.path.links() {
                let st = &mut links[l.0 as usize];
                st.bytes += wire;
                st.retransmitted += resent;
            }
            if f.delivered_on_path >= slice {
                // A slice landed on this path: the slices that failed before are through.
                f.failures = 0;
            }
        }
        f.settled_ns = f.settled_ns.max(now);
    }

    /// Goodput fraction of a path.
    pub(super) fn keep_of(&self, path: Path) -> f64 {
        path.links()
            .iter()
            .map(|l| 1.0 - self.links[l.0 as usize].loss)
            .product()
    }

    pub(super) fn path_is_up(&self, path: &Path) -> bool {
        path.links()
            .iter()
            .all(|l| self.links[l.0 as usize].down == 0)
    }

    /// The path an attempt uses: the first NIC pair, in Mooncake's preference order, whose
    /// links are all up. Order: the sender's preferred NIC with each receiver NIC (preferred
    /// first, then the node's others in ring order), then the sender's next NIC, and so on.
    pub(super) fn select_path(&self, fi: usize) -> Option<Path> {
        let f = self.flows[fi].as_ref().expect("live");
        let up = |p: Path| self.path_is_up(&p).then_some(p);
        if f.src.node == f.dst.node
            || (f.kind == Kind::Batch && self.layout.nvlink_reach(f.src, f.dst))
        {
            return up(self.layout.nvlink_path(f.src, f.dst));
        }
        let n = self.layout.cfg.nics_per_node;
        let l = &self.layout;
        (0..n).find_map(|i| {
            let a = l.candidate(f.src, f.rail + i);
            (0..n).find_map(|j| {
                let b = l.candidate(f.dst, f.rail + j);
                up(if f.kind == Kind::Batch {
                    l.rdma_path(f.src, a, b, f.dst)
                } else {
                    l.nic_path(a, b)
                })
            })
        })
    }

    /// Whether a Mooncake batch from GPU `src` to GPU `dst` would find a path now: some NIC
    /// pair of its preference list (or the NVLink path, where the batch takes it) with every
    /// link up — what a probe of the session (`send_probe`, sglang's failed-session probe)
    /// learns. O(1) while every link is up.
    pub fn reachable(&self, src: GpuId, dst: GpuId) -> bool {
        if self.links_down == 0 {
            return true;
        }
        let l = &self.layout;
        if src.node == dst.node || l.nvlink_reach(src, dst) {
            return self.path_is_up(&l.nvlink_path(src, dst));
        }
        let n = l.cfg.nics_per_node;
        (0..n).any(|i| {
            let a = l.candidate(src, i);
            (0..n).any(|j| self.path_is_up(&l.rdma_path(src, a, l.candidate(dst, j), dst)))
        })
    }

    /// [`Fabric::select_path`], without the search while every link is up: the first NIC
    /// pair in Mooncake's order is then the preferred one.
    pub(super) fn choose_path(&self, fi: usize) -> Option<Path> {
        if self.links_down == 0 {
            Some(self.preferred_path(fi))
        } else {
            self.select_path(fi)
        }
    }

    /// What routing needs of `path`, in one pass over its links: its goodput fraction (as
    /// [`Fabric::keep_of`], same product order), its smallest healthy capacity (bytes/ns) and
    /// its links the solver sees ([`Fabric::binding_links`]).
    pub(super) fn resolve(&self, path: &Path) -> (f64, f64, [LinkIdx; MAX_PATH], usize) {
        let mut keep = 1.0;
        let mut floor = f64::INFINITY;
        let mut out = [LinkIdx(0); MAX_PATH];
        let mut n = 0;
        for &l in path.links() {
            let st = &self.links[l.0 as usize];
            keep *= 1.0 - st.loss;
            floor = f64::min(floor, st.nominal);
            if !st.slack {
                out[n] = l;
                n += 1;
            }
        }
        (keep, floor, out, n)
    }

    /// The path the sender tries first (whether up or not).
    pub(super) fn preferred_path(&self, fi: usize) -> Path {
        let f = self.flows[fi].as_ref().expect("live");
        let l = &self.layout;
        if f.src.node == f.dst.node || (f.kind == Kind::Batch && l.nvlink_reach(f.src, f.dst)) {
            l.nvlink_path(f.src, f.dst)
        } else if f.kind == Kind::Batch {
            let (a, b) = if f.rail == 0 {
                (l.affinity(f.src), l.affinity(f.dst))
            } else {
                (l.candidate(f.src, f.rail), l.candidate(f.dst, f.rail))
            };
            l.rdma_path(f.src, a, b, f.dst)
        } else {
            l.nic_path(l.affinity(f.src), l.affinity(f.dst))
        }
    }

    /// How long the sender takes to see an attempt on `path` fail because `dead` is down:
    /// at once-ish if `dead` is its own (its first links: its RDMA path, its NIC's TX or its
    /// NVLink TX; port-error event, WRs flushed), after the RC retry timeout otherwise.
    pub(super) fn detect_ns(&self, path: &Path, dead: LinkIdx) -> Nanos {
        use super::Link;
        let own = path.links().iter().take(2).any(|&l| l == dead)
            && matches!(
                self.layout.link(dead),
                Link::GpuRdmaTx(_) | Link::NicTx(_) | Link::NvlinkTx(_)
            );
        if own {
            self.params.local_detect_ns
        } else {
            self.params.remote_detect_ns
        }
    }

    /// Starts (or re-posts) the flow's bytes on a path now. With no path up, the attempt fails:
    /// the flow waits for the failure to be seen, then retries.
    pub(super) fn route(&mut self, fi: usize, now: Nanos) -> Option<FlowEnd<T>> {
        let f = self.flows[fi].as_ref().expect("live");
        if f.bytes == 0 {
            return Some(self.end(fi, now, FlowOutcome::Completed));
        }
        match self.choose_path(fi) {
            Some(path) => {
                if !(f.kind == Kind::Batch && self.links_down == 0) {
                    self.unslack_unfed(fi, &path, now);
                }
                let f = self.flows[fi].as_ref().expect("live");
                let (keep, floor, binding, n) = self.resolve(&path);
                // A cap at or above the smallest healthy capacity on the path can never bind
                // (capacities only go down from there): leave it out of the solver, which would
                // otherwise sort every capped flow at each re-solve. Same rates, less work.
                let cap = if f.cap >= floor { f64::INFINITY } else { f.cap };
                let share = self.sharing.add_flow(&binding[..n], cap);
                self.mutations += 1;
                if share.0 as usize >= self.owner.len() {
                    self.owner.resize(share.0 as usize + 1, 0);
                }
                self.owner[share.0 as usize] = fi as u32;
                let f = self.flows[fi].as_mut().expect("live");
                f.phase = Phase::Moving { share };
                f.path = path;
                f.keep = keep;
                f.rate = 0.0;
                f.settled_ns = now;
                f.delivered_on_path = 0.0;
                self.pending = Some(now);
            }
            None => {
                let path = self.preferred_path(fi);
                let dead = *path
                    .links()
                    .iter()
                    .find(|l| self.links[l.0 as usize].down > 0)
                    .expect("no path up, so the preferred one has a down link");
                let until = now + self.detect_ns(&path, dead);
                let f = self.flows[fi].as_mut().expect("live");
                f.failures += 1;
                f.failed_attempts += 1;
                f.phase = Phase::Retrying { until };
                self.stats.failed_attempts += 1;
            }
        }
        self.mark_dirty(fi as u32);
        None
    }
    /// Live fabric flows moving over `l`, ascending.
    pub(super) fn flows_on(&self, l: LinkIdx) -> Vec<FlowId> {
        if self.links[l.0 as usize].slack {
            // Not in the solver's paths: look at the flows' own paths.
            return self
                .flows
                .iter()
                .enumerate()
                .filter(|(_, f)| {
                    f.as_ref().is_some_and(|f| {
                        matches!(f.phase, Phase::Moving { .. }) && f.path.links().contains(&l)
                    })
                })
                .map(|(i, _)| FlowId(i as u32))
                .collect();
        }
        let mut v: Vec<FlowId> = self
            .sharing
            .flows_on(l)
            .map(|s| FlowId(self.owner[s.0 as usize]))
            .collect();
        v.sort_unstable();
        v
    }

    /// Ends flow `fi` now with `outcome`, frees its id, and reports it.
    pub(super) fn end(&mut self, fi: usize, now: Nanos, outcome: FlowOutcome) -> FlowEnd<T> {
        self.settle(fi, now);
        // Read in place and cleared after: taking the flow out would copy all of it.
        let Self { flows, links, .. } = self;
        let f = flows[fi].as_mut().expect("end a live flow");
        let share = match f.phase {
            Phase::Moving { share } => Some(share),
            _ => None,
        };
        if share.is_some() && outcome == FlowOutcome::Completed && f.remaining > 0.0 {
            // The residue left by rounding the event time up to the nanosecond.
            let wire = f.remaining / f.keep;
            let resent = wire - f.remaining;
            for &l in f.path.links() {
                let st = &mut links[l.0 as usize];
                st.bytes += wire;
                st.retransmitted += resent;
            }
            f.retransmitted += resent;
            f.remaining = 0.0;
        }
        let report = FlowEnd {
            flow: FlowId(fi as u32),
            token: f.token,
            outcome,
            src: f.src,
            dst: f.dst,
            bytes: f.bytes,
            delivered_bytes: f.bytes as f64 - f.remaining,
            retransmitted_bytes: f.retransmitted,
            failed_attempts: f.failed_attempts,
            start_ns: f.start_ns,
            end_ns: now,
        };
        flows[fi] = None;
        if let Some(share) = share {
            self.sharing.remove_flow(share);
            self.mutations += 1;
            if self.sharing.has_pending() {
                self.pending = Some(now);
            }
        }
        self.timers.remove(fi as u32);
        self.free.push(Reverse(fi as u32));
        self.live -= 1;
        match outcome {
            FlowOutcome::Completed => self.stats.completed += 1,
            FlowOutcome::Failed(_) => self.stats.failed += 1,
            FlowOutcome::Aborted => self.stats.aborted += 1,
        }
        report
    }
}

impl<T: Copy> Fabric<T> {
    /// The links of `path` the max-min solver must see: all but the slack ones.
    pub(super) fn binding_links(&self, path: &Path) -> ([LinkIdx; MAX_PATH], usize) {
        let mut out = [LinkIdx(0); MAX_PATH];
        let mut n = 0;
        for &l in path.links() {
            if !self.links[l.0 as usize].slack {
                out[n] = l;
                n += 1;
            }
        }
        (out, n)
    }

    /// Before flow `fi` moves on `path`: the links of the path that are slack only while fed by
    /// Mooncake batches on their preferred routes stop being slack, unless this flow is such a
    /// batch (an all-to-all flow, or a batch re-posted on another NIC, is not).
    fn unslack_unfed(&mut self, fi: usize, path: &Path, now: Nanos) {
        let f = self.flows[fi].as_ref().expect("live");
        if f.kind == Kind::Batch && *path == self.preferred_path(fi) {
            return;
        }
        for &l in path.links() {
            if self.links[l.0 as usize].slack_if_fed {
                self.links[l.0 as usize].slack_if_fed = false;
                self.unslack(l, now);
            }
        }
    }

    /// Link `l` may bind from now on (it is being degraded): every flow moving over it goes
    /// back into the solver with `l` in its path. Their rates are re-solved at the next refresh.
    pub(super) fn unslack(&mut self, l: LinkIdx, now: Nanos) {
        if !self.links[l.0 as usize].slack {
            return;
        }
        let hit = self.flows_on(l);
        self.links[l.0 as usize].slack = false;
        for flow in hit {
            let fi = flow.0 as usize;
            self.settle(fi, now);
            let f = self.flows[fi].as_ref().expect("live");
            let Phase::Moving { share } = f.phase else {
                unreachable!("flows_on lists moving flows")
            };
            let path = f.path;
            let cap = self.sharing.cap(share);
            self.sharing.remove_flow(share);
            let (binding, n) = self.binding_links(&path);
            let share = self.sharing.add_flow(&binding[..n], cap);
            if share.0 as usize >= self.owner.len() {
                self.owner.resize(share.0 as usize + 1, 0);
            }
            self.owner[share.0 as usize] = fi as u32;
            self.flows[fi].as_mut().expect("live").phase = Phase::Moving { share };
            self.mutations += 1;
            self.mark_dirty(flow.0);
        }
        self.pending = Some(now);
    }
}
