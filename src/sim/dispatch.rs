//! The router's view of the servers: whether each is alive and its outstanding requests,
//! read from the server tables for the two-level dispatch (`sglang::dp::Dispatch`: the router
//! picks an instance, its DP controller the rank).

use crate::sglang::colocated::ColocatedServer;
use crate::sglang::decode::DecodeServer;
use crate::sglang::dp::FRONT;
use crate::sglang::prefill::PrefillServer;
use crate::vocab::ids::{ColocatedId, DecodeId, IdVec, PrefillId};

/// `(routable, outstanding)` of server `i` on `side` of the router (routable: up and in its
/// pool's serving set): a function of the server
/// tables, not of `World`, so the dispatch may be borrowed beside them (`served!`).
#[inline]
pub(super) fn server_state(
    prefills: &IdVec<PrefillId, PrefillServer>,
    decodes: &IdVec<DecodeId, DecodeServer>,
    colocated: &IdVec<ColocatedId, ColocatedServer>,
    side: usize,
    i: usize,
) -> (bool, u32) {
    let core = match side {
        FRONT if colocated.is_empty() => &prefills[PrefillId::from(i)].core,
        FRONT => &colocated[ColocatedId::from(i)].core,
        _ => &decodes[DecodeId::from(i)].core,
    };
    (core.routable(), core.outstanding)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::metrics::NullSink;
    use crate::sglang::dp::{DECODE, FRONT};
    use crate::vocab::ids::{DecodeId, PrefillId};

    /// The load the router hears for a server is its instance's, DP ranks or not, whatever
    /// the servers' states: the shortcut for a one-server instance agrees with the walk.
    #[test]
    fn server_load_is_the_instance_load() {
        for path in [
            "scenarios/bench/foundation-100k.toml",
            "scenarios/moe/deepep-kv-contention.toml",
        ] {
            let sc = crate::scenario::load(Path::new(path), &[]).expect("scenario loads");
            let mut sink = NullSink;
            let mut w = crate::sim::World::new(&sc, &mut sink);
            let mut x: u64 = 5;
            for _ in 0..50 {
                for p in 0..w.prefills.len() {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let c = &mut w.prefills[PrefillId::from(p)].core;
                    c.set_alive((x >> 60) != 0);
                    c.outstanding = (x >> 40) as u32 % 7;
                }
                for d in 0..w.decodes.len() {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let c = &mut w.decodes[DecodeId::from(d)].core;
                    c.set_alive((x >> 60) != 0);
                    c.outstanding = (x >> 40) as u32 % 7;
                }
                for (side, n) in [(FRONT, w.prefills.len()), (DECODE, w.decodes.len())] {
                    for i in 0..n {
                        let state = served!(w, side);
                        assert_eq!(
                            w.dispatch.server_load(side, i, state),
                            w.dispatch.instance_load(side, i, state),
                            "{path}"
                        );
                    }
                }
            }
        }
    }
}
