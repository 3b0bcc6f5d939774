//! Rendering one rank's layout for `pdsim layout`: the human table and the JSON view (regions
//! grouped into runs of equal kind, item length and dims). Display only; nothing here feeds the
//! simulation.
//!
//! Units: `item_len` in bytes; dims name their own unit (`tokens`, `heads`, `bytes`, …).

use std::fmt::Write as _;

use serde::Serialize;

use crate::layout::rank::RankLayout;
use crate::layout::rank::cell::{KvDtype, KvPart, StatePart, Stream};
use crate::layout::rank::kv::KvRegion;
use crate::layout::rank::metadata::AuxRegion;
use crate::layout::rank::state::StateRegion;

/// One named dimension of an item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Dim {
    /// What it counts (`tokens`, `heads`, `head_dim`, `bytes`, …).
    pub name: String,
    /// How many.
    pub size: u64,
}

fn dims(pairs: &[(&str, u64)]) -> Vec<Dim> {
    pairs
        .iter()
        .map(|&(n, size)| Dim {
            name: n.to_string(),
            size,
        })
        .collect()
}

/// A run of consecutive regions with the same kind, item length and dims (for display).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RegionGroup {
    /// `k`, `v`, `latent`, `page_envelope`, `conv`, `temporal`, `slot_envelope`.
    pub kind: String,
    /// Regions in the group.
    pub count: u32,
    /// Global layer ids (empty for envelopes).
    pub layers: Vec<u32>,
    /// Bytes of one page/slot of one region.
    pub item_len: u64,
    /// Dims of one page/slot of one region, outermost first; their product is `item_len`.
    pub dims: Vec<Dim>,
    /// TP-sliced dim published for state (`state_dim_per_tensor`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dim_per_tensor: Option<u32>,
}

fn kv_dims(l: &RankLayout, r: &KvRegion) -> Vec<Dim> {
    let ps = u64::from(l.page_size);
    if l.kv_dtype == KvDtype::Fp4E2m1 {
        return fp4_dims(l, r);
    }
    let b = u64::from(l.kv_dtype.bytes());
    match r.cell.blocks.as_slice() {
        [blk] => match blk.stream {
            Stream::Kv { head_bytes, .. } => dims(&[
                ("tokens", ps),
                ("heads", u64::from(l.kv_heads_per_rank)),
                ("head_dim", u64::from(head_bytes) / b),
                ("bytes", b),
            ]),
            _ => dims(&[("tokens", ps), ("latent", blk.row_bytes / b), ("bytes", b)]),
        },
        _ => dims(&[("tokens", ps), ("entry_bytes", r.item_len / ps)]),
    }
}

/// An FP4 region's dims: packed E2M1 bytes (two elements each) or scale bytes (one per 16
/// elements) per head, or per latent row.
fn fp4_dims(l: &RankLayout, r: &KvRegion) -> Vec<Dim> {
    let ps = u64::from(l.page_size);
    let unit = match r.part {
        KvPart::KScale | KvPart::VScale | KvPart::LatentScale => "scale_bytes",
        _ => "e2m1_pair_bytes",
    };
    match r.cell.blocks.as_slice() {
        [blk] if !l.mla => {
            let Stream::Kv { head_bytes, .. } = blk.stream else {
                return dims(&[("tokens", ps), ("entry_bytes", r.item_len / ps)]);
            };
            dims(&[
                ("tokens", ps),
                ("heads", u64::from(l.kv_heads_per_rank)),
                (unit, u64::from(head_bytes)),
            ])
        }
        [blk] => dims(&[("tokens", ps), (unit, blk.row_bytes)]),
        _ => dims(&[("tokens", ps), ("entry_bytes", r.item_len / ps)]),
    }
}

fn state_dims(r: &StateRegion) -> Vec<Dim> {
    let names: &[&str] = match r.part {
        // KDA keeps its conv state transposed (`conv_slice_axis = 1`, outer count K - 1).
        StatePart::Conv if r.outer_count > 1 => &["kernel-1", "channels"],
        StatePart::Conv => &["channels", "kernel-1"],
        StatePart::Temporal => &["heads", "head_dim", "state"],
        StatePart::SlotEnvelope => &["entry_bytes"],
        StatePart::SwaWindow => &["tokens", "heads", "head_dim"],
    };
    let mut out: Vec<(&str, u64)> = names.iter().copied().zip(r.shape.iter().copied()).collect();
    if r.part != StatePart::SlotEnvelope {
        out.push(("bytes", u64::from(r.dtype_bytes)));
    }
    dims(&out)
}

/// `(kind, layer, item_len, dims, dim_per_tensor)` of one region.
type RegionRow = (String, Option<u32>, u64, Vec<Dim>, Option<u32>);

fn group_regions(items: impl Iterator<Item = RegionRow>) -> Vec<RegionGroup> {
    let mut out: Vec<RegionGroup> = Vec::new();
    for (kind, layer, item_len, dims, dpt) in items {
        if let Some(last) = out.last_mut()
            && last.kind == kind
            && last.item_len == item_len
            && last.dims == dims
            && last.dim_per_tensor == dpt
        {
            last.count += 1;
            last.layers.extend(layer);
            continue;
        }
        out.push(RegionGroup {
            kind,
            count: 1,
            layers: layer.into_iter().collect(),
            item_len,
            dims,
            dim_per_tensor: dpt,
        });
    }
    out
}

fn snake<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl RankLayout {
    /// KV regions grouped for display.
    pub fn kv_groups(&self) -> Vec<RegionGroup> {
        group_regions(
            self.kv_regions
                .iter()
                .map(|r| (snake(&r.part), r.layer, r.item_len, kv_dims(self, r), None)),
        )
    }

    /// FP4 scale regions grouped for display (empty for other dtypes).
    pub fn kv_scale_groups(&self) -> Vec<RegionGroup> {
        group_regions(
            self.kv_scale_regions
                .iter()
                .map(|r| (snake(&r.part), r.layer, r.item_len, kv_dims(self, r), None)),
        )
    }

    /// State regions grouped for display.
    pub fn state_groups_display(&self) -> Vec<RegionGroup> {
        group_regions(self.state_regions.iter().map(|r| {
            (
                snake(&r.part),
                r.layer,
                r.item_len,
                state_dims(r),
                r.dim_per_tensor,
            )
        }))
    }
}

#[derive(Serialize)]
struct RegionsView<'a> {
    count: usize,
    order: &'static str,
    layer_ids_published: &'a [u32],
    item_lens_distinct: Vec<u64>,
    groups: Vec<RegionGroup>,
}

#[derive(Serialize)]
struct ScaleView {
    count: usize,
    groups: Vec<RegionGroup>,
}

#[derive(Serialize)]
struct StateView {
    count: usize,
    conv_shard_groups: Vec<u32>,
    groups: Vec<RegionGroup>,
}

#[derive(Serialize)]
struct PipelineView {
    pp_size: u32,
    pp_rank: u32,
    start_layer: u32,
    end_layer: u32,
}

#[derive(Serialize)]
struct RankLayoutView<'a> {
    model: &'a str,
    attn_tp_size: u32,
    rank: u32,
    page_size: u32,
    kv_cache_dtype: &'a str,
    kv_dtype: KvDtype,
    /// Whole bytes an element; absent for FP4, whose elements are `kv_dtype_bits` wide.
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_dtype_bytes: Option<u32>,
    /// FP4 only: bits of one stored element of the registered data.
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_dtype_bits: Option<u32>,
    unified: bool,
    mla: bool,
    hybrid: bool,
    kv_heads_per_rank: u32,
    first_kv_head: u32,
    /// `--pp-size` > 1 only: the stage and its layers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline: Option<PipelineView>,
    kv: RegionsView<'a>,
    /// FP4 only: the scale buffers, allocated and not registered (docs/sglang-pd.md §29).
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_scale_unregistered: Option<ScaleView>,
    state: StateView,
    aux: &'a [AuxRegion],
}

impl RankLayout {
    fn kv_order(&self) -> &'static str {
        if self.unified && self.mla {
            // `UnifiedMLATokenToKVPool`: one latent block per layer per page.
            "page envelope: [L0_latent|L1_latent|...] per page, all layers in one region"
        } else if self.unified {
            "page envelope: [L0_K|L0_V|L1_K|...] per page, all layers in one region"
        } else if self.mla {
            "one latent region per layer"
        } else {
            "all K layers, then all V layers"
        }
    }
}

impl Serialize for RankLayout {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut distinct: Vec<u64> = self.kv_item_lens();
        distinct.dedup();
        RankLayoutView {
            model: &self.model,
            attn_tp_size: self.attn_tp_size,
            rank: self.rank,
            page_size: self.page_size,
            kv_cache_dtype: &self.kv_cache_dtype,
            kv_dtype: self.kv_dtype,
            kv_dtype_bytes: (self.kv_dtype != KvDtype::Fp4E2m1).then(|| self.kv_dtype.bytes()),
            kv_dtype_bits: (self.kv_dtype == KvDtype::Fp4E2m1).then(|| self.kv_dtype.bits()),
            unified: self.unified,
            mla: self.mla,
            hybrid: self.hybrid,
            kv_heads_per_rank: self.kv_heads_per_rank,
            first_kv_head: self.first_kv_head,
            pipeline: (self.pp_size > 1).then(|| PipelineView {
                pp_size: self.pp_size,
                pp_rank: self.pp_rank,
                start_layer: self.start_layer,
                end_layer: self.end_layer(),
            }),
            kv: RegionsView {
                count: self.kv_regions.len(),
                order: self.kv_order(),
                layer_ids_published: &self.kv_layer_ids,
                item_lens_distinct: distinct,
                groups: self.kv_groups(),
            },
            kv_scale_unregistered: (!self.kv_scale_regions.is_empty()).then(|| ScaleView {
                count: self.kv_scale_regions.len(),
                groups: self.kv_scale_groups(),
            }),
            state: StateView {
                count: self.state_regions.len(),
                conv_shard_groups: self.conv_shard_groups.clone(),
                groups: self.state_groups_display(),
            },
            aux: &self.aux,
        }
        .serialize(s)
    }
}

fn layer_list(layers: &[u32]) -> String {
    if layers.is_empty() {
        return "-".into();
    }
    // A group may hold the K and the V region of each layer (the SWA windows): list each once.
    let mut layers = layers.to_vec();
    layers.sort_unstable();
    layers.dedup();
    let layers = layers.as_slice();
    let contiguous = layers.windows(2).all(|w| w[1] == w[0] + 1);
    if contiguous && layers.len() > 2 {
        return format!("{}-{}", layers[0], layers[layers.len() - 1]);
    }
    if layers.len() <= 6 {
        return layers
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
    }
    format!(
        "{},{},...,{} ({} layers)",
        layers[0],
        layers[1],
        layers[layers.len() - 1],
        layers.len()
    )
}

fn dims_text(dims: &[Dim]) -> String {
    dims.iter()
        .map(|d| format!("{} {}", d.size, d.name))
        .collect::<Vec<_>>()
        .join(" x ")
}

/// The human table of `pdsim layout`: what one rank registers.
pub fn render_table(l: &RankLayout) -> String {
    let mut s = String::new();
    let width = if l.kv_dtype == KvDtype::Fp4E2m1 {
        "4 bits, 2 a byte, + 1 scale byte per 16 elements".to_string()
    } else {
        format!("{} B", l.kv_dtype.bytes())
    };
    let _ = writeln!(
        s,
        "{}: attention TP {} (rank {}), page size {} tokens, --kv-cache-dtype {} ({}, {width}), unified memory {}",
        l.model,
        l.attn_tp_size,
        l.rank,
        l.page_size,
        l.kv_cache_dtype,
        l.kv_dtype.name(),
        if l.unified { "on" } else { "off" }
    );
    if l.pp_size > 1 {
        let _ = writeln!(
            s,
            "pipeline stage {} of {} (--pp-size {}): layers {}..{} only (get_pp_indices); it writes them to every decode rank it serves, the other stages write theirs",
            l.pp_rank,
            l.pp_size,
            l.pp_size,
            l.start_layer,
            l.end_layer()
        );
    }
    let heads = if l.mla {
        "MLA latent, replicated on every rank".to_string()
    } else if l.attn_tp_size > l.total_kv_heads {
        format!(
            "{} of {} KV heads per rank (head {} here, replicated)",
            l.kv_heads_per_rank, l.total_kv_heads, l.first_kv_head
        )
    } else {
        format!(
            "{} of {} KV heads per rank (heads {}..{} here)",
            l.kv_heads_per_rank,
            l.total_kv_heads,
            l.first_kv_head,
            l.first_kv_head + l.kv_heads_per_rank
        )
    };
    let _ = writeln!(
        s,
        "\nKV regions: {} ({}; layer ids {}; {})",
        l.kv_regions.len(),
        l.kv_order(),
        if l.kv_layer_ids.is_empty() {
            "not published"
        } else {
            "published"
        },
        heads
    );
    if let [r] = l.kv_regions.as_slice()
        && r.part == KvPart::PageEnvelope
    {
        let mut layers: Vec<u32> = r.cell.ids().iter().map(|x| x.0).collect();
        layers.dedup();
        let _ = writeln!(
            s,
            "  the envelope holds {} layer blocks of {} token rows each (layers {})",
            r.cell.blocks.len(),
            l.page_size,
            layer_list(&layers)
        );
    }
    let table = |s: &mut String, groups: &[RegionGroup]| {
        let _ = writeln!(
            s,
            "  {:<14} {:>5}  {:<24} {:>14}  dims of one item",
            "kind", "count", "layers", "item_len (B)"
        );
        for g in groups {
            let _ = writeln!(
                s,
                "  {:<14} {:>5}  {:<24} {:>14}  {}{}",
                g.kind,
                g.count,
                layer_list(&g.layers),
                g.item_len,
                dims_text(&g.dims),
                g.dim_per_tensor
                    .map(|d| format!("  (dim_per_tensor {d})"))
                    .unwrap_or_default()
            );
        }
    };
    table(&mut s, &l.kv_groups());
    if !l.kv_scale_regions.is_empty() {
        let _ = writeln!(
            s,
            "\nKV scale regions (FP4): {}, allocated beside the KV and NOT registered for PD transfer (get_contiguous_buf_infos never returns them): a decode dequantises transferred KV with scales nobody sent",
            l.kv_scale_regions.len()
        );
        table(&mut s, &l.kv_scale_groups());
    }
    if l.state_regions.is_empty() {
        let _ = writeln!(s, "\nState regions: none");
    } else {
        let _ = writeln!(
            s,
            "\nState regions ({}): {}, one slot per request{}",
            if l.swa { "SWA" } else { "MAMBA" },
            l.state_regions.len(),
            if l.unified {
                "; no dim_per_tensor (cannot be TP-resliced)".to_string()
            } else if l.conv_shard_groups.is_empty() {
                String::new()
            } else {
                format!("; conv_shard_groups {:?}", l.conv_shard_groups)
            }
        );
        table(&mut s, &l.state_groups_display());
    }
    if l.unified {
        let _ = writeln!(
            s,
            "  both regions are one raw buffer (registered once): KV grows down from the high end, mamba up from the low end; slot 0 is the sink"
        );
    }
    let _ = writeln!(
        s,
        "\nAux rows: {} buffers, {} B per request",
        l.aux.len(),
        l.aux_row_bytes()
    );
    for a in &l.aux {
        let _ = writeln!(s, "  {:<28} {:>6}", a.name, a.item_len);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::rank::tests::layout;

    #[test]
    fn table_and_json_show_regions() {
        let l = layout("qwen3-next-80b-a3b", 2, 16, "auto", false);
        let t = render_table(&l);
        assert!(t.contains("KV regions: 24"), "{t}");
        assert!(t.contains("8192"), "{t}");
        assert!(t.contains("State regions (MAMBA): 72"), "{t}");
        assert!(t.contains("dim_per_tensor 4096"), "{t}");
        let j = serde_json::to_value(&l).unwrap();
        assert_eq!(j["kv"]["count"], 24);
        assert_eq!(j["kv"]["groups"][0]["kind"], "k");
        assert_eq!(j["kv"]["groups"][0]["count"], 12);
        assert_eq!(j["kv"]["groups"][0]["item_len"], 8192);
        assert_eq!(j["kv"]["groups"][0]["dims"][1]["name"], "heads");
        assert_eq!(j["kv"]["groups"][0]["dims"][1]["size"], 1);
        assert_eq!(j["state"]["groups"][0]["dim_per_tensor"], 4096);
        assert_eq!(j["state"]["groups"][1]["item_len"], 1_048_576);
        let u = layout("nemotron-h-8b", 2, 64, "auto", true);
        let j = serde_json::to_value(&u).unwrap();
        assert_eq!(j["kv"]["groups"][0]["item_len"], 524_288);
        assert_eq!(j["state"]["groups"][0]["item_len"], 51_068_928);
        assert!(render_table(&u).contains("raw buffer"));
    }
}
