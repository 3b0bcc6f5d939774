//! The few least-squares fits the policies need, written out so they are deterministic and
//! need no dependency: scikit-learn's `LinearRegression` (centred, minimum-norm on a rank
//! deficit, as its `scipy.linalg.lstsq` call gives) in one and two features, and ordinary least
//! squares with an intercept column for the ARIMA fits.

/// scikit-learn's `LinearRegression().fit(x, y)` on one feature: `(slope, intercept)`. A
/// feature without spread has the minimum-norm slope 0 (lstsq's answer), the intercept the
/// mean.
pub fn linear_regression_1d(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxx += (x - mx) * (x - mx);
        sxy += (x - mx) * (y - my);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}

/// scikit-learn's `LinearRegression().fit(x, y)` on two features: `(coef, intercept)`. The
/// centred design is factored by one Jacobi rotation (its exact SVD for two columns); singular
/// values below `max(n, 2) · ε · σ_max` count as zero, as scikit-learn's `lstsq` cutoff does,
/// so two features that move together exactly get the minimum-norm split.
pub fn linear_regression_2d(xs: &[[f64; 2]], ys: &[f64]) -> ([f64; 2], f64) {
    let n = xs.len();
    let nf = n as f64;
    let m0 = xs.iter().map(|x| x[0]).sum::<f64>() / nf;
    let m1 = xs.iter().map(|x| x[1]).sum::<f64>() / nf;
    let my = ys.iter().sum::<f64>() / nf;
    let mut a: Vec<f64> = xs.iter().map(|x| x[0] - m0).collect();
    let mut b: Vec<f64> = xs.iter().map(|x| x[1] - m1).collect();
    let yc: Vec<f64> = ys.iter().map(|y| y - my).collect();
    let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(p, q)| p * q).sum::<f64>();
    let (alpha, beta, gamma) = (dot(&a, &a), dot(&b, &b), dot(&a, &b));
    // The rotation that makes the two columns orthogonal: V = [[c, s], [-s, c]].
    let (c, s) = if gamma == 0.0 {
        (1.0, 0.0)
    } else {
        let zeta = (beta - alpha) / (2.0 * gamma);
        let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
        let c = 1.0 / (1.0 + t * t).sqrt();
        (c, c * t)
    };
    for i in 0..n {
        let (p, q) = (a[i], b[i]);
        a[i] = c * p - s * q;
        b[i] = s * p + c * q;
    }
    let sig = [dot(&a, &a).sqrt(), dot(&b, &b).sqrt()];
    let cutoff = (n.max(2) as f64) * f64::EPSILON * sig[0].max(sig[1]);
    // The right singular vectors are V's columns: (c, -s) for `a`, (s, c) for `b`.
    let v = [[c, -s], [s, c]];
    let mut coef = [0.0; 2];
    for (k, col) in [&a, &b].into_iter().enumerate() {
        if sig[k] > cutoff && sig[k] > 0.0 {
            let w = dot(col, &yc) / (sig[k] * sig[k]);
            coef[0] += v[k][0] * w;
            coef[1] += v[k][1] * w;
        }
    }
    (coef, my - coef[0] * m0 - coef[1] * m1)
}

/// Least squares `y ≈ X β` over the rows of `x` (each row one observation, `k` columns), by the
/// normal equations and Gaussian elimination with partial pivoting. `None` when the system is
/// singular (a pivot below 1e-12 of the largest diagonal of `XᵀX`), or there are fewer rows
/// than columns: pmdarima reports such a fit as failed and the search skips it.
pub fn ols(x: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = x.first()?.len();
    if k == 0 || x.len() < k {
        return None;
    }
    let mut m = vec![vec![0.0; k + 1]; k];
    for (row, &yi) in x.iter().zip(y) {
        for i in 0..k {
            for j in 0..k {
                m[i][j] += row[i] * row[j];
            }
            m[i][k] += row[i] * yi;
        }
    }
    let scale = (0..k).map(|i| m[i][i].abs()).fold(0.0, f64::max);
    if scale.is_nan() || scale <= 0.0 {
        return None;
    }
    for col in 0..k {
        let piv = (col..k).max_by(|&p, &q| m[p][col].abs().total_cmp(&m[q][col].abs()))?;
        if m[piv][col].abs() <= 1e-12 * scale {
            return None;
        }
        m.swap(col, piv);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                if f != 0.0 {
                    for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                        *x -= f * p;
                    }
                }
            }
        }
    }
    let beta: Vec<f64> = (0..k).map(|i| m[i][k] / m[i][i]).collect();
    beta.iter().all(|b| b.is_finite()).then_some(beta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_feature_is_the_textbook_line() {
        let (s, i) = linear_regression_1d(&[1.0, 2.0, 3.0, 4.0], &[3.0, 5.0, 7.0, 9.0]);
        assert!(
            (s - 2.0).abs() < 1e-12 && (i - 1.0).abs() < 1e-12,
            "{s} {i}"
        );
        // No spread: slope 0, the mean.
        assert_eq!(linear_regression_1d(&[5.0, 5.0], &[1.0, 3.0]), (0.0, 2.0));
    }

    #[test]
    fn two_features_recover_an_exact_plane() {
        // y = 0.5 + 0.002·a + 0.00003·b, with a and b not proportional.
        let xs: Vec<[f64; 2]> = (0..12)
            .map(|i| {
                [
                    1.0 + i as f64,
                    1000.0 * (1.0 + i as f64) + 700.0 * ((i * i) % 5) as f64,
                ]
            })
            .collect();
        let ys: Vec<f64> = xs
            .iter()
            .map(|x| 0.5 + 0.002 * x[0] + 3e-5 * x[1])
            .collect();
        let (c, i) = linear_regression_2d(&xs, &ys);
        assert!((c[0] - 0.002).abs() < 1e-9, "{c:?}");
        assert!((c[1] - 3e-5).abs() < 1e-12, "{c:?}");
        assert!((i - 0.5).abs() < 1e-9, "{i}");
    }

    #[test]
    fn proportional_features_get_the_minimum_norm_split() {
        // b = 10·a exactly and y = 2 + 101·a: every coef with c₀ + 10·c₁ = 101 fits; the
        // minimum-norm one lies along (1, 10): k·(1 + 100) = 101, k = 1, coef = (1, 10).
        let xs: Vec<[f64; 2]> = (1..=6).map(|i| [i as f64, 10.0 * i as f64]).collect();
        let ys: Vec<f64> = xs.iter().map(|x| 2.0 + 101.0 * x[0]).collect();
        let (c, i) = linear_regression_2d(&xs, &ys);
        assert!(
            (c[0] - 1.0).abs() < 1e-9 && (c[1] - 10.0).abs() < 1e-9,
            "{c:?}"
        );
        assert!((i - 2.0).abs() < 1e-9, "{i}");
    }

    #[test]
    fn ols_solves_and_refuses_singular_systems() {
        let x = vec![vec![1.0, 0.0], vec![1.0, 1.0], vec![1.0, 2.0]];
        let b = ols(&x, &[1.0, 3.0, 5.0]).unwrap();
        assert!(
            (b[0] - 1.0).abs() < 1e-12 && (b[1] - 2.0).abs() < 1e-12,
            "{b:?}"
        );
        let sing = vec![vec![1.0, 2.0], vec![2.0, 4.0], vec![3.0, 6.0]];
        assert_eq!(ols(&sing, &[1.0, 2.0, 3.0]), None);
        assert_eq!(
            ols(&[vec![1.0, 2.0]], &[1.0]),
            None,
            "fewer rows than columns"
        );
    }
}
