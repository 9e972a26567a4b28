//! `retrysim serve`: the scenario's API on a real socket until `--for`
//! expires or a SIGINT/SIGTERM, then the ledger's verdict (exit 1 if broken).

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use crate::sim::serve::{ServeOptions, Served};
use crate::sim::world::api::Preset;
use clap::Args;

use super::{Format, Outcome, ScenarioSource, UserError, terminal};

/// Arguments of `retrysim serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    source: ScenarioSource,
    /// The seed of the server's own draws (which answers are lost).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Where to listen; port 0 picks a free one. Loopback unless --public.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Allow a non-loopback --addr (the API would be reachable from other machines).
    #[arg(long)]
    public: bool,
    /// Stop after this long (e.g. 30s); without it, serve until SIGINT or SIGTERM.
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    for_: Option<Duration>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// Serves until told to stop, then prints the report; exit 1 when a check broke.
pub fn run(args: ServeArgs) -> Outcome {
    let scenario = args.source.load()?;
    let options = ServeOptions::default().addr(args.addr).public(args.public).seed(args.seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| UserError(format!("cannot start the runtime: {e}")))?;
    let report = runtime.block_on(async {
        // Listen for the signals before the address is printed: a script
        // that reads it and stops the server at once gets the report.
        let signals = Signals::listen()?;
        let served = Served::start_with(&scenario, options).await.map_err(|e| UserError(e.to_string()))?;
        // The first line is the address alone, for scripts that start the
        // server in the background and read its port.
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", served.url()).and_then(|()| stdout.flush()).map_err(|e| UserError(e.to_string()))?;
        drop(stdout);
        if !served.addr().ip().is_loopback() {
            eprintln!("warning: serving on {}, reachable from other machines", served.addr());
        }
        let until = args
            .for_
            .map_or("SIGINT or SIGTERM".to_owned(), |d| format!("{} or a signal", humantime::format_duration(d)));
        let key = scenario.api.accounts.first().and_then(|a| a.keys.first());
        let (route, header) = match scenario.api.preset {
            Preset::None => ("/v1/jobs", "x-api-key: "),
            Preset::OpenAi => ("/v1/chat/completions", "Authorization: Bearer "),
            Preset::GitHub => ("/repos/{owner}/{repo}/issues", "Authorization: Bearer "),
        };
        let key = key.map_or(String::new(), |k| format!(" with {header}{}", terminal::printable(k)));
        eprintln!(
            "retrysim serve: {} (seed {}) until {until}; POST {}{route}{key}; GET {}/__retrysim/report",
            terminal::printable(&scenario.name),
            args.seed,
            served.url(),
            served.url()
        );
        signals.wait(args.for_).await;
        Ok::<_, UserError>(served.stop().await)
    })?;
    let out = match args.format {
        Format::Text => report.render_text(),
        Format::Json => serde_json::to_string_pretty(&report).expect("reports serialise"),
    };
    Ok((out, if report.broken { ExitCode::FAILURE } else { ExitCode::SUCCESS }))
}

/// SIGINT and SIGTERM, listened for from the moment this is made.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Result<Signals, UserError> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind: SignalKind, name: &str| {
                signal(kind).map_err(|e| UserError(format!("cannot listen for {name}: {e}")))
            };
            Ok(Signals {
                int: listen(SignalKind::interrupt(), "SIGINT")?,
                term: listen(SignalKind::terminate(), "SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Until `limit` passes, or SIGINT, or SIGTERM.
    async fn wait(mut self, limit: Option<Duration>) {
        let limit = async {
            match limit {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        #[cfg(unix)]
        tokio::select! {
            biased;
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            () = limit => {}
        }
        #[cfg(not(unix))]
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => {}
            () = limit => {}
        }
    }
}
