//! The finished points of a sweep or plan in progress, one file per point, so a killed sweep
//! loses only the points that were running.
//!
//! A point file is the row's bytes as the final file holds them (a header and one CSV record)
//! and a last line `#fnv=<hash of the bytes before it>`. It is written to a temporary name,
//! synced and renamed, so it exists whole or not at all; the checksum catches what a rename
//! cannot (a file damaged on disk or by hand), and such a point is run again rather than
//! trusted. The journal's `identity` file holds what the sweep is (scenario and input
//! fingerprints, grid, shard, search settings): `--resume` continues only the same sweep.

use std::path::{Path, PathBuf};

use super::{PlanError, fnv};

/// The folder of point files inside an output folder's staging.
pub const POINTS: &str = ".points";

/// Recorded rows `(index, bytes)`, and the point files found damaged.
pub type Recorded = (Vec<(usize, Vec<u8>)>, Vec<PathBuf>);

/// Point files of one sweep.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
}

fn io(path: &Path, e: std::io::Error) -> PlanError {
    PlanError::Io(format!("{}: {e}", path.display()))
}

impl Journal {
    /// Opens the journal in `staging`. With `resume`, an existing journal must have been started
    /// with the same `identity` (else exit 2 saying so); without, any old one is cleared.
    /// Returns the journal and whether it continues an earlier one.
    pub fn open(staging: &Path, identity: &str, resume: bool) -> Result<(Self, bool), PlanError> {
        let dir = staging.join(POINTS);
        let id_path = dir.join("identity.json");
        let j = Self { dir: dir.clone() };
        if resume {
            match std::fs::read_to_string(&id_path) {
                Ok(old) if old == identity => return Ok((j, true)),
                Ok(_) => {
                    return Err(PlanError::flag(
                        "--resume",
                        format!(
                            "--resume: the unfinished sweep in {} was started with other inputs (scenario text, a file it reads, --vary, --seeds, --set, --shard or the plan's question differ); run without --resume to start over",
                            staging.parent().unwrap_or(staging).display()
                        ),
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&id_path, e)),
            }
        } else if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        write_synced(&id_path, identity.as_bytes())?;
        Ok((j, false))
    }

    fn path_of(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{i:09}.csv"))
    }

    /// Makes row `i`'s bytes durable.
    pub fn record(&self, i: usize, bytes: &[u8]) -> Result<(), PlanError> {
        let mut all = bytes.to_vec();
        all.extend_from_slice(format!("#fnv={}\n", fnv(bytes)).as_bytes());
        write_synced(&self.path_of(i), &all)
    }

    /// The recorded rows, by index: `(index, bytes)` for every point file whose checksum holds.
    /// Damaged files are listed in the second vector (by path) and removed, so they run again.
    pub fn recorded(&self) -> Result<Recorded, PlanError> {
        let rd = std::fs::read_dir(&self.dir).map_err(|e| io(&self.dir, e))?;
        let mut good = Vec::new();
        let mut bad = Vec::new();
        let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        for p in names {
            let Some(i) = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".csv"))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let bytes = std::fs::read(&p).map_err(|e| io(&p, e))?;
            match split_checked(&bytes) {
                Some(body) => good.push((i, body.to_vec())),
                None => {
                    let _ = std::fs::remove_file(&p);
                    bad.push(p);
                }
            }
        }
        Ok((good, bad))
    }
}

/// The bytes before a valid `#fnv=` last line, or `None`.
fn split_checked(bytes: &[u8]) -> Option<&[u8]> {
    let text = std::str::from_utf8(bytes).ok()?;
    let body_end = text.trim_end_matches('\n').rfind('\n')? + 1;
    let (body, last) = text.split_at(body_end);
    let sum = last.trim_end().strip_prefix("#fnv=")?;
    (fnv(body.as_bytes()) == sum).then_some(body.as_bytes())
}

/// Writes `bytes` to `path` through a synced temporary file and a rename.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), PlanError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    r.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_survive_and_damage_is_detected() {
        let d = std::env::temp_dir().join(format!("pdsim-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (j, cont) = Journal::open(&d, "id-1", false).unwrap();
        assert!(!cont);
        j.record(3, b"a,b\n1,2\n").unwrap();
        j.record(5, b"a,b\n3,4\n").unwrap();
        // A hand-edited point fails its checksum and is dropped.
        let p = d.join(POINTS).join("000000005.csv");
        let t = std::fs::read_to_string(&p).unwrap().replace("3,4", "3,5");
        std::fs::write(&p, t).unwrap();
        let (j, cont) = Journal::open(&d, "id-1", true).unwrap();
        assert!(cont);
        let (good, bad) = j.recorded().unwrap();
        assert_eq!(good, vec![(3, b"a,b\n1,2\n".to_vec())]);
        assert_eq!(bad.len(), 1);
        assert!(Journal::open(&d, "id-2", true).is_err(), "another sweep");
        let (j, _) = Journal::open(&d, "id-2", false).unwrap();
        assert!(j.recorded().unwrap().0.is_empty(), "a fresh start clears");
    }
}
