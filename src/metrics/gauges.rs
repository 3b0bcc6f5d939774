//! An instance's gauges over a run (`summary.json` `pools`): batch, queue and KV occupancy
//! integrated over time by the left-point rule, and the busy time and NIC bytes of the seconds
//! closed. The sampler (`metrics::sampler`, fed by `sim::sampler`) observes every instance at
//! its step ends and ticks and feeds this observer; the pool's figures are the sums over its
//! instances.

use super::summary::PoolGauges;
use crate::engine::Nanos;

/// One instance's gauges, integrated over time by the left-point rule: the state seen at an
/// observation holds until the next one. Observations come at every step end of the instance
/// (its batch changes only there or when an idle instance starts a step, also observed) and at
/// every tick, so the error is at most one step of one instance.
///
/// The integrals are exact (integers: request·ns, page·ns), so an observation that repeats
/// the state last seen changes nothing a later one would not: a coalesced decode run observes
/// only where its pages grow and at its ends, and integrates to the very integers that every
/// step observed gives (`an_unchanged_state_needs_no_observation`).
#[derive(Clone, Copy, Default, Debug)]
pub struct Gauge {
    last_ns: Nanos,
    running: u32,
    queued: u32,
    /// Pages in use at the last observation.
    used: u32,
    /// The instance's pages (constant over a run).
    total: u32,
    /// ∫ running requests dt, request·ns.
    running_ns: u128,
    /// ∫ queued requests dt, request·ns.
    queued_ns: u128,
    /// ∫ pages used dt, page·ns.
    used_ns: u128,
    /// ∫ [queue non-empty] dt, ns.
    queue_nonempty_ns: u64,
    /// Busy time of the ticks already closed, ns.
    busy_ns: f64,
    /// Bytes the NICs moved in the instance's direction in the ticks already closed.
    nic_bytes: f64,
}

/// One observation: the instance's batch, queue and pages (`used` of `total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub running: u32,
    pub queued: u32,
    pub used: u32,
    pub total: u32,
}

impl Gauge {
    /// Integrates the state last seen up to `now` (clipped to the arrival window's `end`: the
    /// summary's utilisation, like its throughput, describes the steady state, not the drain
    /// tail where load falls to 0), then takes the state now.
    #[inline]
    pub fn observe(&mut self, now: Nanos, end: Nanos, s: State) {
        let dt = now.min(end).max(self.last_ns) - self.last_ns;
        self.integrate(dt, now, s);
    }

    /// [`Gauge::observe`] at `now` at or before the window's end: the same operations, without
    /// the clip.
    #[inline]
    pub fn observe_open(&mut self, now: Nanos, s: State) {
        let dt = now.max(self.last_ns) - self.last_ns;
        self.integrate(dt, now, s);
    }

    /// Adds `dt` ns of the state last seen to the integrals, then takes the state at `now`.
    #[inline(always)]
    fn integrate(&mut self, dt: u64, now: Nanos, s: State) {
        let d = u128::from(dt);
        self.running_ns += u128::from(self.running) * d;
        self.queued_ns += u128::from(self.queued) * d;
        self.used_ns += u128::from(self.used) * d;
        if self.queued > 0 {
            self.queue_nonempty_ns += dt;
        }
        self.last_ns = now;
        self.running = s.running;
        self.queued = s.queued;
        self.used = s.used;
        self.total = s.total;
    }
}

/// The observations of one coalesced decode pass (`DecodeServer::virtual_steps`), where the
/// batch and queue stay as they are and only the pages in use grow: the first is an
/// [`Gauge::observe_open`], the others add only their pages' area, and [`PagesPass::finish`]
/// adds the batch's and queue's over the whole pass at once. The integers are those one
/// [`Gauge::observe_open`] per observation gives (integer sums regroup exactly).
#[derive(Clone, Copy, Debug)]
pub struct PagesPass {
    /// The state but its pages.
    state: State,
    seen: bool,
    /// The first observation's time and the latest's, ns.
    from: Nanos,
    at: Nanos,
    /// Pages in use at the latest observation.
    used: u32,
    /// ∫ pages used dt since the first observation, page·ns.
    area: u128,
}

impl PagesPass {
    /// A pass of an instance showing `state` (its `used` is ignored).
    pub fn new(state: State) -> Self {
        Self {
            state,
            seen: false,
            from: 0,
            at: 0,
            used: 0,
            area: 0,
        }
    }

    /// The instance shows `used` pages at `at` (ns, not before the last observation).
    #[inline(always)]
    pub fn see(&mut self, g: &mut Gauge, at: Nanos, used: u32) {
        if self.seen {
            self.area += u128::from(self.used) * u128::from(at - self.at);
        } else {
            g.observe_open(at, State { used, ..self.state });
            (self.seen, self.from) = (true, at);
        }
        (self.at, self.used) = (at, used);
    }

    /// Adds the pass to `g`, which saw its first observation and none since.
    pub fn finish(self, g: &mut Gauge) {
        if !self.seen {
            return;
        }
        let dt = self.at - self.from;
        let d = u128::from(dt);
        g.running_ns += u128::from(g.running) * d;
        g.queued_ns += u128::from(g.queued) * d;
        g.used_ns += self.area;
        if g.queued > 0 {
            g.queue_nonempty_ns += dt;
        }
        g.last_ns = self.at;
        g.used = self.used;
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
        pool.running_ns += self.running_ns as f64;
        pool.queued_ns += self.queued_ns as f64;
        // Pages are shares of the instance's own pool.
        pool.kv_ns += if self.total == 0 {
            0.0
        } else {
            self.used_ns as f64 / f64::from(self.total)
        };
        pool.queue_nonempty_ns += self.queue_nonempty_ns as f64;
        pool.nic_bytes += self.nic_bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::{Gauge, PagesPass, State};
    use crate::engine::Nanos;
    use rand::{RngExt, SeedableRng};

    fn random_state(rng: &mut rand_chacha::ChaCha8Rng) -> State {
        State {
            running: rng.random_range(0..300),
            queued: rng.random_range(0..3),
            used: rng.random_range(0..=1000),
            total: 1000,
        }
    }

    fn integrals(g: &Gauge) -> (u128, u128, u128, u64, Nanos) {
        (
            g.running_ns,
            g.queued_ns,
            g.used_ns,
            g.queue_nonempty_ns,
            g.last_ns,
        )
    }

    /// Inside the window, `observe_open` integrates exactly as `observe`, over random
    /// observation sequences that also repeat a time and idle.
    #[test]
    fn an_open_observation_is_the_clipped_one_inside_the_window() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..200 {
            let (mut a, mut b) = (Gauge::default(), Gauge::default());
            let mut now = rng.random_range(0..1_000_000u64);
            for _ in 0..100 {
                now += rng.random_range(0..3) * rng.random_range(0..50_000_000u64);
                let s = random_state(&mut rng);
                a.observe(now, now + rng.random_range(0..2), s);
                b.observe_open(now, s);
            }
            assert_eq!(integrals(&a), integrals(&b));
        }
    }

    /// Observations that repeat the state last seen can be left out (a coalesced run observes
    /// at its first step, where its pages grow and at its last step): the integrals are the same integers,
    /// inside the window and past its end.
    #[test]
    fn an_unchanged_state_needs_no_observation() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        for _ in 0..200 {
            let (mut every, mut changes) = (Gauge::default(), Gauge::default());
            let mut now = rng.random_range(0..1_000_000u64);
            let end = now + rng.random_range(500_000_000..2_000_000_000u64);
            let mut s = random_state(&mut rng);
            let mut pending = None;
            for k in 0..200 {
                now += rng.random_range(0..30_000_000u64);
                // The first observation takes a state the gauge has not seen.
                let changed = k == 0 || rng.random_bool(0.2);
                if changed {
                    s.used = rng.random_range(0..=1000);
                }
                every.observe(now, end, s);
                if changed {
                    changes.observe(now, end, s);
                    pending = None;
                } else {
                    pending = Some(now);
                }
            }
            if let Some(at) = pending {
                changes.observe(at, end, s);
            }
            assert_eq!(integrals(&every), integrals(&changes));
            assert!(every.used_ns > 0);
        }
    }

    /// A pass gives the integers one `observe_open` per observation gives: after a gauge that
    /// saw another state (its batch and queue differ), a pass of random length whose pages
    /// grow at increasing times, some repeating a time; then the gauge goes on alike. An empty
    /// pass changes nothing.
    #[test]
    fn a_pass_integrates_as_its_observations_one_by_one() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut passes = 0;
        for _ in 0..300 {
            let (mut each, mut pass_g) = (Gauge::default(), Gauge::default());
            let mut now = rng.random_range(0..1_000_000u64);
            let before = random_state(&mut rng);
            each.observe_open(now, before);
            pass_g.observe_open(now, before);
            let s = random_state(&mut rng);
            let mut pass = PagesPass::new(State { used: 0, ..s });
            let mut used = rng.random_range(0..500);
            let n = rng.random_range(0..40);
            for _ in 0..n {
                now += rng.random_range(0..2) * rng.random_range(0..20_000_000u64);
                used += rng.random_range(0..4);
                each.observe_open(now, State { used, ..s });
                pass.see(&mut pass_g, now, used);
            }
            passes += usize::from(n > 1);
            pass.finish(&mut pass_g);
            assert_eq!(integrals(&each), integrals(&pass_g));
            let after = random_state(&mut rng);
            now += rng.random_range(1..9_000_000u64);
            each.observe_open(now, after);
            pass_g.observe_open(now, after);
            assert_eq!(integrals(&each), integrals(&pass_g), "after the pass");
            assert_eq!(
                (each.running, each.queued, each.used),
                (pass_g.running, pass_g.queued, pass_g.used)
            );
        }
        assert!(passes > 200, "{passes}");
    }
}
