//! Each server's tokenizer manager: the one process that tokenizes every request before the
//! scheduler sees it (its queue), and the length check that rejects a request before it is
//! scheduled (its limits).
//!
//! sglang's `TokenizerManager._tokenize_one_request` runs the tokenizer in the manager's event
//! loop, one request after another; `_validate_one_request` (`managers/tokenizer_manager.py`,
//! read in sgl-project/sglang's stored copy) raises `ValueError` for a prompt at or past
//! `context_len`, or one whose prompt plus `max_new_tokens` passes it, and the request fails
//! before any scheduler holds it. pdsim bounds a request by what it must hold instead of a
//! context length it does not model: its KV pages on each server it uses, with pdsim's own
//! text (`docs/sglang-pd.md` §12).

use std::fmt;

use crate::engine::Nanos;
use crate::vocab::ErrorKind;
use crate::vocab::ids::InstanceId;

use super::{Core, Failure};

/// When each instance's tokenizer manager is free again, ns, by global instance number.
pub struct Tokenizers {
    free: Vec<Nanos>,
}

impl Tokenizers {
    /// Idle managers for `instances` instances.
    pub fn new(instances: usize) -> Self {
        Self {
            free: vec![0; instances],
        }
    }

    /// `instance`'s manager takes a request of `input` prompt tokens at `now`, at the
    /// calibration's cost (`ComputeParams::tokenize_s`). Returns when it hands the request to
    /// the scheduler, ns.
    #[inline]
    pub fn tokenize_prompt(
        &mut self,
        instance: InstanceId,
        now: Nanos,
        input: u32,
        costs: &crate::spec::ComputeParams,
    ) -> Nanos {
        let cost = crate::engine::ns_from_secs_ceil(costs.tokenize_s(input));
        self.tokenize(instance, now, cost)
    }

    /// `instance`'s manager takes a request that costs `cost_ns` to tokenize at `now`: it
    /// starts when the process is free (first come, first served). Returns when it hands the
    /// request to the scheduler, ns.
    pub fn tokenize(&mut self, instance: InstanceId, now: Nanos, cost_ns: Nanos) -> Nanos {
        let free = &mut self.free[instance.idx()];
        *free = (*free).max(now) + cost_ns;
        *free
    }
}

/// A request the tokenizer manager rejects before scheduling (`request_too_long`): its KV can
/// never fit the server(s) it was routed to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// PD: the prompt's pages on the prefill, or the prompt and output's on the decode.
    PdTooLong {
        /// The request.
        id: u64,
        /// Prefill KV pages it needs and the prefill holds.
        prefill: (u64, u32),
        /// Decode KV pages it needs and the decode holds.
        decode: (u64, u32),
    },
    /// A colocated server: the prompt and output's pages.
    TooLong {
        /// The request.
        id: u64,
        /// KV pages it needs and the server holds.
        pages: (u64, u32),
    },
}

impl Rejection {
    /// Its error kind.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::RequestTooLong
    }

    /// How the request fails.
    pub fn failure(&self) -> Failure {
        Failure::new(self.kind(), self.to_string())
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::PdTooLong {
                id,
                prefill,
                decode,
            } => write!(
                f,
                "Request {id} needs {} prefill and {} decode KV pages; the instances hold {} and {}",
                prefill.0, decode.0, prefill.1, decode.1
            ),
            Self::TooLong { id, pages } => write!(
                f,
                "Request {id} needs {} KV pages; the server holds {}",
                pages.0, pages.1
            ),
        }
    }
}

/// Request `id` of `input` prompt and `output` generated tokens, routed to `prefill` and
/// `decode`: the prefill must hold the prompt's pages, the decode the prompt's and the
/// output's.
pub fn check_pd(
    id: u64,
    (input, output): (u32, u32),
    prefill: &Core,
    decode: &Core,
) -> Result<(), Rejection> {
    // In u64: a prompt and output near u32::MAX each must not wrap into a small request.
    let need_p = u64::from(input).div_ceil(u64::from(prefill.page_size));
    let need_d = (u64::from(input) + u64::from(output)).div_ceil(u64::from(decode.page_size));
    let (have_p, have_d) = (prefill.pages.total(), decode.pages.total());
    if need_p > u64::from(have_p) || need_d > u64::from(have_d) {
        return Err(Rejection::PdTooLong {
            id,
            prefill: (need_p, have_p),
            decode: (need_d, have_d),
        });
    }
    Ok(())
}

/// Request `id` on a colocated `server`: it must hold the prompt's and the output's pages.
pub fn check_colocated(
    id: u64,
    (input, output): (u32, u32),
    server: &Core,
) -> Result<(), Rejection> {
    let need = (u64::from(input) + u64::from(output)).div_ceil(u64::from(server.page_size));
    let have = server.pages.total();
    if need > u64::from(have) {
        return Err(Rejection::TooLong {
            id,
            pages: (need, have),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::testkit::core;

    /// A prefill of 10 pages of 16 tokens holds a 160-token prompt and no more; a decode of 12
    /// pages holds 192 tokens of prompt and output: 160 + 32 fits, 160 + 33 (13 pages) does
    /// not, and 161 + 0 fails on the prefill (11 pages).
    #[test]
    fn pd_limits_are_each_servers_pages() {
        let (p, d) = (core(10, 16), core(12, 16));
        assert_eq!(check_pd(1, (160, 32), &p, &d), Ok(()));
        let e = check_pd(2, (160, 33), &p, &d).unwrap_err();
        assert_eq!(
            e,
            Rejection::PdTooLong {
                id: 2,
                prefill: (10, 10),
                decode: (13, 12)
            }
        );
        assert_eq!(e.kind(), ErrorKind::RequestTooLong);
        assert_eq!(
            e.failure().message,
            "Request 2 needs 10 prefill and 13 decode KV pages; the instances hold 10 and 12"
        );
        assert!(check_pd(3, (161, 0), &p, &d).is_err());
    }

    /// A colocated server of 4 pages of 16 tokens holds 64 tokens: 50 + 14 fits, 50 + 15 does
    /// not.
    #[test]
    fn colocated_limit_is_prompt_and_output() {
        let s = core(4, 16);
        assert_eq!(check_colocated(0, (50, 14), &s), Ok(()));
        let e = check_colocated(7, (50, 15), &s).unwrap_err();
        assert_eq!(
            e.failure(),
            Failure::new(
                ErrorKind::RequestTooLong,
                "Request 7 needs 5 KV pages; the server holds 4"
            )
        );
    }

    /// A prompt and output that together pass u32::MAX are a request too long, not one that
    /// wraps into a short one (the fuzzer's case 623,327 of seed 42: a 65,536-token prompt
    /// with 4,294,967,295 output tokens ran, never ending, on both kinds of server).
    #[test]
    fn a_prompt_and_output_past_u32_do_not_wrap() {
        let (p, d) = (core(10_000, 64), core(10_000, 64));
        let e = check_pd(1, (65_536, u32::MAX), &p, &d).unwrap_err();
        assert_eq!(
            e,
            Rejection::PdTooLong {
                id: 1,
                prefill: (1_024, 10_000),
                decode: (67_109_888, 10_000)
            }
        );
        let e = check_colocated(2, (u32::MAX, u32::MAX), &core(10, 1)).unwrap_err();
        assert_eq!(
            e,
            Rejection::TooLong {
                id: 2,
                pages: (2 * u64::from(u32::MAX), 10)
            }
        );
    }

    /// One manager, first come first served: requests at 0 and 1 ns costing 10 ns are handed
    /// over at 10 and 20 ns; one at 50 ns at 60 ns; another instance's manager is independent.
    #[test]
    fn one_tokenizer_process_per_instance() {
        let mut t = Tokenizers::new(2);
        let (a, b) = (InstanceId(0), InstanceId(1));
        assert_eq!(t.tokenize(a, 0, 10), 10);
        assert_eq!(t.tokenize(a, 1, 10), 20);
        assert_eq!(t.tokenize(b, 1, 10), 11);
        assert_eq!(t.tokenize(a, 50, 10), 60);
    }
}
