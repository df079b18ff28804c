//! `trainer eval`: GLUE dev accuracy and AdvGLUE dev accuracy (per task, per attack level, per
//! method, and on each item's clean original), with the honesty rule built in: a model near
//! chance on clean data is flagged "did not learn", never reported as robust.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use burn::tensor::backend::Backend;
use clap::Args;
use shared::data::{self, AdvExample, Example, Task};
use shared::io::bundle::load_model_dir;
use shared::{BertClassifier, BertTokenizer, ConnectionSpec};

use crate::backend::BackendKind;
use crate::datasets;
use crate::predict::{predict_by_length, Predictions};
use crate::run::{self, AdvResult, CleanResult, EvalReport, LevelResult, RunConfig, Score};

#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// A run directory: evaluates its best model and writes RUN_DIR/eval.json (+ eval.md).
    #[arg(long, conflicts_with_all = ["model", "task", "connection"])]
    pub run: Option<PathBuf>,
    /// An HF model directory with a classifier, or a web bundle (`trainer export --web`), instead
    /// of --run.
    #[arg(long, required_unless_present = "run")]
    pub model: Option<PathBuf>,
    /// Task of --model (sst2, qqp, qnli, mnli, rte).
    #[arg(long)]
    pub task: Option<String>,
    /// Connection spec for --model (default: the one in its imbert.json, else bert).
    #[arg(long)]
    pub connection: Option<String>,
    /// Data directory (GLUE + AdvGLUE layout of ../shared/data).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Evaluate at most this many examples per split (quick checks).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Clean accuracy on a fixed sample of this many GLUE dev examples per split, the same items
    /// for every model (the pair tasks' dev sets run to 40k); AdvGLUE is always evaluated whole.
    #[arg(long)]
    pub clean_sample: Option<usize>,
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    #[arg(long, default_value_t = shared::io::tokenizer::DEFAULT_MAX_LEN)]
    pub max_len: usize,
    /// Write the JSON report here (default: RUN_DIR/eval.json with --run, else stdout only).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "ndarray")]
    pub backend: BackendKind,
}

/// Accuracy (and F1 of class 1 when asked) of predictions against labels.
pub fn score(predicted: &[usize], labels: &[usize], with_f1: bool) -> Score {
    let n = labels.len();
    let correct = predicted.iter().zip(labels).filter(|(p, l)| p == l).count();
    let f1 = with_f1.then(|| {
        let tp = predicted.iter().zip(labels).filter(|(p, l)| **p == 1 && **l == 1).count() as f64;
        let fp = predicted.iter().zip(labels).filter(|(p, l)| **p == 1 && **l != 1).count() as f64;
        let fn_ = predicted.iter().zip(labels).filter(|(p, l)| **p != 1 && **l == 1).count() as f64;
        if tp == 0.0 {
            0.0
        } else {
            2.0 * tp / (2.0 * tp + fp + fn_)
        }
    });
    Score { n, accuracy: if n == 0 { 0.0 } else { correct as f64 / n as f64 }, f1 }
}

/// Share of the most frequent value.
pub fn top_share(values: &[usize]) -> f64 {
    let mut counts = BTreeMap::new();
    for v in values {
        *counts.entry(*v).or_insert(0usize) += 1;
    }
    counts.values().max().map_or(0.0, |&m| m as f64 / values.len().max(1) as f64)
}

/// The "did not learn" rule: clean accuracy within 5 points of always guessing the majority
/// label, or more than 90% of the predictions on one label.
pub fn did_not_learn(clean: &[CleanResult]) -> Option<String> {
    clean.iter().find_map(|c| {
        near_chance(c.score.accuracy, c.majority_share, c.top_prediction_share)
            .map(|why| format!("{}: {why}", c.split))
    })
}

/// The rule of [`did_not_learn`] for one set of predictions.
pub fn near_chance(
    accuracy: f64,
    majority_share: f64,
    top_prediction_share: f64,
) -> Option<String> {
    if accuracy < majority_share + 0.05 {
        Some(format!(
            "clean accuracy {:.1}% is within 5 points of the majority-label rate {:.1}%",
            100.0 * accuracy,
            100.0 * majority_share
        ))
    } else if top_prediction_share > 0.9 {
        Some(format!("{:.0}% of predictions are one label", 100.0 * top_prediction_share))
    } else {
        None
    }
}

/// Everything `eval` needs to know about the model under test.
pub struct EvalTarget {
    pub model_dir: PathBuf,
    pub task: Task,
    pub connection: ConnectionSpec,
}

pub fn run(args: EvalArgs) -> Result<()> {
    if args.limit == Some(0) || args.batch_size == 0 || args.max_len == 0 {
        bail!("--limit, --batch-size and --max-len must be at least 1");
    }
    let (target, out) = resolve(&args)?;
    if let Some(out) = &out {
        crate::run::check_output_path("--out", out)?;
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(datasets::default_data_dir);
    let report = crate::with_backend!(args.backend, |B, device| evaluate::<B>(
        &target, &data_dir, &args, &device
    ))?;
    let markdown = markdown(&report);
    println!("{markdown}");
    if let Some(out) = out {
        run::write_json(&out, &report)?;
        shared::io::atomic::write_atomic(&out.with_extension("md"), markdown.as_bytes())?;
        eprintln!("wrote {} and {}", out.display(), out.with_extension("md").display());
    }
    Ok(())
}

fn resolve(args: &EvalArgs) -> Result<(EvalTarget, Option<PathBuf>)> {
    if let Some(run_dir) = &args.run {
        let config: RunConfig = run::read_json(&run_dir.join("config.json"))?;
        if !run_dir.join("best").is_dir() {
            bail!(
                "{} has no best/: the run has not finished an epoch yet (resume it with \
                 `trainer finetune --resume {0}`)",
                run_dir.display()
            );
        }
        let target = EvalTarget {
            model_dir: run_dir.join("best"),
            task: config.task,
            connection: config.connection.clone(),
        };
        return Ok((target, Some(args.out.clone().unwrap_or_else(|| run_dir.join("eval.json")))));
    }
    let model_dir = args.model.clone().context("--model or --run is required")?;
    shared::io::checkpoint::check_model_dir(&model_dir)?;
    let card = read_model_card(&model_dir)?;
    let task = match (&args.task, card.as_ref().and_then(|c| c["task"].as_str())) {
        (Some(t), _) => t.parse()?,
        (None, Some(t)) => t.parse()?,
        (None, None) => {
            anyhow::bail!("--task is required (no imbert.json in {})", model_dir.display())
        }
    };
    let connection = match (&args.connection, card.as_ref().and_then(|c| c["connection"].as_str()))
    {
        (Some(c), _) => ConnectionSpec::parse(c)?,
        (None, Some(c)) => ConnectionSpec::parse(c)?,
        (None, None) => ConnectionSpec::default(),
    };
    Ok((EvalTarget { model_dir, task, connection }, args.out.clone()))
}

/// The model card `imbert.json` that `finetune` writes next to a saved model: `None` when there
/// is none, an error naming the file when it cannot be read (a damaged card must not make an
/// IM model silently evaluate as BERT).
pub fn read_model_card(dir: &Path) -> Result<Option<serde_json::Value>> {
    let path = dir.join("imbert.json");
    if !path.exists() {
        return Ok(None);
    }
    run::read_json(&path).map(Some)
}

pub fn evaluate<B: Backend>(
    target: &EvalTarget,
    data_dir: &Path,
    args: &EvalArgs,
    device: &B::Device,
) -> Result<EvalReport> {
    let (tokenizer, model) = load_for_eval::<B>(target, device)?;
    let max_len = model.max_len(args.max_len);
    let (mut seconds, mut examples, mut tokens) = (0.0, 0usize, 0.0);
    let mut run_predict = |list: &[&Example]| -> Result<Predictions> {
        let p = predict_by_length(&model, &tokenizer, list, args.batch_size, max_len, device)?;
        seconds += p.seconds;
        examples += list.len();
        tokens += p.mean_tokens * list.len() as f64;
        Ok(p)
    };

    let mut clean =
        clean_results(target.task, data_dir, args.limit, args.clean_sample, &mut run_predict)?;
    let adv_file = datasets::advglue_file(data_dir)?;
    let mut advglue = Vec::new();
    for task in datasets::advglue_tasks(target.task) {
        let items: Vec<AdvExample> = data::load_advglue(&adv_file, task)?;
        if items.is_empty() {
            bail!("{}: no AdvGLUE items of {task}", adv_file.display());
        }
        let items: Vec<AdvExample> = match args.limit {
            Some(n) => items.into_iter().take(n).collect(),
            None => items,
        };
        advglue.push(evaluate_advglue(task, &items, &mut run_predict)?);
    }

    // Without a GLUE dev split (QQP), the clean originals of AdvGLUE are the clean reference.
    if clean.is_empty() {
        for a in &advglue {
            clean.push(CleanResult {
                split: format!("{}-advglue-originals", a.split),
                score: a.clean_original.clone(),
                majority_share: 0.0,
                top_prediction_share: 0.0,
                sampled_from: None,
                held_out: None,
            });
        }
    }
    let reason = did_not_learn(&clean);
    let mean_tokens = if examples > 0 { tokens / examples as f64 } else { 0.0 };
    let connections = model.bert.encoder.connections.clone();
    Ok(EvalReport {
        task: target.task.name().to_string(),
        model: target.model_dir.display().to_string(),
        connection: target.connection.to_spec_string(),
        clean,
        advglue,
        did_not_learn: reason.is_some(),
        did_not_learn_reason: reason,
        flops_per_example: shared::model::flops::forward_flops(
            &model.config,
            &connections,
            mean_tokens.round().max(1.0) as usize,
            true,
        ),
        examples_per_sec: if seconds > 0.0 { examples as f64 / seconds } else { 0.0 },
    })
}

/// The tokenizer and the classifier with the target's connections; a head the checkpoint lacks
/// is announced, since its predictions mean nothing.
fn load_for_eval<B: Backend>(
    target: &EvalTarget,
    device: &B::Device,
) -> Result<(BertTokenizer, BertClassifier<B>)> {
    let tokenizer = BertTokenizer::from_dir(&target.model_dir).context("loading the tokenizer")?;
    let (model, report) =
        load_model_dir::<B>(&target.model_dir, Some(target.task.num_labels()), device)
            .with_context(|| format!("loading {}", target.model_dir.display()))?;
    if !report.initialized_fresh.is_empty() {
        tracing::warn!(
            "not a fine-tuned model: {:?} initialised fresh (random)",
            report.initialized_fresh
        );
    }
    let model = model.with_connections(&target.connection)?;
    tokenizer.check_compatible(&model.config)?;
    Ok((tokenizer, model))
}

/// Accuracy (and F1 for QQP) on each GLUE dev split the data directory has for `task`.
fn clean_results(
    task: Task,
    data_dir: &Path,
    limit: Option<usize>,
    sample: Option<usize>,
    run_predict: &mut dyn FnMut(&[&Example]) -> Result<Predictions>,
) -> Result<Vec<CleanResult>> {
    let mut clean = Vec::new();
    for datasets::DevFile { split, path: file, held_out } in datasets::dev_files(data_dir, task) {
        let dev = data::load(&file, task)?;
        if dev.is_empty() {
            bail!("{}: no examples", file.display());
        }
        let full = dev.len();
        let dev = match sample {
            Some(n) if n < full => fixed_sample(dev, n),
            _ => dev,
        };
        let sampled_from = (dev.len() < full).then_some(full);
        let dev: Vec<Example> = dev.into_iter().take(limit.unwrap_or(usize::MAX)).collect();
        let refs: Vec<&Example> = dev.iter().collect();
        let p = run_predict(&refs)?;
        let labels: Vec<usize> = dev.iter().map(|e| e.label).collect();
        clean.push(CleanResult {
            split,
            score: score(&p.predicted, &labels, task == Task::Qqp),
            majority_share: top_share(&labels),
            top_prediction_share: top_share(&p.predicted),
            sampled_from,
            held_out,
        });
    }
    if clean.is_empty() {
        tracing::warn!(
            "no GLUE dev file for {task} in {}: clean accuracy comes from AdvGLUE originals only",
            data_dir.display()
        );
    }
    Ok(clean)
}

/// `n` examples chosen by a fixed hash of their position, in file order: the same items for
/// every model, every run and every version of the `rand` crate.
fn fixed_sample(examples: Vec<Example>, n: usize) -> Vec<Example> {
    let key = |i: usize| {
        let mut hasher = fnv::FnvHasher::default();
        std::hash::Hasher::write_u64(&mut hasher, i as u64);
        std::hash::Hasher::finish(&hasher)
    };
    let mut order: Vec<usize> = (0..examples.len()).collect();
    order.sort_by_key(|&i| key(i));
    let mut keep = vec![false; examples.len()];
    for &i in order.iter().take(n) {
        keep[i] = true;
    }
    examples.into_iter().zip(keep).filter_map(|(e, k)| k.then_some(e)).collect()
}

fn evaluate_advglue(
    task: Task,
    items: &[AdvExample],
    run_predict: &mut dyn FnMut(&[&Example]) -> Result<Predictions>,
) -> Result<AdvResult> {
    let adversarial: Vec<&Example> = items.iter().map(|a| &a.example).collect();
    let p_adv = run_predict(&adversarial)?;
    let labels: Vec<usize> = items.iter().map(|a| a.example.label).collect();

    // Clean originals: items whose text was perturbed carry `original_*`; the others (human-made)
    // have none and are left out of the paired comparison.
    let originals: Vec<(usize, Example)> = items
        .iter()
        .enumerate()
        .filter(|(_, a)| a.original_a.is_some() || a.original_b.is_some())
        .map(|(i, a)| {
            let e = &a.example;
            let text_a = a.original_a.clone().unwrap_or_else(|| e.text_a.clone());
            let text_b = a.original_b.clone().or_else(|| e.text_b.clone());
            (i, Example { idx: e.idx, text_a, text_b, label: e.label })
        })
        .collect();
    let refs: Vec<&Example> = originals.iter().map(|(_, e)| e).collect();
    let p_orig = run_predict(&refs)?;
    let paired_labels: Vec<usize> = originals.iter().map(|(i, _)| labels[*i]).collect();
    let paired_adv: Vec<usize> = originals.iter().map(|(i, _)| p_adv.predicted[*i]).collect();
    let with_f1 = task == Task::Qqp;

    let mut by_level = BTreeMap::new();
    for level in data::AttackLevel::ALL {
        let idx: Vec<usize> = (0..items.len()).filter(|&i| items[i].level == Some(level)).collect();
        if idx.is_empty() {
            continue;
        }
        let pick = |v: &[usize], ids: &[usize]| ids.iter().map(|&i| v[i]).collect::<Vec<_>>();
        let orig_ids: Vec<usize> = originals
            .iter()
            .enumerate()
            .filter(|(_, (i, _))| items[*i].level == Some(level))
            .map(|(k, _)| k)
            .collect();
        by_level.insert(
            level.name().to_string(),
            LevelResult {
                adversarial: score(&pick(&p_adv.predicted, &idx), &pick(&labels, &idx), with_f1),
                clean_original: (!orig_ids.is_empty()).then(|| {
                    score(
                        &pick(&p_orig.predicted, &orig_ids),
                        &pick(&paired_labels, &orig_ids),
                        with_f1,
                    )
                }),
            },
        );
    }
    let mut by_method: BTreeMap<String, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for (i, a) in items.iter().enumerate() {
        let entry =
            by_method.entry(a.method.clone().unwrap_or_else(|| "unknown".into())).or_default();
        entry.0.push(p_adv.predicted[i]);
        entry.1.push(labels[i]);
    }
    Ok(AdvResult {
        split: task.name().to_string(),
        adversarial: score(&p_adv.predicted, &labels, with_f1),
        clean_original: score(&p_orig.predicted, &paired_labels, with_f1),
        adversarial_paired: score(&paired_adv, &paired_labels, with_f1),
        top_prediction_share: top_share(&p_adv.predicted),
        by_level,
        by_method: by_method.into_iter().map(|(m, (p, l))| (m, score(&p, &l, with_f1))).collect(),
    })
}

fn pct(s: &Score) -> String {
    format!("{:.1}", 100.0 * s.accuracy)
}

/// The report as markdown. Every robustness number stands beside the clean accuracy.
pub fn markdown(r: &EvalReport) -> String {
    let mut md = format!("## {} — {} ({})\n\n", r.task, r.connection, r.model);
    if let Some(reason) = &r.did_not_learn_reason {
        md += &format!(
            "> ⚠ **did not learn** — {reason}. AdvGLUE items were built to fool trained \
             models, so a model near chance scores near chance there too; its AdvGLUE numbers \
             are not robustness.\n\n"
        );
    }
    md += "| clean split | n | accuracy % | F1 | majority-label % | top-prediction % |\n\
           |---|---|---|---|---|---|\n";
    for c in &r.clean {
        md += &format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} |\n",
            c.split,
            c.score.n,
            pct(&c.score),
            c.score.f1.map_or("–".into(), |f| format!("{:.1}", 100.0 * f)),
            100.0 * c.majority_share,
            100.0 * c.top_prediction_share
        );
    }
    for c in r.clean.iter().filter(|c| c.held_out.is_some()) {
        md += &format!("\n{}: not GLUE dev, {}.\n", c.split, c.held_out.as_deref().unwrap_or(""));
    }
    md += "\n| AdvGLUE | n | adversarial % | clean originals % (n) | adversarial on those % \
           | drop | word % | sentence % | human % | top-prediction % |\n\
           |---|---|---|---|---|---|---|---|---|---|\n";
    for a in &r.advglue {
        let level = |name: &str| {
            a.by_level.get(name).map_or("–".into(), |l| {
                format!("{} (n={})", pct(&l.adversarial), l.adversarial.n)
            })
        };
        md += &format!(
            "| {} | {} | {} | {} ({}) | {} | {:+.1} | {} | {} | {} | {:.1} |\n",
            a.split,
            a.adversarial.n,
            pct(&a.adversarial),
            pct(&a.clean_original),
            a.clean_original.n,
            pct(&a.adversarial_paired),
            100.0 * (a.adversarial_paired.accuracy - a.clean_original.accuracy),
            level("word"),
            level("sentence"),
            level("human"),
            100.0 * a.top_prediction_share
        );
    }
    md += "\n| AdvGLUE method | n | adversarial % |\n|---|---|---|\n";
    for a in &r.advglue {
        for (m, s) in &a.by_method {
            md += &format!("| {} / {m} | {} | {} |\n", a.split, s.n, pct(s));
        }
    }
    md += &format!(
        "\nForward FLOPs per example: {:.3e}; throughput {:.1} examples/s.\n",
        r.flops_per_example, r.examples_per_sec
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_and_shares() {
        let s = score(&[1, 1, 0, 1], &[1, 0, 0, 1], true);
        assert_eq!(s.accuracy, 0.75);
        assert!((s.f1.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(top_share(&[2, 2, 2, 1]), 0.75);
    }

    #[test]
    fn the_clean_sample_is_fixed_and_keeps_file_order() {
        let examples: Vec<Example> = (0..50)
            .map(|i| Example { idx: i as i64, text_a: i.to_string(), text_b: None, label: i % 2 })
            .collect();
        let a = fixed_sample(examples.clone(), 20);
        let b = fixed_sample(examples.clone(), 20);
        let ids = |v: &[Example]| v.iter().map(|e| e.text_a.parse().unwrap()).collect::<Vec<u32>>();
        assert_eq!(ids(&a), ids(&b), "the same items every time");
        assert_eq!(a.len(), 20);
        assert!(ids(&a).windows(2).all(|w| w[0] < w[1]), "in file order");
        assert_ne!(ids(&a), (0..20).collect::<Vec<u32>>(), "not just the first 20");
        let larger = ids(&fixed_sample(examples.clone(), 30));
        assert!(ids(&a).iter().all(|i| larger.contains(i)), "a larger sample contains a smaller");
        assert_eq!(fixed_sample(examples, 80).len(), 50);
    }

    #[test]
    fn near_chance_is_flagged() {
        let c = |acc, top| CleanResult {
            split: "sst2".into(),
            score: Score { n: 100, accuracy: acc, f1: None },
            majority_share: 0.51,
            top_prediction_share: top,
            sampled_from: None,
            held_out: None,
        };
        assert!(did_not_learn(&[c(0.53, 0.6)]).unwrap().contains("majority"));
        assert!(did_not_learn(&[c(0.7, 0.95)]).unwrap().contains("one label"));
        assert!(did_not_learn(&[c(0.78, 0.55)]).is_none());
    }
}
