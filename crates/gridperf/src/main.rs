//! The gridperf command line: parse, dispatch to the command's workflow,
//! and map its error to an exit code. Each command's arguments become its
//! checked options in `cli`; the workflows are in `commands`.

use gridperf::cli::{Command, Formatted};
use gridperf::commands::{self, Format, Output};
use gridperf::error::{Error, Kind, Result};

/// Runs a command; Some(code) when it ends with an exit status of its own (`lab exec`).
fn dispatch(command: Command) -> Result<Option<i32>> {
    // the one way a command's output format is chosen: its flags' group (cli::Formatted)
    fn go<A: Formatted, O>(a: A, run: fn(O, &mut Output) -> Result<()>) -> Result<Option<i32>>
    where
        O: TryFrom<A, Error = Error>,
    {
        let mut out = Output::stdout(a.format());
        run(O::try_from(a)?, &mut out).map(|()| None)
    }
    let table = Format::Table;
    match command {
        Command::Serve(a) => go(*a, commands::serve::run),
        Command::Rtt(a) => go(a, commands::rtt::run),
        Command::Transfer(a) => go(a, commands::transfer::run),
        Command::Stream(a) => go(*a, stream_or_sweep),
        Command::Fanout(a) => go(a, commands::fanout::run),
        Command::Copy(a) => go(*a, commands::copy::run),
        Command::Tune(a) => go(a, commands::tune::run),
        Command::Trace(a) => go(a, commands::trace::run),
        Command::Survey(a) => go(a, commands::survey::run),
        Command::Runs(c) => go(c, commands::runs::run),
        Command::Report(a) => go(a, commands::report::run),
        Command::Pscheduler(a) => go(a, commands::pscheduler::run),
        Command::Lab(c) => {
            let mut out = Output::stdout(c.format());
            commands::lab::run(commands::lab::Opts::try_from(c)?, &mut out)
        }
        Command::Keygen(a) => commands::keygen(a.name, a.out, &mut Output::stdout(table)).map(|()| None),
        Command::Completions(a) => Output::stdout(table).print(&gridperf::cli::completions(a.shell)).map(|()| None),
        Command::Man(a) => {
            gridperf::cli::man_pages().and_then(|p| commands::man(p, a.dir, &mut Output::stdout(table))).map(|()| None)
        }
    }
}

/// `gridperf stream`: a sweep when it has axes (--sweep, --preset), else one test.
fn stream_or_sweep(o: commands::stream::Opts, out: &mut Output) -> Result<()> {
    if o.sweep.is_empty() {
        commands::stream::run(o, out)
    } else {
        commands::sweep::run(o, out)
    }
}

fn main() {
    let args = match gridperf::cli::serve::expand_config(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gridperf: usage error: {e}");
            std::process::exit(e.kind.exit_code());
        }
    };
    let cli = match gridperf::cli::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            // another tool's flag: gridperf's way, not clap's "use -- -c"
            if e.kind() == clap::error::ErrorKind::UnknownArgument {
                if let Some(clap::error::ContextValue::String(arg)) = e.get(clap::error::ContextKind::InvalidArg) {
                    let command = args.get(1).and_then(|a| a.to_str()).filter(|a| !a.starts_with('-'));
                    if let Some(habit) = gridperf::cli::peer_habit(command, arg) {
                        eprintln!("gridperf: usage error: {arg}: {habit}");
                        std::process::exit(Kind::Usage.exit_code());
                    }
                }
            }
            e.exit()
        }
    };
    // before any thread starts: a user namespace of one's own for a rootless lab
    gridperf::lab::prepare(cli.command.namespaces());
    let key =
        if cli.command.reaches_agents() { gridperf::runner::load_client_key(cli.key.as_deref()) } else { Ok(None) };
    let result = key.and_then(|k| {
        gridperf::runner::set_client_key(k, cli.key.is_some() && !cli.insecure);
        dispatch(cli.command)
    });
    match result {
        Ok(None) => {}
        Ok(Some(code)) => std::process::exit(code),
        Err(e) => {
            let kind = match e.kind {
                Kind::Usage => "usage error",
                Kind::Network => "network error",
                Kind::Measurement => "measurement failed",
                Kind::Refused => "refused",
                Kind::Internal => "error",
            };
            eprintln!("gridperf: {kind}: {}", gridperf_core::wire::printable_lines(&e.to_string()));
            std::process::exit(e.kind.exit_code());
        }
    }
}
