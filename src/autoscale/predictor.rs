//! Dynamo's load predictors (`components/src/dynamo/planner/core/load/predictors.py` @260b6ae):
//! one per series the SLA planner forecasts — requests per window, mean ISL, mean OSL, KV hit
//! rate — each fed one point per throughput window and asked for the next.
//!
//! Shared by all (`BasePredictor.add_data_point`): a reading that is not finite counts as 0;
//! zeros before the first non-zero reading are skipped (the idle start of a deployment).
//! - `constant` (`ConstantPredictor`): the last reading (0 before any).
//! - `arima` (`ARIMAPredictor`): the last reading until 5 points; the first point when every
//!   point is equal ("pmdarima will predict 0 for constant data"); else `auto_arima` fitted once
//!   on all points — and, when `load_predictor_log1p` is off and it picks `(0, d, 0)`, refitted
//!   on `log1p(y)` and kept in that space ("better handle spiky time series") —, later points
//!   folded in by `update`; the forecast is `max(0, ŷ)` (`max(0, expm1(ŷ))` in log space); a
//!   failed fit answers the last reading (and is tried again next window). [`super::arima`] says how pdsim's
//!   `auto_arima` and `update` follow pmdarima's and where they differ.
//! - `kalman` (`KalmanPredictor`, filterpy's `KalmanFilter(dim_x=2, dim_z=1)`): a local linear
//!   trend, state `[level, trend]`, `F = [[1, 1], [0, 1]]`, `H = [1, 0]`, `P₀ = 1000·I`,
//!   `R = max(1e-9, kalman_r)`, `Q = diag(max(1e-12, q_level), max(1e-12, q_trend))`; the first
//!   point sets the level (trend 0, `P` untouched); each later point runs predict (unless a
//!   forecast already did) then update (filterpy's Joseph form); a forecast runs predict once
//!   per window and returns the level, cached until the next point. Dynamo's
//!   `kalman_min_points` is passed to the base class but never read by `predict_next`, so it is
//!   not a pdsim key.
//!
//! Dynamo's ARIMA predictor fits its first model on the readings as given and keeps a copy
//! clipped at 0 for the rest; pdsim fits the clipped copy throughout (the series here — request
//! counts, token means, hit shares — are never negative, so the two agree).
//!
//! `prophet` is not implemented (Meta's Prophet fits a Stan model by optimisation; pdsim has no
//! deterministic equivalent): a scenario naming it is refused.

use super::arima::{self, ArimaModel};
use crate::config::autoscale::{LoadPredictor, SlaPlannerParams};

/// The ARIMA predictor's model state.
#[derive(Clone, Debug)]
struct ArimaState {
    /// `load_predictor_log1p`.
    requested_log: bool,
    /// Whether the fitted model lives in log1p space.
    log: bool,
    /// The fitted model (`None`: not yet, or the last fit failed).
    model: Option<ArimaModel>,
    /// Points arrived since the last fit or update.
    pending: usize,
}

/// A 2-state Kalman filter (level, trend) as filterpy runs it.
#[derive(Clone, Debug)]
struct KalmanState {
    log: bool,
    x: [f64; 2],
    p: [[f64; 2]; 2],
    q: [f64; 2],
    r: f64,
    initialized: bool,
    /// The forecast already made for the coming window (its level, model space).
    cached: Option<f64>,
}

impl KalmanState {
    /// filterpy `predict`: x = F x, P = F P Fᵀ + Q.
    fn predict(&mut self) {
        let [l, t] = self.x;
        self.x = [l + t, t];
        let p = self.p;
        // F P Fᵀ with F = [[1, 1], [0, 1]].
        let a = p[0][0] + p[0][1] + p[1][0] + p[1][1];
        let b = p[0][1] + p[1][1];
        let c = p[1][0] + p[1][1];
        let d = p[1][1];
        self.p = [[a + self.q[0], b], [c, d + self.q[1]]];
    }

    /// filterpy `update` with H = [1, 0]: Joseph-form covariance.
    fn update(&mut self, z: f64) {
        let p = self.p;
        let y = z - self.x[0];
        let s = p[0][0] + self.r;
        let k = [p[0][0] / s, p[1][0] / s];
        self.x = [self.x[0] + k[0] * y, self.x[1] + k[1] * y];
        // (I − K H) P (I − K H)ᵀ + K R Kᵀ, with I − K H = [[1 − k₀, 0], [−k₁, 1]].
        let m = [[1.0 - k[0], 0.0], [-k[1], 1.0]];
        let mut mp = [[0.0; 2]; 2];
        for i in 0..2 {
            for j in 0..2 {
                mp[i][j] = m[i][0] * p[0][j] + m[i][1] * p[1][j];
            }
        }
        let mut out = [[0.0; 2]; 2];
        for i in 0..2 {
            for j in 0..2 {
                out[i][j] = mp[i][0] * m[j][0] + mp[i][1] * m[j][1] + k[i] * self.r * k[j];
            }
        }
        self.p = out;
    }
}

#[derive(Clone, Debug)]
enum Kind {
    Constant,
    Arima(ArimaState),
    Kalman(Box<KalmanState>),
}

/// One forecast series.
#[derive(Clone, Debug)]
pub struct Predictor {
    kind: Kind,
    /// Accepted readings (after the idle skip), as given (the ARIMA model space is derived).
    points: Vec<f64>,
    /// Whether a non-zero reading has arrived (`_seen_nonzero_since_idle_reset`).
    seen_nonzero: bool,
}

impl Predictor {
    /// The predictor `params.load_predictor` names, with its settings.
    pub fn new(params: &SlaPlannerParams) -> Self {
        Self::of(params.load_predictor, params)
    }

    /// The predictor `kind`, with the Kalman and log1p settings of `params`.
    pub fn of(kind: LoadPredictor, params: &SlaPlannerParams) -> Self {
        let kind = match kind {
            LoadPredictor::Constant => Kind::Constant,
            LoadPredictor::Arima => Kind::Arima(ArimaState {
                requested_log: params.load_predictor_log1p,
                log: params.load_predictor_log1p,
                model: None,
                pending: 0,
            }),
            LoadPredictor::Kalman => Kind::Kalman(Box::new(KalmanState {
                log: params.load_predictor_log1p,
                x: [0.0, 0.0],
                p: [[1000.0, 0.0], [0.0, 1000.0]],
                q: [
                    params.kalman_q_level.max(1e-12),
                    params.kalman_q_trend.max(1e-12),
                ],
                r: params.kalman_r.max(1e-9),
                initialized: false,
                cached: None,
            })),
        };
        Self {
            kind,
            points: Vec::new(),
            seen_nonzero: false,
        }
    }

    /// The readings accepted so far.
    pub fn points(&self) -> &[f64] {
        &self.points
    }

    /// `add_data_point`: one window's reading.
    pub fn add(&mut self, value: f64) {
        let value = if value.is_finite() { value } else { 0.0 };
        if value == 0.0 && !self.seen_nonzero {
            return;
        }
        if value != 0.0 {
            self.seen_nonzero = true;
        }
        self.points.push(value);
        match &mut self.kind {
            Kind::Constant => {}
            Kind::Arima(a) => a.pending += 1,
            Kind::Kalman(k) => {
                let z = if k.log { value.max(0.0).ln_1p() } else { value };
                if !k.initialized {
                    k.x = [z, 0.0];
                    k.initialized = true;
                } else {
                    if k.cached.is_none() {
                        k.predict();
                    }
                    k.update(z);
                }
                k.cached = None;
            }
        }
    }

    fn last(&self) -> f64 {
        self.points.last().copied().unwrap_or(0.0)
    }

    /// `predict_next`: the forecast for the coming window.
    pub fn predict(&mut self) -> f64 {
        let last = self.last();
        let raw: Vec<f64> = self.points.iter().map(|v| v.max(0.0)).collect();
        match &mut self.kind {
            Kind::Constant => last,
            Kind::Kalman(k) => {
                if !k.initialized {
                    return last;
                }
                let level = match k.cached {
                    Some(c) => c,
                    None => {
                        k.predict();
                        k.cached = Some(k.x[0]);
                        k.x[0]
                    }
                };
                if k.log {
                    level.exp_m1().max(0.0)
                } else {
                    level
                }
            }
            Kind::Arima(a) => {
                // `get_last_value` reads the raw (clipped) buffer.
                let last = raw.last().copied().unwrap_or(0.0);
                if raw.len() < 5 {
                    return last;
                }
                if raw.iter().all(|v| *v == raw[0]) {
                    return raw[0];
                }
                let space = |log: bool| -> Vec<f64> {
                    if log {
                        raw.iter().map(|v| v.ln_1p()).collect()
                    } else {
                        raw.clone()
                    }
                };
                match &a.model {
                    None => {
                        a.log = a.requested_log;
                        let Some(m) = arima::auto_arima(&space(a.log)) else {
                            a.pending = 0;
                            return last;
                        };
                        a.model = Some(m);
                        // Collapsed to a random walk in raw space: try log1p(y) instead.
                        if let Some(m) = &a.model
                            && m.p == 0
                            && m.q == 0
                            && !a.requested_log
                            && let Some(lm) = arima::auto_arima(&space(true))
                        {
                            a.log = true;
                            a.model = Some(lm);
                        }
                    }
                    Some(m) => {
                        if a.pending > 0 {
                            a.model = Some(arima::refit(m, &space(a.log)));
                        }
                    }
                }
                a.pending = 0;
                let m = a.model.as_ref().expect("fitted above");
                let f = m.forecast(&space(a.log));
                if !f.is_finite() {
                    return last;
                }
                if a.log {
                    f.exp_m1().max(0.0)
                } else {
                    f.max(0.0)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kind: LoadPredictor) -> SlaPlannerParams {
        SlaPlannerParams {
            load_predictor: kind,
            ..SlaPlannerParams::default()
        }
    }

    #[test]
    fn leading_zeros_and_non_finite_readings_are_dynamos() {
        let mut p = Predictor::new(&params(LoadPredictor::Constant));
        assert_eq!(p.predict(), 0.0);
        p.add(0.0);
        p.add(f64::NAN);
        assert!(p.points().is_empty(), "the idle start is skipped");
        p.add(12.0);
        p.add(f64::INFINITY);
        assert_eq!(
            p.points(),
            &[12.0, 0.0],
            "after traffic, a bad reading is a zero"
        );
        assert_eq!(p.predict(), 0.0);
        p.add(7.0);
        assert_eq!(p.predict(), 7.0);
    }

    #[test]
    fn arima_waits_for_five_points_and_short_cuts_constant_series() {
        let mut p = Predictor::new(&params(LoadPredictor::Arima));
        for v in [10.0, 11.0, 12.0, 13.0] {
            p.add(v);
            assert_eq!(p.predict(), v, "fewer than 5 points: the last value");
        }
        let mut c = Predictor::new(&params(LoadPredictor::Arima));
        for _ in 0..8 {
            c.add(42.0);
        }
        assert_eq!(
            c.predict(),
            42.0,
            "constant data: its value, not pmdarima's 0"
        );
    }

    #[test]
    fn arima_extrapolates_a_ramp() {
        // 100, 110, …, 210.
        let mut p = Predictor::new(&params(LoadPredictor::Arima));
        for t in 0..12 {
            p.add(100.0 + 10.0 * t as f64);
        }
        let f = p.predict();
        // The raw fit is (0, 1, 0) — a random walk with drift — so Dynamo refits on log1p(y);
        // the forecast is that model's, expm1'd (here the log-space fit extrapolates the ramp
        // almost exactly).
        let raw: Vec<f64> = (0..12).map(|t| 100.0 + 10.0 * t as f64).collect();
        let m = arima::auto_arima(&raw).unwrap();
        assert_eq!((m.p, m.d, m.q), (0, 1, 0), "{m:?}");
        let logs: Vec<f64> = raw.iter().map(|v| v.ln_1p()).collect();
        let lm = arima::auto_arima(&logs).unwrap();
        let want = lm.forecast(&logs).exp_m1().max(0.0);
        assert_eq!(f.to_bits(), want.to_bits(), "{f} vs {want}");
        assert!((f - 220.0).abs() < 1e-3, "{f}");
    }

    #[test]
    fn kalman_matches_a_hand_run_filter() {
        // r = 10, q = (1, 0.1), P₀ = 1000·I. Point 1 (z = 10): x = [10, 0].
        // Forecast: predict → x = [10, 0], P = [[2001, 1000], [1000, 1000.1]] → 10.
        // Point 2 (z = 20), predict already done: S = 2011, K = [2001/2011, 1000/2011];
        // x = [10 + 9.950·…, 0 + 4.973·…].
        let mut p = Predictor::new(&params(LoadPredictor::Kalman));
        p.add(10.0);
        assert_eq!(p.predict(), 10.0);
        assert_eq!(
            p.predict(),
            10.0,
            "a second ask in the same window is cached"
        );
        p.add(20.0);
        let k0 = 2001.0 / 2011.0;
        let k1 = 1000.0 / 2011.0;
        let level = 10.0 + k0 * 10.0;
        let trend = k1 * 10.0;
        let f = p.predict();
        assert!(
            (f - (level + trend)).abs() < 1e-9,
            "{f} vs {}",
            level + trend
        );
    }

    #[test]
    fn kalman_follows_a_ramp() {
        let mut p = Predictor::new(&params(LoadPredictor::Kalman));
        for t in 0..40 {
            p.add(50.0 + 5.0 * t as f64);
            p.predict();
        }
        p.add(50.0 + 5.0 * 40.0);
        let f = p.predict();
        assert!((f - 255.0).abs() < 1.0, "{f}");
    }
}
