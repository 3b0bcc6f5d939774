//! The Mooncake Store's traffic seen from the whole world (`sglang::mooncake_store`, called
//! through `store!`): what a decode's offload puts on its NICs, to the byte.

use super::World;

/// Runs `scenarios/store/decode-offload.toml` with `sets`: bytes the decode instances'
/// NICs received and sent over the whole run (the fabric's own counters, to the last
/// byte), the KV bytes of every request, and the offload's figures.
fn decode_nics(
    sets: &[&str],
) -> (
    f64,
    f64,
    u64,
    Option<crate::metrics::summary::DecodeOffloadTraffic>,
) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/store/decode-offload.toml");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let sc = crate::scenario::load(&path, &sets).expect("loads");
    let mut sink = crate::metrics::VecSink::default();
    let (rx, tx, traffic) = {
        let mut w = World::new(&sc, &mut sink);
        w.run().expect("runs");
        let now = w.q.now();
        w.fabric.settle_all(now);
        let mut nics: Vec<_> = w.decodes.iter().flat_map(|d| d.core.nics.clone()).collect();
        nics.sort_unstable();
        nics.dedup();
        let (mut rx, mut tx) = (0.0, 0.0);
        for n in nics {
            let (t, r) = w.fabric.nic_bytes(n);
            tx += t;
            rx += r;
        }
        (rx, tx, w.store.traffic().decode_offload)
    };
    let kv = sink.requests.iter().map(|r| r.kv_bytes).sum();
    (rx, tx, kv, traffic)
}

/// Conservation, to the byte: with the store on the prefill nodes, the decode instances'
/// NICs receive the KV transfers into them and nothing else whether the offload is on or
/// off, and with it on they send exactly the offload's batches (and nothing without it).
#[test]
fn a_decode_nics_carry_exactly_its_offload_more() {
    let store = "kv_store.nodes=[0, 1, 2]";
    let (rx_on, tx_on, kv_on, on) = decode_nics(&[store]);
    let (rx_off, tx_off, kv_off, off) = decode_nics(&[
        store,
        "pools.decode.server.disaggregation_decode_enable_offload_kvcache=false",
    ]);
    let on = on.expect("the offload's figures");
    assert!(off.is_none());
    assert!(on.writes > 0 && on.fabric_write_bytes > 0, "{on:?}");
    assert_eq!(kv_on, kv_off);
    // Byte counts are sums of f64 shares; they agree to well under a byte per flow.
    let close = |a: f64, b: u64| (a - b as f64).abs() < 1e-3 * (1.0 + b as f64 / 1e9);
    assert!(
        close(rx_on, kv_on) && close(rx_off, kv_off),
        "rx {rx_on} {rx_off} {kv_on}"
    );
    assert!(close(tx_off, 0), "{tx_off}");
    assert!(close(tx_on, on.fabric_write_bytes), "tx {tx_on} vs {on:?}");
    assert!(close(
        (rx_on + tx_on) - (rx_off + tx_off),
        on.fabric_write_bytes
    ));
}
