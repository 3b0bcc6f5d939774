//! `pmdarima.auto_arima` as Dynamo's ARIMA predictor calls it (`auto_arima(y,
//! suppress_warnings=True, error_action="ignore")`: every other argument at its default),
//! made deterministic. What is pmdarima's, step for step, and what is approximated:
//!
//! **Faithful** (pmdarima `arima/auto.py` @00b1541, `arima/_auto_solvers.py` @e5f76d5,
//! `arima/stationarity.py` @00b1541, `arima/utils.py::ndiffs`, `arima/_arima.pyx::C_tseries_pp_sum`):
//! - a constant series fits `(0, 0, 0)` without an intercept (forecast 0 — why Dynamo checks
//!   for constant data before calling);
//! - `max_p = min(5, ⌊n/3⌋)`, `max_q` likewise, `start_p = start_q = 2` clipped to them, and to
//!   1 when `n < 10`;
//! - `d` by `ndiffs(test="kpss", alpha=0.05, max_d=2)`: the KPSS level-stationarity statistic
//!   with the Newey–West sum over `⌊4 (n/100)^¼⌋` lags, its p-value interpolated in tseries'
//!   table (0.739, 0.574, 0.463, 0.347 ↔ 0.01, 0.025, 0.05, 0.10, clamped at the ends), one more
//!   difference while p < 0.05, stopping early at a constant difference;
//! - a constant difference fits `(0, d, 0)` (with an intercept when `d < 2`);
//! - the intercept (`with_intercept="auto"`) when `d ∈ {0, 1}`;
//! - the stepwise search of `_StepwiseFitWrapper.solve` (non-seasonal: `m = 1`): the start
//!   order, `(0,d,0)`, `(1,d,0)`, `(0,d,1)`, `(0,d,0)` without the intercept, then the moves
//!   p−1, q−1, p+1, q+1, (p−1,q−1), (p−1,q+1), (p+1,q−1), (p+1,q+1) and the intercept's toggle,
//!   each tried once, at most 100 fits; a fit that fails or whose roots come within 0.01 of the
//!   unit circle (`_root_test`) scores +∞; the answer is the lowest AIC, the first fitted on a
//!   tie (`_sort_and_filter_fits`, a stable sort).
//!
//! **Approximated** (statsmodels' exact Gaussian MLE of SARIMAX by L-BFGS is not reproduced):
//! - each order is estimated by Hannan–Rissanen — ordinary least squares for pure AR; for MA
//!   terms a long autoregression of order `max(⌊ln² m⌋, 2·max(p, q))` (statsmodels'
//!   `hannan_rissanen` default, shrunk to what the data can fit) gives residuals, then a
//!   regression on lagged values and lagged residuals;
//! - the likelihood is the conditional one (CSS) on the residuals from
//!   `max(max_p, max_q)` of the differenced series on, so every candidate of a search is
//!   scored on the same points: AIC = −2 ℓ + 2 (p + q + intercept + 1), σ² counted as
//!   statsmodels counts it;
//! - the parameters are not constrained to the stationary and invertible region (statsmodels
//!   enforces it); the root test then scores such a fit +∞ rather than pulling it inside — on
//!   both its AR and MA roots (pmdarima's `_root_test` lets the MA check replace the AR one,
//!   harmless only because statsmodels keeps the AR part stationary);
//! - the intercept enters the differenced equation (`φ(L) Δᵈ y = c + θ(L) ε`, SARIMAX's
//!   `trend="c"` form), so with `d = 1` it is a drift;
//! - pmdarima's `update(new points)` (a few optimizer steps from the old parameters) is a
//!   re-estimation of the same order on the whole series, the old parameters kept when the new
//!   ones leave the stationary and invertible region;
//! - a fit with fewer rows than parameters, or a singular regression, fails (pmdarima's
//!   optimizer might still return one on very short series).
//!
//! On short series these can pick a different order than pmdarima; the tests pin what this
//! code does on known series, and the predictor falls back to the last value exactly where
//! Dynamo's does (fewer than 5 points, or no viable model).

use super::linalg::ols;

/// A fitted ARIMA(p, d, q) with an optional intercept.
#[derive(Clone, Debug, PartialEq)]
pub struct ArimaModel {
    /// AR order.
    pub p: usize,
    /// Differences.
    pub d: usize,
    /// MA order.
    pub q: usize,
    /// Whether the model has an intercept (`c`).
    pub intercept: bool,
    /// The intercept of the differenced equation.
    pub c: f64,
    /// AR coefficients φ₁ … φₚ.
    pub ar: Vec<f64>,
    /// MA coefficients θ₁ … θ_q.
    pub ma: Vec<f64>,
    /// The conditional residual variance.
    pub sigma2: f64,
    /// AIC (+∞ when the root test failed).
    pub aic: f64,
    /// Points of the differenced series the likelihood conditions on.
    cond: usize,
}

impl ArimaModel {
    /// The one-step forecast after `y` (the series the model was fitted to).
    pub fn forecast(&self, y: &[f64]) -> f64 {
        let w = diff(y, self.d);
        let e = self.residuals(&w);
        let m = w.len();
        let mut next = self.c;
        for (i, phi) in self.ar.iter().enumerate() {
            if m > i {
                next += phi * w[m - 1 - i];
            }
        }
        for (j, theta) in self.ma.iter().enumerate() {
            if m > j {
                next += theta * e[m - 1 - j];
            }
        }
        // Undo the differencing: yₙ = ŵ + Σₖ (−1)^(k+1) C(d, k) y_{n−k}.
        let n = y.len();
        let mut level = next;
        let mut binom = 1.0;
        for k in 1..=self.d {
            binom = binom * (self.d - k + 1) as f64 / k as f64;
            let sign = if k % 2 == 1 { 1.0 } else { -1.0 };
            if n >= k {
                level += sign * binom * y[n - k];
            }
        }
        level
    }

    /// The conditional residuals of the differenced series `w`: zero before `p`, then the
    /// ARMA recursion with pre-sample residuals zero (CSS).
    fn residuals(&self, w: &[f64]) -> Vec<f64> {
        let mut e = vec![0.0; w.len()];
        for t in self.p..w.len() {
            let mut v = w[t] - self.c;
            for (i, phi) in self.ar.iter().enumerate() {
                v -= phi * w[t - 1 - i];
            }
            for (j, theta) in self.ma.iter().enumerate() {
                if t > j {
                    v -= theta * e[t - 1 - j];
                }
            }
            e[t] = v;
        }
        e
    }
}

/// `y` differenced `d` times.
pub fn diff(y: &[f64], d: usize) -> Vec<f64> {
    let mut w = y.to_vec();
    for _ in 0..d {
        w = w.windows(2).map(|p| p[1] - p[0]).collect();
    }
    w
}

fn is_constant(x: &[f64]) -> bool {
    x.iter().all(|v| *v == x[0])
}

/// The KPSS p-value of `x` under level stationarity (pmdarima `KPSSTest.should_diff`, after
/// R's `tseries::kpss.test`): NaN when the statistic is not a number.
pub fn kpss_pvalue(x: &[f64]) -> f64 {
    let n = x.len();
    let nf = n as f64;
    let mean = x.iter().sum::<f64>() / nf;
    let e: Vec<f64> = x.iter().map(|v| v - mean).collect();
    let mut s = 0.0;
    let mut eta = 0.0;
    for v in &e {
        s += v;
        eta += s * s;
    }
    eta /= nf * nf;
    let s2 = e.iter().map(|v| v * v).sum::<f64>() / nf;
    let lags = (4.0 * (nf / 100.0).powf(0.25)).trunc() as usize;
    // tseries' `tseries_pp_sum`: the Bartlett-weighted autocovariances.
    let mut tmp1 = 0.0;
    for i in 1..=lags {
        let mut tmp2 = 0.0;
        for j in i..n {
            tmp2 += e[j] * e[j - i];
        }
        tmp2 *= 1.0 - i as f64 / (lags as f64 + 1.0);
        tmp1 += tmp2;
    }
    let s2 = s2 + 2.0 * tmp1 / nf;
    let stat = eta / s2;
    if stat.is_nan() {
        return f64::NAN;
    }
    // R's approx(table, tablep, xout = stat, rule = 2) over the sorted table.
    const STAT: [f64; 4] = [0.347, 0.463, 0.574, 0.739];
    const P: [f64; 4] = [0.10, 0.05, 0.025, 0.01];
    if stat <= STAT[0] {
        return P[0];
    }
    if stat >= STAT[3] {
        return P[3];
    }
    let i = STAT.iter().rposition(|&s| s <= stat).unwrap_or(0);
    P[i] + (P[i + 1] - P[i]) * (stat - STAT[i]) / (STAT[i + 1] - STAT[i])
}

/// pmdarima's `ndiffs(x, alpha=0.05, test="kpss", max_d=2)`.
pub fn ndiffs(x: &[f64]) -> usize {
    const ALPHA: f64 = 0.05;
    const MAX_D: usize = 2;
    if x.is_empty() || is_constant(x) {
        return 0;
    }
    let pval = kpss_pvalue(x);
    if pval.is_nan() {
        return 0;
    }
    let mut dodiff = pval < ALPHA;
    let mut d = 0;
    let mut w = x.to_vec();
    while dodiff && d < MAX_D {
        d += 1;
        w = diff(&w, 1);
        if w.is_empty() || is_constant(&w) {
            return d;
        }
        let pval = kpss_pvalue(&w);
        if pval.is_nan() {
            return d - 1;
        }
        dodiff = pval < ALPHA;
    }
    d
}

/// Whether every root of the monic polynomial `zᵏ + a₁ zᵏ⁻¹ + … + aₖ` lies strictly inside
/// the circle of radius `r` (Schur–Cohn by the backward Levinson recursion on the polynomial
/// rescaled to the unit circle).
fn roots_within(a: &[f64], r: f64) -> bool {
    let mut a: Vec<f64> = a
        .iter()
        .enumerate()
        .map(|(i, c)| c / r.powi(i as i32 + 1))
        .collect();
    while let Some(&kappa) = a.last() {
        if kappa.is_nan() || kappa.abs() >= 1.0 {
            return false;
        }
        let k = a.len();
        let denom = 1.0 - kappa * kappa;
        let prev = a.clone();
        a.truncate(k - 1);
        for i in 0..k - 1 {
            a[i] = (prev[i] - kappa * prev[k - 2 - i]) / denom;
        }
    }
    true
}

/// pmdarima's `_root_test`: whether the model's inverse roots stay within 0.99, the AR ones
/// (`1 − φ₁z − …`: inverse roots are those of `zᵖ − φ₁zᵖ⁻¹ − …`) and the MA ones
/// (`1 + θ₁z + …`). pmdarima's code lets the MA check replace the AR one when a model has MA
/// terms; there that is harmless, as statsmodels' fit keeps the AR part stationary. pdsim's
/// estimates are unconstrained, so both checks must hold (an explosive AR part would otherwise
/// pass and its forecasts run away).
fn roots_ok(m: &ArimaModel) -> bool {
    const R: f64 = 1.0 - 1e-2;
    let ar: Vec<f64> = m.ar.iter().map(|phi| -phi).collect();
    (m.p == 0 || roots_within(&ar, R)) && (m.q == 0 || roots_within(&m.ma, R))
}

/// Hannan–Rissanen's long autoregression order for `m` points (statsmodels' default), shrunk
/// until its regression has more rows than columns; `None` when even the orders themselves do
/// not fit.
fn long_ar_order(m: usize, p: usize, q: usize, intercept: bool) -> Option<usize> {
    let want = ((m as f64).ln().powi(2).floor() as usize).max(2 * p.max(q));
    let cols = |l: usize| l + usize::from(intercept);
    let mut l = want;
    while l > 0 && m.saturating_sub(l) <= cols(l) {
        l -= 1;
    }
    (l >= q.max(1)).then_some(l)
}

/// One candidate fit: ARIMA(p, d, q) on `y`, the likelihood conditioned on `cond` points.
pub fn fit(
    y: &[f64],
    p: usize,
    d: usize,
    q: usize,
    intercept: bool,
    cond: usize,
) -> Option<ArimaModel> {
    let w = diff(y, d);
    let m = w.len();
    let cond = cond.max(p);
    if m <= cond {
        return None;
    }
    let lead = usize::from(intercept);
    // Residuals of a long autoregression stand in for the unobserved shocks of the MA terms.
    let (shocks, start) = if q > 0 {
        let l = long_ar_order(m, p, q, intercept)?;
        let rows: Vec<Vec<f64>> = (l..m)
            .map(|t| {
                let mut r = Vec::with_capacity(lead + l);
                if intercept {
                    r.push(1.0);
                }
                r.extend((1..=l).map(|i| w[t - i]));
                r
            })
            .collect();
        let beta = ols(&rows, &w[l..])?;
        let mut e = vec![0.0; m];
        for (t, row) in (l..m).zip(&rows) {
            e[t] = w[t] - row.iter().zip(&beta).map(|(x, b)| x * b).sum::<f64>();
        }
        (e, p.max(l + q))
    } else {
        (Vec::new(), p)
    };
    let cols = lead + p + q;
    let (c, ar, ma) = if cols == 0 {
        (0.0, Vec::new(), Vec::new())
    } else {
        let rows: Vec<Vec<f64>> = (start..m)
            .map(|t| {
                let mut r = Vec::with_capacity(cols);
                if intercept {
                    r.push(1.0);
                }
                r.extend((1..=p).map(|i| w[t - i]));
                r.extend((1..=q).map(|j| shocks[t - j]));
                r
            })
            .collect();
        let beta = ols(&rows, &w[start..])?;
        let c = if intercept { beta[0] } else { 0.0 };
        (c, beta[lead..lead + p].to_vec(), beta[lead + p..].to_vec())
    };
    let mut model = ArimaModel {
        p,
        d,
        q,
        intercept,
        c,
        ar,
        ma,
        sigma2: 0.0,
        aic: 0.0,
        cond,
    };
    let e = model.residuals(&w);
    let n_eff = (m - cond) as f64;
    let sse: f64 = e[cond..].iter().map(|v| v * v).sum();
    let sigma2 = (sse / n_eff).max(f64::MIN_POSITIVE);
    let llf = -0.5 * n_eff * ((2.0 * std::f64::consts::PI * sigma2).ln() + 1.0);
    let k = (p + q + lead + 1) as f64;
    model.sigma2 = sigma2;
    model.aic = -2.0 * llf + 2.0 * k;
    if !model.aic.is_finite() || !model.c.is_finite() {
        model.aic = f64::INFINITY;
    }
    if !roots_ok(&model) {
        model.aic = f64::INFINITY;
    }
    Some(model)
}

/// pmdarima's stepwise search (non-seasonal).
struct Stepwise<'a> {
    y: &'a [f64],
    d: usize,
    cond: usize,
    with_intercept: bool,
    /// Every order tried, in the order tried, with its fit (`None`: failed).
    results: Vec<((usize, usize, bool), Option<ArimaModel>)>,
    best: Option<usize>,
    k: usize,
}

impl Stepwise<'_> {
    const MAX_K: usize = 100;

    fn ic(&self, i: usize) -> f64 {
        self.results[i].1.as_ref().map_or(f64::INFINITY, |m| m.aic)
    }

    /// `_do_fit`: fit an order not seen before; whether it became the best.
    fn try_fit(&mut self, p: usize, q: usize, constant: Option<bool>) -> bool {
        let constant = constant.unwrap_or(self.with_intercept);
        let key = (p, q, constant);
        if self.results.iter().any(|(k, _)| *k == key) {
            return false;
        }
        self.k += 1;
        let fitted = fit(self.y, p, self.d, q, constant, self.cond);
        self.results.push((key, fitted));
        let i = self.results.len() - 1;
        let new_ic = self.ic(i);
        if self.results[i].1.is_none() || new_ic.is_infinite() {
            return false;
        }
        match self.best {
            None => {
                self.best = Some(i);
                true
            }
            Some(b) if new_ic < self.ic(b) => {
                self.best = Some(i);
                true
            }
            Some(_) => false,
        }
    }
}

/// `auto_arima(y)` with pmdarima's defaults (module docs: what is faithful, what is
/// approximated). `None` when no candidate is viable (pmdarima raises; Dynamo then predicts
/// the last value).
pub fn auto_arima(y: &[f64]) -> Option<ArimaModel> {
    let n = y.len();
    if n == 0 {
        return None;
    }
    if is_constant(y) {
        return fit(y, 0, 0, 0, false, 0);
    }
    let max_p = 5.min(n / 3);
    let max_q = 5.min(n / 3);
    let mut start_p = 2.min(max_p);
    let mut start_q = 2.min(max_q);
    let d = ndiffs(y);
    let dx = diff(y, d);
    if dx.is_empty() {
        return None;
    }
    let cond = max_p.max(max_q);
    if is_constant(&dx) {
        return fit(y, 0, d, 0, d < 2, cond);
    }
    let with_intercept = d <= 1;
    if n < 10 {
        start_p = start_p.min(1);
        start_q = start_q.min(1);
    }
    let mut s = Stepwise {
        y,
        d,
        cond,
        with_intercept,
        results: Vec::new(),
        best: None,
        k: 0,
    };
    let (mut p, mut q) = (start_p, start_q);
    s.try_fit(p, q, None);
    if s.try_fit(0, 0, None) {
        (p, q) = (0, 0);
    }
    if max_p > 0 && s.try_fit(1, 0, None) {
        (p, q) = (1, 0);
    }
    if max_q > 0 && s.try_fit(0, 1, None) {
        (p, q) = (0, 1);
    }
    if s.with_intercept && s.try_fit(0, 0, Some(false)) {
        (p, q) = (0, 0);
    }
    let mut start_k = 0;
    while start_k < s.k && s.k < Stepwise::MAX_K {
        start_k = s.k;
        let moves: [(isize, isize); 8] = [
            (-1, 0),
            (0, -1),
            (1, 0),
            (0, 1),
            (-1, -1),
            (-1, 1),
            (1, -1),
            (1, 1),
        ];
        let mut moved = false;
        for (dp, dq) in moves {
            let np = p as isize + dp;
            let nq = q as isize + dq;
            if np < 0 || nq < 0 || np as usize > max_p || nq as usize > max_q {
                continue;
            }
            if s.k < Stepwise::MAX_K && s.try_fit(np as usize, nq as usize, None) {
                (p, q) = (np as usize, nq as usize);
                moved = true;
                break;
            }
        }
        if moved {
            continue;
        }
        let toggled = !s.with_intercept;
        if s.k < Stepwise::MAX_K && s.try_fit(p, q, Some(toggled)) {
            s.with_intercept = toggled;
        }
    }
    // `_sort_and_filter_fits`: the finite ones by AIC, the first tried on a tie.
    let mut best: Option<&ArimaModel> = None;
    for (_, m) in &s.results {
        if let Some(m) = m
            && m.aic.is_finite()
            && best.is_none_or(|b| m.aic < b.aic)
        {
            best = Some(m);
        }
    }
    best.cloned()
}

/// pmdarima's `update`, approximated: the same order (and intercept) re-estimated on the whole
/// series `y`. statsmodels' update starts from the old parameters and keeps them stationary and
/// invertible; a re-estimate outside that region (or none) keeps the old parameters here.
pub fn refit(model: &ArimaModel, y: &[f64]) -> ArimaModel {
    match fit(y, model.p, model.d, model.q, model.intercept, model.cond) {
        Some(m) if m.aic.is_finite() => m,
        _ => model.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kpss_matches_hand_computation() {
        // x = 1, 2, 3, 4, 5: mean 3, e = −2 … 2, partial sums −2, −3, −3, −2, 0 → Σs² = 26,
        // η = 26/25 = 1.04; s² = 10/5 = 2; lags ⌊4·0.05^¼⌋ = ⌊1.891⌋ = 1: lag-1 sum
        // (−1)(−2) + 0 + 1·0 + 2·1 = 4, weight ½ → 2·(4·½)/5 = 0.8; stat = 1.04/2.8 = 0.3714
        // → p = 0.10 + (0.05 − 0.10)·(0.3714 − 0.347)/(0.463 − 0.347) = 0.08948.
        let p = kpss_pvalue(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!((p - 0.089_48).abs() < 1e-4, "{p}");
        // A strong trend over more points needs a difference; white-ish noise does not.
        let trend: Vec<f64> = (0..40).map(|i| i as f64 * 10.0 + (i % 3) as f64).collect();
        assert_eq!(ndiffs(&trend), 1);
        let noise: Vec<f64> = (0..40).map(|i| ((i * 7919) % 13) as f64).collect();
        assert_eq!(ndiffs(&noise), 0);
        assert_eq!(ndiffs(&[3.0; 8]), 0);
    }

    #[test]
    fn roots_test_finds_the_unit_circle() {
        // 1 − 0.5z: inverse root 0.5 → fine; 1 − 1.2z: 1.2 → not; 1 − 0.995z: too close.
        assert!(roots_within(&[-0.5], 0.99));
        assert!(!roots_within(&[-1.2], 0.99));
        assert!(!roots_within(&[-0.995], 0.99));
        // (z − 0.9)(z + 0.5) = z² − 0.4z − 0.45: both inside; (z − 0.9)(z − 1.1) is not.
        assert!(roots_within(&[-0.4, -0.45], 0.99));
        assert!(!roots_within(&[-2.0, 0.99], 0.99));
    }

    #[test]
    fn an_ar1_series_is_recovered() {
        // y_t = 5 + 0.6·y_{t−1} + a deterministic wiggle: mean 12.5.
        let mut y = vec![12.0];
        for t in 1..60 {
            let wiggle = [0.8, -0.5, 0.3, -0.9, 0.6, -0.2, 0.1][t % 7];
            y.push(5.0 + 0.6 * y[t - 1] + wiggle);
        }
        let m = auto_arima(&y).expect("a model");
        assert_eq!(m.d, 0, "{m:?}");
        let f = m.forecast(&y);
        // The forecast stays near the process's own next value.
        let truth = 5.0 + 0.6 * y[59];
        assert!((f - truth).abs() < 1.0, "forecast {f} vs {truth} ({m:?})");
    }

    #[test]
    fn a_linear_trend_is_extrapolated() {
        // y = 100 + 7t exactly: d = 1 and a constant difference: (0, 1, 0) with drift 7.
        let y: Vec<f64> = (0..20).map(|t| 100.0 + 7.0 * t as f64).collect();
        let m = auto_arima(&y).expect("a model");
        assert_eq!((m.p, m.d, m.q, m.intercept), (0, 1, 0, true), "{m:?}");
        assert!((m.forecast(&y) - 240.0).abs() < 1e-9, "{}", m.forecast(&y));
    }

    #[test]
    fn a_constant_series_fits_the_zero_model() {
        let m = auto_arima(&[4.0; 6]).unwrap();
        assert_eq!((m.p, m.d, m.q, m.intercept), (0, 0, 0, false));
        assert_eq!(m.forecast(&[4.0; 6]), 0.0, "pmdarima predicts 0 here");
    }

    #[test]
    fn explosive_fits_are_scored_out_and_updates_keep_viable_parameters() {
        // y = 1.05ᵗ: an AR(1) without intercept fits φ = 1.05 exactly, outside the unit circle.
        let y: Vec<f64> = (0..20).map(|t| 1.05f64.powi(t)).collect();
        let m = fit(&y, 1, 0, 0, false, 0).unwrap();
        assert!((m.ar[0] - 1.05).abs() < 1e-9, "{m:?}");
        assert_eq!(m.aic, f64::INFINITY, "the root test scores it out");
        // With an MA term too the AR check still holds (pmdarima's code would only check the MA).
        let bad = ArimaModel {
            q: 1,
            ma: vec![0.2],
            aic: 10.0,
            ..m.clone()
        };
        assert!(!roots_ok(&bad));
        // A viable AR(1) updated on data that re-estimates explosive keeps its parameters.
        let calm: Vec<f64> = (0..20).map(|t| 0.5f64.powi(t)).collect();
        let good = fit(&calm, 1, 0, 0, false, 0).unwrap();
        assert!(
            (good.ar[0] - 0.5).abs() < 1e-9 && good.aic.is_finite(),
            "{good:?}"
        );
        assert_eq!(refit(&good, &y), good);
        assert_ne!(
            refit(&good, &calm[..15]).aic,
            good.aic,
            "a viable re-estimate replaces it"
        );
    }

    #[test]
    fn the_search_is_deterministic() {
        let y: Vec<f64> = (0..30)
            .map(|t| 50.0 + 20.0 * ((t as f64) * 0.7).sin() + ((t * 37) % 11) as f64)
            .collect();
        let a = auto_arima(&y).unwrap();
        let b = auto_arima(&y).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.forecast(&y).to_bits(), b.forecast(&y).to_bits());
    }
}
