//! The identity of generated blocks: for each trace row, the ids of the 512-token blocks its
//! output completes, as a later turn of the same conversation names them — what a decode that
//! offloads its KV to the store (`disaggregation_decode_enable_offload_kvcache`, sglang's
//! `DecodeKVCacheOffloadManager`) writes, so that the next turn's prefill can hit them
//! (`docs/sglang-pd.md` §18.1).
//!
//! # Why the trace layer, and why at load time
//!
//! A trace's `hash_ids` name a row's *prompt* blocks only. In a multi-turn trace (the Mooncake
//! conversation traces) a later turn's prompt is the earlier prompt, the earlier answer and a
//! new message, so its `hash_ids` begin with the earlier row's full prompt blocks and go on
//! with blocks that cover the earlier answer: the trace does name the answer's blocks, one
//! turn later. The names are read here, once, before the run, from the rows themselves; the
//! simulation only looks its own request up (never a future row).
//!
//! # The rule
//!
//! For row `R` with prompt blocks `h` (`ceil(n / 512)` of them), prompt `n` and output `o`
//! tokens:
//!
//! * `f = n / 512` of its prompt blocks are full; the KV of `n + o − 1` tokens exists when it
//!   ends (the last token is never fed back: sglang offloads `origin_input_ids +
//!   output_ids[:-1]`), so its output completes `m = (n + o − 1) / 512 − f` blocks: the
//!   prompt's partial last block filled up by generated tokens, then whole blocks of them.
//!   The tail past the last whole block (< 512 tokens) has no block id and is not written.
//! * Its **continuation** is the first later row `L` (file order) with `f ≥ 1` and
//!   - `L`'s block `f − 1` is `h[f − 1]` (ids are prefix-chained: the same id at the same
//!     place is the same prefix, so `L` begins with `R`'s full prompt blocks),
//!   - `L` has a block `f` and it is not `R`'s own partial block `h[f]` (a re-sent prompt
//!     is not a continuation),
//!   - `L`'s prompt holds `R`'s prompt and its whole answer: `n_L ≥ n + o` (which tells a
//!     next turn from a sibling that shares `R`'s prefix — another conversation on the same
//!     system prompt — with a short prompt of its own).
//! * `R`'s answer blocks are then `L`'s blocks `f, f + 1, …` that are full in `L` (index below
//!   `n_L / 512`), up to `m` of them.
//! * Blocks the rule does not name — no continuation, `f = 0` (no full block to anchor on), or
//!   an answer longer than what `L` holds — get **fresh ids** nothing will hit: counted up
//!   from one past the largest id of the rows read, in row order. They are still written (the
//!   traffic is real).
//! * A row without `hash_ids` (a format without prefix information) gets no answer blocks: the
//!   store keys a block by its prefix, which such a row does not have.
//!
//! # Limits
//!
//! * A sibling with a long prompt of its own that shares `R`'s full prompt blocks and comes
//!   before `R`'s real next turn is taken for it (the trace says nothing that tells them
//!   apart); its blocks past `f` are then its own prompt's, written early by `R`'s decode.
//!   A prompt whose only full blocks are a shared system prompt is the likely case.
//! * A continuation that shortened the answer (a client that trims history) names fewer
//!   blocks; the rest are fresh.
//! * Memory: one short list of ids per row (empty for most), held for the run — the only
//!   per-row state pdsim keeps of a trace, and only with the key on.

use std::collections::BTreeMap;

use super::{HASH_BLOCK_TOKENS, TraceRow};
use crate::config::AnswerBlocks;

/// Builds [`AnswerBlocks`] from rows fed in file order, holding only the rows still waiting
/// for their continuation.
#[derive(Default)]
pub struct AnswerDeriver {
    /// Per row: its answer blocks named so far (empty until its continuation arrives) and how
    /// many it needs.
    rows: Vec<(Vec<u64>, u32)>,
    /// Rows waiting for a continuation, by (index of their last full block, its id).
    waiting: BTreeMap<(u32, u64), Vec<Waiting>>,
    /// The largest block id seen.
    max_id: Option<u64>,
    continued: u64,
    /// Rows with a `session_id`: the session's last row, which its next row continues
    /// (the session names the continuation; no guessing from the ids).
    by_session: BTreeMap<u64, Waiting>,
}

/// A row that may still be continued.
struct Waiting {
    row: usize,
    /// Its full prompt blocks (`f`).
    full: u32,
    /// Its own partial last block, if its prompt has one.
    partial: Option<u64>,
    /// Tokens a continuation's prompt must hold: prompt + output.
    need: u64,
    /// Session rows: its full prompt blocks, which its next turn must start with (empty
    /// for rows without a session: the chained ids tell that there).
    prefix: Vec<u64>,
}

/// Full blocks of a prompt of `tokens` tokens.
fn full_blocks(tokens: u64) -> u64 {
    tokens / u64::from(HASH_BLOCK_TOKENS)
}

/// The blocks an output of `output` tokens after a prompt of `input` completes:
/// `(input + output − 1) / 512 − input / 512`.
pub fn completed_blocks(input: u32, output: u32) -> u32 {
    let (n, o) = (u64::from(input), u64::from(output));
    (full_blocks(n + o.saturating_sub(1)) - full_blocks(n)) as u32
}

impl AnswerDeriver {
    /// Reads the next row (file order).
    pub fn push(&mut self, row: &TraceRow) {
        let h = &row.hash_ids;
        if let Some(&m) = h.iter().max() {
            self.max_id = Some(self.max_id.map_or(m, |x| x.max(m)));
        }
        if let Some(session) = row.session_id {
            self.push_session_row(session, row);
            return;
        }
        // This row may continue earlier ones: at every block it has a successor for, the rows
        // whose last full block is that one.
        if h.len() > 1 {
            for (at, &id) in h[..h.len() - 1].iter().enumerate() {
                let key = (at as u32, id);
                let Some(list) = self.waiting.get_mut(&key) else {
                    continue;
                };
                let next = h[at + 1];
                let full_here = full_blocks(u64::from(row.input_tokens)) as usize;
                let mut i = 0;
                while i < list.len() {
                    let w = &list[i];
                    if w.partial == Some(next) || u64::from(row.input_tokens) < w.need {
                        i += 1;
                        continue;
                    }
                    let w = list.swap_remove(i);
                    let (named, want) = &mut self.rows[w.row];
                    let f = w.full as usize;
                    let end = (f + *want as usize).min(full_here).max(f);
                    named.extend_from_slice(&h[f..end]);
                    self.continued += 1;
                }
                if list.is_empty() {
                    self.waiting.remove(&key);
                }
            }
        }
        let want = if h.is_empty() {
            0
        } else {
            completed_blocks(row.input_tokens, row.output_tokens)
        };
        let f = full_blocks(u64::from(row.input_tokens)) as usize;
        let index = self.rows.len();
        self.rows.push((Vec::new(), want));
        if want > 0 && f >= 1 && f <= h.len() {
            // `swap_remove` above reorders a key's list; which of two rows waiting on the same
            // key a later row continues does not depend on the order (it continues both).
            self.waiting
                .entry(((f - 1) as u32, h[f - 1]))
                .or_default()
                .push(Waiting {
                    row: index,
                    full: f as u32,
                    partial: h.get(f).copied(),
                    need: u64::from(row.input_tokens) + u64::from(row.output_tokens),
                    prefix: Vec::new(),
                });
        }
    }

    /// A row of session `session`: it continues the session's previous row (its blocks past
    /// that row's full prompt blocks, full in this row, name that row's answer, up to what
    /// the answer completed; a prompt that no longer starts with the previous one's full
    /// blocks names nothing) and waits for the session's next row.
    fn push_session_row(&mut self, session: u64, row: &TraceRow) {
        let h = &row.hash_ids;
        if let Some(w) = self.by_session.remove(&session) {
            let f = w.full as usize;
            let full_here = full_blocks(u64::from(row.input_tokens)) as usize;
            let (named, want) = &mut self.rows[w.row];
            let prev_prefix = w.prefix.as_slice();
            if h.len() >= f && &h[..f] == prev_prefix {
                let end = (f + *want as usize).min(full_here).max(f);
                named.extend_from_slice(&h[f..end]);
                self.continued += 1;
            }
        }
        let want = if h.is_empty() {
            0
        } else {
            completed_blocks(row.input_tokens, row.output_tokens)
        };
        let f = (full_blocks(u64::from(row.input_tokens)) as usize).min(h.len());
        let index = self.rows.len();
        self.rows.push((Vec::new(), want));
        if want > 0 {
            self.by_session.insert(
                session,
                Waiting {
                    row: index,
                    full: f as u32,
                    partial: None,
                    need: 0,
                    prefix: h[..f].to_vec(),
                },
            );
        }
    }

    /// The table: every row's named blocks, the rest fresh ids counted up from one past the
    /// largest id read, in row order. `None` if the fresh ids would pass `u64::MAX`.
    pub fn finish(self) -> Option<AnswerBlocks> {
        let mut next = self.max_id.map_or(Some(0), |m| m.checked_add(1))?;
        let mut rows = Vec::with_capacity(self.rows.len());
        for (mut named, want) in self.rows {
            while named.len() < want as usize {
                named.push(next);
                next = next.checked_add(1)?;
            }
            rows.push(named);
        }
        Some(AnswerBlocks::new(rows, self.continued))
    }
}

/// [`AnswerDeriver`] over `rows`, for tests and tools.
pub fn answer_blocks<'a>(rows: impl IntoIterator<Item = &'a TraceRow>) -> Option<AnswerBlocks> {
    let mut d = AnswerDeriver::default();
    for r in rows {
        d.push(r);
    }
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(input: u32, output: u32, hash_ids: &[u64]) -> TraceRow {
        TraceRow {
            arrival_ns: 0,
            input_tokens: input,
            output_tokens: output,
            hash_ids: hash_ids.to_vec(),
            session_id: None,
            turn: None,
            timeout_ns: None,
        }
    }

    #[test]
    fn an_output_completes_the_partial_block_then_whole_ones() {
        // 1000 prompt tokens (1 full block + 488), 25 output tokens: KV of 1024 tokens, the
        // second block is complete.
        assert_eq!(completed_blocks(1000, 25), 1);
        assert_eq!(completed_blocks(1000, 24), 0, "1023 tokens of KV");
        assert_eq!(completed_blocks(1024, 1), 0, "the last token has no KV");
        assert_eq!(completed_blocks(1024, 513), 1);
        assert_eq!(
            completed_blocks(100, 2000),
            4,
            "2099 tokens: 4 whole blocks"
        );
    }

    /// Turn 1 (blocks 1 2 3, 1300 tokens), a sibling on the same first block, turn 2 =
    /// turn 1's prompt + answer + message: turn 2's blocks 2.. name turn 1's answer.
    #[test]
    fn a_later_turn_names_the_answer_blocks() {
        let rows = [
            row(1300, 800, &[1, 2, 3]), // f = 2, KV 2099: blocks 2, 3 complete (m = 2)
            row(1200, 10, &[1, 9, 10]), // sibling: shares block 1 only
            row(1300, 5, &[1, 2, 3]),   // a re-send of turn 1: not a continuation
            row(1500, 5, &[1, 2, 20]),  // too short to hold turn 1's answer
            row(2400, 30, &[1, 2, 4, 5, 6]), // turn 2: blocks 4, 5 are full (2400 / 512 = 4)
        ];
        let t = answer_blocks(&rows).unwrap();
        assert_eq!(t.of(0), &[4, 5]);
        assert_eq!(t.continued, 1);
        // Row 1 (f = 2, m = (1209 / 512) − 2 = 0), rows 2 and 3 (m = 0): nothing to name.
        assert!(t.of(1).is_empty() && t.of(2).is_empty() && t.of(3).is_empty());
        // Row 4: KV 2429 tokens, f = 4, m = 0.
        assert!(t.of(4).is_empty());
        assert!(t.of(99).is_empty());
    }

    #[test]
    fn unnamed_blocks_get_fresh_ids_above_every_trace_id() {
        let rows = [
            // f = 1, KV of 2599 tokens: 4 blocks.
            row(600, 2000, &[7, 8]),
            // Too short (1200 < 2600): not its continuation.
            row(1200, 5, &[7, 30, 31]),
            // Its continuation: blocks 1..5 are full in it (2700 / 512 = 5).
            row(2700, 5, &[7, 40, 41, 42, 43, 44]),
            // f = 0: nothing to anchor on, 2 fresh ids.
            row(300, 900, &[50]),
        ];
        let t = answer_blocks(&rows).unwrap();
        assert_eq!(t.of(0), &[40, 41, 42, 43]);
        assert_eq!(
            t.of(3),
            &[51, 52],
            "fresh ids from one past the largest id (50)"
        );
        assert_eq!(t.continued, 1);
        assert_eq!(t.blocks(), 6);
    }

    #[test]
    fn a_continuation_that_holds_less_leaves_fresh_ids() {
        // m = (1000 + 1100 − 1) / 512 − 1 = 3; the next turn (2100 tokens ≥ 2100) has 4 full
        // blocks: blocks 1..4 → 3 named.
        let rows = [row(1000, 1100, &[1, 2]), row(2100, 1, &[1, 5, 6, 7, 8])];
        assert_eq!(answer_blocks(&rows).unwrap().of(0), &[5, 6, 7]);
        // A trace whose ids end at u64::MAX leaves no room for fresh ids.
        let rows = [row(300, 900, &[u64::MAX])];
        assert!(answer_blocks(&rows).is_none());
        // Rows without hash_ids get nothing.
        let rows = [row(3000, 3000, &[])];
        assert!(answer_blocks(&rows).unwrap().of(0).is_empty());
    }
}
