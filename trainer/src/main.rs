//! `trainer`: the command line of imbert-rs. Parses flags into settings and hands them to the
//! library; errors are reported once, here.

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use trainer::*;

// Keeps freed tensor buffers instead of returning them to the OS (see the workspace Cargo.toml
// and `shared::cpu::allocator`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "trainer",
    version,
    about = "IM-BERT: fine-tune, evaluate, attack and inspect BERT with implicit Euler connections"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model on some text and print tokens, logits, hidden-state norms and IM residuals.
    Inspect(inspect::InspectArgs),
    /// TextFooler (greedy embedding-neighbour word swaps) against a model; TextAttack's metrics.
    Attack(attack::AttackArgs),
    /// The fewest word and sentence edits that flip a model's verdict, then whether other
    /// connections or models flip on the same edit.
    Flip(Box<flip::FlipArgs>),
    /// Tables (mean ± std over seeds) and plots over run directories, in the paper's format.
    Report(report::ReportArgs),
    /// Fine-tune on a GLUE task (paper protocol; BERT / EX / IM connections; CreAT or PGD).
    Finetune(Box<finetune::FinetuneArgs>),
    /// GLUE dev and AdvGLUE dev accuracy, per task, attack level and method, beside clean accuracy.
    Eval(evaluate::EvalArgs),
    /// Fine-tune at several learning rates and choose one on the validation split (lowest loss).
    LrSearch(Box<lr_search::LrSearchArgs>),
    /// Run a whole experiment grid (tasks x connections x seeds), resumably, then report it.
    Reproduce(reproduce::ReproduceArgs),
    /// Pack a fine-tuned model for the browser demo (`--web`: int8 bundle + SITE/index.json).
    Export(export::ExportArgs),
    /// Drift between clean and perturbed hidden states, per layer, for BERT, EX and IM side by
    /// side.
    Probe(Box<probe::ProbeArgs>),
    /// Training and prediction examples/s of a grid's arms beside BERT's, measured in one run
    /// on an idle machine (the grid's report shows it).
    Speed(speed::SpeedArgs),
    /// Download GLUE (HF hub) and AdvGLUE dev into a data directory (needs internet).
    FetchData(fetch::FetchArgs),
}

fn main() {
    shared::cpu::allocator::keep_freed_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes only where a terminal reads them, not in a log file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    #[cfg(feature = "openblas")]
    if let Some(advice) = shared::cpu::blas::advice() {
        tracing::warn!("{advice}");
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Attack(args) => attack::run(args),
        Command::Flip(args) => flip::run(*args),
        Command::Report(args) => report::run(args),
        Command::Finetune(args) => finetune::run(*args),
        Command::Eval(args) => evaluate::run(args),
        Command::Export(args) => export::run(args),
        Command::FetchData(args) => fetch::run(args),
        Command::Reproduce(args) => reproduce::run(args),
        Command::LrSearch(args) => lr_search::run(*args),
        Command::Probe(args) => probe::run(*args),
        Command::Speed(args) => speed::run(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
