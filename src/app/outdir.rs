//! Output folders, shared by every verb that writes one (`run`, `sweep`, `plan`, `merge`,
//! `check --out`, `explain SCENARIO`): one writer at a time, and nothing in the folder that
//! looks finished before it is.
//!
//! - **Lock.** A writer holds `DIR/.pdsim-lock`, an advisory `flock(2)` on a file that names
//!   it (pid, host, verb). The kernel drops the lock when the process ends however it ends, so
//!   a lock file whose lock is free is *stale*: its writer was killed. A second writer while
//!   the first lives fails with exit 3 naming the folder and the holder; a stale lock is
//!   explained on stderr and taken over. (A bare `create_new` lock file cannot tell a killed
//!   writer from a live one without guessing from pids, which may be reused.)
//! - **Staging.** Files are written into `DIR/.pdsim-partial/` and renamed into `DIR` only
//!   when the verb succeeded, the completeness marker (`summary.json`, `sweep.json`,
//!   `plan.json`) last. A killed writer leaves its lock file and the staging folder, never a
//!   CSV cut mid-line beside an older summary. A sweep keeps its finished points there, which
//!   `--resume` continues from.
//! - **Read side.** [`check_complete`] refuses a folder with a lock file or a staging folder:
//!   its writer is still running or did not finish.
//!
//! Only the verb's own result files are touched: anything else a user keeps in the folder
//! stays. A result file that is a symbolic link or a special file (FIFO, socket, device) is
//! refused (exit 2, naming it) before anything is written: writing through a link planted as
//! `DIR/summary.json` would overwrite the file it points to, outside the folder (issue 40).
//! Every file reaches the folder by `rename(2)`, which replaces a name and never follows it;
//! the lock file is opened with `O_NOFOLLOW`, and a staging folder that is a link is refused.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::CliError;
use crate::report::IoError;

/// The lock file inside an output folder.
pub const LOCK: &str = ".pdsim-lock";
/// The staging folder inside an output folder.
pub const STAGING: &str = ".pdsim-partial";

unsafe extern "C" {
    // libc's flock(2); std links libc already, so no crate is needed for one call.
    fn flock(fd: i32, operation: i32) -> i32;
}
const LOCK_EX: i32 = 2;
const LOCK_NB: i32 = 4;

fn io(path: &Path) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |source| {
        CliError::Io(IoError {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// This host's name, for lock files (`/proc/sys/kernel/hostname`, else `/etc/hostname`).
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "an unknown host".into())
}

/// An output folder being written: its lock is held until [`OutDir::install`] or drop.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    staging: PathBuf,
    lock: Option<File>,
    /// Keep the staging folder when the verb fails (a sweep's finished points).
    keep_staging: bool,
    installed: bool,
}

/// What the holder of a lock wrote into it, for messages.
fn holder_text(text: &str) -> String {
    let t = text.trim();
    if t.is_empty() {
        "a pdsim process that did not say which".into()
    } else {
        t.to_string()
    }
}

/// Takes the lock of `dir` (created if missing). Exit 3 when another process holds it.
/// Returns the open lock file and the stale holder's text if a killed writer left one.
fn take_lock(dir: &Path, verb: &str) -> Result<(File, Option<String>), CliError> {
    use std::os::fd::AsRawFd;
    let path = dir.join(LOCK);
    loop {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOFOLLOW: a link planted as the lock file would otherwise have its target truncated.
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    not_a_plain_file(&path, "a symbolic link")
                } else {
                    io(&path)(e)
                }
            })?;
        if !f.metadata().map_err(io(&path))?.is_file() {
            return Err(not_a_plain_file(&path, "not a regular file"));
        }
        // SAFETY: flock on a file descriptor this function owns; no memory is shared.
        if unsafe { flock(f.as_raw_fd(), LOCK_EX | LOCK_NB) } != 0 {
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            return Err(CliError::Busy(format!(
                "{}: another pdsim is writing this folder ({}); wait for it to finish, or give another --out",
                dir.display(),
                holder_text(&text)
            )));
        }
        // The previous holder may have removed the file between our open and our lock (it
        // finished): then we hold a lock on a file no one else can see; open it again.
        let same = std::fs::metadata(&path).ok().zip(f.metadata().ok());
        if !same.is_some_and(|(a, b)| a.ino() == b.ino() && a.dev() == b.dev()) {
            continue;
        }
        let mut old = String::new();
        let _ = f.read_to_string(&mut old);
        let stale = (!old.trim().is_empty()).then(|| old.trim().to_string());
        let me = format!(
            "pid {} on {}: pdsim {verb}",
            std::process::id(),
            host_name()
        );
        f.set_len(0).map_err(io(&path))?;
        f.rewind().map_err(io(&path))?;
        f.write_all(me.as_bytes())
            .and_then(|()| f.write_all(b"\n"))
            .and_then(|()| f.flush())
            .map_err(io(&path))?;
        return Ok((f, stale));
    }
}

fn remove_entry(p: &Path) -> Result<(), CliError> {
    let meta = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(p)(e)),
    };
    let gone = if meta.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    match gone {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(p)(e)),
    }
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// The refusal of an output path that is `what` (a symbolic link, a special file): pdsim
/// writes only plain files and folders of its own, never through a name it did not create.
fn not_a_plain_file(p: &Path, what: &str) -> CliError {
    CliError::Input {
        path: p.to_path_buf(),
        message: format!(
            "{}: {what}; pdsim writes its outputs only as plain files (a link or special file there could send them elsewhere): remove it, or give another output path",
            p.display()
        ),
    }
}

/// Refuses `p` when it exists as anything but a plain file (or, with `dir_ok`, a folder).
pub fn refuse_odd_entry(p: &Path, dir_ok: bool) -> Result<(), CliError> {
    let meta = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(p)(e)),
    };
    let t = meta.file_type();
    if t.is_symlink() {
        Err(not_a_plain_file(p, "a symbolic link"))
    } else if t.is_file() || (dir_ok && t.is_dir()) {
        Ok(())
    } else if t.is_dir() {
        Err(not_a_plain_file(p, "a folder where pdsim writes a file"))
    } else {
        Err(not_a_plain_file(
            p,
            "a special file (FIFO, socket or device)",
        ))
    }
}

impl OutDir {
    /// Locks `dir` for `verb` and prepares its staging folder. `files` are the verb's result
    /// files: earlier ones are removed from `dir` now (so a failed writer never leaves an older
    /// result looking like its own); one that is a symbolic link or a special file is refused
    /// (module docs). With `resume`, a staging folder left by a killed writer is kept (its
    /// finished points); otherwise it is cleared.
    pub fn open(dir: &Path, verb: &str, files: &[&str], resume: bool) -> Result<Self, CliError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        if !dir.is_dir() {
            return Err(CliError::Input {
                path: dir.to_path_buf(),
                message: format!(
                    "{}: not a folder; give --out a folder to write the results into",
                    dir.display()
                ),
            });
        }
        let (lock, stale) = take_lock(dir, verb)?;
        let staging = dir.join(STAGING);
        if let Some(s) = stale {
            let what = if resume && staging.is_dir() {
                "continuing from what it finished"
            } else {
                "its partial output is discarded"
            };
            let _ = writeln!(
                std::io::stderr(),
                "pdsim: note: {} was being written by {s}, which stopped before finishing (killed?); {what}",
                dir.display()
            );
        }
        let out = Self {
            dir: dir.to_path_buf(),
            staging: staging.clone(),
            lock: Some(lock),
            keep_staging: false,
            installed: false,
        };
        // Before anything is removed or written: a link or special file among the results, or
        // a staging folder that is a link (whose contents a resume would write into).
        let odd = files
            .iter()
            .try_for_each(|f| refuse_odd_entry(&dir.join(f), true))
            .and_then(|()| {
                if is_symlink(&staging) {
                    Err(not_a_plain_file(&staging, "a symbolic link"))
                } else {
                    Ok(())
                }
            });
        if let Err(e) = odd {
            // Refused before touching anything: the lock is released, staging left as found.
            let mut out = out;
            out.keep_staging = true;
            return Err(e);
        }
        if !resume {
            remove_entry(&staging)?;
        }
        for f in files {
            remove_entry(&dir.join(f))?;
        }
        std::fs::create_dir_all(&staging).map_err(io(&staging))?;
        Ok(out)
    }

    /// The folder results are written into before [`OutDir::install`].
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// The final folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Keeps the staging folder if the verb fails (a sweep's finished points, for `--resume`).
    pub fn keep_staging_on_failure(&mut self) {
        self.keep_staging = true;
    }

    /// An error whose file is in staging, named by its final path (the user knows that one).
    pub fn rename_error(&self, e: CliError) -> CliError {
        match e {
            CliError::Io(IoError { path, source }) => {
                let path = match path.strip_prefix(&self.staging) {
                    Ok(rest) => self.dir.join(rest),
                    Err(_) => path,
                };
                CliError::Io(IoError { path, source })
            }
            e => e,
        }
    }

    /// Moves the staged files into the folder, `last` after every other entry (in that
    /// order: the completeness marker goes last), and releases the lock. Entries of staging
    /// whose name starts with `.` (a sweep's points) are not results and are dropped.
    pub fn install(mut self, last: &[&str]) -> Result<(), CliError> {
        let rd = std::fs::read_dir(&self.staging).map_err(io(&self.staging))?;
        let mut names: Vec<std::ffi::OsString> = rd
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|n| !n.to_string_lossy().starts_with('.'))
            .filter(|n| !last.iter().any(|l| n == l))
            .collect();
        names.sort();
        names.extend(
            last.iter()
                .map(std::ffi::OsString::from)
                .filter(|n| self.staging.join(n).exists()),
        );
        for n in &names {
            let from = self.staging.join(n);
            let to = self.dir.join(n);
            // rename(2) replaces `to` itself, never what a link there points to.
            if std::fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                remove_entry(&to)?;
            }
            std::fs::rename(&from, &to).map_err(io(&to))?;
        }
        remove_entry(&self.staging)?;
        self.installed = true;
        self.release();
        Ok(())
    }

    fn release(&mut self) {
        if let Some(f) = self.lock.take() {
            // Removed while still locked, so the next writer never sees our text as stale.
            let _ = std::fs::remove_file(self.dir.join(LOCK));
            drop(f);
        }
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        if !self.installed && !self.keep_staging {
            let _ = remove_entry(&self.staging);
        }
        self.release();
    }
}

/// Refuses a results folder whose writer is still running or did not finish: a lock file or a
/// staging folder in it (exit 2, naming the folder and what to do).
pub fn check_complete(dir: &Path, verb_hint: &str) -> Result<(), CliError> {
    let lock = dir.join(LOCK);
    if lock.exists() {
        let holder = holder_text(&std::fs::read_to_string(&lock).unwrap_or_default());
        return Err(CliError::Input {
            path: lock.clone(),
            message: format!(
                "{}: incomplete: {} is writing it or was killed before it finished ({}); wait for it, or {verb_hint}",
                dir.display(),
                holder,
                lock.display()
            ),
        });
    }
    if dir.join(STAGING).exists() {
        return Err(CliError::Input {
            path: dir.join(STAGING),
            message: format!(
                "{}: incomplete: it holds the partial output of a writer that did not finish ({}); {verb_hint}",
                dir.display(),
                dir.join(STAGING).display()
            ),
        });
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file beside it (created new, not
/// following a link), synced, then renamed, so a reader (or a crash) sees the old file or the
/// new one, never half of one. A `path` that is a symbolic link or a special file is refused
/// (exit 2, naming it): the rename would replace a link, but a user who put one there meant
/// it to be written through, and pdsim writes through no link (module docs).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    refuse_odd_entry(path, false)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    // A temporary left by a killed writer of the same pid, or planted: replaced, not followed.
    if is_symlink(&tmp) || tmp.is_file() {
        let _ = std::fs::remove_file(&tmp);
    }
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path)(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pdsim-outdir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Issue 40: a link planted as a result file (or as the lock, or as staging) is refused
    /// by name and its target is untouched; a FIFO too; `write_atomic` the same.
    #[test]
    fn links_and_special_files_among_the_outputs_are_refused_untouched() {
        let d = tmp("links");
        std::fs::create_dir_all(&d).unwrap();
        let outside = tmp("links-outside");
        std::fs::create_dir_all(&outside).unwrap();
        let victim = outside.join("victim.txt");
        for name in ["summary.json", LOCK, STAGING] {
            std::fs::write(&victim, "precious").unwrap();
            let planted = d.join(name);
            std::os::unix::fs::symlink(&victim, &planted).unwrap();
            let e = OutDir::open(&d, "run", &["summary.json"], false).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{name}: {e}");
            let m = e.to_string();
            assert!(
                m.contains(&planted.display().to_string()) && m.contains("symbolic link"),
                "{m}"
            );
            assert_eq!(
                std::fs::read_to_string(&victim).unwrap(),
                "precious",
                "{name}"
            );
            assert!(is_symlink(&planted), "{name}: the link is left as found");
            std::fs::remove_file(&planted).unwrap();
            let _ = std::fs::remove_file(d.join(LOCK));
        }
        let fifo = d.join("summary.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path owned here.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = OutDir::open(&d, "run", &["summary.json"], false).unwrap_err();
        assert!(e.to_string().contains("special file"), "{e}");
        let e = write_atomic(&fifo, b"x").unwrap_err();
        assert!(e.to_string().contains("special file"), "{e}");
        std::fs::remove_file(&fifo).unwrap();
        let link = d.join("junit.xml");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = write_atomic(&link, b"x").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        write_atomic(&d.join("plain.txt"), b"ok").unwrap();
        assert_eq!(std::fs::read_to_string(d.join("plain.txt")).unwrap(), "ok");
    }

    #[test]
    fn a_second_writer_is_refused_naming_the_holder() {
        let d = tmp("busy");
        let a = OutDir::open(&d, "run", &["summary.json"], false).unwrap();
        let e = OutDir::open(&d, "sweep", &["summary.json"], false).unwrap_err();
        assert_eq!(e.exit_code(), 3);
        let m = e.to_string();
        assert!(
            m.contains(&d.display().to_string()) && m.contains("pdsim run"),
            "{m}"
        );
        assert!(check_complete(&d, "rerun").is_err());
        drop(a);
        assert!(!d.join(LOCK).exists() && !d.join(STAGING).exists());
        check_complete(&d, "rerun").unwrap();
    }

    #[test]
    fn install_moves_files_and_a_failure_leaves_nothing_new() {
        let d = tmp("install");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("summary.json"), "old").unwrap();
        std::fs::write(d.join("mine.txt"), "user's").unwrap();
        let o = OutDir::open(&d, "run", &["summary.json", "requests.csv"], false).unwrap();
        assert!(
            !d.join("summary.json").exists(),
            "an old result is cleared first"
        );
        std::fs::write(o.staging().join("requests.csv"), "rows").unwrap();
        drop(o);
        assert!(!d.join("requests.csv").exists());
        let o = OutDir::open(&d, "run", &["summary.json", "requests.csv"], false).unwrap();
        std::fs::write(o.staging().join("requests.csv"), "rows").unwrap();
        std::fs::write(o.staging().join("summary.json"), "new").unwrap();
        o.install(&["summary.json"]).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("summary.json")).unwrap(),
            "new"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("mine.txt")).unwrap(),
            "user's"
        );
        check_complete(&d, "rerun").unwrap();
    }
}
