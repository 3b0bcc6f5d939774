//! Decode's prealloc queue: sglang's admission budget (`DecodePreallocQueue`). An admitted
//! request's `WaitingForInput` clock is [`crate::sglang::transfer::PollTimeout::Waiting`].

use std::cmp::Reverse;

use super::{CLIP_MAX_NEW_TOKENS, DecodeServer};
use crate::vocab::requests::{KvPoll, ReqRef, Requests};

/// `DecodeReqToTokenPool` rows beyond `--max-running-requests` for requests being preallocated
/// or transferred: `pre_alloc_size = 2 × max_num_reqs` when `max_num_reqs <= 32`, else
/// `SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS` (0 unless set; environ.py: "only effective
/// when max_num_reqs > 32"), which 2026's `--disaggregation-decode-extra-slots` names
/// (`model_runner.py`; `docs/sglang-pd.md` §16.1). So above 32 running requests and without
/// extra slots, preallocated, transferring and running requests share the same rows.
fn pre_alloc_rows(max_running: u32, extra: Option<u32>) -> u32 {
    if max_running <= 32 {
        2 * max_running
    } else {
        extra.unwrap_or(0)
    }
}

impl DecodeServer {
    /// Request `r` has been tokenized and has handshaken with its prefill: it waits for pages
    /// at the back of the prealloc queue.
    pub fn enqueue_prealloc(&mut self, r: ReqRef) {
        self.prealloc.push_back(r);
    }

    /// Request `r` has been tokenized and has handshaken with its prefill
    /// (`sglang::bootstrap::Handoff::Prealloc`): it waits for pages at the back of the
    /// prealloc queue (`DecodePreallocQueue.add`), unless this server is down, which takes
    /// nothing (false).
    #[inline]
    pub fn handshaken(&mut self, r: ReqRef) -> bool {
        if !self.core.alive {
            return false;
        }
        self.enqueue_prealloc(r);
        true
    }

    /// Whether nobody waits for pages (most step ends: nothing to admit).
    #[inline]
    pub fn prealloc_is_empty(&self) -> bool {
        self.prealloc.is_empty()
    }

    /// The prealloc queue: in order, reserve KV pages for the prompt (and a state slot for
    /// hybrids) while the admission budget holds; stop at the first request that does not fit.
    /// Each admitted request goes to `admitted`, in order (its page ids are then sent to the
    /// prefill).
    ///
    /// sglang's `DecodePreallocQueue.pop_preallocated` with `_allocatable_tokens` (sglang
    /// `disaggregation/decode.py` @ 278e503a; `_allocatable_token_budgets` @ 0035ca42, same
    /// rule), in tokens, with `R = --num-reserved-decode-tokens`:
    ///
    /// ```text
    /// retractable = Σ running (prompt + outputs)
    /// need_single = max running (prompt + min(max_new, 4096)) − retractable
    /// allocatable = free − max(R × held, need_single)         held: running, transferring,
    ///                                                          waiting, just preallocated
    /// admit iff a request row is free and
    ///   max(pages(prompt) + R, prompt + min(max_new, 4096) − retractable) <= allocatable
    /// ```
    ///
    /// Only the prompt's pages are taken; `R` is a budget, never allocated. There is no
    /// exception for an empty server: a prompt that cannot fit with its reservation waits.
    ///
    /// With a radix tree (`sglang::decode_radix`) the request's prefix is matched and locked
    /// first; `free` counts the tree's unlocked pages, the request asks for the pages past its
    /// prefix (`pages(prompt) − prefix`, and `prompt − prefix` in the finish term), and the
    /// tree's least recently used unlocked blocks make room if the pool is short.
    pub fn try_prealloc(&mut self, reqs: &mut Requests, admitted: &mut Vec<ReqRef>) {
        if !self.core.alive {
            return;
        }
        let ps = u64::from(self.core.page_size);
        let r = u64::from(self.reserved_tokens);
        let rows = u64::from(self.max_running)
            + u64::from(pre_alloc_rows(self.max_running, self.extra_slots));
        let retractable = self.context_tokens;
        // `need_single` is read only when it could beat the holders' reservation: the longest
        // running request's tokens bound it, so the scan of the batch runs on small batches.
        let mut need_single: Option<u64> = None;
        while let Some(&q) = self.prealloc.front() {
            let Some((id, prompt, output)) = reqs.get(q).map(|x| (x.id, x.prompt(), x.output))
            else {
                self.prealloc.pop_front();
                continue;
            };
            let held = u64::from(self.holders);
            if held >= rows {
                self.prealloc_stops[0] += 1;
                break;
            }
            let reserve = r * held;
            let single = if self.longest_joined > retractable + reserve {
                *need_single.get_or_insert_with(|| self.need_single(reqs))
            } else {
                0
            };
            let (prefix, evictable) = match self.radix.as_deref_mut() {
                Some(t) => {
                    let hash_ids = &reqs.get(q).expect("looked up above").hash_ids;
                    let prefix = t.match_prefix(id, hash_ids, prompt);
                    (u64::from(prefix), t.evictable_pages())
                }
                None => (0, 0),
            };
            let free = u64::from(self.core.pages.available() + evictable) * ps;
            let allocatable = free.saturating_sub(reserve.max(single));
            let prompt = u64::from(prompt);
            let pages = prompt.div_ceil(ps) - prefix;
            let finish = (prompt - prefix * ps + u64::from(output.min(CLIP_MAX_NEW_TOKENS)))
                .saturating_sub(retractable);
            let mut holding = None;
            if (pages * ps + r).max(finish) <= allocatable {
                if let Some(t) = self.radix.as_deref_mut() {
                    t.evict_for(pages as u32, &mut self.core.pages);
                }
                holding = self.core.pages.alloc(id, pages as u32, self.core.hybrid);
            }
            let Some(mut holding) = holding else {
                if let Some(t) = self.radix.as_deref_mut() {
                    t.unmatch(id);
                }
                self.prealloc_stops[1] += 1;
                break;
            };
            let req = reqs.get_mut(q).expect("looked up above");
            if let Some(t) = self.radix.as_deref_mut() {
                t.admitted(id, req.prompt(), &mut holding);
                req.decode_prefix = (prefix * ps) as u32;
            }
            self.prealloc.pop_front();
            self.holders += 1;
            req.on_decode = holding;
            req.decode_allocated = true;
            req.receiver = KvPoll::WaitingForInput;
            admitted.push(q);
        }
    }

    /// `need_single` of the budget: the most tokens one running request may reach
    /// (`prompt + min(max_new, 4096)`) less every running request's tokens now.
    fn need_single(&self, reqs: &Requests) -> u64 {
        let longest = self
            .finishing
            .iter()
            .filter_map(|&Reverse((_, join, r))| {
                let q = reqs.get(r).filter(|q| q.join_step == join)?;
                Some(u64::from(q.prompt()) + u64::from(q.output.min(CLIP_MAX_NEW_TOKENS)))
            })
            .max()
            .unwrap_or(0);
        longest.saturating_sub(self.context_tokens)
    }
}
