//! An instance's gauges over a run (`summary.json` `pools`): batch, queue and KV occupancy
//! integrated over time by the left-point rule, and the busy time and NIC bytes of the seconds
//! closed. The sampler (`sim::sampler`) observes every instance at its step ends and ticks and
//! feeds this observer; the pool's figures are the sums over its instances.

use super::summary::PoolGauges;
use crate::engine::Nanos;

/// One instance's gauges, integrated over time by the left-point rule: the state seen at an
/// observation holds until the next one. Observations come at every step end of the instance
/// (its batch changes only there or when an idle instance starts a step, also observed) and at
/// every tick, so the error is at most one step of one instance.
#[derive(Clone, Copy, Default, Debug)]
pub struct Gauge {
    last_ns: Nanos,
    running: u32,
    queued: u32,
    kv_share: f64,
    running_ns: f64,
    queued_ns: f64,
    kv_ns: f64,
    queue_nonempty_ns: f64,
    /// Busy time of the ticks already closed, ns.
    busy_ns: f64,
    /// Bytes the NICs moved in the instance's direction in the ticks already closed.
    nic_bytes: f64,
}

impl Gauge {
    /// Integrates the state last seen up to `now` (clipped to the arrival window's `end`: the
    /// summary's utilisation, like its throughput, describes the steady state, not the drain
    /// tail where load falls to 0), then takes the state now.
    #[inline]
    pub fn observe(&mut self, now: Nanos, end: Nanos, running: u32, queued: u32, kv_share: f64) {
        let dt = crate::engine::u64_to_f64(now.min(end).max(self.last_ns) - self.last_ns);
        self.integrate(dt, now, running, queued, kv_share);
    }

    /// [`Gauge::observe`] at `now` at or before the window's end: the same operations, without
    /// the clip.
    #[inline]
    pub fn observe_open(&mut self, now: Nanos, running: u32, queued: u32, kv_share: f64) {
        let dt = crate::engine::u64_to_f64(now.max(self.last_ns) - self.last_ns);
        self.integrate(dt, now, running, queued, kv_share);
    }

    /// Adds `dt` ns of the state last seen to the integrals, then takes the state at `now`.
    #[inline(always)]
    fn integrate(&mut self, dt: f64, now: Nanos, running: u32, queued: u32, kv_share: f64) {
        self.running_ns += f64::from(self.running) * dt;
        self.queued_ns += f64::from(self.queued) * dt;
        self.kv_ns += self.kv_share * dt;
        if self.queued > 0 {
            self.queue_nonempty_ns += dt;
        }
        self.last_ns = now;
        self.running = running;
        self.queued = queued;
        self.kv_share = kv_share;
    }
}

impl Gauge {
    /// A second closed: the instance's busy time in it (ns) and the bytes its NICs moved in its
    /// direction count toward the run's figures.
    #[inline]
    pub fn tick_closed(&mut self, busy_ns: u64, nic_bytes: f64) {
        self.busy_ns += busy_ns as f64;
        self.nic_bytes += nic_bytes;
    }

    /// Adds this instance's integrals to its pool's (`busy_open_ns`: the busy time of the
    /// second still open, when it counts).
    pub fn add_to(&self, pool: &mut PoolGauges, busy_open_ns: f64) {
        pool.busy_ns += self.busy_ns + busy_open_ns;
        pool.running_ns += self.running_ns;
        pool.queued_ns += self.queued_ns;
        pool.kv_ns += self.kv_ns;
        pool.queue_nonempty_ns += self.queue_nonempty_ns;
        pool.nic_bytes += self.nic_bytes;
    }
}

/// `used` of `total` pages as a share (0 for a pool of none).
#[inline]
pub fn share(used: u32, total: u32) -> f64 {
    if total == 0 {
        0.0
    } else {
        f64::from(used) / f64::from(total)
    }
}

#[cfg(test)]
mod tests {
    use super::Gauge;
    use rand::{RngExt, SeedableRng};

    /// Inside the window, `observe_open` integrates exactly as `observe` (bit for bit), over
    /// random observation sequences that also repeat a time and idle.
    #[test]
    fn an_open_observation_is_the_clipped_one_inside_the_window() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..200 {
            let (mut a, mut b) = (Gauge::default(), Gauge::default());
            let mut now = rng.random_range(0..1_000_000u64);
            for _ in 0..100 {
                now += rng.random_range(0..3) * rng.random_range(0..50_000_000u64);
                let (running, queued) = (rng.random_range(0..300), rng.random_range(0..3));
                let kv = rng.random_range(0..=1000u32);
                let share = f64::from(kv) / 1000.0;
                a.observe(now, now + rng.random_range(0..2), running, queued, share);
                b.observe_open(now, running, queued, share);
            }
            let bits = |g: &Gauge| {
                [g.running_ns, g.queued_ns, g.kv_ns, g.queue_nonempty_ns].map(f64::to_bits)
            };
            assert_eq!(bits(&a), bits(&b));
            assert_eq!(a.last_ns, b.last_ns);
        }
    }
}
