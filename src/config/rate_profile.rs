//! Rate profiles (`workload.arrival.rate_profile`): a factor on an arrival process's rate
//! that moves over simulated time — piecewise, diurnal, or a trace's own arrival counts — so a
//! run can replay a day of traffic with any process (issue 38, item 1).
//!
//! The process runs in *operational time* `τ = Λ(t) = ∫₀ᵗ factor(s) ds`: its gaps are drawn as
//! without a profile, then mapped back through `Λ⁻¹` (the time change of a non-homogeneous
//! Poisson process, Çinlar's construction; for a renewal process such as `gamma` it keeps the
//! gaps' shape in operational time). A factor of 1 everywhere is the process itself, draw for
//! draw. The factor is piecewise linear in time (steps are segments of slope 0), so `Λ` is
//! piecewise quadratic and `Λ⁻¹` has a closed form on every segment; a diurnal cosine is
//! sampled at [`DIURNAL_POINTS`] points a period and joined linearly.

/// Points a diurnal period is sampled at (every 5 minutes of a day): the linear join's largest
/// error on the factor is `(2π / 288)² / 8 ≈ 6·10⁻⁵` of the swing.
pub const DIURNAL_POINTS: usize = 288;

/// A factor on an arrival rate over simulated time, with its integral and the integral's
/// inverse. Times and operational times are in fractional ns.
#[derive(Clone, Debug, PartialEq)]
pub struct RateProfile {
    /// Segment starts, ns: `at[0] = 0`, increasing.
    at: Vec<f64>,
    /// The factor at each segment's start.
    f0: Vec<f64>,
    /// The factor's slope in each segment, per ns (0 for a step).
    slope: Vec<f64>,
    /// `Λ` at each segment's start, ns of operational time.
    cum: Vec<f64>,
    /// The period the profile repeats with, ns, and `Λ` over one period; `None`: the last
    /// segment's factor holds for ever (its slope is 0).
    period: Option<(f64, f64)>,
}

/// Why a profile cannot be built, for the checker to name with its key.
pub type ProfileError = String;

impl RateProfile {
    /// A step profile: factor `factor[i]` from `at_ns[i]` to the next point (`at_ns[0] = 0`,
    /// increasing), the last one to `repeat_ns` (then again from the start) or for ever.
    pub fn steps(
        at_ns: &[f64],
        factor: &[f64],
        repeat_ns: Option<f64>,
    ) -> Result<Self, ProfileError> {
        check_points(at_ns, factor, repeat_ns)?;
        let slope = vec![0.0; at_ns.len()];
        Self::build(at_ns.to_vec(), factor.to_vec(), slope, repeat_ns)
    }

    /// A linear profile through `(at_ns[i], factor[i])`: with `repeat_ns`, the last point joins
    /// the first at `repeat_ns`; without, the last factor holds for ever.
    pub fn linear(
        at_ns: &[f64],
        factor: &[f64],
        repeat_ns: Option<f64>,
    ) -> Result<Self, ProfileError> {
        check_points(at_ns, factor, repeat_ns)?;
        let n = at_ns.len();
        let mut slope = Vec::with_capacity(n);
        for i in 0..n {
            let (t1, f1) = match (i + 1 < n, repeat_ns) {
                (true, _) => (at_ns[i + 1], factor[i + 1]),
                (false, Some(p)) => (p, factor[0]),
                (false, None) => {
                    slope.push(0.0);
                    continue;
                }
            };
            slope.push((f1 - factor[i]) / (t1 - at_ns[i]));
        }
        Self::build(at_ns.to_vec(), factor.to_vec(), slope, repeat_ns)
    }

    /// A day's swing: `trough + (1 − trough)·(1 + cos(2π(t − peak)/period))/2`, 1 at `peak_ns`
    /// (so the process's rate is the peak rate) and `trough` half a period away.
    pub fn diurnal(period_ns: f64, peak_ns: f64, trough: f64) -> Result<Self, ProfileError> {
        if !(period_ns.is_finite() && period_ns > 0.0) {
            return Err(format!(
                "period must be a positive number of seconds, got {} s",
                period_ns / 1e9
            ));
        }
        if !(0.0..=1.0).contains(&trough) {
            return Err(format!(
                "trough must be in [0, 1] (the factor half a period from the peak; the peak is 1), got {trough}"
            ));
        }
        let n = DIURNAL_POINTS;
        let at: Vec<f64> = (0..n).map(|i| period_ns * i as f64 / n as f64).collect();
        let factor: Vec<f64> = at
            .iter()
            .map(|&t| {
                let phase = std::f64::consts::TAU * (t - peak_ns) / period_ns;
                trough + (1.0 - trough) * (1.0 + phase.cos()) / 2.0
            })
            .collect();
        Self::linear(&at, &factor, Some(period_ns))
    }

    /// A profile from arrival times (ns, in order): their counts in bins of `bin_ns` from the
    /// first, as steps whose mean is 1 over the trace's span, stretched so the span lasts
    /// `span_ns` (the trace's own span if `None`), repeating with it.
    pub fn from_arrivals(
        arrivals: &[u64],
        bin_ns: f64,
        span_ns: Option<f64>,
    ) -> Result<Self, ProfileError> {
        let (Some(&first), Some(&last)) = (arrivals.first(), arrivals.last()) else {
            return Err("the trace has no rows".into());
        };
        let own = (last - first) as f64;
        if !(bin_ns.is_finite() && bin_ns > 0.0) {
            return Err(format!(
                "bin must be a positive number of seconds, got {} s",
                bin_ns / 1e9
            ));
        }
        let bins = (own / bin_ns).ceil().max(1.0);
        if own == 0.0 || bins < 2.0 {
            return Err(format!(
                "the trace's arrivals span {} s: less than two bins of {} s, so no rate moves",
                own / 1e9,
                bin_ns / 1e9
            ));
        }
        if bins > 1e6 {
            return Err(format!(
                "{bins} bins of {} s: at most a million (use a wider bin)",
                bin_ns / 1e9
            ));
        }
        let nb = bins as usize;
        let mut counts = vec![0.0f64; nb];
        for &a in arrivals {
            if a < first {
                return Err("arrival times go back in time".into());
            }
            let i = (((a - first) as f64 / bin_ns) as usize).min(nb - 1);
            counts[i] += 1.0;
        }
        let mean = arrivals.len() as f64 / nb as f64;
        let span = span_ns.unwrap_or(nb as f64 * bin_ns);
        if !(span.is_finite() && span > 0.0) {
            return Err(format!(
                "span must be a positive number of seconds, got {} s",
                span / 1e9
            ));
        }
        let width = span / nb as f64;
        let at: Vec<f64> = (0..nb).map(|i| i as f64 * width).collect();
        let factor: Vec<f64> = counts.iter().map(|c| c / mean).collect();
        Self::steps(&at, &factor, Some(span))
    }

    fn build(
        at: Vec<f64>,
        f0: Vec<f64>,
        slope: Vec<f64>,
        repeat: Option<f64>,
    ) -> Result<Self, ProfileError> {
        let n = at.len();
        let mut cum = Vec::with_capacity(n);
        let mut c = 0.0;
        for i in 0..n {
            cum.push(c);
            let end = if i + 1 < n { Some(at[i + 1]) } else { repeat };
            if let Some(e) = end {
                let dt = e - at[i];
                c += f0[i] * dt + slope[i] * dt * dt / 2.0;
            }
        }
        let period = repeat.map(|p| (p, c));
        let p = Self {
            at,
            f0,
            slope,
            cum,
            period,
        };
        let never = match p.period {
            Some((_, per)) => per <= 0.0,
            None => p.f0[n - 1] <= 0.0 && p.cum[n - 1] <= 0.0,
        };
        if never {
            return Err("every factor is 0: no request would ever arrive".into());
        }
        Ok(p)
    }

    /// The largest factor anywhere (a piecewise-linear factor peaks at a point).
    pub fn max_factor(&self) -> f64 {
        self.f0.iter().copied().fold(0.0, f64::max)
    }

    /// The factor at `t` ns.
    pub fn factor(&self, t: f64) -> f64 {
        let r = self.within(t).1;
        let i = self.segment_at(r);
        self.f0[i] + self.slope[i] * (r - self.at[i])
    }

    /// The whole periods before `t` and `t`'s place in its period.
    #[inline]
    fn within(&self, t: f64) -> (f64, f64) {
        match self.period {
            Some((p, _)) => {
                let k = (t / p).floor();
                (k, t - k * p)
            }
            None => (0.0, t),
        }
    }

    /// The segment holding `r` (within a period).
    #[inline]
    fn segment_at(&self, r: f64) -> usize {
        self.at.partition_point(|&a| a <= r).saturating_sub(1)
    }

    /// `Λ(t)`: operational ns elapsed by `t` ns.
    pub fn lambda(&self, t: f64) -> f64 {
        let (k, r) = self.within(t);
        let i = self.segment_at(r);
        let dt = r - self.at[i];
        let inside = self.cum[i] + self.f0[i] * dt + self.slope[i] * dt * dt / 2.0;
        k * self.period.map_or(0.0, |p| p.1) + inside
    }

    /// `Λ⁻¹(y)`: the first time operational time reaches `y` (`+∞` if it never does).
    pub fn inverse(&self, y: f64) -> f64 {
        let (rem, base) = match self.period {
            Some((p, per)) => {
                let k = (y / per).floor();
                (y - k * per, k * p)
            }
            None => (y, 0.0),
        };
        // The last segment that starts below `rem` holds it (a segment of factor 0 adds
        // nothing to Λ, so the search passes over it to the next that does).
        let i = self.cum.partition_point(|&c| c < rem).saturating_sub(1);
        let d = rem - self.cum[i];
        let (f, s) = (self.f0[i], self.slope[i]);
        let dt = if s == 0.0 {
            if f <= 0.0 {
                return f64::INFINITY;
            }
            d / f
        } else {
            // f·dt + s·dt²/2 = d, the root in the segment, in the form that does not cancel.
            let disc = (f * f + 2.0 * s * d).max(0.0);
            let den = f + disc.sqrt();
            if den <= 0.0 {
                return f64::INFINITY;
            }
            2.0 * d / den
        };
        base + self.at[i] + dt
    }
}

/// The points of a piecewise profile: as many factors as times, the first time 0, times
/// increasing and below `repeat_ns`, factors finite and ≥ 0.
fn check_points(at_ns: &[f64], factor: &[f64], repeat_ns: Option<f64>) -> Result<(), ProfileError> {
    if at_ns.is_empty() {
        return Err("needs at least one point, e.g. at_s = [0, 3600], factor = [0.5, 1.0]".into());
    }
    if at_ns.len() != factor.len() {
        return Err(format!(
            "at_s has {} points and factor {}: one factor per time",
            at_ns.len(),
            factor.len()
        ));
    }
    if at_ns[0] != 0.0 {
        return Err(format!(
            "the first point must be at 0 s, got {} s",
            at_ns[0] / 1e9
        ));
    }
    for w in at_ns.windows(2) {
        if !(w[1].is_finite() && w[1] > w[0]) {
            return Err(format!(
                "times must increase: {} s after {} s",
                w[1] / 1e9,
                w[0] / 1e9
            ));
        }
    }
    if let Some((i, f)) = factor
        .iter()
        .enumerate()
        .find(|(_, f)| !(f.is_finite() && **f >= 0.0))
    {
        return Err(format!(
            "factor {} is {f}: factors are finite and ≥ 0",
            i + 1
        ));
    }
    if let Some(p) = repeat_ns {
        let last = at_ns[at_ns.len() - 1];
        if !(p.is_finite() && p > last) {
            return Err(format!(
                "repeat_s = {} s must be later than the last point ({} s)",
                p / 1e9,
                last / 1e9
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: f64 = 1e9;

    /// Λ⁻¹ inverts Λ on every shape, in and across periods, to a part in 10¹²; factors
    /// integrate to Λ.
    #[test]
    fn the_inverse_inverts_the_integral() {
        let shapes = [
            RateProfile::steps(&[0.0, 10.0 * S, 25.0 * S], &[0.5, 0.0, 2.0], Some(40.0 * S))
                .unwrap(),
            RateProfile::steps(&[0.0, 10.0 * S], &[1.0, 3.0], None).unwrap(),
            RateProfile::linear(&[0.0, 10.0 * S, 30.0 * S], &[0.2, 1.5, 0.0], Some(50.0 * S))
                .unwrap(),
            RateProfile::linear(&[0.0, 10.0 * S], &[2.0, 0.5], None).unwrap(),
            RateProfile::diurnal(86_400.0 * S, 50_400.0 * S, 0.25).unwrap(),
            RateProfile::diurnal(600.0 * S, 0.0, 0.0).unwrap(),
        ];
        for (k, p) in shapes.iter().enumerate() {
            let mut t = 0.0;
            while t < 200_000.0 * S {
                let y = p.lambda(t);
                if p.factor(t) > 0.0 {
                    let back = p.inverse(y);
                    assert!(
                        (back - t).abs() <= 1e-9 * t.max(S),
                        "shape {k}: Λ⁻¹(Λ({t})) = {back}"
                    );
                }
                // Λ grows by the factor's integral: a midpoint check over a short step.
                let h = 1e-3 * S;
                let grow = p.lambda(t + h) - y;
                let mid = p.factor(t + h / 2.0) * h;
                assert!(
                    (grow - mid).abs() <= 1e-6 * h,
                    "shape {k} at {t}: {grow} vs {mid}"
                );
                t += 977.0 * S + t * 0.01;
            }
        }
    }

    /// A factor of 1 everywhere is the identity; a diurnal profile's mean over its period is
    /// `(1 + trough) / 2` and its peak is 1 at `peak`.
    #[test]
    fn unit_and_diurnal_factors() {
        let one = RateProfile::steps(&[0.0], &[1.0], None).unwrap();
        for t in [0.0, 1.5, 1e9, 3.7e13] {
            assert_eq!(one.lambda(t), t);
            assert_eq!(one.inverse(t), t);
        }
        let day = 86_400.0 * S;
        let d = RateProfile::diurnal(day, 14.0 * 3600.0 * S, 0.3).unwrap();
        assert!(
            (d.lambda(day) / day - 0.65).abs() < 1e-9,
            "{}",
            d.lambda(day) / day
        );
        assert!((d.factor(14.0 * 3600.0 * S) - 1.0).abs() < 1e-4);
        assert!((d.factor(2.0 * 3600.0 * S) - 0.3).abs() < 1e-4);
    }

    /// A trace's counts per bin become its steps, their mean 1, stretched to the span asked.
    #[test]
    fn a_trace_profile_follows_its_counts() {
        // 10 arrivals in the first 10 s, 30 in the next 10 s.
        let mut a: Vec<u64> = (0..10).map(|i| (i as f64 * 1e9) as u64).collect();
        a.extend((0..30).map(|i| (10e9 + i as f64 * 1e9 / 3.0) as u64));
        let p = RateProfile::from_arrivals(&a, 10.0 * S, Some(3600.0 * S)).unwrap();
        assert!((p.factor(100.0 * S) - 0.5).abs() < 1e-12);
        assert!((p.factor(2000.0 * S) - 1.5).abs() < 1e-12);
        assert!((p.lambda(3600.0 * S) - 3600.0 * S).abs() < 1e-3);
    }

    #[test]
    fn bad_profiles_say_what_is_wrong() {
        let e = |r: Result<RateProfile, String>| r.unwrap_err();
        assert!(e(RateProfile::steps(&[], &[], None)).contains("at least one point"));
        assert!(e(RateProfile::steps(&[0.0, 1.0], &[1.0], None)).contains("one factor per time"));
        assert!(
            e(RateProfile::steps(&[5.0 * S], &[1.0], None)).contains("first point must be at 0")
        );
        assert!(
            e(RateProfile::steps(
                &[0.0, 5.0 * S, 5.0 * S],
                &[1.0; 3],
                None
            ))
            .contains("increase")
        );
        assert!(e(RateProfile::steps(&[0.0], &[-1.0], None)).contains("≥ 0"));
        assert!(
            e(RateProfile::steps(
                &[0.0, 9.0 * S],
                &[1.0, 1.0],
                Some(9.0 * S)
            ))
            .contains("repeat_s")
        );
        assert!(e(RateProfile::steps(&[0.0], &[0.0], None)).contains("every factor is 0"));
        assert!(e(RateProfile::diurnal(86_400.0 * S, 0.0, 1.5)).contains("trough"));
        assert!(e(RateProfile::from_arrivals(&[7, 7], S, None)).contains("span"));
    }
}
