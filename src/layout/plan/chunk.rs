//! What a compiled [`PairPlan`] answers per chunk: the flows the fabric carries (bytes and RDMA
//! write entries per target, computed arithmetically) and the concrete writes the oracle applies.
//!
//! Units: bytes; page ids are the instances' physical ids.

use super::{
    ChunkRequest, ChunkTransfer, DcpChunk, DcpSpan, ErrorTiming, KvSend, PairPlan, RankFlow,
    TargetPlan,
};
use crate::layout::write::{Pattern, Write, WriteDst};

/// `group_concurrent_contiguous` (docs/sglang-pd.md §3.2 step 1): `(src start, dst start, pages)` runs where both
/// lists advance by one. O(pages).
pub fn contiguous_runs(src: &[u32], dst: &[u32]) -> Vec<(u32, u32, u32)> {
    let n = src.len().min(dst.len());
    let mut runs: Vec<(u32, u32, u32)> = Vec::new();
    for i in 0..n {
        if let Some(r) = runs.last_mut()
            && src[i] == r.0 + r.2
            && dst[i] == r.1 + r.2
        {
            r.2 += 1;
            continue;
        }
        runs.push((src[i], dst[i], 1));
    }
    runs
}
/// Pages and runs [`contiguous_runs`] would give, counted without building the runs.
fn run_counts(src: &[u32], dst: &[u32]) -> (u64, u64) {
    let n = src.len().min(dst.len());
    if n == 0 {
        return (0, 0);
    }
    let (src, dst) = (&src[..n], &dst[..n]);
    // Branch-free over both lists at once, so the loop vectorizes (a chunk has up to hundreds
    // of pages, and every chunk of every request is counted).
    let breaks: u32 = (src[1..].iter().zip(&src[..n - 1]))
        .zip(dst[1..].iter().zip(&dst[..n - 1]))
        .map(|((&s1, &s0), (&d1, &d0))| {
            u32::from((s1 != s0.wrapping_add(1)) | (d1 != d0.wrapping_add(1)))
        })
        .sum();
    (n as u64, u64::from(breaks) + 1)
}

impl PairPlan {
    /// The flows of one chunk and its error. O(pages) to group the contiguous runs, then O(1) per
    /// target (a target's region groups are few): the head-sliced write count is
    /// `2L × pages × page_size` per target, computed, not enumerated.
    pub fn chunk(&self, req: &ChunkRequest) -> ChunkTransfer {
        let mut flows = Vec::new();
        let error = self.chunk_into(req, &mut flows);
        ChunkTransfer { flows, error }
    }

    /// [`PairPlan::chunk`] with the flows appended to `flows` (cleared first), so the caller
    /// reuses one buffer for every chunk; returns the chunk's error.
    pub fn chunk_into(
        &self,
        req: &ChunkRequest,
        flows: &mut Vec<RankFlow>,
    ) -> Option<(crate::layout::PdError, ErrorTiming)> {
        self.chunk_some_into(req, DcpSpan::default(), 0..self.targets.len(), flows)
    }

    /// [`PairPlan::chunk`] on a pair with decode context parallelism: the chunk at `span` of
    /// its request, `req.dst_pages` the request's whole decode page list.
    pub fn chunk_dcp(&self, req: &ChunkRequest, span: DcpSpan) -> ChunkTransfer {
        let mut flows = Vec::new();
        let error = self.chunk_some_into(req, span, 0..self.targets.len(), &mut flows);
        ChunkTransfer { flows, error }
    }

    /// [`PairPlan::chunk_target_into`] on a pair with decode context parallelism (see
    /// [`PairPlan::chunk_dcp`]).
    pub fn chunk_target_dcp_into(
        &self,
        req: &ChunkRequest,
        span: DcpSpan,
        target: usize,
        flows: &mut Vec<RankFlow>,
    ) -> Option<(crate::layout::PdError, ErrorTiming)> {
        self.chunk_some_into(req, span, target..target + 1, flows)
    }

    /// [`PairPlan::chunk_into`] for target number `target` alone (an index into
    /// [`PairPlan::targets`]): what one prefill rank's transfer worker sends to one decode rank
    /// for this chunk (docs/sglang-pd.md §3.1: the worker walks its targets one after another).
    pub fn chunk_target_into(
        &self,
        req: &ChunkRequest,
        target: usize,
        flows: &mut Vec<RankFlow>,
    ) -> Option<(crate::layout::PdError, ErrorTiming)> {
        self.chunk_some_into(req, DcpSpan::default(), target..target + 1, flows)
    }

    fn chunk_some_into(
        &self,
        req: &ChunkRequest,
        span: DcpSpan,
        which: std::ops::Range<usize>,
        flows: &mut Vec<RankFlow>,
    ) -> Option<(crate::layout::PdError, ErrorTiming)> {
        flows.clear();
        if let Some(e) = &self.kv_error {
            return Some((e.clone(), ErrorTiming::BeforeAnyWrite));
        }
        let (n_pages, n_runs) = run_counts(req.src_pages, req.dst_pages);
        let state_error = if req.last {
            self.state_error.clone()
        } else {
            None
        };
        let send_extra = req.last && state_error.is_none();
        for t in &self.targets[which] {
            let (mut bytes, mut writes) = (0u64, 0u64);
            match &t.kv {
                // Counted below, out of this match's hot arms.
                KvSend::Nothing | KvSend::Dcp { .. } => {}
                KvSend::Generic { runs: rr, item } => {
                    let regions: u64 = rr.iter().map(|r| u64::from(r.count)).sum();
                    writes += regions * n_runs;
                    bytes += regions * n_pages * item;
                }
                KvSend::Sliced {
                    runs: rr,
                    page_size,
                    len,
                    ..
                } => {
                    let regions: u64 = rr.iter().map(|r| u64::from(r.count)).sum();
                    let w = regions * n_pages * u64::from(*page_size);
                    // The staging buffer sends the same bytes as one block
                    // (`send_kvcache_staged`: one `_transfer_data` entry per chunk and target).
                    writes += if self.staging.is_some() {
                        u64::from(w > 0)
                    } else {
                        w
                    };
                    bytes += w * len;
                }
            }
            if let KvSend::Dcp { .. } = &t.kv {
                let c = self.dcp_target_chunk(t, req, span);
                writes += c.regions * c.writes_per_region;
                bytes += c.owned * c.token_bytes;
            }
            if send_extra {
                if req.src_slot.is_some() && req.dst_slot.is_some() {
                    for s in &t.state {
                        writes += u64::from(s.run.count);
                        bytes += u64::from(s.run.count) * s.len;
                    }
                }
                writes += t.aux.len() as u64;
                bytes += t.aux.iter().map(|a| a.1).sum::<u64>();
            }
            if writes > 0 {
                flows.push(RankFlow {
                    prefill_rank: t.target.prefill_rank,
                    decode_rank: t.target.decode_rank,
                    bytes,
                    writes,
                });
            }
        }
        state_error.map(|e| (e, ErrorTiming::AfterKv))
    }

    /// The concrete writes of one chunk at run granularity, appended to `out` (cleared first),
    /// for the oracle. Empty when the chunk raises before any write; without state and aux
    /// when the last chunk raises after KV.
    pub fn writes(&self, req: &ChunkRequest, out: &mut Vec<Write>) {
        self.some_writes(req, 0..self.targets.len(), out);
    }

    /// [`PairPlan::writes`] of target number `target` alone.
    pub fn target_writes(&self, req: &ChunkRequest, target: usize, out: &mut Vec<Write>) {
        self.some_writes(req, target..target + 1, out);
    }

    fn some_writes(&self, req: &ChunkRequest, which: std::ops::Range<usize>, out: &mut Vec<Write>) {
        out.clear();
        if self.kv_error.is_some() {
            return;
        }
        let runs = contiguous_runs(req.src_pages, req.dst_pages);
        let send_extra = req.last && self.state_error.is_none();
        for t in &self.targets[which] {
            let (prefill_rank, decode_rank) = (t.target.prefill_rank, t.target.decode_rank);
            match &t.kv {
                // A DCP pair is exact by construction and outside the oracle
                // (`PairPlan::compile`): it has no page-row writes to give.
                KvSend::Nothing | KvSend::Dcp { .. } => {}
                KvSend::Generic { runs: rr, item } => {
                    for g in rr {
                        for &(_, d0, n) in &runs {
                            out.push(Write {
                                decode_rank,
                                prefill_rank,
                                dst: WriteDst::Kv {
                                    first: g.dst,
                                    count: g.count,
                                },
                                src_first_region: g.src,
                                dst_offset: u64::from(d0) * item,
                                src_offset: 0,
                                intended: d0,
                                src_unit_len: *item,
                                len: u64::from(n) * item,
                                pattern: Pattern::ONE,
                            });
                        }
                    }
                }
                KvSend::Sliced {
                    runs: rr,
                    src_item,
                    dst_item,
                    page_size,
                    src_off,
                    dst_off,
                    len,
                } => {
                    let ps = u64::from(*page_size);
                    for g in rr {
                        for &(_, d0, n) in &runs {
                            out.push(Write {
                                decode_rank,
                                prefill_rank,
                                dst: WriteDst::Kv {
                                    first: g.dst,
                                    count: g.count,
                                },
                                src_first_region: g.src,
                                dst_offset: u64::from(d0) * dst_item + dst_off,
                                src_offset: *src_off,
                                intended: d0,
                                src_unit_len: *src_item,
                                len: *len,
                                pattern: Pattern {
                                    units: n,
                                    rows: *page_size,
                                    // Both token strides divide by the prefill's page size.
                                    dst_row_stride: dst_item / ps,
                                    dst_unit_stride: *dst_item,
                                    src_row_stride: src_item / ps,
                                },
                            });
                        }
                    }
                }
            }
            if !send_extra {
                continue;
            }
            if let (Some(_), Some(dst_slot)) = (req.src_slot, req.dst_slot) {
                for s in &t.state {
                    out.push(Write {
                        decode_rank,
                        prefill_rank,
                        dst: WriteDst::State {
                            first: s.run.dst,
                            count: s.run.count,
                        },
                        src_first_region: s.run.src,
                        dst_offset: s.dst_stride * u64::from(dst_slot) + s.dst_off,
                        src_offset: s.src_off,
                        intended: dst_slot,
                        src_unit_len: s.src_item,
                        len: s.len,
                        pattern: Pattern::ONE,
                    });
                }
            }
            for &(i, len) in &t.aux {
                out.push(Write {
                    decode_rank,
                    prefill_rank,
                    dst: WriteDst::Aux { index: i },
                    src_first_region: i,
                    dst_offset: len * u64::from(req.dst_aux),
                    src_offset: 0,
                    intended: req.dst_aux,
                    src_unit_len: len,
                    len,
                    pattern: Pattern::ONE,
                });
            }
        }
    }
}

impl PairPlan {
    /// What target `i` sends of chunk `req` at `span` on a DCP pair (`None` on another path):
    /// `build_dcp_token_transfer_plan`'s owned tokens, then `group_concurrent_contiguous`'s
    /// blocks, computed from the owned range, not enumerated per token.
    pub fn dcp_chunk(&self, i: usize, req: &ChunkRequest, span: DcpSpan) -> Option<DcpChunk> {
        let t = &self.targets[i];
        matches!(t.kv, KvSend::Dcp { .. }).then(|| self.dcp_target_chunk(t, req, span))
    }

    #[cold]
    #[inline(never)]
    fn dcp_target_chunk(&self, t: &TargetPlan, req: &ChunkRequest, span: DcpSpan) -> DcpChunk {
        let KvSend::Dcp {
            runs,
            token_item,
            page_size,
            dcp_size,
            dcp_rank,
            ..
        } = &t.kv
        else {
            unreachable!("called on DCP targets only");
        };
        let (ps, dcp) = (u64::from(*page_size), u64::from(*dcp_size));
        let regions: u64 = runs.iter().map(|r| u64::from(r.count)).sum();
        // `chunk_start = decode_prefix_len + src_page_offset * page_size` (no decode prefix:
        // DCP refuses the decode radix cache); `first_owned_offset = (dcp_rank - chunk_start)
        // % dcp_size`; owned offsets `first, first + dcp, … < num_kv_tokens`.
        let start = u64::from(span.src_page_offset) * ps;
        let n = u64::from(span.tokens);
        let first = (u64::from(*dcp_rank) + dcp - start % dcp) % dcp;
        let owned = if first < n {
            (n - 1 - first) / dcp + 1
        } else {
            0
        };
        let packed = self
            .dcp_pack
            .is_some_and(|p| owned <= (dcp - u64::from(*dcp_rank)) * p.rank_tokens);
        let writes_per_region = if owned == 0 {
            0
        } else if packed {
            // Packed rows are contiguous in the buffer; the destination slots `p / dcp` are
            // consecutive, so a block breaks only where the decode page list jumps.
            let l0 = (start + first) / dcp;
            let (o0, o1) = (l0 / ps, (l0 + owned - 1) / ps);
            let d = req.dst_pages;
            let o1 = (o1 as usize).min(d.len().saturating_sub(1));
            let o0 = (o0 as usize).min(o1);
            1 + d[o0..=o1]
                .windows(2)
                .filter(|w| w[1] != w[0].wrapping_add(1))
                .count() as u64
        } else {
            // Unpacked, consecutive owned rows sit `dcp_size` slots apart on the prefill:
            // every row is a group of its own (page size 1 with page ids that happen to run
            // `+1` across `dcp_size` positions could merge two; not counted).
            owned
        };
        DcpChunk {
            owned,
            regions,
            writes_per_region,
            packed,
            token_bytes: regions * token_item,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_where_either_side_jumps() {
        assert_eq!(
            contiguous_runs(&[1, 2, 3, 7, 8], &[4, 5, 9, 10, 11]),
            vec![(1, 4, 2), (3, 9, 1), (7, 10, 2)]
        );
        // The sender truncates the source list to the destination's length.
        assert_eq!(contiguous_runs(&[1, 2, 3], &[5]), vec![(1, 5, 1)]);
    }
}

#[cfg(test)]
mod run_count_tests {
    use super::*;

    #[test]
    fn run_counts_match_the_runs() {
        let mut x: u64 = 3;
        for len in 0..60usize {
            let mut src = Vec::new();
            let mut dst = Vec::new();
            for _ in 0..len {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Mostly consecutive ids, with breaks.
                let step = if (x >> 60) == 0 { 3 } else { 1 };
                src.push(src.last().map_or(1, |&v: &u32| v + step));
                dst.push(
                    dst.last()
                        .map_or(5, |&v: &u32| v + if (x >> 58) & 3 == 0 { 2 } else { 1 }),
                );
            }
            let dst_len = len.saturating_sub((x % 3) as usize);
            let runs = contiguous_runs(&src, &dst[..dst_len]);
            let pages: u64 = runs.iter().map(|r| u64::from(r.2)).sum();
            assert_eq!(
                run_counts(&src, &dst[..dst_len]),
                (pages, runs.len() as u64)
            );
        }
    }
}
