//! What a run's decode servers report together, for `summary.json`: summed over the
//! instances here, where the server is known, so that the offload and the radix tree
//! (`sglang::decode_offload`, `sglang::decode_radix`) need not know the server.

use super::DecodeServer;

/// The decode offloads' host-pool figures, summed over `decodes`: (blocks that found the host
/// pool full, waits for it), for `summary.json` `kv_store`.
pub fn offload_host_figures<'d>(decodes: impl Iterator<Item = &'d DecodeServer>) -> (u64, u64) {
    decodes
        .filter_map(|d| d.offload.as_deref())
        .fold((0, 0), |(f, w), o| {
            (f + o.host_full_blocks, w + o.host_waits)
        })
}

/// `summary.json` `decode_prefix`: the radix trees of every decode instance that has one,
/// summed (`None` when none has).
pub fn radix_summary<'d>(
    decodes: impl Iterator<Item = &'d DecodeServer>,
) -> Option<crate::metrics::summary::DecodePrefixSummary> {
    let mut total: Option<crate::sglang::decode_radix::RadixStats> = None;
    for t in decodes.filter_map(|d| d.radix.as_deref()) {
        total
            .get_or_insert_with(crate::sglang::decode_radix::RadixStats::default)
            .add(&t.stats);
    }
    total.map(|s| crate::metrics::summary::DecodePrefixSummary {
        requests_admitted: s.admitted,
        requests_hit: s.hit_requests,
        prompt_tokens: s.prompt_tokens,
        hit_tokens: s.hit_tokens,
        hit_share: (s.prompt_tokens > 0).then(|| s.hit_tokens as f64 / s.prompt_tokens as f64),
        hit_pages: s.hit_pages,
        bytes_not_transferred: s.bytes_not_transferred,
        inserted_blocks: s.inserted_blocks,
        evicted_blocks: s.evicted_blocks,
        peak_blocks: s.peak_blocks,
    })
}
