//! `pdsim serve`: its flags; the verb itself is `app::serve`.

use std::path::PathBuf;

use clap::Args;

use crate::app::CliError;
use crate::app::serve::{DEFAULT_MAX_REQUESTS, DEFAULT_WAIT_S, ServeRequest};

/// Arguments of `pdsim serve`.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The port to listen on; 0 picks a free one (printed with the address).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The address to listen on: 127.0.0.1 serves this machine only; 0.0.0.0 every interface
    /// (anyone who reaches it can run simulations and read the results folder).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// The results folder: plans and runs write under it, and only files under it are served.
    #[arg(long, default_value = "results/serve")]
    pub dir: PathBuf,
    /// Seconds a page waits for its plan or run before it says "still running" and reloads
    /// itself until the answer is ready.
    #[arg(long, default_value_t = DEFAULT_WAIT_S)]
    pub wait: u64,
    /// The most arrivals one simulated run may have (`run.max_requests`, or the arrival rate ×
    /// `run.duration_s`): a scenario or question over it is refused before it runs.
    #[arg(long, default_value_t = DEFAULT_MAX_REQUESTS)]
    pub max_requests: u64,
}

impl ServeArgs {
    /// The request these flags make; `--bind` must be an IP address.
    pub fn request(&self) -> Result<ServeRequest, CliError> {
        let bind = self.bind.parse().map_err(|_| {
            CliError::flag(
                "--bind",
                format!(
                    "--bind {:?}: not an IP address; e.g. 127.0.0.1 (this machine) or 0.0.0.0 (every interface)",
                    self.bind
                ),
            )
        })?;
        Ok(ServeRequest {
            bind,
            port: self.port,
            dir: self.dir.clone(),
            wait_s: self.wait,
            max_requests: self.max_requests,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// Every flag reaches the request; `--bind` must be an address, named when it is not.
    #[test]
    fn flags_become_the_serve_request() {
        let parse = |argv: &[&str]| match Cli::try_parse_from(argv).expect("parses").command {
            Command::Serve(a) => a,
            _ => panic!("not serve"),
        };
        let r = parse(&[
            "pdsim",
            "serve",
            "--port",
            "0",
            "--bind",
            "::1",
            "--dir",
            "d",
            "--wait",
            "5",
            "--max-requests",
            "9",
        ])
        .request()
        .unwrap();
        assert_eq!(
            (
                r.port,
                r.bind.to_string(),
                r.dir.to_str(),
                r.wait_s,
                r.max_requests
            ),
            (0, "::1".to_string(), Some("d"), 5, 9)
        );
        let d = parse(&["pdsim", "serve"]).request().unwrap();
        assert_eq!(
            (d.port, d.bind.to_string(), d.dir.to_str()),
            (8080, "127.0.0.1".to_string(), Some("results/serve"))
        );
        let e = parse(&["pdsim", "serve", "--bind", "localhost"])
            .request()
            .unwrap_err();
        assert_eq!((e.key().as_deref(), e.exit_code()), (Some("--bind"), 2));
    }
}
