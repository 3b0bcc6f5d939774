//! `pdsim`: parse the command line, call the library, map errors to exit codes
//! (0 ok, 1 expectation failed, 2 usage or invalid input, 3 I/O, 4 internal invariant broken).

use clap::Parser;

fn main() {
    let cli = pdsim::cli::Cli::parse();
    let reproduce = std::env::args().collect::<Vec<_>>().join(" ");
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("pdsim: internal error (a bug in pdsim): {info}");
        eprintln!("reproduce: {reproduce}");
        std::process::exit(4);
    }));
    if let Err(e) = pdsim::cli::dispatch(cli) {
        eprintln!("pdsim: {e}");
        std::process::exit(e.exit_code());
    }
}
