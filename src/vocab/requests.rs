//! The request table: every request in flight, in a slab indexed by [`ReqRef`]. A request
//! leaves the table when it reaches an outcome, so memory is bounded by requests in flight.

use serde::Serialize;

use super::RequestRow;
use super::ids::{DecodeId, PrefillId};
use crate::engine::{EventKey, Nanos};

/// sglang's `KVPoll`: the state of one side of a request's transfer. The order is sglang's
/// (`Failed=0 < Bootstrapping < WaitingForInput < Transferring < Success`;
/// `disaggregation/base/conn.py`, `class KVPoll`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum KvPoll {
    /// The transfer failed (terminal, overrides everything).
    Failed,
    /// Created; peers not yet connected (prefill: decode's page ids not yet received).
    Bootstrapping,
    /// Connected; waiting for data (decode: metadata sent, KV not yet landed).
    WaitingForInput,
    /// Chunks queued or moving.
    Transferring,
    /// Every chunk, the state and the aux landed.
    Success,
}

/// Handle of a request in the table: the slot and the id, so a stale handle is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReqRef {
    pub(crate) slot: u32,
    /// The request id (arrival order from 0).
    pub id: u64,
}

/// `join_step` of a request that is not in a decode batch.
pub const NOT_RUNNING: u64 = u64::MAX;

/// The id a retired request's slot holds until it is released (no request has it).
const RETIRED: u64 = u64::MAX;

/// One request in flight.
pub struct Req {
    /// Arrival order from 0.
    pub id: u64,
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens.
    pub output: u32,
    /// Where the router sent it.
    pub prefill: PrefillId,
    /// Where the router sent it.
    pub decode: DecodeId,
    /// The prefill side's `KVPoll`.
    pub sender: KvPoll,
    /// The decode side's `KVPoll`.
    pub receiver: KvPoll,
    /// Prompt tokens already computed.
    pub prefilled: u32,
    /// Prompt tokens whose KV has been queued for sending.
    pub sent: u32,
    /// Chunks queued or moving.
    pub chunks_in_flight: u32,
    /// Whether the last chunk has been queued.
    pub last_queued: bool,
    /// What the request holds on its prefill instance.
    pub on_prefill: Holding,
    /// What the request holds on its decode instance.
    pub on_decode: Holding,
    /// Whether the decode allocation happened (so it must be given back).
    pub decode_allocated: bool,
    /// Prompt tokens decode's radix cache already held when it admitted the request (sglang's
    /// `decode_prefix_len`, page-aligned; 0 without `disaggregation_decode_enable_radix_cache`):
    /// the prefill sends the KV from here on (`sglang::decode_radix`).
    pub decode_prefix: u32,
    /// Prompt block ids for the prefix cache (empty without prefix information).
    pub hash_ids: Vec<u64>,
    /// Tokens decode generated before a retraction: their KV is rebuilt by the next prefill,
    /// so the prompt the prefill sees is `input + extra`.
    pub extra: u32,
    /// Decode steps done on its instance when it joined the batch ([`NOT_RUNNING`] otherwise).
    pub join_step: u64,
    /// The pending prefill `Bootstrapping` timeout, cancelled when the sender moves on.
    pub bootstrap_timeout: Option<EventKey>,
    /// The pending decode `WaitingForInput` timeout, cancelled when the KV lands.
    pub waiting_timeout: Option<EventKey>,
    /// The oracle's verdict on a round before a retraction, if it found foreign bytes:
    /// (victims, corrupted_by) as space-separated ids.
    pub corrupted_earlier: Option<Box<(String, String)>>,
    /// When the prefill's scheduler has the request (its tokenizer manager is done), ns: the
    /// metadata that arrives earlier waits for it.
    pub prefill_ready_ns: Nanos,
    /// When the prefill's HTTP response leaves, ns (0 until its transfer concluded): its event
    /// loop sends it at the first turn after the transfer, the end of the forward running then
    /// (sglang issue #22853). The PD router streams nothing to the client before it.
    pub prefill_response_ns: Nanos,
    /// Its prefetch from the shared store (HiCache with a storage backend), if one was started.
    pub prefetch: Option<Prefetch>,
    /// When decode's page ids would reach the prefill, ns, while the prefetch policy holds the
    /// request back (`wait_complete`, `timeout`): the prefetch's end releases it.
    pub metadata_at: Option<Nanos>,
    /// Prompt tokens its admission found on its prefill's own tiers (GPU and host).
    pub local_hit_tokens: u32,
    /// Its client deadline and what an abort costs (only when a scenario models aborts).
    pub abort: Option<Box<super::abort::AbortTrack>>,
    /// The row `requests.csv` gets when the request ends.
    pub row: RequestRow,
}

impl Req {
    /// A request the router just sent to `prefill` and `decode`: both sides `Bootstrapping`,
    /// nothing held, no timeout yet.
    pub fn routed(
        id: u64,
        input: u32,
        output: u32,
        (prefill, decode): (PrefillId, DecodeId),
        hash_ids: Vec<u64>,
        row: RequestRow,
    ) -> Self {
        Self {
            id,
            input,
            output,
            prefill,
            decode,
            sender: KvPoll::Bootstrapping,
            receiver: KvPoll::Bootstrapping,
            prefilled: 0,
            sent: 0,
            chunks_in_flight: 0,
            last_queued: false,
            on_prefill: Holding::default(),
            on_decode: Holding::default(),
            decode_allocated: false,
            decode_prefix: 0,
            hash_ids,
            extra: 0,
            join_step: NOT_RUNNING,
            bootstrap_timeout: None,
            waiting_timeout: None,
            corrupted_earlier: None,
            prefill_ready_ns: 0,
            prefill_response_ns: 0,
            prefetch: None,
            metadata_at: None,
            local_hit_tokens: 0,
            abort: None,
            row,
        }
    }

    /// Whether its prefill still holds its side (its pages, its place in the prefill's load):
    /// from routing until its transfer concludes (`Success`) or the prefill lets it go before
    /// that (`Failed`: the request failed or was aborted, or its decode leg outlives the
    /// prefill's failure).
    #[inline]
    pub fn prefill_holds(&self) -> bool {
        !matches!(self.sender, KvPoll::Failed | KvPoll::Success)
    }

    /// What the prefill computes and sends: the prompt plus tokens generated before a retraction.
    pub fn prompt(&self) -> u32 {
        self.input + self.extra
    }
}

/// The slab of requests in flight.
#[derive(Default)]
pub struct Requests {
    slots: Vec<Option<Req>>,
    free: Vec<u32>,
    live: u64,
}

impl Requests {
    /// Stores a new request and returns its handle.
    pub fn insert(&mut self, req: Req) -> ReqRef {
        let id = req.id;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(req);
                s
            }
            None => {
                self.slots.push(Some(req));
                (self.slots.len() - 1) as u32
            }
        };
        self.live += 1;
        ReqRef { slot, id }
    }

    /// The request behind `r`, if it is still in flight.
    pub fn get(&self, r: ReqRef) -> Option<&Req> {
        self.slots
            .get(r.slot as usize)
            .and_then(Option::as_ref)
            .filter(|q| q.id == r.id)
    }

    /// The request behind `r`, mutable, if it is still in flight.
    pub fn get_mut(&mut self, r: ReqRef) -> Option<&mut Req> {
        self.slots
            .get_mut(r.slot as usize)
            .and_then(Option::as_mut)
            .filter(|q| q.id == r.id)
    }

    /// Removes the request behind `r` (it reached an outcome).
    pub fn take(&mut self, r: ReqRef) -> Option<Req> {
        let slot = self.slots.get_mut(r.slot as usize)?;
        if slot.as_ref().is_none_or(|q| q.id != r.id) {
            return None;
        }
        self.free.push(r.slot);
        self.live -= 1;
        slot.take()
    }

    /// Takes the request behind `r` out of flight without moving it: from now on only
    /// [`Requests::retired_mut`] finds it (`get` does not, as after [`Requests::take`]), until
    /// [`Requests::release`] drops it in its slot. Returns whether it was in flight. A request
    /// is ~400 bytes: its end works on it where it is instead of moving it out.
    pub fn retire(&mut self, r: ReqRef) -> bool {
        let Some(q) = self.get_mut(r) else {
            return false;
        };
        q.id = RETIRED;
        self.live -= 1;
        true
    }

    /// The request [`Requests::retire`] took out of flight behind `r`.
    pub fn retired_mut(&mut self, r: ReqRef) -> &mut Req {
        self.slots[r.slot as usize]
            .as_mut()
            .filter(|q| q.id == RETIRED)
            .expect("a retired request")
    }

    /// Drops the retired request behind `r`; its slot is free again.
    pub fn release(&mut self, r: ReqRef) {
        let slot = &mut self.slots[r.slot as usize];
        assert!(slot.as_ref().is_some_and(|q| q.id == RETIRED));
        *slot = None;
        self.free.push(r.slot);
    }

    /// Requests in flight.
    pub fn live(&self) -> u64 {
        self.live
    }

    /// Requests in flight matching `pred`, in id order.
    pub fn matching(&self, pred: impl Fn(&Req) -> bool) -> Vec<ReqRef> {
        let mut v: Vec<ReqRef> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, q)| {
                let q = q.as_ref().filter(|q| q.id != RETIRED)?;
                pred(q).then_some(ReqRef {
                    slot: slot as u32,
                    id: q.id,
                })
            })
            .collect();
        v.sort_unstable_by_key(|r| r.id);
        v
    }
}

/// One chunk of a request's KV on a transfer queue.
#[derive(Clone, Copy, Debug)]
pub struct ChunkJob {
    /// The request.
    pub req: ReqRef,
    /// Its decode instance (which decides the shard).
    pub decode: DecodeId,
    /// Positions `[first_page, end_page)` in the request's page lists.
    pub first_page: u32,
    /// End of the page range (exclusive).
    pub end_page: u32,
    /// Whether this is the request's last chunk (it also carries state and aux).
    pub last: bool,
}

/// What a request holds on an instance: KV pages in request order, a state slot (hybrid
/// models) and a metadata row (decode).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holding {
    /// KV page ids, in the request's token order.
    pub pages: Vec<u32>,
    /// Mamba/GDN state slot.
    pub slot: Option<u32>,
    /// Metadata (aux) row.
    pub aux: u32,
    /// Pages reserved in all (`pages` plus, on an oracle-watched decode, the output room).
    pub reserved: u32,
}

/// A request's prefetch from the store, started when its prefill's scheduler receives it. Its
/// bytes move as fabric flows (`sglang::mooncake_store`); the sglang rules on it (its timeout, whether it holds a request back) are `sglang::hicache::PrefetchRules`; the simulator keeps `arrived` and `done_ns` up
/// to date from them before the prefill's scheduler looks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prefetch {
    /// When the read started, ns.
    pub start_ns: Nanos,
    /// Prompt blocks the local tiers held then: the read starts after them.
    pub from_block: u32,
    /// Blocks to read.
    pub blocks: u32,
    /// Bytes of one block (all attention-TP ranks together).
    pub block_bytes: u64,
    /// Blocks in host memory by the last look, in prompt order (sglang counts a prefetch's
    /// progress in whole pages from the front: `PrefetchOperation.completed_tokens`).
    pub arrived: u32,
    /// When the read ended (every flow and local copy), ns; `None` while it moves.
    pub done_ns: Option<Nanos>,
}

impl Prefetch {
    /// A read of `blocks` blocks from block `from_block` on, started at `start_ns`.
    pub fn new(start_ns: Nanos, from_block: u32, blocks: u32, block_bytes: u64) -> Self {
        Self {
            start_ns,
            from_block,
            blocks,
            block_bytes,
            arrived: 0,
            done_ns: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::RequestRow;

    fn req(id: u64) -> Req {
        let row = RequestRow::arrived(id, 0, Some((0, 1)), 8, 4);
        Req::routed(id, 8, 4, (PrefillId(0), DecodeId(0)), Vec::new(), row)
    }

    /// A retired request is out of flight exactly as a taken one is (`get`, `take`,
    /// `matching`, `live` no longer see it) while its end still reaches it; released, its
    /// slot serves the next request.
    #[test]
    fn retire_then_release_is_take() {
        let (mut a, mut b) = (Requests::default(), Requests::default());
        let ra: Vec<ReqRef> = (0..4).map(|i| a.insert(req(i))).collect();
        let rb: Vec<ReqRef> = (0..4).map(|i| b.insert(req(i))).collect();
        assert_eq!(ra, rb);
        assert!(a.retire(ra[1]));
        assert!(!a.retire(ra[1]), "retired twice");
        assert!(b.take(rb[1]).is_some());
        assert!(a.get(ra[1]).is_none() && a.take(ra[1]).is_none());
        assert_eq!(a.retired_mut(ra[1]).input, 8);
        assert_eq!(a.live(), b.live());
        assert_eq!(a.matching(|_| true), b.matching(|_| true));
        a.release(ra[1]);
        assert_eq!(
            a.insert(req(9)),
            b.insert(req(9)),
            "the freed slot is reused"
        );
        assert_eq!(a.matching(|_| true), b.matching(|_| true));
    }
}
