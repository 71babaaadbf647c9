//! `rigdeck`: the desktop app, the headless daemon and the command-line tools in one command.

use std::process::ExitCode;

use clap::Parser;
use rigdeck_server::cli::{self, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_logging();
    let outcome = match cli
        .command
        .unwrap_or(Command::Desktop(cli::desktop::DesktopArgs::default()))
    {
        Command::Serve(args) => cli::serve::run(args),
        Command::Gpus(args) => cli::gpus::run(args),
        Command::Engines(args) => cli::engines::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Models(args) => cli::models::run(args),
        Command::Search(args) => cli::hub::search(args),
        Command::Pull(args) => cli::hub::pull(args),
        Command::Hub(args) => cli::hub::hub(args),
        Command::Verify(args) => cli::hub::verify(args),
        Command::Desktop(args) => cli::desktop::run(args),
        Command::Profiles(args) => cli::profiles::run(args),
        Command::Run(args) => cli::run::run(args),
        Command::Ps(args) => cli::run::ps(args),
        Command::Stop(args) => cli::run::stop(args),
        Command::Logs(args) => cli::run::logs(args),
        Command::Keys(args) => cli::keys::run(args),
        Command::Chat(args) => cli::chat::run(args),
        Command::Bench(args) => cli::bench::run(*args),
        Command::Quality(args) => cli::quality::run(args),
        Command::Service(args) => cli::service::run(args),
        Command::Fleet(args) => cli::fleet::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("rigdeck: {err:#}");
            ExitCode::FAILURE
        }
    }
}
