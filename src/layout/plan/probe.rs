//! Where the plan meets the corruption oracle: [`PairPlan::is_exact`] is decided by running a
//! probe request's writes through a [`DecodeMemory`], and [`DecodeMemory::apply`] feeds a
//! plan's writes to the oracle with the plan's prefill layouts. Both live here, on the plan's
//! side, so that the oracle knows only layouts and writes and the dependency runs one way
//! (plan → oracle).

use super::{ChunkRequest, PairPlan};
use crate::layout::oracle::{ApplyOutcome, DecodeMemory, RequestId, Verdict};
use crate::layout::rank::Capacity;
use crate::layout::write::Write;

impl DecodeMemory {
    /// Applies one chunk's planned writes of `writer` (from [`PairPlan::writes`] of `plan`);
    /// see [`DecodeMemory::apply_writes`].
    pub fn apply(&mut self, plan: &PairPlan, writer: RequestId, writes: &[Write]) -> ApplyOutcome {
        self.apply_writes(plan.prefill_layouts(), writer, writes)
    }
}

impl PairPlan {
    /// Decides [`PairPlan::is_exact`] by running a probe request through the oracle: two page
    /// runs (one of them split on the decode side), a state slot and an aux row, with every
    /// other unit owned by a neighbour. The writes are a function of the runs' structure, not
    /// of the ids, so a clean probe — no foreign or out-of-bounds byte, and the request whole
    /// if no error — means every request on this pair is clean.
    pub(super) fn probe_exact(&self) -> bool {
        if self.first_contact.is_some() || self.kv_error.is_some() {
            return true; // nothing is ever written
        }
        let cap = Capacity {
            pages: 8,
            slots: 3,
            aux_rows: 3,
        };
        let mut mem = DecodeMemory::new(&self.decode, cap);
        let reg = self.decode[0].registration(&cap);
        let p = reg.page_ids.start;
        let dst = [p + 1, p + 2, p + 4];
        let src = [10, 11, 12];
        let slot = reg.slot_ids.clone().nth(1);
        let (me, other) = (RequestId(1), RequestId(2));
        let others: Vec<u32> = reg.page_ids.clone().filter(|x| !dst.contains(x)).collect();
        let other_slots: Vec<u32> = reg.slot_ids.clone().filter(|s| Some(*s) != slot).collect();
        mem.alloc(me, &dst, slot, Some(1))
            .expect("probe units are free");
        mem.alloc(other, &others, other_slots.first().copied(), Some(0))
            .expect("probe units are free");
        let mut writes = Vec::new();
        for (range, last) in [(0..2, false), (2..3, true)] {
            let req = ChunkRequest {
                src_pages: &src[range.clone()],
                dst_pages: &dst[range],
                last,
                src_slot: slot.map(|_| 1),
                dst_slot: slot,
                src_aux: 0,
                dst_aux: 1,
            };
            self.writes(&req, &mut writes);
            let out = mem.apply(self, me, &writes);
            if out.error.is_some() {
                return false;
            }
        }
        let failed = self.state_error.is_some();
        mem.landed(me);
        let report = mem.release(me, None);
        report.victims.is_empty() && (failed || report.verdict == Verdict::Completed)
    }
}
