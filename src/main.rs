//! `pdsim`: parse the command line, call the library, map errors to exit codes
//! (0 ok, 1 expectation failed, 2 usage or invalid input, 3 I/O, 4 internal invariant broken).
//! A closed standard output (`pdsim ... | head`) ends the run quietly with exit 0.

use std::io::Write;

use clap::Parser;

fn main() {
    // `args_os`: a non-UTF-8 argument reaches clap, which rejects it with exit 2 and a message
    // (`std::env::args` would panic before any hook is set).
    let cli = pdsim::cli::Cli::parse_from(std::env::args_os());
    let reproduce = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("pdsim: internal error (a bug in pdsim): {info}");
        eprintln!("reproduce: {reproduce}");
        std::process::exit(4);
    }));
    if let Err(e) = pdsim::cli::dispatch(cli) {
        if !matches!(e, pdsim::cli::CliError::ClosedStdout) {
            // `writeln!`, not `eprintln!`: a closed stderr must not turn an error into a panic.
            let _ = writeln!(std::io::stderr(), "pdsim: {e}");
        }
        std::process::exit(e.exit_code());
    }
}
