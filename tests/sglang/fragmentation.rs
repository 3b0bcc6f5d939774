//! KV page fragmentation over a long run (`docs/sglang-pd.md` §22): under sglang's unsorted
//! free list a decode's pages scatter and every transfer breaks into many more RDMA writes,
//! growing over the run; under the sorted free list sglang builds for PD servers since PR
//! #8133 the writes stay at what contiguous pages give. A bad `kv_allocator` is exit 2.

use crate::common;
use common::*;

const SCENARIO: &str = "scenarios/production/kv-fragmentation.toml";

fn shape(s: &pdsim::report::Summary) -> (f64, f64, f64, f64) {
    let f = s
        .transfer
        .fragmentation
        .as_ref()
        .expect("a PD run reports its transfers over time");
    (
        f.first_tenth.writes_p50.unwrap(),
        f.last_tenth.writes_p50.unwrap(),
        f.first_tenth.transfer_ms_p50.unwrap(),
        f.last_tenth.transfer_ms_p50.unwrap(),
    )
}

/// Llama-3.1-8B at TP 1 registers 64 KV regions (32 layers' K and V); at page size 1 a prompt
/// of contiguous pages is one write per region, plus the metadata row's buffers: the sorted
/// run's median must be that floor (a run of pages never breaks), while the unsorted run's
/// pages are scattered (hundreds of times more writes) and scatter further over the run.
#[test]
fn writes_per_transfer_grow_unsorted_and_stay_flat_sorted() {
    let dir_u = tmpdir("frag-unsorted");
    let u = run(SCENARIO, &[], &dir_u);
    let dir_s = tmpdir("frag-sorted");
    let s = run(SCENARIO, &["pools.decode.kv_allocator=\"sorted\""], &dir_s);
    assert_eq!(u.requests.completed, u.requests.arrived);
    assert_eq!(
        s.requests.arrived, u.requests.arrived,
        "the policy moves no request"
    );
    let (u0, u1, ut0, ut1) = shape(&u);
    let (s0, s1, st0, st1) = shape(&s);
    println!(
        "writes p50 first → last tenth: unsorted {u0} → {u1} ({ut0:.2} → {ut1:.2} ms), \
         sorted {s0} → {s1} ({st0:.2} → {st1:.2} ms)"
    );
    // Sorted: flat, and at the contiguous floor (64 regions and a handful of aux writes).
    assert_eq!(s0, s1, "sorted writes per request must not drift");
    assert!((64.0..80.0).contains(&s1), "{s1}");
    // Unsorted: scattered from the first tenth on, and more so by the last.
    assert!(u0 > 100.0 * s0, "{u0} vs {s0}");
    assert!(
        u1 > 1.1 * u0,
        "unsorted writes should grow over the run: {u0} → {u1}"
    );
    // What it costs: the median transfer several times longer than the sorted run's.
    assert!(ut1 > 3.0 * st1, "{ut1} vs {st1} ms");
    // The total is the sum of the rows, so the two runs moved the same bytes.
    assert_eq!(u.transfer.bytes, s.transfer.bytes);
    // explain tells the story on each.
    let (code, out, _) = pdsim(&[std::ffi::OsStr::new("explain"), dir_u.as_os_str()]);
    assert_eq!(code, 0);
    assert!(out.contains("The free list fragmented"), "{out}");
    assert!(out.contains("kv_allocator = \"sorted\""), "{out}");
    let (_, out_s, _) = pdsim(&[std::ffi::OsStr::new("explain"), dir_s.as_os_str()]);
    assert!(out_s.contains("stayed flat"), "{out_s}");
}

#[test]
fn a_bad_kv_allocator_is_exit_2_naming_the_key() {
    let path = repo().join(SCENARIO);
    let (code, _, err) = pdsim(&[
        "run",
        path.to_str().unwrap(),
        "--summary-only",
        "--out",
        tmpdir("frag-bad").to_str().unwrap(),
        "--set",
        "pools.decode.kv_allocator=\"lifo\"",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("kv_allocator"), "{err}");
    assert!(err.contains("sorted") && err.contains("unsorted"), "{err}");
}
