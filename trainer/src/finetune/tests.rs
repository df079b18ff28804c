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

/// The loss a step minimises follows `--adv`: plain cross-entropy without it; with PGD
/// (`lambda` 0, one ascent step) the loss at the perturbed embeddings, which the ascent makes
/// larger than the clean loss; with `lambda` 1 the clean loss again.
#[test]
fn training_loss_follows_the_adversarial_setting() {
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::tensor::{Int, Tensor};
    use shared::{BertClassifier, BertConfig, BertInput, ForwardOptions};
    type B = Autodiff<NdArray<f64>>;

    let device = Default::default();
    // No dropout, so that every forward of the same input agrees.
    let bert = BertConfig {
        hidden_dropout_prob: 0.0,
        attention_probs_dropout_prob: 0.0,
        ..BertConfig::tiny()
    };
    let model = BertClassifier::<B>::new(&bert, 2, &device);
    let ids = Tensor::<B, 2, Int>::from_data([[2, 7, 9, 3], [2, 5, 6, 3]], &device);
    let input = BertInput {
        input_ids: ids.clone(),
        token_type_ids: ids.zeros_like(),
        attention_mask: ids.ones_like(),
    };
    let labels = Tensor::<B, 1, Int>::from_data([0, 1], &device);
    let logits = model.forward(&input, ForwardOptions::default()).logits.unwrap();
    let clean: f64 =
        CrossEntropyLossConfig::new().init(&device).forward(logits, labels.clone()).into_scalar();
    let loss = |adv: AdvKind, lambda: f64| -> f64 {
        let config = RunConfig { adv, adv_lambda: lambda, adv_tau: 0.0, ..config(0.1) };
        training_loss(&model, &input, labels.clone(), &config).unwrap().into_scalar()
    };
    assert_eq!(loss(AdvKind::None, 0.5), clean);
    let perturbed = loss(AdvKind::Pgd, 0.0);
    assert!(perturbed > clean + 1e-6, "PGD loss {perturbed} is not above the clean {clean}");
    assert!((loss(AdvKind::Pgd, 1.0) - clean).abs() < 1e-12);
}
