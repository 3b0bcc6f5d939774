//! SIGINT and SIGTERM during a sweep or plan: print how to resume and exit at once.
//!
//! Every finished point is already durable (`plan::journal`), and a point in flight cannot be
//! stopped midway without the simulation knowing about signals, so the cleanest stop is the
//! immediate one: the handler writes a message prepared beforehand and calls `_exit`
//! (128 + the signal, the shell's convention), both async-signal-safe. The output folder's lock
//! is released by the kernel with the process; its lock file and staging folder stay and mark
//! the folder unfinished until `--resume` completes it.
//!
//! No crate: `signal`, `write` and `_exit` are libc's, which std links already; `signal-hook`
//! would add a thread and a pipe for what two async-signal-safe calls do.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

unsafe extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    fn _exit(status: i32) -> !;
}

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

static MESSAGE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static MESSAGE_LEN: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(sig: i32) {
    let (p, n) = (
        MESSAGE.load(Ordering::Acquire),
        MESSAGE_LEN.load(Ordering::Acquire),
    );
    // SAFETY: `p` is null or a leaked buffer of `n` bytes that is never freed; write(2) and
    // _exit(2) are async-signal-safe.
    unsafe {
        if !p.is_null() {
            let _ = write(2, p, n);
        }
        _exit(128 + sig);
    }
}

/// Whether [`on_interrupt`] installs its handler: off in a process that embeds pdsim (the
/// Python binding), whose own SIGINT handling must survive a sweep.
static INSTALL: AtomicBool = AtomicBool::new(true);

/// Leaves this process's SIGINT and SIGTERM handlers alone from now on: a sweep or plan then
/// runs to its end (its finished points are durable either way) and the host program decides
/// what an interrupt does.
pub fn keep_host_handlers() {
    INSTALL.store(false, Ordering::Release);
}

/// Installs the handler for SIGINT and SIGTERM with `message` (a line is added after it).
/// A later call replaces the message. Does nothing after [`keep_host_handlers`].
pub fn on_interrupt(message: &str) {
    if !INSTALL.load(Ordering::Acquire) {
        return;
    }
    let bytes: &'static mut [u8] = Box::leak(format!("\n{message}\n").into_bytes().into());
    MESSAGE_LEN.store(bytes.len(), Ordering::Release);
    MESSAGE.store(bytes.as_mut_ptr(), Ordering::Release);
    // SAFETY: `on_signal` has the C signature signal(2) expects and only calls
    // async-signal-safe functions.
    unsafe {
        signal(SIGINT, on_signal as extern "C" fn(i32) as usize);
        signal(SIGTERM, on_signal as extern "C" fn(i32) as usize);
    }
}

/// This process's command line, shell-quoted, with `--resume` added when it is missing: what
/// to run to continue an interrupted sweep or plan.
pub fn resume_line() -> String {
    let mut args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if !args.iter().any(|a| a == "--resume") {
        args.push("--resume".into());
    }
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@+".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
