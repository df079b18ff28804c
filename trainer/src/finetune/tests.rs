use super::*;

fn config(warmup_ratio: f64) -> RunConfig {
    let args = FinetuneArgs::try_parse_from_args(&["--task", "sst2", "--train-file", "x.jsonl"]);
    RunConfig { warmup_ratio, ..args.to_config().unwrap() }
}

impl FinetuneArgs {
    fn try_parse_from_args(args: &[&str]) -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            inner: FinetuneArgs,
        }
        Wrapper::parse_from(std::iter::once("finetune").chain(args.iter().copied())).inner
    }
}

#[test]
fn defaults_are_the_paper_protocol() {
    let c = config(0.1);
    assert_eq!((c.lr, c.batch_size, c.max_len, c.epochs), (2e-5, 16, 128, 3));
    assert_eq!((c.adam_eps, c.weight_decay, c.optimizer), (1e-8, 0.0, OptimizerKind::Adamw));
    assert_eq!((c.adv_epsilon, c.adv_alpha, c.adv_steps, c.adv_lambda), (0.1, 0.1, 1, 0.5));
}

#[test]
fn schedule_warms_up_then_decays_like_hf() {
    let c = config(0.1);
    assert_eq!(learning_rate(&c, 0, 100), 0.0);
    assert!((learning_rate(&c, 5, 100) - 1e-5).abs() < 1e-15);
    assert!((learning_rate(&c, 10, 100) - 2e-5).abs() < 1e-15);
    assert!((learning_rate(&c, 55, 100) - 1e-5).abs() < 1e-15);
    assert_eq!(learning_rate(&c, 100, 100), 0.0);
    let flat = config(0.0);
    assert_eq!(learning_rate(&flat, 0, 10), 2e-5);
}

#[test]
fn connection_flags_build_a_spec() {
    let a = FinetuneArgs::try_parse_from_args(&[
        "--task",
        "rte",
        "--train-file",
        "x",
        "--connection",
        "im",
        "--T",
        "3",
        "--gamma",
        "0.2",
        "--im-layers",
        "1-2",
    ]);
    assert_eq!(a.to_config().unwrap().connection.to_spec_string(), "im:T=3,gamma=0.2,layers=1-2");
    let bad =
        FinetuneArgs::try_parse_from_args(&["--task", "rte", "--train-file", "x", "--T", "3"]);
    assert!(bad.to_config().is_err());
}

#[test]
fn time_left_follows_this_sessions_pace() {
    use super::logging::{format_duration, time_left};
    use std::time::Duration;
    assert_eq!(time_left(Duration::from_secs(10), 5, 20), Duration::from_secs(40));
    assert_eq!(time_left(Duration::from_secs(10), 0, 20), Duration::ZERO);
    assert_eq!(format_duration(Duration::from_secs(12)), "12s");
    assert_eq!(format_duration(Duration::from_secs(185)), "3m 05s");
    assert_eq!(format_duration(Duration::from_secs(3720)), "1h 02m");
}

#[test]
fn every_flag_that_defines_a_run_is_refused_with_resume() {
    use clap::Args;
    let command = FinetuneArgs::augment_args(clap::Command::new("finetune"));
    let per_invocation = ["resume", "save_final", "checkpoint_every", "progress_every"];
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        assert!(
            per_invocation.contains(&id) || super::args::RUN_SETTINGS.contains(&id),
            "--{id} is neither in RUN_SETTINGS nor a per-invocation flag: would --resume \
             silently ignore it?"
        );
    }
    for id in super::args::RUN_SETTINGS {
        assert!(command.get_arguments().any(|a| a.get_id() == *id), "{id} is not a flag");
    }
}
