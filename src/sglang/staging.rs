//! The decode side of the GPU staging buffer for heterogeneous attention TP
//! (`SGLANG_DISAGG_STAGING_BUFFER=1`, sglang PR #19890 for Mooncake, #22536 for NIXL;
//! `docs/sglang-pd.md` §26): each decode rank's staging ring and its watermark back-pressure.
//!
//! sglang (`disaggregation/common/staging_buffer.py::StagingAllocator`,
//! `common/staging_handler.py`): every decode rank holds one ring of
//! `SGLANG_DISAGG_STAGING_POOL_SIZE_MB` (4096 by default). A chunk's region is assigned with
//! overcommit — `assign` always succeeds while the region fits the whole ring, wrapping to
//! offset 0 and a new round when the tail is short — and is freed once decode's scatter of it
//! finished; the watermark, `(round, offset)` of the oldest region not yet freed, is sent to
//! the prefills (`_free_and_send_watermark`). Before writing, a prefill worker asks
//! `is_watermark_ready`: a region of round `r > 0` may be written once the watermark passed
//! round `r − 1` at or beyond the region's end. Otherwise it puts the chunk back and waits up
//! to `STAGING_WATERMARK_WAIT_S` (1 ms) for a watermark before trying again. A region larger
//! than the ring (`ALLOC_OVERSIZED`) raises in the worker ("Chunk staging allocation
//! permanently failed … Increase SGLANG_DISAGG_STAGING_POOL_SIZE_MB"), which kills it
//! (`docs/sglang-pd.md` §2.4).
//!
//! pdsim's rings are the component [`StagingRings`], one per decode rank, which the transfer
//! workers ask before each staged batch ([`StagingRings::admit`]) and tell when one landed
//! ([`StagingRings::landed`]). Where pdsim departs from sglang, and why, is stated at each
//! function. A ring frees lazily: a region's free time is known once its last writer landed,
//! and a region whose room failed is freed as `release_room` frees it, so the ring never needs
//! an event of its own.

use std::collections::{BTreeMap, VecDeque};

use crate::engine::Nanos;
use crate::layout::{PdError, Staging};
use crate::vocab::ErrorKind;
use crate::vocab::ids::DecodeId;
use crate::vocab::requests::{KvPoll, ReqRef, Requests};

/// `SGLANG_DISAGG_STAGING_POOL_SIZE_MB`'s default (`environ.py`; `init_staging_allocator`),
/// MiB per decode rank.
pub const DEFAULT_POOL_MB: u64 = 4096;

/// `SGLANG_FAILED_SESSION_PROBE_INTERVAL_S`'s default (`environ.py`: `EnvFloat(30.0)`), s:
/// the blacklist's probe (`sglang::transfer`, docs/sglang-pd.md §26.5), kept beside the
/// staging defaults as the other transfer-path environment default.
pub const DEFAULT_PROBE_INTERVAL_S: f64 = 30.0;

/// `STAGING_WATERMARK_WAIT_S = 0.001` (`common/staging_handler.py`): how long a worker whose
/// chunk's region is not yet free waits for a watermark before it tries again, ns. pdsim waits
/// the whole bound (sglang's condition variable may wake it sooner, when a watermark arrives).
pub const STAGING_WATERMARK_WAIT_NS: Nanos = 1_000_000;

/// One region of a ring: a chunk's bytes for one decode rank, from all of its writers.
#[derive(Clone, Copy, Debug)]
struct Region {
    /// The request and the chunk's first page position: sglang's `(room, chunk_idx)`, whose
    /// region every writer of the chunk shares (`handle_staging_req` deduplicates).
    key: (ReqRef, u32),
    offset: u64,
    end: u64,
    round: u64,
    /// Writers not yet landed.
    writers_left: u32,
    /// When the watermark passes it: known once its last writer landed.
    free_at: Option<Nanos>,
}

/// One decode rank's ring (`StagingAllocator`).
#[derive(Debug)]
struct Ring {
    total: u64,
    head: u64,
    round: u64,
    /// Regions in assignment order; the front ones leave as the watermark passes them.
    regions: VecDeque<Region>,
}

impl Ring {
    /// `StagingAllocator.assign`: the region of `size` bytes, wrapping to a new round when the
    /// tail is too short. `None` when it exceeds the whole ring (`ALLOC_OVERSIZED`).
    fn assign(&mut self, key: (ReqRef, u32), size: u64, writers: u32) -> Option<Region> {
        if size > self.total {
            return None;
        }
        let offset = if size <= self.total - self.head {
            self.head
        } else {
            self.round += 1;
            0
        };
        self.head = offset + size;
        let r = Region {
            key,
            offset,
            end: offset + size,
            round: self.round,
            writers_left: writers,
            free_at: None,
        };
        self.regions.push_back(r);
        Some(r)
    }

    /// The watermark at `now` (`StagingAllocator.free` / `get_watermark`): the oldest region
    /// still held, or the head when none is. A region is freed when its scatter ended, or its
    /// room failed or left (`DecodeStagingHandler.release_room` frees what a failed room
    /// held). The regions it passes leave the ring.
    fn watermark(&mut self, now: Nanos, reqs: &Requests) -> (u64, u64) {
        while let Some(f) = self.regions.front() {
            let freed = f.free_at.is_some_and(|t| t <= now)
                || reqs.get(f.key.0).is_none_or(|q| q.sender == KvPoll::Failed);
            if !freed {
                return (f.round, f.offset);
            }
            self.regions.pop_front();
        }
        (self.round, self.head)
    }
}

/// What a staged batch may do now ([`StagingRings::admit`]).
#[derive(Debug, PartialEq)]
pub enum Admit {
    /// Its region is free to write: the batch goes, after the prefill's gather.
    Go,
    /// The watermark has not passed its region: the worker waits
    /// [`STAGING_WATERMARK_WAIT_NS`] and tries again.
    Wait,
    /// The region exceeds the whole ring: the worker raises and dies.
    Oversized(PdError),
}

/// `_do_staging_transfer`'s raise when decode answered `ALLOC_OVERSIZED` (room as sglang
/// prints it).
pub fn oversized(room: u64) -> String {
    format!(
        "[Staging] Chunk staging allocation permanently failed: chunk exceeds ring buffer total size (room={room}). Increase SGLANG_DISAGG_STAGING_POOL_SIZE_MB."
    )
}

/// Every decode rank's staging ring, created when a staged chunk first reaches it.
#[derive(Debug, Default)]
pub struct StagingRings {
    rings: BTreeMap<(DecodeId, u32), Ring>,
}

impl StagingRings {
    /// May a writer of the chunk `(req, first_page)` of `pages` pages write decode `d`'s rank
    /// `rank`'s region at `now`? The first writer to ask assigns the region. `room` names the
    /// request in an error.
    ///
    /// sglang assigns every chunk's region ahead, when the prefill forms the batch
    /// (`prefetch_staging_reqs` sends a `STAGING_REQ` per chunk before the forward); pdsim
    /// assigns when the chunk's first writer is about to send. The order of regions on a ring
    /// is then the order the workers send in, which is the order sglang's forwards finish in
    /// unless a worker lags behind another prefill's.
    pub fn admit(
        &mut self,
        s: &Staging,
        (d, rank): (DecodeId, u32),
        (req, first_page, pages): (ReqRef, u32, u64),
        room: u64,
        now: Nanos,
        reqs: &Requests,
    ) -> Admit {
        let ring = self.rings.entry((d, rank)).or_insert_with(|| Ring {
            total: s.pool_bytes,
            head: 0,
            round: 0,
            regions: VecDeque::new(),
        });
        let key = (req, first_page);
        let region = match ring.regions.iter().find(|r| r.key == key) {
            Some(r) => *r,
            None => {
                let writers = s.writers[rank as usize];
                match ring.assign(key, s.region_bytes(pages), writers) {
                    Some(r) => r,
                    None => {
                        return Admit::Oversized(PdError {
                            kind: ErrorKind::TransferFailed,
                            message: oversized(room),
                            effect: crate::layout::Effect::WorkerDies,
                        });
                    }
                }
            }
        };
        // `is_watermark_ready`: round 0 is always free; round r once the watermark is past
        // round r − 1, or on it at or beyond the region's end.
        if region.round == 0 {
            return Admit::Go;
        }
        let (wm_round, wm_tail) = ring.watermark(now, reqs);
        let prev = region.round - 1;
        if prev < wm_round || (prev == wm_round && region.end <= wm_tail) {
            Admit::Go
        } else {
            Admit::Wait
        }
    }

    /// One writer's batch of chunk `(req, first_page)` landed on decode `d`'s rank `rank` at
    /// `now`; when it is the chunk's last writer, the region is freed `after` later (decode's
    /// scatter, and the messages that start it and announce the free).
    pub fn landed(
        &mut self,
        (d, rank): (DecodeId, u32),
        key: (ReqRef, u32),
        now: Nanos,
        after: Nanos,
    ) {
        let Some(ring) = self.rings.get_mut(&(d, rank)) else {
            return;
        };
        if let Some(r) = ring.regions.iter_mut().find(|r| r.key == key) {
            r.writers_left = r.writers_left.saturating_sub(1);
            if r.writers_left == 0 {
                r.free_at = Some(now + after);
            }
        }
    }

    /// Decode `d` went down: its rings go with its GPUs' memory (a restart allocates new
    /// ones).
    pub fn decode_down(&mut self, d: DecodeId) {
        self.rings.retain(|&(x, _), _| x != d);
    }

    /// Bytes held on decode `d`'s rank `rank` (regions not yet passed by the watermark at
    /// `now`), for tests and reports.
    pub fn held_bytes(&mut self, (d, rank): (DecodeId, u32), now: Nanos, reqs: &Requests) -> u64 {
        let Some(ring) = self.rings.get_mut(&(d, rank)) else {
            return 0;
        };
        ring.watermark(now, reqs);
        ring.regions.iter().map(|r| r.end - r.offset).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(total: u64) -> Ring {
        Ring {
            total,
            head: 0,
            round: 0,
            regions: VecDeque::new(),
        }
    }

    fn key(i: u32) -> (ReqRef, u32) {
        (ReqRef { slot: i, id: 1 }, 0)
    }

    /// `StagingAllocator.assign` by hand: a 10-byte ring takes 4 and 4 at offsets 0 and 4 in
    /// round 0; the next 4 do not fit the 2-byte tail, so they wrap to offset 0, round 1; 11
    /// bytes never fit.
    #[test]
    fn assign_wraps_to_a_new_round_and_refuses_what_exceeds_the_ring() {
        let mut r = ring(10);
        let a = r.assign(key(0), 4, 1).unwrap();
        let b = r.assign(key(1), 4, 1).unwrap();
        let c = r.assign(key(2), 4, 1).unwrap();
        assert_eq!((a.offset, a.round), (0, 0));
        assert_eq!((b.offset, b.round), (4, 0));
        assert_eq!((c.offset, c.end, c.round), (0, 4, 1));
        assert!(r.assign(key(3), 11, 1).is_none());
    }

    fn staging(pool_bytes: u64) -> Staging {
        Staging {
            pool_bytes,
            decode_page_bytes: 4,
            writers: vec![2],
            prefill_bytes_per_s: 1e12,
            decode_bytes_per_s: 1e12,
        }
    }

    /// `is_watermark_ready` by hand on a 10-byte ring of 4-byte pages, two writers a chunk:
    /// chunks A and B of one page take [0, 4) and [4, 8) in round 0 and go at once; chunk C
    /// wraps to [0, 4) in round 1 and waits while A is held — after A's two writers landed
    /// too, until A's scatter ended (t = 100) — then goes.
    #[test]
    fn a_wrapped_region_waits_for_the_watermark() {
        let mut reqs = Requests::default();
        let r: Vec<ReqRef> = (0..3)
            .map(|i| crate::sglang::testkit::request(&mut reqs, i, 16, 4))
            .collect();
        let (s, d, room) = (staging(10), (DecodeId(0), 0), 7);
        let mut rings = StagingRings::default();
        assert_eq!(rings.admit(&s, d, (r[0], 0, 1), room, 0, &reqs), Admit::Go);
        assert_eq!(rings.admit(&s, d, (r[1], 0, 1), room, 0, &reqs), Admit::Go);
        // The second writer of A finds A's region, not a new one.
        assert_eq!(rings.admit(&s, d, (r[0], 0, 1), room, 0, &reqs), Admit::Go);
        assert_eq!(rings.held_bytes(d, 0, &reqs), 8);
        assert_eq!(
            rings.admit(&s, d, (r[2], 0, 1), room, 0, &reqs),
            Admit::Wait
        );
        rings.landed(d, (r[0], 0), 50, 50);
        assert_eq!(
            rings.admit(&s, d, (r[2], 0, 1), room, 60, &reqs),
            Admit::Wait
        );
        rings.landed(d, (r[0], 0), 60, 40);
        assert_eq!(
            rings.admit(&s, d, (r[2], 0, 1), room, 99, &reqs),
            Admit::Wait
        );
        assert_eq!(
            rings.admit(&s, d, (r[2], 0, 1), room, 100, &reqs),
            Admit::Go
        );
        // A left the ring; B and C are held.
        assert_eq!(rings.held_bytes(d, 0, &reqs), 8);
    }

    /// A failed room's region is freed (`release_room`), so a wrapped region behind it goes.
    #[test]
    fn a_failed_rooms_region_is_released() {
        let mut reqs = Requests::default();
        let r: Vec<ReqRef> = (0..3)
            .map(|i| crate::sglang::testkit::request(&mut reqs, i, 16, 4))
            .collect();
        let (s, d) = (staging(8), (DecodeId(0), 0));
        let mut rings = StagingRings::default();
        assert_eq!(rings.admit(&s, d, (r[0], 0, 2), 1, 0, &reqs), Admit::Go);
        assert_eq!(rings.admit(&s, d, (r[1], 0, 1), 1, 0, &reqs), Admit::Wait);
        reqs.get_mut(r[0]).unwrap().sender = KvPoll::Failed;
        assert_eq!(rings.admit(&s, d, (r[1], 0, 1), 1, 0, &reqs), Admit::Go);
        // 3 pages × 4 B = 12 > 8: sglang's raise, which kills the worker.
        match rings.admit(&s, d, (r[2], 0, 3), 1, 0, &reqs) {
            Admit::Oversized(e) => {
                assert_eq!(e.effect, crate::layout::Effect::WorkerDies);
                assert!(
                    e.message
                        .contains("Increase SGLANG_DISAGG_STAGING_POOL_SIZE_MB")
                );
            }
            other => panic!("{other:?}"),
        }
        // A decode that went down takes its rings with it.
        rings.decode_down(DecodeId(0));
        assert_eq!(rings.held_bytes(d, 0, &reqs), 0);
    }
}
