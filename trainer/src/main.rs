//! `trainer`: the command line of imbert-rs. Parses flags into settings and hands them to the
//! library (`shared`); errors are reported once, here.

mod backend;
mod inspect;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "trainer", version, about = "IM-BERT: fine-tune, evaluate and inspect BERT with implicit Euler connections")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model on some text and print tokens, logits, hidden-state norms and IM residuals.
    Inspect(inspect::InspectArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
