//! What one attention-TP rank of one sglang instance registers for PD transfer
//! (`docs/sglang-pd.md` §1): KV regions, mamba/GDN state regions, aux rows, and — for a given
//! capacity — the registered buffers with their byte lengths.
//!
//! Files, bottom up: `cell.rs` (what a unit's bytes are: dtype, streams, labels), `kv.rs` (KV
//! heads and regions), `state.rs` (mamba/GDN state regions), `metadata.rs` (aux rows); this file
//! assembles them into a [`RankLayout`]; `registration.rs` (buffers for a capacity, the unified
//! pool) and `view.rs` (`pdsim layout` table and JSON) read a finished layout.
//!
//! Units: `page_size` in tokens; every `item_len`, `len` and offset in bytes; page, slot and aux
//! row ids are indices (page/slot 0 is the padding sink).

use super::LayoutError;
use crate::spec::{ModelSpec, ServerArgs};

mod cell;
mod kv;
mod metadata;
mod registration;
mod state;
mod view;

pub(crate) use cell::CellFormat;
pub use cell::{KvDtype, KvPart, Label, StatePart, Stream};
pub use kv::KvRegion;
pub use metadata::AuxRegion;
pub use registration::{Buffer, Capacity, Registration, Space, UnitMap};
pub use state::StateRegion;
#[cfg(test)]
pub(crate) use state::padded_groups;
pub use view::{Dim, RegionGroup, render_table};

/// The layout one attention-TP rank registers (`kv_args`, docs/sglang-pd.md §1.1), for one model and server args.
#[derive(Clone, Debug, PartialEq)]
pub struct RankLayout {
    /// Model name.
    pub model: String,
    /// Attention TP of the instance.
    pub attn_tp_size: u32,
    /// This rank: its attention-TP rank within its pipeline stage.
    pub rank: u32,
    /// Its pipeline stage (`kv_args.pp_rank`; 0 without `--pp-size`).
    pub pp_rank: u32,
    /// The instance's pipeline stages (`--pp-size`; 1 without PP).
    pub pp_size: u32,
    /// The first layer its stage holds (`kv_args.prefill_start_layer`, the KV pool's
    /// `start_layer`; 0 without `--pp-size`): its KV regions are the stage's layers only,
    /// `[start_layer, start_layer + regions)`, with their global layer ids in the labels.
    pub start_layer: u32,
    /// Tokens per page.
    pub page_size: u32,
    /// The `--kv-cache-dtype` flag as given (sglang compares peers by this string).
    pub kv_cache_dtype: String,
    /// The resolved encoding.
    pub kv_dtype: KvDtype,
    /// `--enable-unified-memory`.
    pub unified: bool,
    /// KV is an MLA latent.
    pub mla: bool,
    /// The model has mamba/GDN layers.
    pub hybrid: bool,
    /// Total KV heads of the model (`total_kv_head_num`; 1 for MLA).
    pub total_kv_heads: u32,
    /// KV heads this rank stores, `max(1, H_kv / tp)` (docs/sglang-pd.md §1.2).
    pub kv_heads_per_rank: u32,
    /// First global KV head this rank stores (`r * h_r`, or `r / (tp / H_kv)` when replicated).
    pub first_kv_head: u32,
    /// KV regions in registration order (MHA: all K layers then all V layers).
    pub kv_regions: Vec<KvRegion>,
    /// FP4 only (`--kv-cache-dtype fp4_e2m1`): the pool's scale buffers, allocated beside the
    /// KV regions and **not registered** for PD transfer (docs/sglang-pd.md §29), so a decode
    /// dequantises transferred KV with scales nobody wrote. Empty for every other dtype.
    pub kv_scale_regions: Vec<KvRegion>,
    /// `kv_layer_ids` as published (`get_transfer_kv_layer_ids`, docs/sglang-pd.md §1.1): a non-unified hybrid
    /// pool (`HybridLinearKVPool`, the SWA pool) publishes the global layer id of each KV
    /// region (every K then every V); plain MHA/MLA pools publish none, and the unified pool's
    /// `get_kv_layer_ids` returns `[]` ("the sender falls back to positional pairing").
    pub kv_layer_ids: Vec<u32>,
    /// State regions (all conv layers then all temporal layers; or one slot envelope).
    pub state_regions: Vec<StateRegion>,
    /// Whether the model is an SWA hybrid: its state component is `StateType.SWA`, sent on the
    /// generic page path, not the mamba path.
    pub swa: bool,
    /// Unsharded conv sub-block widths (`[key_dim, key_dim, value_dim]` for GDN), published with
    /// the per-layer conv regions; empty for Mamba2 and for the unified envelope.
    pub conv_shard_groups: Vec<u32>,
    /// Aux buffers (docs/sglang-pd.md §1.5), in order.
    pub aux: Vec<AuxRegion>,
}

impl RankLayout {
    /// The layout attention-TP rank `rank` of an instance of `model` with `server` registers.
    ///
    /// Errors: an unknown KV dtype flag, unified memory on a model without hybrid layers (docs/sglang-pd.md §9),
    /// a TP that neither divides nor is a multiple of the KV head count, a mamba dimension TP does
    /// not divide, or MHA with different K and V head dims (no preset has one).
    pub fn new(model: &ModelSpec, server: &ServerArgs, rank: u32) -> Result<Self, LayoutError> {
        let tp = server.attn_tp_size;
        let ps = server.page_size;
        if tp == 0 {
            return Err(LayoutError::ZeroTp);
        }
        if ps == 0 {
            return Err(LayoutError::ZeroPageSize);
        }
        if rank >= tp {
            return Err(LayoutError::RankOutOfRange { rank, tp });
        }
        let hybrid = model.is_hybrid();
        if server.enable_unified_memory && !hybrid {
            return Err(LayoutError::UnifiedNeedsHybrid {
                model: model.name.clone(),
            });
        }
        let dtype = KvDtype::resolve(&server.kv_cache_dtype, model.activation_bytes)?;
        if dtype == KvDtype::Fp4E2m1 && (hybrid || server.speculative.is_some()) {
            // sglang's hybrid pools build the plain MHA/MLA classes, never the FP4 ones; the
            // draft's FP4 pool pdsim has not read (docs/sglang-pd.md §29).
            return Err(LayoutError::Unsupported {
                model: model.name.clone(),
                what: "sglang's FP4 KV cache (fp4_e2m1) with mamba or sliding-window layers or a speculative draft: only MHATokenToKVPoolFP4 and MLATokenToKVPoolFP4 on their own",
            });
        }

        // docs/sglang-pd.md §1.2: heads per rank and which global heads this rank holds.
        let (total_heads, h_r, first_head) = kv::kv_heads(model, tp, rank)?;
        let unified = server.enable_unified_memory;
        let mut kv_regions = kv::kv_regions(model, dtype, ps, (h_r, first_head), unified);
        let kv_scale_regions = kv::kv_scale_regions(model, dtype, ps, (h_r, first_head));
        // docs/sglang-pd.md §19.4: with speculative decoding the draft's KV pool is registered
        // after the target's, at the same page indices (`kv_data_ptrs += draft_kv_data_ptrs`,
        // `PrefillBootstrapQueue._init_kv_manager`; "The indices are always shared with a
        // target model"): one more layer's K and V (MHA) or latent (MLA) per rank, labelled as
        // layer `num_layers`. Hybrid and unified pools are refused with speculation
        // (`scenario::speculative`), so the draft is always a plain full-attention layer.
        if let Some(spec) = &server.speculative {
            let draft = spec.draft_model(model);
            kv_regions.extend(kv::kv_regions(&draft, dtype, ps, (h_r, first_head), false));
        }
        // docs/sglang-pd.md §1.4 / §1.6: mamba state.
        let (mut state_regions, conv_shard_groups) =
            state::state_regions(model, tp, rank, unified)?;
        state_regions.extend(state::swa_regions(
            model,
            dtype,
            ps,
            (h_r, first_head),
            unified,
        ));
        let mla = model.is_mla();
        Ok(RankLayout {
            model: model.name.clone(),
            attn_tp_size: tp,
            rank,
            pp_rank: 0,
            pp_size: 1,
            start_layer: 0,
            page_size: ps,
            kv_cache_dtype: server.kv_cache_dtype.clone(),
            kv_dtype: dtype,
            unified: server.enable_unified_memory,
            mla,
            hybrid,
            total_kv_heads: total_heads,
            kv_heads_per_rank: h_r,
            first_kv_head: first_head,
            kv_layer_ids: if hybrid && !unified {
                kv_regions.iter().filter_map(|r| r.layer).collect()
            } else {
                Vec::new()
            },
            kv_regions,
            kv_scale_regions,
            state_regions,
            swa: model.is_swa(),
            conv_shard_groups,
            aux: metadata::aux_regions(model),
        })
    }
    /// Layouts of every rank of an instance: every attention-TP rank of every pipeline stage,
    /// stage-major (rank `pp_rank · attn_tp + tp_rank`), so a stage's ranks are consecutive.
    pub fn all_ranks(model: &ModelSpec, server: &ServerArgs) -> Result<Vec<Self>, LayoutError> {
        let tp = server.attn_tp_size.max(1);
        (0..server.pp_size.max(1))
            .flat_map(|s| (0..tp).map(move |r| (s, r)))
            .map(|(s, r)| Self::stage(model, server, r, s))
            .collect()
    }

    /// The layout TP rank `rank` of pipeline stage `pp_rank` registers: the whole instance's
    /// layout ([`RankLayout::new`]) cut to the stage's layers, as sglang's KV pool on a stage
    /// allocates only `[start_layer, end_layer)` (`get_pp_indices`) and registers them K then
    /// V, as without PP (`docs/sglang-pd.md` §27). pdsim takes PP on plain attention models
    /// only (no state, no draft: `scenario::sections::pipeline`), so only KV regions move.
    pub fn stage(
        model: &ModelSpec,
        server: &ServerArgs,
        rank: u32,
        pp_rank: u32,
    ) -> Result<Self, LayoutError> {
        let mut l = Self::new(model, server, rank)?;
        if server.pp_size <= 1 {
            return Ok(l);
        }
        let (start, end) =
            crate::spec::server::pp_indices(model.num_layers, pp_rank, server.pp_size);
        l.kv_regions
            .retain(|r| r.layer.is_some_and(|id| (start..end).contains(&id)));
        l.kv_scale_regions
            .retain(|r| r.layer.is_some_and(|id| (start..end).contains(&id)));
        l.kv_layer_ids.retain(|id| (start..end).contains(id));
        l.pp_rank = pp_rank;
        l.pp_size = server.pp_size;
        l.start_layer = start;
        Ok(l)
    }

    /// One past the last layer its stage holds (the model's layer count without PP).
    pub fn end_layer(&self) -> u32 {
        self.kv_regions
            .iter()
            .filter_map(|r| r.layer)
            .max()
            .map_or(self.start_layer, |l| l + 1)
    }

    /// MLA attention on a model with mamba layers (Kimi-Linear type, `is_hybrid_mla_backend`).
    pub fn hybrid_mla(&self) -> bool {
        self.mla && self.hybrid
    }

    /// `kv_item_lens`, bytes.
    pub fn kv_item_lens(&self) -> Vec<u64> {
        self.kv_regions.iter().map(|r| r.item_len).collect()
    }

    /// `state_item_lens` of the MAMBA component, bytes.
    pub fn state_item_lens(&self) -> Vec<u64> {
        self.state_regions.iter().map(|r| r.item_len).collect()
    }

    /// `state_dim_per_tensor` of the MAMBA component (empty for the unified envelope).
    pub fn state_dim_per_tensor(&self) -> Vec<u32> {
        self.state_regions
            .iter()
            .filter_map(|r| r.dim_per_tensor)
            .collect()
    }

    /// `aux_item_lens`, bytes.
    pub fn aux_item_lens(&self) -> Vec<u64> {
        self.aux.iter().map(|a| a.item_len).collect()
    }

    /// Bytes of one page across all KV regions of this rank.
    pub fn kv_page_bytes(&self) -> u64 {
        self.kv_regions.iter().map(|r| r.item_len).sum()
    }

    /// Bytes of one state slot across all state regions of this rank.
    pub fn state_slot_bytes(&self) -> u64 {
        self.state_regions.iter().map(|r| r.item_len).sum()
    }

    /// Bytes of one metadata row across all aux buffers.
    pub fn aux_row_bytes(&self) -> u64 {
        self.aux.iter().map(|a| a.item_len).sum()
    }

    /// The state group of each state region: regions of one group share their item length
    /// (non-unified: conv layers are group 0, temporal layers group 1; unified: the envelope).
    pub fn state_group(&self, region: u32) -> (u32, u32) {
        let n_conv = self
            .state_regions
            .iter()
            .filter(|r| r.part == StatePart::Conv)
            .count() as u32;
        match self.state_regions[region as usize].part {
            StatePart::Conv | StatePart::SlotEnvelope | StatePart::SwaWindow => (0, region),
            StatePart::Temporal => (1, region - n_conv),
        }
    }

    /// Number of state groups (see [`RankLayout::state_group`]).
    pub fn state_groups(&self) -> u32 {
        match self.state_regions.first().map(|r| r.part) {
            None => 0,
            Some(StatePart::SlotEnvelope | StatePart::SwaWindow) => 1,
            Some(_) => 2,
        }
    }

    /// Regions of one state group: `(first region index, count, item_len)`.
    pub fn state_group_regions(&self, group: u32) -> (u32, u32, u64) {
        let idx: Vec<u32> = (0..self.state_regions.len() as u32)
            .filter(|&i| self.state_group(i).0 == group)
            .collect();
        let first = idx.first().copied().unwrap_or(0);
        let item = self
            .state_regions
            .get(first as usize)
            .map_or(0, |r| r.item_len);
        (first, idx.len() as u32, item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::preset;

    pub(super) fn args(tp: u32, ps: u32, dtype: &str, unified: bool) -> ServerArgs {
        crate::layout::test_args(tp, ps, dtype, unified)
    }

    pub(super) fn layout(model: &str, tp: u32, ps: u32, dtype: &str, unified: bool) -> RankLayout {
        RankLayout::new(&preset(model).unwrap(), &args(tp, ps, dtype, unified), 0).unwrap()
    }

    const TPS: [u32; 4] = [1, 2, 4, 8];

    /// Asserts every KV region of every TP has the listed item_len (one value per TP).
    fn kv_vector(model: &str, regions: usize, ps: u32, dtype: &str, want: [u64; 4]) {
        for (tp, w) in TPS.iter().zip(want) {
            let l = layout(model, *tp, ps, dtype, false);
            assert_eq!(l.kv_regions.len(), regions, "{model} tp{tp}");
            assert!(
                l.kv_item_lens().iter().all(|&x| x == w),
                "{model} ps{ps} {dtype} tp{tp}: {:?} != {w}",
                &l.kv_item_lens()[..1]
            );
        }
    }

    #[test]
    fn section_5_1_dense_and_mla_item_lens() {
        for (model, regions) in [("llama-3.1-8b", 64), ("llama-3.1-70b", 160)] {
            kv_vector(model, regions, 1, "auto", [2048, 1024, 512, 256]);
            kv_vector(model, regions, 1, "fp8_e4m3", [1024, 512, 256, 128]);
            kv_vector(model, regions, 16, "bf16", [32768, 16384, 8192, 4096]);
            kv_vector(model, regions, 16, "fp8_e5m2", [16384, 8192, 4096, 2048]);
            kv_vector(model, regions, 64, "auto", [131072, 65536, 32768, 16384]);
            kv_vector(model, regions, 64, "fp8_e4m3", [65536, 32768, 16384, 8192]);
        }
        for (ps, bf, fp) in [(1, 1152, 576), (16, 18432, 9216), (64, 73728, 36864)] {
            kv_vector("deepseek-v3", 61, ps, "auto", [bf; 4]);
            kv_vector("deepseek-v3", 61, ps, "fp8_e4m3", [fp; 4]);
        }
    }

    #[test]
    fn section_5_1_hybrid_kv_parts() {
        kv_vector("qwen3-next-80b-a3b", 24, 1, "auto", [1024, 512, 512, 512]);
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            1,
            "fp8_e4m3",
            [512, 256, 256, 256],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            16,
            "auto",
            [16384, 8192, 8192, 8192],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            16,
            "fp8_e4m3",
            [8192, 4096, 4096, 4096],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            64,
            "auto",
            [65536, 32768, 32768, 32768],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            64,
            "fp8_e4m3",
            [32768, 16384, 16384, 16384],
        );
        for ps in [1u64, 16, 64] {
            let p = ps as u32;
            kv_vector(
                "nemotron-h-8b",
                8,
                p,
                "auto",
                [2048, 1024, 512, 256].map(|x| x * ps),
            );
            kv_vector(
                "nemotron-h-8b",
                8,
                p,
                "fp8_e4m3",
                [1024, 512, 256, 128].map(|x| x * ps),
            );
        }
        // Replicated heads: Qwen3-Next has 2 KV heads, so tp 4 holds head r / 2.
        let l = RankLayout::new(
            &preset("qwen3-next-80b-a3b").unwrap(),
            &args(4, 16, "auto", false),
            3,
        )
        .unwrap();
        assert_eq!((l.kv_heads_per_rank, l.first_kv_head), (1, 1));
    }

    #[test]
    fn section_5_1_mamba_state() {
        let cases = [
            (
                "qwen3-next-80b-a3b",
                72,
                [49152, 24576, 12288, 6144],
                [8192, 4096, 2048, 1024],
                [2097152, 1048576, 524288, 262144],
                [32, 16, 8, 4],
            ),
            (
                "nemotron-h-8b",
                48,
                [61440, 30720, 15360, 7680],
                [10240, 5120, 2560, 1280],
                [4194304, 2097152, 1048576, 524288],
                [128, 64, 32, 16],
            ),
        ];
        for (model, regions, conv, conv_dim, temporal, heads) in cases {
            for (i, tp) in TPS.iter().enumerate() {
                let l = layout(model, *tp, 16, "auto", false);
                assert_eq!(l.state_regions.len(), regions, "{model}");
                let half = regions / 2;
                for (j, r) in l.state_regions.iter().enumerate() {
                    let (want_len, want_dim, part) = if j < half {
                        (conv[i], conv_dim[i], StatePart::Conv)
                    } else {
                        (temporal[i], heads[i], StatePart::Temporal)
                    };
                    assert_eq!(r.part, part);
                    assert_eq!(r.item_len, want_len, "{model} tp{tp} region {j}");
                    assert_eq!(r.dim_per_tensor, Some(want_dim), "{model} tp{tp}");
                }
                // fp8 KV does not change mamba state.
                let f = layout(model, *tp, 16, "fp8_e4m3", false);
                assert_eq!(f.state_item_lens(), l.state_item_lens());
            }
        }
        let q = layout("qwen3-next-80b-a3b", 2, 16, "auto", false);
        assert_eq!(q.conv_shard_groups, vec![2048, 2048, 4096]);
        assert!(
            layout("nemotron-h-8b", 2, 16, "auto", false)
                .conv_shard_groups
                .is_empty()
        );
    }

    #[test]
    fn section_5_2_unified_envelopes() {
        let qwen_bf16 = [
            (1, [24576, 12288, 12288, 12288]),
            (16, [393216, 196608, 196608, 196608]),
            (64, [1572864, 786432, 786432, 786432]),
        ];
        let nem_bf16 = [
            (1, [16384, 8192, 4096, 2048]),
            (16, [262144, 131072, 65536, 32768]),
            (64, [1048576, 524288, 262144, 131072]),
        ];
        for (model, table, m) in [
            (
                "qwen3-next-80b-a3b",
                qwen_bf16,
                [77_266_944u64, 38_633_472, 19_316_736, 9_658_368],
            ),
            (
                "nemotron-h-8b",
                nem_bf16,
                [102_137_856, 51_068_928, 25_534_464, 12_767_232],
            ),
        ] {
            for (ps, bf) in table {
                for (i, tp) in TPS.iter().enumerate() {
                    for (dtype, div) in [("auto", 1), ("fp8_e5m2", 2)] {
                        let l = layout(model, *tp, ps, dtype, true);
                        assert_eq!(l.kv_item_lens(), vec![bf[i] / div], "{model} ps{ps} tp{tp}");
                        assert_eq!(l.state_item_lens(), vec![m[i]], "{model} tp{tp} M");
                        assert!(l.state_dim_per_tensor().is_empty());
                        assert!(l.conv_shard_groups.is_empty());
                        assert!(l.kv_layer_ids.is_empty());
                    }
                }
            }
        }
    }

    #[test]
    fn aux_rows_follow_section_1_5() {
        let l = layout("qwen3-next-80b-a3b", 1, 16, "auto", false);
        assert_eq!(
            l.aux_item_lens(),
            vec![64, 64, 64, 64, 512, 512, 64, 128, 2048 * 2, 64]
        );
    }

    /// Kimi-Linear (`docs/sglang-pd.md` §5.4), computed by hand from sglang's pools:
    /// `MLATokenToKVPool` over the 7 full-attention layers (`ps · 576 · b`, TP-invariant);
    /// `MambaPool` with `KimiLinearStateShape` over the 20 KDA layers: conv `[3, 12288/tp]` bf16
    /// (73728 / tp bytes, `dim_per_tensor` 12288 / tp, outer count 3) and temporal
    /// `[32/tp, 128, 128]` fp32 (2097152 / tp bytes, dim 32 / tp); unified: one page envelope
    /// `ps · 7 · 576 · b` and one slot envelope `M = 20 · (73728 + 2097152) / tp`.
    #[test]
    fn section_5_4_kimi_linear_vectors() {
        let m = "kimi-linear-48b-a3b";
        for (i, tp) in [1u32, 2, 4].into_iter().enumerate() {
            for (ps, dtype, b) in [(1u64, "auto", 2u64), (16, "auto", 2), (64, "fp8_e4m3", 1)] {
                let l = layout(m, tp, ps as u32, dtype, false);
                assert_eq!(l.kv_item_lens(), vec![ps * 576 * b; 7], "tp{tp} ps{ps}");
                assert_eq!(l.kv_layer_ids, vec![3, 7, 11, 15, 19, 23, 26]);
                let conv = [73_728u64, 36_864, 18_432][i];
                let temporal = [2_097_152u64, 1_048_576, 524_288][i];
                let mut want = vec![conv; 20];
                want.extend([temporal; 20]);
                assert_eq!(l.state_item_lens(), want, "tp{tp}");
                let mut dims = vec![[12_288u32, 6144, 3072][i]; 20];
                dims.extend([[32u32, 16, 8][i]; 20]);
                assert_eq!(l.state_dim_per_tensor(), dims, "tp{tp}");
                assert_eq!(l.conv_shard_groups, vec![4096, 4096, 4096]);
                assert!(l.hybrid_mla());

                let u = layout(m, tp, ps as u32, dtype, true);
                assert_eq!(
                    u.kv_item_lens(),
                    vec![ps * 7 * 576 * b],
                    "unified tp{tp} ps{ps}"
                );
                assert_eq!(
                    u.state_item_lens(),
                    vec![[43_417_600u64, 21_708_800, 10_854_400][i]],
                    "unified tp{tp}"
                );
                assert!(u.state_dim_per_tensor().is_empty());
                assert!(u.kv_layer_ids.is_empty() && u.conv_shard_groups.is_empty());
            }
        }
        // KimiLinearStateShape divides the 32 KDA heads by TP (`divide` asserts): TP 64 fails.
        let e = RankLayout::new(&preset(m).unwrap(), &args(64, 16, "auto", false), 0).unwrap_err();
        assert!(matches!(e, LayoutError::TpDoesNotDivide { .. }), "{e}");
    }

    #[test]
    fn unified_on_a_dense_model_is_an_error() {
        for m in ["llama-3.1-8b", "deepseek-v3"] {
            let e =
                RankLayout::new(&preset(m).unwrap(), &args(1, 16, "auto", true), 0).unwrap_err();
            assert!(matches!(e, LayoutError::UnifiedNeedsHybrid { .. }), "{e}");
            assert!(e.to_string().contains("--enable-unified-memory"));
        }
    }

    #[test]
    fn bad_dtype_and_tp_are_errors() {
        let m = preset("llama-3.1-8b").unwrap();
        let e = RankLayout::new(&m, &args(1, 16, "fp4", false), 0).unwrap_err();
        assert!(e.to_string().contains("fp4"), "{e}");
        assert!(RankLayout::new(&m, &args(3, 16, "auto", false), 0).is_err());
        assert!(RankLayout::new(&m, &args(2, 16, "auto", false), 2).is_err());
    }
}
