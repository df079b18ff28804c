//! `trainer probe`: the paper's stability claim, measured. For pairs of inputs (an AdvGLUE item
//! and its clean original, `--text`/`--perturbed` pairs, or a `shared::robustness::perturb` edit
//! of a GLUE file), the mean drift between the clean and the perturbed hidden states at every
//! layer, for several connections side by side:
//! - [CLS] cosine distance, `1 - cos(h_clean[CLS], h_perturbed[CLS])`;
//! - mean-pooled relative L2, `||mean(h_perturbed) - mean(h_clean)|| / ||mean(h_clean)||` (means
//!   over real tokens: the two texts may differ in length).
//!
//! Beside each connection: how far its final [CLS] state in f32 is from the same computation in
//! f64 (a child process: burn keeps one float type per CPU device). A connection whose iterations
//! amplify perturbations amplifies rounding too.
//!
//! No classifier is needed: plain pretrained MiniLM shows what the connections do on their own.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use burn::tensor::backend::Backend;
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use shared::data::{self, Task};
use shared::io::checkpoint::load_classifier;
use shared::{BertClassifier, BertTokenizer, ConnectionSpec, ForwardOptions};

use crate::datasets;
use crate::report::{self, Chart, LineChart, LineSeriesData};

/// How `--data` examples are perturbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PerturbKind {
    /// Two character-level typos (swap, drop, insert, keyboard neighbour).
    Typo,
    /// Two words deleted.
    Delete,
    /// A distracting clause appended.
    Distractor,
}

#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// HF BERT directory; no classifier needed.
    #[arg(long, default_value = "models/all-minilm-l6-v2")]
    pub model: PathBuf,
    /// A connection spec to run `--model` with (repeat the flag). Default, when no `--run` is
    /// given either: bert, ex, IM as the paper writes it, IM with backtracking, IM at gamma 0.02,
    /// and the recommended IM where its forward pass differs from those.
    #[arg(long = "connection")]
    pub connections: Vec<String>,
    /// A fine-tuned run directory (repeat the flag): its `best/` model with the connection it was
    /// trained with, probed beside the `--connection`s. Compares trained models, each on its own
    /// weights.
    #[arg(long = "run")]
    pub runs: Vec<PathBuf>,
    /// A clean text (repeat; each pairs with the `--perturbed` at the same position).
    #[arg(long)]
    pub text: Vec<String>,
    /// The perturbed version of the `--text` at the same position.
    #[arg(long)]
    pub perturbed: Vec<String>,
    /// A GLUE file (TSV or JSONL) whose first texts are perturbed with `--perturbation`.
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "typo")]
    pub perturbation: PerturbKind,
    /// Task of `--data`, and of the AdvGLUE items used when neither `--text` nor `--data` is given.
    #[arg(long, default_value = "sst2")]
    pub task: String,
    /// Where `advglue/dev_ann.json` (or `dev.json`) is found.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Use at most this many pairs.
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    #[arg(long, default_value_t = shared::io::tokenizer::DEFAULT_MAX_LEN)]
    pub max_len: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Skip the f32-vs-f64 comparison (it runs every connection a second time in f64).
    #[arg(long)]
    pub no_f64: bool,
    /// Write probe.json, probe.md and the plots (drift_cls, drift_l2; SVG, PNG when a font is
    /// found) into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the result as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Internal: compute in f64 and write the final [CLS] states to this file.
    #[arg(long, hide = true)]
    pub f64_states: Option<PathBuf>,
}

/// The probe's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeReport {
    pub model: String,
    /// Where the pairs came from.
    pub source: String,
    pub pairs: usize,
    pub connections: Vec<ConnectionDrift>,
}

/// One connection's drift, layer by layer (index 0 is the embedding output).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectionDrift {
    pub connection: String,
    /// The run (`--run`) whose weights were probed; `None`: the `--model` weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    pub cls_cosine_distance: Vec<f64>,
    pub mean_relative_l2: Vec<f64>,
    /// `max over pairs of ||cls_f32 - cls_f64|| / ||cls_f64||` of the final clean state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f32_vs_f64: Option<f64>,
}

impl ConnectionDrift {
    /// The connection, and the run when the weights are a run's.
    pub fn label(&self) -> String {
        match &self.run {
            Some(run) => format!("{} ({run})", self.connection),
            None => self.connection.clone(),
        }
    }
}

/// The connections compared when none is given: BERT, EX, IM as the paper writes it, IM with a
/// converging solve (backtracking; a small gamma), and the recommended IM when its forward pass
/// differs from those (`grad` changes only the backward pass).
pub fn default_connections() -> Vec<String> {
    let mut specs: Vec<String> =
        ["bert", "ex", "im:T=5,gamma=0.1", "im:T=5,gamma=0.1,step=backtrack", "im:T=5,gamma=0.02"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let forward = |spec: &str| {
        let mut parsed = ConnectionSpec::parse(spec).ok()?;
        if let shared::Connection::Implicit(im) = &mut parsed.connection {
            im.gradient = shared::InnerGradient::Exact;
        }
        Some(parsed)
    };
    let recommended = forward(shared::RECOMMENDED_IM);
    if !specs.iter().any(|s| forward(s) == recommended) {
        specs.push(shared::RECOMMENDED_IM.to_string());
    }
    specs
}

/// One probed model: its weights and the connection it runs with.
struct Subject {
    model: PathBuf,
    spec: ConnectionSpec,
    /// The run's name, for `--run` subjects.
    run: Option<String>,
}

/// The `--connection`s on `--model` (or the default list when neither they nor `--run` are
/// given), then each `--run`'s best model with its own connection.
fn subjects(args: &ProbeArgs) -> Result<Vec<Subject>> {
    let specs = if args.connections.is_empty() && args.runs.is_empty() {
        default_connections()
    } else {
        args.connections.clone()
    };
    let mut subjects = specs
        .iter()
        .map(|s| {
            let spec = ConnectionSpec::parse(s).with_context(|| format!("--connection {s}"))?;
            Ok(Subject { model: args.model.clone(), spec, run: None })
        })
        .collect::<Result<Vec<_>>>()?;
    for dir in &args.runs {
        let config: crate::run::RunConfig = crate::run::read_json(&dir.join("config.json"))
            .with_context(|| format!("--run {}: not a run directory", dir.display()))?;
        let spec = config.connection.clone();
        let name = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        subjects.push(Subject { model: dir.join("best"), spec, run: Some(name) });
    }
    Ok(subjects)
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let subjects = subjects(&args)?;
    if args.batch_size == 0 {
        bail!("--batch-size must be positive");
    }
    let (source, pairs) = pairs(&args)?;
    if pairs.is_empty() {
        bail!("no pairs to probe ({source})");
    }
    if let Some(out) = &args.out {
        // Created now, not after the forwards: a path that cannot be a directory fails first.
        std::fs::create_dir_all(out).with_context(|| format!("--out {}", out.display()))?;
    }

    if let Some(path) = &args.f64_states {
        // The child: the same computation in f64, final [CLS] states only.
        type B64 = burn::backend::NdArray<f64>;
        let states: Vec<Vec<f64>> = subjects
            .iter()
            .map(|s| Ok(measure::<B64>(&args, s, &pairs)?.final_cls))
            .collect::<Result<_>>()?;
        return shared::io::atomic::write_atomic(path, serde_json::to_string(&states)?.as_bytes())
            .map_err(Into::into);
    }

    type B = crate::backend::Cpu;
    let mut connections = Vec::new();
    let mut finals = Vec::new();
    for subject in &subjects {
        let m = measure::<B>(&args, subject, &pairs)?;
        finals.push(m.final_cls);
        connections.push(ConnectionDrift {
            connection: subject.spec.to_spec_string(),
            run: subject.run.clone(),
            cls_cosine_distance: m.cls_cosine_distance,
            mean_relative_l2: m.mean_relative_l2,
            f32_vs_f64: None,
        });
    }
    if !args.no_f64 {
        let f64_finals = f64_final_states(&args)?;
        for ((c, f32s), f64s) in connections.iter_mut().zip(&finals).zip(&f64_finals) {
            let width = f32s.len() / pairs.len(); // hidden size
            c.f32_vs_f64 = Some(max_relative_difference(f32s, f64s, width));
        }
    }
    let report = ProbeReport {
        model: args.model.display().to_string(),
        source,
        pairs: pairs.len(),
        connections,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", markdown(&report));
    }
    if let Some(out) = &args.out {
        write(&report, out)?;
    }
    Ok(())
}

/// `(clean, perturbed)` text pairs and a description of where they came from.
fn pairs(args: &ProbeArgs) -> Result<(String, Vec<(String, String)>)> {
    let limit = |v: Vec<(String, String)>| match args.limit {
        Some(n) => v.into_iter().take(n).collect(),
        None => v,
    };
    if !args.text.is_empty() || !args.perturbed.is_empty() {
        if args.text.len() != args.perturbed.len() {
            bail!(
                "{} --text but {} --perturbed: give one --perturbed per --text",
                args.text.len(),
                args.perturbed.len()
            );
        }
        let v = args.text.iter().cloned().zip(args.perturbed.iter().cloned()).collect();
        return Ok(("--text/--perturbed pairs".into(), limit(v)));
    }
    let task: Task = args.task.parse()?;
    if let Some(path) = &args.data {
        let examples =
            data::load(path, task).with_context(|| format!("reading {}", path.display()))?;
        let v: Vec<(String, String)> = examples
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let seed = args.seed.wrapping_add(i as u64);
                let p = match args.perturbation {
                    PerturbKind::Typo => shared::robustness::perturb::typo(&e.text_a, 2, seed),
                    PerturbKind::Delete => {
                        shared::robustness::perturb::delete_word(&e.text_a, 2, seed)
                    }
                    PerturbKind::Distractor => {
                        shared::robustness::perturb::distractor(&e.text_a, seed)
                    }
                };
                (e.text_a.clone(), p.text)
            })
            .filter(|(a, b)| a != b)
            .collect();
        let what =
            format!("{} of {} ({:?})", task, path.display(), args.perturbation).to_lowercase();
        return Ok((what, limit(v)));
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(datasets::default_data_dir);
    let file = datasets::advglue_file(&data_dir)?;
    let items =
        data::load_advglue(&file, task).with_context(|| format!("reading {}", file.display()))?;
    let v: Vec<(String, String)> = items
        .into_iter()
        .filter_map(|a| a.original_a.map(|clean| (clean, a.example.text_a)))
        .filter(|(a, b)| a != b)
        .collect();
    Ok((format!("AdvGLUE {task} items with their clean originals ({})", file.display()), limit(v)))
}

/// One connection's measurements: per layer the mean drifts, and the final clean [CLS] states
/// (`pairs x hidden`, flat).
struct Measured {
    cls_cosine_distance: Vec<f64>,
    mean_relative_l2: Vec<f64>,
    final_cls: Vec<f64>,
}

/// Per example and layer, the [CLS] vector and the mean over real tokens: `[layer][example]`.
struct States {
    cls: Vec<Vec<Vec<f64>>>,
    mean: Vec<Vec<Vec<f64>>>,
}

fn states<B: Backend>(
    model: &BertClassifier<B>,
    tokenizer: &BertTokenizer,
    texts: &[&str],
    max_len: usize,
    device: &B::Device,
) -> Result<States> {
    let items: Vec<(&str, Option<&str>)> = texts.iter().map(|t| (*t, None)).collect();
    let batch = tokenizer.encode(&items, max_len)?;
    let input = batch.to_input::<B>(device);
    let mask: Vec<f64> = input
        .attention_mask
        .clone()
        .float()
        .into_data()
        .convert::<f64>()
        .into_vec()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let out = model.forward(
        &input,
        ForwardOptions { hidden_states: true, skip_head: true, ..Default::default() },
    );
    let mut cls = Vec::new();
    let mut mean = Vec::new();
    for h in out.hidden_states {
        let [n, seq, hidden] = h.dims();
        let v: Vec<f64> =
            h.into_data().convert::<f64>().into_vec().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let mut layer_cls = Vec::with_capacity(n);
        let mut layer_mean = Vec::with_capacity(n);
        for i in 0..n {
            let rows = &v[i * seq * hidden..(i + 1) * seq * hidden];
            layer_cls.push(rows[..hidden].to_vec());
            let mut m = vec![0.0; hidden];
            let mut count = 0.0f64;
            for (j, row) in rows.chunks(hidden).enumerate() {
                if mask[i * seq + j] > 0.0 {
                    count += 1.0;
                    m.iter_mut().zip(row).for_each(|(a, b)| *a += b);
                }
            }
            m.iter_mut().for_each(|a| *a /= count.max(1.0));
            layer_mean.push(m);
        }
        cls.push(layer_cls);
        mean.push(layer_mean);
    }
    Ok(States { cls, mean })
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn cosine_distance(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    // Rounding can put `cos` a hair above 1.
    (1.0 - dot / (norm(a) * norm(b)).max(1e-30)).max(0.0)
}

fn relative_l2(clean: &[f64], perturbed: &[f64]) -> f64 {
    let diff: Vec<f64> = clean.iter().zip(perturbed).map(|(a, b)| b - a).collect();
    norm(&diff) / norm(clean).max(1e-30)
}

fn measure<B: Backend>(
    args: &ProbeArgs,
    subject: &Subject,
    pairs: &[(String, String)],
) -> Result<Measured> {
    let device = Default::default();
    let dir = &subject.model;
    let tokenizer = &BertTokenizer::from_dir(dir)
        .with_context(|| format!("loading the tokenizer of {}", dir.display()))?;
    let (model, _) = load_classifier::<B>(dir, None, &device)
        .with_context(|| format!("loading {}", dir.display()))?;
    let model = model.with_connections(&subject.spec)?;
    tokenizer.check_compatible(&model.config)?;
    let max_len = model.max_len(args.max_len);
    let layers = model.config.num_hidden_layers + 1;
    let (mut cos, mut l2) = (vec![0.0; layers], vec![0.0; layers]);
    let mut final_cls = Vec::new();
    for chunk in pairs.chunks(args.batch_size) {
        let clean: Vec<&str> = chunk.iter().map(|p| p.0.as_str()).collect();
        let perturbed: Vec<&str> = chunk.iter().map(|p| p.1.as_str()).collect();
        let a = states(&model, tokenizer, &clean, max_len, &device)?;
        let b = states(&model, tokenizer, &perturbed, max_len, &device)?;
        for l in 0..layers {
            for i in 0..chunk.len() {
                cos[l] += cosine_distance(&a.cls[l][i], &b.cls[l][i]);
                l2[l] += relative_l2(&a.mean[l][i], &b.mean[l][i]);
            }
        }
        final_cls.extend(a.cls[layers - 1].iter().flatten());
    }
    let n = pairs.len() as f64;
    Ok(Measured {
        cls_cosine_distance: cos.into_iter().map(|x| x / n).collect(),
        mean_relative_l2: l2.into_iter().map(|x| x / n).collect(),
        final_cls,
    })
}

/// Runs this command again in f64 (`--f64-states`) and reads the final [CLS] states back.
fn f64_final_states(args: &ProbeArgs) -> Result<Vec<Vec<f64>>> {
    let mut exe = std::env::current_exe().context("finding the trainer executable")?;
    // Rebuilt while a long grid ran: the path now names "... (deleted)"; Linux still runs the
    // image this process started from through /proc.
    if !exe.exists() && Path::new("/proc/self/exe").exists() {
        exe = PathBuf::from("/proc/self/exe");
    }
    let tmp = std::env::temp_dir().join(format!("imbert-probe-f64-{}.json", std::process::id()));
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("probe").arg("--model").arg(&args.model).arg("--task").arg(&args.task);
    cmd.arg("--batch-size")
        .arg(args.batch_size.to_string())
        .arg("--max-len")
        .arg(args.max_len.to_string());
    cmd.arg("--seed").arg(args.seed.to_string()).arg("--f64-states").arg(&tmp);
    // The same subjects in the same order: `subjects` reads these flags as the parent did.
    for spec in &args.connections {
        cmd.arg("--connection").arg(spec);
    }
    for dir in &args.runs {
        cmd.arg("--run").arg(dir);
    }
    for (t, p) in args.text.iter().zip(&args.perturbed) {
        cmd.arg("--text").arg(t).arg("--perturbed").arg(p);
    }
    if let Some(d) = &args.data {
        cmd.arg("--data")
            .arg(d)
            .arg("--perturbation")
            .arg(format!("{:?}", args.perturbation).to_lowercase());
    }
    if let Some(d) = &args.data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    if let Some(n) = args.limit {
        cmd.arg("--limit").arg(n.to_string());
    }
    let status = cmd.status().context("running the f64 probe")?;
    if !status.success() {
        bail!("the f64 probe failed ({status})");
    }
    let text =
        std::fs::read_to_string(&tmp).with_context(|| format!("reading {}", tmp.display()))?;
    let _ = std::fs::remove_file(&tmp);
    Ok(serde_json::from_str(&text)?)
}

/// `max over examples of ||a_i - b_i|| / ||b_i||`, rows of `width`.
fn max_relative_difference(a: &[f64], b: &[f64], width: usize) -> f64 {
    a.chunks(width.max(1))
        .zip(b.chunks(width.max(1)))
        .map(|(x, y)| relative_l2(y, x))
        .fold(0.0, f64::max)
}

fn layer_name(l: usize) -> String {
    if l == 0 {
        "embeddings".into()
    } else {
        format!("layer {}", l - 1)
    }
}

/// The report as markdown: one table per measure, layers down, connections across.
pub fn markdown(r: &ProbeReport) -> String {
    let mut md =
        format!("# Stability probe\n\n{} pairs: {}. Model: {}.\n\n", r.pairs, r.source, r.model);
    let header: Vec<String> = r.connections.iter().map(|c| format!("`{}`", c.label())).collect();
    let table = |md: &mut String, title: &str, pick: &dyn Fn(&ConnectionDrift) -> &Vec<f64>| {
        md.push_str(&format!(
            "## {title}\n\n| layer | {} |\n|---|{}\n",
            header.join(" | "),
            "---|".repeat(header.len())
        ));
        let layers = r.connections.first().map_or(0, |c| pick(c).len());
        for l in 0..layers {
            let cells: Vec<String> =
                r.connections.iter().map(|c| format!("{:.4}", pick(c)[l])).collect();
            md.push_str(&format!("| {} | {} |\n", layer_name(l), cells.join(" | ")));
        }
        md.push('\n');
    };
    table(&mut md, "Mean [CLS] cosine distance, clean vs perturbed", &|c| &c.cls_cosine_distance);
    table(&mut md, "Mean-pooled relative L2, clean vs perturbed", &|c| &c.mean_relative_l2);
    if r.connections.iter().any(|c| c.f32_vs_f64.is_some()) {
        md.push_str(
            "## f32 against f64, final clean [CLS] state\n\n\
             max over pairs of `||h_f32 - h_f64|| / ||h_f64||`\n\n",
        );
        for c in &r.connections {
            md.push_str(&format!(
                "- `{}`: {}\n",
                c.label(),
                c.f32_vs_f64.map_or("-".into(), |x| format!("{x:.2e}"))
            ));
        }
        md.push('\n');
    }
    md
}

/// A line per connection over the layers, drift in % (`value * 100`).
fn chart(
    r: &ProbeReport,
    title: &str,
    y_label: &str,
    pick: fn(&ConnectionDrift) -> &Vec<f64>,
) -> Chart {
    let series = r
        .connections
        .iter()
        .enumerate()
        .map(|(i, c)| LineSeriesData {
            label: c.label(),
            color: i,
            clean: false,
            points: pick(c).iter().enumerate().map(|(l, &v)| (l as f64, 100.0 * v, None)).collect(),
        })
        .collect();
    let y_max =
        r.connections.iter().flat_map(|c| pick(c).iter()).fold(0.0f64, |m, &v| m.max(100.0 * v));
    Chart::Lines(LineChart {
        title: title.into(),
        x_label: "layer (0 = embeddings)".into(),
        y_label: y_label.into(),
        series,
        y_max: Some((y_max * 1.1).max(1e-3)),
    })
}

/// `probe.json`, `probe.md` and the two plots in `out`.
pub fn write(r: &ProbeReport, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    crate::run::write_json(&out.join("probe.json"), r)?;
    shared::io::atomic::write_atomic(&out.join("probe.md"), markdown(r).as_bytes())?;
    let font = report::find_font(None)?.map(|(_, f)| f);
    let cls =
        chart(r, "[CLS] drift: cosine distance (%)", "1 - cos (%)", |c| &c.cls_cosine_distance);
    let l2 =
        chart(r, "Mean-pooled drift: relative L2 (%)", "relative L2 (%)", |c| &c.mean_relative_l2);
    report::render_chart(&cls, out, "drift_cls", font.as_ref())?;
    report::render_chart(&l2, out, "drift_l2", font.as_ref())?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "wrote {}", out.display())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_connections_parse_and_differ_in_their_forward_pass() {
        let specs = default_connections();
        assert!(specs.len() >= 5);
        for s in &specs {
            ConnectionSpec::parse(s).unwrap();
        }
    }

    #[test]
    fn drift_measures() {
        assert!(cosine_distance(&[1.0, 0.0], &[1.0, 0.0]).abs() < 1e-15);
        assert!((cosine_distance(&[1.0, 0.0], &[0.0, 2.0]) - 1.0).abs() < 1e-15);
        assert!((relative_l2(&[3.0, 4.0], &[3.0, 4.5]) - 0.1).abs() < 1e-15);
        assert_eq!(max_relative_difference(&[1.0, 0.0, 2.0, 0.0], &[1.0, 0.0, 1.0, 0.0], 2), 1.0);
    }
}
