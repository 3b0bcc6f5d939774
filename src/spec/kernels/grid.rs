//! A measured kernel table as a dense grid: named axes of increasing points and one latency
//! per point, interpolated multilinearly.
//!
//! # Interpolation (every table, every axis)
//!
//! * **Inside** an axis's range: linear between the two bracketing points. Kernel latency is
//!   close to linear in each of its sizes (a GEMM's `c + a·n·k` at small `m` and `∝ m·n·k` at
//!   large `m` are both exactly bilinear in `n`, `k`; memory-bound attention is linear in batch
//!   and context), so multilinear interpolation is exact where the kernel is in one regime and
//!   errs only across a regime change between two measured points.
//! * **Below** the first point: the first point's value (clamped). Small shapes are bound by
//!   launch and fixed latency, not by their size, so time is flat there; extrapolating down
//!   could go negative.
//! * **Above** the last point: linear extrapolation from the last two points, the slope
//!   floored at 0 (a larger shape is never faster). Beyond the tables, kernels are in their
//!   bandwidth- or compute-bound regime, where time grows linearly in each size.
//!
//! A point the source did not measure (attention at a batch and context too large for one
//! GPU's memory, written `-` in the file) is filled when the table is read, by the rule for
//! "above": linear extrapolation along the last axis from the row's last two measured points
//! ([`Grid::fill_missing`]).

/// One axis: its name and its points, strictly increasing.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// The axis's name as the file writes it (`m`, `batch`, `context`, …).
    pub name: String,
    /// The measured points, strictly increasing.
    pub points: Vec<f64>,
}

/// A dense grid of latencies over its axes, row-major (the last axis varies fastest).
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    /// The axes, outermost first.
    pub axes: Vec<Axis>,
    /// Latency at each point, microseconds; `NaN` where not measured (until filled).
    pub values: Vec<f64>,
}

/// The most axes a table has that [`Grid::eval`] reads (the MoE tables have five).
const MAX_AXES: usize = 8;

/// Where a coordinate falls on one axis: the two points it is taken between and the weight of
/// the second (`0` at the first, `1` at the second, above 1 when extrapolating past the last).
#[derive(Clone, Copy, Debug)]
struct Bracket {
    lo: usize,
    hi: usize,
    w: f64,
}

impl Axis {
    /// The bracket of `x` on this axis by the module's rules.
    fn bracket(&self, x: f64) -> Bracket {
        let p = &self.points;
        let n = p.len();
        if n == 1 || x <= p[0] {
            return Bracket {
                lo: 0,
                hi: 0,
                w: 0.0,
            };
        }
        if x >= p[n - 1] {
            let (a, b) = (p[n - 2], p[n - 1]);
            return Bracket {
                lo: n - 2,
                hi: n - 1,
                w: (x - a) / (b - a),
            };
        }
        // The last point at or below x; x < p[n-1] so i + 1 < n.
        let i = p.partition_point(|&v| v <= x) - 1;
        Bracket {
            lo: i,
            hi: i + 1,
            w: (x - p[i]) / (p[i + 1] - p[i]),
        }
    }
}

impl Grid {
    /// A grid over `axes` with `values` in row-major order; `None` when the sizes disagree or
    /// an axis is empty or not strictly increasing.
    pub fn new(axes: Vec<Axis>, values: Vec<f64>) -> Result<Self, String> {
        if axes.len() > MAX_AXES {
            return Err(format!(
                "{} axes: a table has at most {MAX_AXES}",
                axes.len()
            ));
        }
        let mut n = 1usize;
        for a in &axes {
            if a.points.is_empty() {
                return Err(format!("axis {} has no points", a.name));
            }
            if a.points
                .windows(2)
                .any(|w| w[0] >= w[1] || !w[1].is_finite())
                || !a.points[0].is_finite()
            {
                return Err(format!(
                    "axis {} is not strictly increasing finite numbers",
                    a.name
                ));
            }
            n = n.saturating_mul(a.points.len());
        }
        if n != values.len() {
            return Err(format!(
                "{} values for a grid of {} points ({})",
                values.len(),
                n,
                axes.iter()
                    .map(|a| format!("{} {}", a.name, a.points.len()))
                    .collect::<Vec<_>>()
                    .join(" × ")
            ));
        }
        Ok(Self { axes, values })
    }

    /// The axis named `name`, if any.
    pub fn axis(&self, name: &str) -> Option<&Axis> {
        self.axes.iter().find(|a| a.name == name)
    }

    /// Latency at `x` (one coordinate per axis, in the axes' order), microseconds, by the
    /// module's rules. `x.len()` must equal the number of axes.
    pub fn eval(&self, x: &[f64]) -> f64 {
        assert_eq!(x.len(), self.axes.len(), "one coordinate per axis");
        // The brackets on the stack: a step model's composition evaluates tables thousands of
        // times at every start.
        let mut brackets = [Bracket {
            lo: 0,
            hi: 0,
            w: 0.0,
        }; MAX_AXES];
        assert!(x.len() <= MAX_AXES, "a table has at most {MAX_AXES} axes");
        for ((b, a), &v) in brackets.iter_mut().zip(&self.axes).zip(x) {
            *b = a.bracket(v);
        }
        self.eval_from(&brackets[..x.len()], 0, 0)
    }

    /// The value of the sub-grid starting at `offset` over axes `d..`.
    fn eval_from(&self, b: &[Bracket], d: usize, offset: usize) -> f64 {
        if d == b.len() {
            return self.values[offset];
        }
        let stride: usize = self.axes[d + 1..].iter().map(|a| a.points.len()).product();
        let br = b[d];
        let lo = self.eval_from(b, d + 1, offset + br.lo * stride);
        if br.lo == br.hi || br.w == 0.0 {
            return lo;
        }
        let hi = self.eval_from(b, d + 1, offset + br.hi * stride);
        if br.w > 1.0 {
            // Past the last point: the last segment's slope, never negative.
            hi + (hi - lo).max(0.0) * (br.w - 1.0)
        } else {
            lo + (hi - lo) * br.w
        }
    }

    /// Fills every `NaN` by extrapolating along the last axis from the last two measured
    /// points of its row (slope floored at 0; one measured point: its value). A row with no
    /// measured point takes the row before it along the next axis out, scaled by nothing (a
    /// copy): the sources leave out only the largest shapes, whose neighbours are measured.
    /// Returns how many points were filled; an error if some row has no measured point and no
    /// neighbour to copy.
    pub fn fill_missing(&mut self) -> Result<usize, String> {
        let last = self.axes.last().map_or(1, |a| a.points.len());
        let xs: Vec<f64> = self
            .axes
            .last()
            .map(|a| a.points.clone())
            .unwrap_or_default();
        let rows = self.values.len() / last.max(1);
        let mut filled = 0;
        let mut empty_rows = Vec::new();
        for r in 0..rows {
            let row = &mut self.values[r * last..(r + 1) * last];
            // Most rows are measured whole: no list of their points is needed.
            if row.iter().all(|v| v.is_finite()) {
                continue;
            }
            let known: Vec<usize> = (0..last).filter(|&i| row[i].is_finite()).collect();
            match known.len() {
                0 => empty_rows.push(r),
                n if n == last => {}
                _ => {
                    for i in 0..last {
                        if row[i].is_finite() {
                            continue;
                        }
                        // The measured points around i: below it and above it.
                        let below: Vec<usize> = known.iter().copied().filter(|&j| j < i).collect();
                        let above: Vec<usize> = known.iter().copied().filter(|&j| j > i).collect();
                        row[i] = match (below.as_slice(), above.as_slice()) {
                            ([.., a], [b, ..]) => {
                                let w = (xs[i] - xs[*a]) / (xs[*b] - xs[*a]);
                                row[*a] + (row[*b] - row[*a]) * w
                            }
                            ([.., a, b], []) => {
                                let slope = ((row[*b] - row[*a]) / (xs[*b] - xs[*a])).max(0.0);
                                row[*b] + slope * (xs[i] - xs[*b])
                            }
                            ([b], []) => row[*b],
                            ([], [b, ..]) => row[*b],
                            ([], []) => unreachable!("the row has a measured point"),
                        };
                        filled += 1;
                    }
                }
            }
        }
        // A row with nothing measured copies its neighbour along the next axis out.
        if !empty_rows.is_empty() {
            let outer = if self.axes.len() >= 2 {
                self.axes[self.axes.len() - 2].points.len()
            } else {
                return Err("a one-axis table with no measured point".into());
            };
            for &r in &empty_rows {
                let pos = r % outer;
                let candidates = (0..outer)
                    .filter(|&q| q != pos)
                    .map(|q| r - pos + q)
                    .filter(|&rr| !empty_rows.contains(&rr))
                    .min_by_key(|&rr| rr.abs_diff(r));
                let Some(src) = candidates else {
                    return Err(format!("row {r} of the table has no measured point"));
                };
                for i in 0..last {
                    self.values[r * last + i] = self.values[src * last + i];
                }
                filled += last;
            }
        }
        Ok(filled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(name: &str, p: &[f64]) -> Axis {
        Axis {
            name: name.into(),
            points: p.to_vec(),
        }
    }

    /// A table of more axes than `eval` holds on its stack is refused when read, naming the
    /// count; one of exactly `MAX_AXES` evaluates.
    #[test]
    fn too_many_axes_are_refused_at_read() {
        let axes = |n: usize| {
            (0..n)
                .map(|i| axis(&format!("a{i}"), &[1.0, 2.0]))
                .collect()
        };
        let e = Grid::new(axes(MAX_AXES + 1), vec![1.0; 1 << (MAX_AXES + 1)]).unwrap_err();
        assert!(e.contains("9 axes") && e.contains("at most 8"), "{e}");
        let g = Grid::new(axes(MAX_AXES), vec![3.0; 1 << MAX_AXES]).unwrap();
        assert_eq!(g.eval(&[1.5; MAX_AXES]), 3.0);
    }

    /// A bilinear function is reproduced exactly inside the grid, clamped below and
    /// extrapolated linearly above.
    #[test]
    fn multilinear_inside_clamped_below_linear_above() {
        let f = |n: f64, k: f64| 3.0 + 0.5 * n * k;
        let (ns, ks) = ([32.0, 64.0, 128.0], [16.0, 48.0]);
        let mut v = Vec::new();
        for &n in &ns {
            for &k in &ks {
                v.push(f(n, k));
            }
        }
        let g = Grid::new(vec![axis("n", &ns), axis("k", &ks)], v).unwrap();
        assert!((g.eval(&[40.0, 20.0]) - f(40.0, 20.0)).abs() < 1e-9);
        assert!((g.eval(&[100.0, 47.0]) - f(100.0, 47.0)).abs() < 1e-9);
        // Below: the first point's value.
        assert_eq!(g.eval(&[1.0, 16.0]), f(32.0, 16.0));
        // Above along n: the last segment's slope (exact for a linear function).
        assert!((g.eval(&[256.0, 48.0]) - f(256.0, 48.0)).abs() < 1e-9);
        // A falling last segment extrapolates flat.
        let d = Grid::new(vec![axis("x", &[1.0, 2.0])], vec![5.0, 4.0]).unwrap();
        assert_eq!(d.eval(&[10.0]), 4.0);
    }

    #[test]
    fn missing_points_are_extrapolated_along_the_last_axis() {
        let nan = f64::NAN;
        let mut g = Grid::new(
            vec![axis("b", &[1.0, 2.0]), axis("s", &[1.0, 2.0, 4.0])],
            vec![1.0, 2.0, 4.0, 2.0, 3.0, nan],
        )
        .unwrap();
        assert_eq!(g.fill_missing().unwrap(), 1);
        // Slope 1 per token from (1, 2) → (2, 3): at 4, 5.
        assert_eq!(g.values[5], 5.0);
        let mut empty = Grid::new(
            vec![axis("b", &[1.0, 2.0]), axis("s", &[1.0, 2.0])],
            vec![1.0, 2.0, nan, nan],
        )
        .unwrap();
        assert_eq!(empty.fill_missing().unwrap(), 2);
        assert_eq!(empty.values, vec![1.0, 2.0, 1.0, 2.0]);
    }

    #[test]
    fn bad_grids_are_refused() {
        assert!(Grid::new(vec![axis("m", &[2.0, 1.0])], vec![1.0, 2.0]).is_err());
        assert!(Grid::new(vec![axis("m", &[1.0, 2.0])], vec![1.0]).is_err());
        assert!(Grid::new(vec![axis("m", &[])], vec![]).is_err());
    }
}
