//! Byte geometry of the oracle: a written part of a unit is a box of (regions × rows × columns)
//! so that overlapping writes are subtracted exactly, whatever their shapes.
//!
//! Units: rows are token rows (KV) or the single row of a state slot / aux row; columns are
//! bytes within a row.

/// Per-rank geometry of one unit space: regions, and the row structure of one unit (rows of
/// `row_len` bytes).
#[derive(Clone, Copy, Debug)]
pub(super) struct SpaceGeom {
    /// Regions in the space.
    pub(super) regions: u32,
    /// Rows per unit: the page's token rows for per-layer KV; 1 for a unified page envelope,
    /// a state slot and an aux row (one contiguous run of bytes).
    pub(super) rows: u32,
    /// Bytes per row.
    pub(super) row_len: u64,
}

/// Rows × columns of one unit of one region, and the region range, half-open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Box3 {
    pub(super) regions: (u32, u32),
    pub(super) rows: (u32, u32),
    pub(super) cols: (u64, u64),
}

impl Box3 {
    pub(super) fn volume(&self) -> u64 {
        u64::from(self.regions.1 - self.regions.0)
            * u64::from(self.rows.1 - self.rows.0)
            * (self.cols.1 - self.cols.0)
    }

    fn intersects(&self, o: &Box3) -> bool {
        self.regions.0 < o.regions.1
            && o.regions.0 < self.regions.1
            && self.rows.0 < o.rows.1
            && o.rows.0 < self.rows.1
            && self.cols.0 < o.cols.1
            && o.cols.0 < self.cols.1
    }

    /// `self \ o` as at most six disjoint boxes.
    pub(super) fn minus(&self, o: &Box3, out: &mut Vec<Box3>) {
        if !self.intersects(o) {
            out.push(*self);
            return;
        }
        let mut rest = *self;
        // Split off the parts outside `o` along each axis in turn.
        if rest.regions.0 < o.regions.0 {
            out.push(Box3 {
                regions: (rest.regions.0, o.regions.0),
                ..rest
            });
            rest.regions.0 = o.regions.0;
        }
        if rest.regions.1 > o.regions.1 {
            out.push(Box3 {
                regions: (o.regions.1, rest.regions.1),
                ..rest
            });
            rest.regions.1 = o.regions.1;
        }
        if rest.rows.0 < o.rows.0 {
            out.push(Box3 {
                rows: (rest.rows.0, o.rows.0),
                ..rest
            });
            rest.rows.0 = o.rows.0;
        }
        if rest.rows.1 > o.rows.1 {
            out.push(Box3 {
                rows: (o.rows.1, rest.rows.1),
                ..rest
            });
            rest.rows.1 = o.rows.1;
        }
        if rest.cols.0 < o.cols.0 {
            out.push(Box3 {
                cols: (rest.cols.0, o.cols.0),
                ..rest
            });
        }
        if rest.cols.1 > o.cols.1 {
            out.push(Box3 {
                cols: (o.cols.1, rest.cols.1),
                ..rest
            });
        }
    }
}

/// The boxes of bytes `[la, lb)` of one unit with geometry `g`, over `regions`.
pub(super) fn byte_boxes(regions: (u32, u32), g: SpaceGeom, la: u64, lb: u64) -> Vec<Box3> {
    let rl = g.row_len;
    let (r0, c0) = ((la / rl) as u32, la % rl);
    let (r1, c1) = (((lb - 1) / rl) as u32, (lb - 1) % rl + 1);
    let b = |rows: (u32, u32), cols: (u64, u64)| Box3 {
        regions,
        rows,
        cols,
    };
    if r0 == r1 {
        return vec![b((r0, r0 + 1), (c0, c1))];
    }
    let mut out = Vec::new();
    let mut mid0 = r0;
    if c0 > 0 {
        out.push(b((r0, r0 + 1), (c0, rl)));
        mid0 = r0 + 1;
    }
    let mut mid1 = r1 + 1;
    if c1 < rl {
        out.push(b((r1, r1 + 1), (0, c1)));
        mid1 = r1;
    }
    if mid0 < mid1 {
        out.push(b((mid0, mid1), (0, rl)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_difference_is_exact() {
        let a = Box3 {
            regions: (0, 4),
            rows: (0, 4),
            cols: (0, 10),
        };
        let b = Box3 {
            regions: (1, 2),
            rows: (1, 3),
            cols: (2, 5),
        };
        let mut out = Vec::new();
        a.minus(&b, &mut out);
        let vol: u64 = out.iter().map(Box3::volume).sum();
        assert_eq!(vol, a.volume() - b.volume());
        for (i, x) in out.iter().enumerate() {
            assert!(!x.intersects(&b));
            for y in &out[i + 1..] {
                assert!(!x.intersects(y));
            }
        }
    }

    #[test]
    fn byte_ranges_become_row_boxes() {
        let g = SpaceGeom {
            regions: 1,
            rows: 4,
            row_len: 10,
        };
        let vol = |v: Vec<Box3>| v.iter().map(Box3::volume).sum::<u64>();
        assert_eq!(vol(byte_boxes((0, 1), g, 3, 37)), 34);
        assert_eq!(byte_boxes((0, 1), g, 0, 40).len(), 1);
        assert_eq!(byte_boxes((0, 1), g, 12, 18).len(), 1);
        assert_eq!(vol(byte_boxes((0, 3), g, 5, 15)), 30);
    }
}
