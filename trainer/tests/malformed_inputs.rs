//! Malformed inputs, table-driven: model directories, configs, weights, checkpoints, data files
//! and flags, each given to the subcommand that reads it. For every case the trainer must exit
//! with an error (no panic, no abort) whose message names the offending file or flag.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// One malformed input: the command line, and a string the error must contain.
struct Case {
    name: String,
    args: Vec<String>,
    needle: String,
}

/// Builds the cases and the files they read under one scratch directory.
struct Suite {
    root: PathBuf,
    cases: Vec<Case>,
}

impl Suite {
    fn new() -> Self {
        let root = scratch("malformed");
        std::fs::create_dir_all(&root).unwrap();
        Suite { root, cases: Vec::new() }
    }

    fn case(&mut self, name: &str, args: &[&str], needle: &str) {
        let args = args.iter().map(|s| s.to_string()).collect();
        self.cases.push(Case { name: name.into(), args, needle: needle.into() });
    }

    fn path(&self, name: &str) -> String {
        self.root.join(name).display().to_string()
    }

    /// A file under the scratch directory with these bytes; returns its path.
    fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    }

    /// A copy of the tiny BERT, changed by `edit`; returns its directory.
    fn model(&self, name: &str, edit: impl FnOnce(&Path)) -> String {
        let dir = self.root.join("models").join(name);
        copy_dir(&repo().join("tests/fixtures/tiny-bert"), &dir);
        edit(&dir);
        dir.display().to_string()
    }

    /// A copy of the tiny BERT whose config.json has `key` set to the JSON `value`.
    fn model_config(&self, name: &str, key: &str, value: &str) -> String {
        self.model(name, |dir| {
            let path = dir.join("config.json");
            let mut config: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            config[key] = serde_json::from_str(value).unwrap();
            std::fs::write(&path, config.to_string()).unwrap();
        })
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn inspect(model: &str) -> Vec<String> {
    ["inspect", "--model", model, "--text", "a fine film"].iter().map(|s| s.to_string()).collect()
}

/// Model directories, configs and weights, read by `inspect`.
fn model_cases(s: &mut Suite) {
    let missing = s.path("models/none");
    s.case("model dir missing", &as_refs(&inspect(&missing)), "model directory not found");
    let empty = s.model("empty", |d| {
        std::fs::remove_dir_all(d).unwrap();
        std::fs::create_dir_all(d).unwrap();
    });
    s.case("model dir empty", &as_refs(&inspect(&empty)), &empty);
    let file = s.file("models/a-file", b"not a directory");
    s.case("model is a file", &as_refs(&inspect(&file)), "is a file");
    let no_config = s.model("no-config", |d| std::fs::remove_file(d.join("config.json")).unwrap());
    s.case("config.json missing", &as_refs(&inspect(&no_config)), "config.json");
    for (name, text) in [
        ("config-not-json", "this is not json"),
        ("config-truncated", "{\"hidden_size\": 16, \"num_attention"),
        ("config-empty", ""),
        ("config-array", "[1, 2, 3]"),
    ] {
        let dir = s.model(name, |d| std::fs::write(d.join("config.json"), text).unwrap());
        s.case(name, &as_refs(&inspect(&dir)), "config.json");
    }
    for (key, value, needle) in [
        ("hidden_size", "\"sixteen\"", "config.json"),
        ("hidden_size", "-16", "config.json"),
        ("intermediate_size", "0", "intermediate_size"),
        ("vocab_size", "1000000000000", "vocab_size"),
        ("vocab_size", "0", "vocab_size"),
        ("num_hidden_layers", "0", "num_hidden_layers"),
        ("num_hidden_layers", "3", "num_hidden_layers"),
        ("num_hidden_layers", "100000", "num_hidden_layers"),
        ("num_attention_heads", "3", "num_attention_heads"),
        ("num_attention_heads", "0", "num_attention_heads"),
        ("hidden_act", "\"relu\"", "hidden_act"),
        ("hidden_dropout_prob", "1.5", "hidden_dropout_prob"),
        ("attention_probs_dropout_prob", "-0.1", "attention_probs_dropout_prob"),
        ("layer_norm_eps", "-1", "layer_norm_eps"),
        ("max_position_embeddings", "8", "max_position_embeddings"),
        ("max_position_embeddings", "0", "max_position_embeddings"),
        ("type_vocab_size", "0", "type_vocab_size"),
        ("type_vocab_size", "7", "type_vocab_size"),
        ("pad_token_id", "5000", "pad_token_id"),
        ("initializer_range", "-0.02", "initializer_range"),
        ("classifier_dropout", "2", "classifier_dropout"),
        ("hidden_size", "24", "hidden_size"),
    ] {
        let name = format!("config-{key}-{}", value.replace('"', ""));
        let dir = s.model_config(&name, key, value);
        s.case(&name, &as_refs(&inspect(&dir)), needle);
    }
    let weights = |s: &Suite, name: &str, edit: &dyn Fn(&Path)| -> String {
        s.model(name, |d| edit(&d.join("model.safetensors")))
    };
    let no_weights = weights(s, "no-weights", &|p| std::fs::remove_file(p).unwrap());
    s.case("weights missing", &as_refs(&inspect(&no_weights)), &no_weights);
    let zero = weights(s, "weights-empty", &|p| std::fs::write(p, b"").unwrap());
    s.case("weights zero bytes", &as_refs(&inspect(&zero)), "model.safetensors");
    let truncated = weights(s, "weights-truncated", &|p| {
        let bytes = std::fs::read(p).unwrap();
        std::fs::write(p, &bytes[..bytes.len() / 2]).unwrap();
    });
    s.case("weights truncated", &as_refs(&inspect(&truncated)), "model.safetensors");
    let garbage = weights(s, "weights-garbage", &|p| std::fs::write(p, [0xAB; 4096]).unwrap());
    s.case("weights garbage", &as_refs(&inspect(&garbage)), "model.safetensors");
    let huge_header = weights(s, "weights-huge-header", &|p| {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        std::fs::write(p, bytes).unwrap();
    });
    s.case("weights header size absurd", &as_refs(&inspect(&huge_header)), "model.safetensors");
    let bin_garbage = s.model("bin-garbage", |d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(d.join("pytorch_model.bin"), b"PK\x03\x04 not really a zip").unwrap();
    });
    s.case("pytorch_model.bin garbage", &as_refs(&inspect(&bin_garbage)), "pytorch_model.bin");
    let no_vocab = s.model("no-vocab", |d| std::fs::remove_file(d.join("vocab.txt")).unwrap());
    s.case("tokenizer files missing", &as_refs(&inspect(&no_vocab)), "vocab.txt");
    let empty_vocab = s.model("empty-vocab", |d| std::fs::write(d.join("vocab.txt"), "").unwrap());
    s.case("vocab.txt empty", &as_refs(&inspect(&empty_vocab)), "vocab.txt");
    let bad_tokenizer = s.model("bad-tokenizer-json", |d| {
        std::fs::write(d.join("tokenizer.json"), "{\"model\": 3").unwrap()
    });
    s.case("tokenizer.json corrupt", &as_refs(&inspect(&bad_tokenizer)), "tokenizer.json");
}

/// `inspect`'s flags.
fn inspect_flag_cases(s: &mut Suite) {
    let tiny = "tests/fixtures/tiny-bert";
    let with = |extra: &[&str]| -> Vec<String> {
        let mut args = inspect(tiny);
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    for (name, extra, needle) in [
        ("gamma NaN", &["--mode", "im", "--gamma", "NaN"][..], "gamma"),
        ("gamma inf", &["--mode", "im", "--gamma", "inf"], "gamma"),
        ("gamma -1", &["--mode", "im", "--gamma=-1"], "gamma"),
        ("gamma 1e9", &["--mode", "im", "--gamma", "1e9"], "gamma"),
        ("T 1000", &["--mode", "im", "--T", "1000"], "T = 1000"),
        ("T -1", &["--mode", "im", "--T=-1"], "--T"),
        ("bert with --T", &["--mode", "bert", "--T", "9"], "--T"),
        ("ex with --gamma", &["--mode", "ex", "--gamma", "0.5"], "--gamma"),
        ("im-layers reversed", &["--mode", "im", "--im-layers", "3-1"], "--im-layers 3-1"),
        ("im-layers past the model", &["--mode", "im", "--im-layers", "5-7"], "layers"),
        ("im-layers not a range", &["--mode", "im", "--im-layers", "abc"], "--im-layers"),
        ("connection unknown", &["--connection", "foo"], "foo"),
        ("connection bad gamma", &["--connection", "im:gamma=x"], "gamma"),
        ("connection bad key", &["--connection", "im:speed=3"], "speed"),
        ("connection with --T", &["--connection", "im", "--T", "3"], "--T"),
        ("num-labels 0", &["--num-labels", "0"], "--num-labels"),
        ("num-labels 1e12", &["--num-labels", "1000000000000"], "--num-labels"),
        ("label out of range", &["--grad-norms", "--label", "7"], "--label"),
        ("label without grad-norms", &["--label", "1"], "--grad-norms"),
        ("mode unknown", &["--mode", "rk4"], "rk4"),
        ("backend unknown", &["--backend", "tpu"], "tpu"),
    ] {
        s.case(&format!("inspect {name}"), &as_refs(&with(extra)), needle);
    }
    let dump_dir = s.path("no/such/dir/dump.safetensors");
    s.case("inspect --dump into a missing dir", &as_refs(&with(&["--dump", &dump_dir])), &dump_dir);
}

/// The tiny fine-tune with `extra`'s flags set (replacing the tiny run's own value of a flag).
fn finetune(s: &Suite, name: &str, extra: &[&str]) -> Vec<String> {
    let mut args = tiny_finetune(&s.root.join("runs").join(name), &[]);
    let mut i = 0;
    while i < extra.len() {
        let flag = extra[i].split('=').next().unwrap();
        let has_value =
            !extra[i].contains('=') && extra.get(i + 1).is_some_and(|v| !v.starts_with("--"));
        match args.iter().position(|a| a == flag) {
            Some(at) if has_value => args[at + 1] = extra[i + 1].to_string(),
            Some(at) => {
                args.remove(at + 1);
                args[at] = extra[i].to_string();
            }
            None => {
                args.push(extra[i].to_string());
                if has_value {
                    args.push(extra[i + 1].to_string());
                }
            }
        }
        i += if has_value { 2 } else { 1 };
    }
    args
}

/// `finetune`'s flags and training files.
fn finetune_cases(s: &mut Suite) {
    for (name, extra, needle) in [
        ("lr NaN", &["--lr", "NaN"][..], "--lr"),
        ("lr -1", &["--lr=-1"], "--lr"),
        ("lr 0", &["--lr", "0"], "--lr"),
        ("beta1 1.5", &["--adam-beta1", "1.5"], "--adam-beta1"),
        ("beta2 1", &["--adam-beta2", "1"], "--adam-beta2"),
        ("eps 0", &["--adam-eps", "0"], "--adam-eps"),
        ("warmup -1", &["--warmup-ratio=-1"], "--warmup-ratio"),
        ("weight decay inf", &["--weight-decay", "inf"], "--weight-decay"),
        ("max-grad-norm -1", &["--max-grad-norm=-1"], "--max-grad-norm"),
        ("dropout 1", &["--dropout", "1"], "--dropout"),
        ("batch size 0", &["--batch-size", "0"], "--batch-size"),
        ("epochs 0", &["--epochs", "0"], "--epochs"),
        ("max-steps 0", &["--max-steps", "0"], "--max-steps"),
        ("max-len 0", &["--max-len", "0"], "--max-len"),
        ("grad-accum 0", &["--grad-accum", "0"], "--grad-accum"),
        ("train-samples 0", &["--train-samples", "0"], "--train-samples"),
        ("val-samples 0", &["--val-samples", "0"], "--val-samples"),
        ("adv-lambda 2", &["--adv", "creat", "--adv-lambda", "2"], "--adv-lambda"),
        ("adv unknown", &["--adv", "fgsm"], "fgsm"),
        ("optimizer unknown", &["--optimizer", "lion"], "lion"),
        ("gamma 1e9", &["--connection", "im", "--gamma", "1e9"], "gamma"),
        ("T with bert", &["--T", "3"], "--T"),
        ("T 1000", &["--connection", "im", "--T", "1000"], "T = 1000"),
        ("connection unknown", &["--connection", "rk4"], "rk4"),
        ("im-layers past the model", &["--connection", "im", "--im-layers", "4-5"], "layers"),
        ("seed not a number", &["--seed", "abc"], "--seed"),
    ] {
        let args = finetune(s, &format!("flag-{name}").replace(' ', "-"), extra);
        s.case(&format!("finetune {name}"), &as_refs(&args), needle);
    }
    let mut no_task = finetune(s, "no-task", &[]);
    let at = no_task.iter().position(|a| a == "--task").unwrap();
    no_task.drain(at..at + 2);
    s.case("finetune without --task", &as_refs(&no_task), "--task");
    let mut bad_task = finetune(s, "bad-task", &[]);
    bad_task[at + 1] = "cola".into();
    s.case("finetune --task cola", &as_refs(&bad_task), "cola");

    let header = "sentence\tlabel\n";
    let good_rows: String =
        (0..60).map(|i| format!("sentence number {i}\t{}\n", i % 2)).collect::<String>();
    for (name, file, text, needle) in [
        ("empty file", "empty.tsv", String::new(), "empty.tsv"),
        ("header only", "header.tsv", header.to_string(), "header.tsv"),
        ("label 7", "label7.tsv", format!("{header}{good_rows}a film\t7\n"), "label7.tsv"),
        ("label word", "labelw.tsv", format!("{header}{good_rows}a film\tgood\n"), "labelw.tsv"),
        ("missing column", "short.tsv", format!("{header}{good_rows}only text\n"), "short.tsv"),
        (
            "bad jsonl",
            "bad.jsonl",
            "{\"sentence\": \"x\", \"label\": 1}\n{oops\n".into(),
            "bad.jsonl",
        ),
        (
            "jsonl without label",
            "nolabel.jsonl",
            "{\"sentence\": \"x\"}\n".repeat(60),
            "nolabel.jsonl",
        ),
        ("unknown extension", "train.xlsx", good_rows.clone(), "train.xlsx"),
    ] {
        let path = s.file(&format!("data/{file}"), text.as_bytes());
        let args = finetune(s, &format!("data-{file}"), &["--train-file", &path]);
        s.case(&format!("finetune {name}"), &as_refs(&args), needle);
    }
    let mut latin1 = header.as_bytes().to_vec();
    latin1.extend_from_slice(b"caf\xe9 au lait\t1\n");
    let path = s.file("data/latin1.tsv", &latin1);
    let args = finetune(s, "data-latin1", &["--train-file", &path]);
    s.case("finetune non-UTF-8 file", &as_refs(&args), "latin1.tsv");
    let missing = s.path("data/none.tsv");
    let args = finetune(s, "data-missing", &["--train-file", &missing]);
    s.case("finetune missing train file", &as_refs(&args), &missing);
    let dir = s.path("data");
    let args = finetune(s, "data-dir-as-file", &["--train-file", &dir]);
    s.case("finetune train file is a directory", &as_refs(&args), &dir);
    let no_data = s.path("no-data-here");
    let args = finetune(s, "data-dir-missing", &["--data-dir", &no_data]);
    s.case("finetune --data-dir missing", &as_refs(&args), &no_data);
    let bad_model = s.model_config("finetune-vocab", "vocab_size", "1000000000000");
    let args = finetune(s, "model-vocab", &["--model", &bad_model]);
    s.case("finetune model vocab_size 1e12", &as_refs(&args), "vocab_size");
    let blocked = s.file("a-file", b"x");
    let args = finetune(s, "out-under-file", &[]);
    let mut args = args;
    let at = args.iter().position(|a| a == "--out").unwrap();
    args[at + 1] = format!("{blocked}/run");
    s.case("finetune --out under a file", &as_refs(&args), &blocked);
}

fn best_of(run: &str) -> String {
    format!("{run}/best")
}

/// A finished tiny run to damage; returns its directory.
fn finished_run(s: &Suite, name: &str) -> PathBuf {
    let dir = s.root.join("runs").join(name);
    ok(trainer(&as_refs(&tiny_finetune(&dir, &[])), &[]));
    dir
}

/// A copy of `run` with `edit` applied.
fn damaged_run(s: &Suite, run: &Path, name: &str, edit: impl FnOnce(&Path)) -> String {
    let dir = s.root.join("runs").join(name);
    copy_dir(run, &dir);
    std::fs::remove_file(dir.join("done")).ok();
    // Unfinished, so that a resume reads everything instead of stopping at "already finished".
    replace_in(&dir.join("checkpoint/state.json"), "\"finished\": true", "\"finished\": false");
    edit(&dir);
    dir.display().to_string()
}

/// Replaces `from` by `to` in the file at `path`, which must contain it (else the case would
/// test the undamaged file).
fn replace_in(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} lacks {from:?}", path.display());
    std::fs::write(path, text.replace(from, to)).unwrap();
}

/// Run directories: `finetune --resume`, `eval --run`, `export`.
fn run_dir_cases(s: &mut Suite) {
    let run = finished_run(s, "finished");
    let resume = |dir: &str| -> Vec<String> {
        ["finetune", "--resume", dir].iter().map(|s| s.to_string()).collect()
    };
    type Edit = fn(&Path);
    let edits: [(&str, Edit, &str); 10] = [
        (
            "state-corrupt",
            |d| std::fs::write(d.join("checkpoint/state.json"), "{").unwrap(),
            "state.json",
        ),
        (
            "state-fields",
            |d| std::fs::write(d.join("checkpoint/state.json"), "{}").unwrap(),
            "state.json",
        ),
        (
            "state-past-end",
            |d| replace_in(&d.join("checkpoint/state.json"), "\"step\": 6", "\"step\": 600"),
            "state.json",
        ),
        (
            "model-zero",
            |d| std::fs::write(d.join("checkpoint/model.mpk"), "").unwrap(),
            "model.mpk",
        ),
        (
            "model-truncated",
            |d| {
                let p = d.join("checkpoint/model.mpk");
                let b = std::fs::read(&p).unwrap();
                std::fs::write(&p, &b[..b.len() / 3]).unwrap()
            },
            "model.mpk",
        ),
        (
            "optim-missing",
            |d| std::fs::remove_file(d.join("checkpoint/optim.mpk")).unwrap(),
            "optim.mpk",
        ),
        (
            "config-corrupt",
            |d| std::fs::write(d.join("config.json"), "{\"task\":").unwrap(),
            "config.json",
        ),
        (
            "config-lr-null",
            |d| replace_in(&d.join("config.json"), "\"lr\": 0.001", "\"lr\": null"),
            "config.json",
        ),
        (
            "checkpoint-removed",
            |d| std::fs::remove_dir_all(d.join("checkpoint")).unwrap(),
            "checkpoint",
        ),
        ("config-missing", |d| std::fs::remove_file(d.join("config.json")).unwrap(), "config.json"),
    ];
    for (name, edit, needle) in edits {
        let dir = damaged_run(s, &run, name, edit);
        s.case(&format!("resume {name}"), &as_refs(&resume(&dir)), needle);
    }
    let missing = s.path("runs/none");
    s.case("resume a missing run", &as_refs(&resume(&missing)), &missing);
    let run_str = run.display().to_string();
    s.case("resume with --lr", &["finetune", "--resume", &run_str, "--lr", "1e-3"], "--lr");

    // eval --run / --model
    let no_best =
        damaged_run(s, &run, "eval-no-best", |d| std::fs::remove_dir_all(d.join("best")).unwrap());
    s.case("eval a run without best/", &["eval", "--run", &no_best], "best");
    // (--run reads the run's config.json, not best/imbert.json: only --model reads a card.)
    let bad_card = damaged_run(s, &run, "eval-bad-card", |d| {
        std::fs::write(d.join("best/imbert.json"), "{not json").unwrap()
    });
    let bad_card_model = format!("{bad_card}/best");
    s.case(
        "eval --model with corrupt imbert.json",
        &["eval", "--model", &bad_card_model, "--task", "sst2"],
        "imbert.json",
    );
    s.case("eval --limit 0", &["eval", "--run", &run_str, "--limit", "0"], "--limit");
    let empty_data = s.root.join("empty-data");
    copy_dir(&data_dir().join("advglue"), &empty_data.join("advglue"));
    std::fs::create_dir_all(empty_data.join("normalized")).unwrap();
    std::fs::write(empty_data.join("normalized/sst2_dev.jsonl"), "").unwrap();
    let empty_data = empty_data.display().to_string();
    let args = ["eval", "--run", &run_str, "--data-dir", &empty_data];
    s.case("eval an empty dev file", &args, "sst2_dev.jsonl");
    let no_advglue = s.root.join("no-advglue");
    std::fs::create_dir_all(&no_advglue).unwrap();
    let no_advglue = no_advglue.display().to_string();
    let args = ["eval", "--run", &run_str, "--data-dir", &no_advglue];
    s.case("eval without an AdvGLUE file", &args, "--data-dir");
    let missing_model = s.path("models/none-eval");
    s.case(
        "eval --model missing",
        &["eval", "--model", &missing_model, "--task", "sst2"],
        &missing_model,
    );
    s.case("eval --run with --task", &["eval", "--run", &run_str, "--task", "rte"], "--task");
    let args = ["eval", "--model", &best_of(&run_str), "--task", "cola"];
    s.case("eval --task unknown", &args, "cola");
    let out_blocked = format!("{}/eval.json", s.file("eval-blocker", b"x"));
    s.case(
        "eval --out under a file",
        &["eval", "--run", &run_str, "--out", &out_blocked],
        "eval-blocker",
    );

    // export
    let site = s.path("site");
    let missing_export = s.path("models/none-export");
    s.case(
        "export a missing model",
        &["export", "--web", "--model", &missing_export, "--site", &site, "--name", "x"],
        "model directory not found",
    );
    let best = format!("{run_str}/best");
    s.case(
        "export a bad bundle name",
        &["export", "--web", "--model", &best, "--site", &site, "--name", "../escape"],
        "--name",
    );
    let site_file = s.file("site-file", b"x");
    s.case(
        "export into a site that is a file",
        &["export", "--web", "--model", &best, "--site", &site_file, "--name", "x"],
        &site_file,
    );
}

/// `attack` and `probe`.
fn attack_and_probe_cases(s: &mut Suite) {
    let tiny = "tests/fixtures/tiny-bert";
    let missing = s.path("attack-data.txt");
    let under_file = format!("{}/probe", s.file("probe-blocker", b"x"));
    let sst2 = data_dir().join("glue/SST-2/dev.tsv").display().to_string();
    let attack = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["attack", "--model", tiny, "--task", "sst2", "--connection", "bert"];
        args.extend(["--data", &sst2, "--limit", "2"]);
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        for pair in extra.chunks(2) {
            match args.iter().position(|a| a == pair[0]) {
                Some(at) => args[at + 1] = pair[1].to_string(),
                None => args.extend(pair.iter().filter(|s| !s.is_empty()).map(|s| s.to_string())),
            }
        }
        args
    };
    let attack_cases = [
        ("attack missing data", attack(&["--data", &missing]), missing.as_str()),
        ("attack min-cos 2", attack(&["--min-cos", "2"]), "--min-cos"),
        ("attack max-ratio -1", attack(&["--max-ratio=-1", ""]), "--max-ratio"),
        ("attack k 0", attack(&["--k", "0"]), "--k"),
        ("attack queries 0", attack(&["--queries", "0"]), "--queries"),
        ("attack gamma 1e9", attack(&["--connection", "im:gamma=1e9"]), "gamma"),
        ("attack --json into a missing dir", attack(&["--json", "no/dir/a.json"]), "--json"),
        ("attack num-labels 1e12", attack(&["--num-labels", "1000000000000"]), "--num-labels"),
    ];
    for (name, args, needle) in &attack_cases {
        s.case(name, &as_refs(args), needle);
    }
    for (name, args, needle) in [
        ("probe without pairs", vec!["probe", "--model", tiny, "--text", "a film"], "--perturbed"),
        (
            "probe bad connection",
            vec!["probe", "--model", tiny, "--connection", "im:T=1000"],
            "T = 1000",
        ),
        ("probe missing model", vec!["probe", "--model", &missing], missing.as_str()),
        (
            "probe --out under a file",
            vec!["probe", "--model", tiny, "--text", "a", "--perturbed", "b", "--out", &under_file],
            "--out",
        ),
        (
            "probe perturbation unknown",
            vec!["probe", "--model", tiny, "--perturbation", "shout"],
            "shout",
        ),
    ] {
        s.case(name, &args, needle);
    }
}

/// `reproduce`: refused before any cell trains, each naming the flag.
fn reproduce_cases(s: &mut Suite) {
    let tiny = "tests/fixtures/tiny-bert";
    let out = s.path("grid");
    let reproduce = |extra: &[&'static str]| -> Vec<String> {
        let mut args = vec!["reproduce", "--preset", "sst2", "--smoke", "--model", tiny];
        args.extend(["--dry-run", "--out", out.as_str()]);
        args.extend(extra);
        args.iter().map(|a| a.to_string()).collect()
    };
    let t_sweep_past_the_model = {
        let mut args = reproduce(&["--im-layers", "5-9"]);
        args[2] = "t-sweep".into();
        args
    };
    for (name, args, needle) in [
        (
            "reproduce --im-layers outside t-sweep",
            reproduce(&["--im-layers", "0-1"]),
            "--im-layers",
        ),
        ("reproduce t-sweep layers past the model", t_sweep_past_the_model, "--im-layers 5-9"),
        ("reproduce --lrs 0", reproduce(&["--lrs", "0"]), "--lrs"),
        ("reproduce --tasks outside the grid", reproduce(&["--tasks", "rte"]), "--tasks rte"),
        ("reproduce --tasks unknown", reproduce(&["--tasks", "imdb2"]), "imdb2"),
        ("reproduce bad --connection", reproduce(&["--connection", "im:T=0.5"]), "--connection"),
        (
            "reproduce --connection past the model",
            reproduce(&["--connection", "im:T=2,layers=3-4"]),
            "3-4",
        ),
    ] {
        s.case(name, &as_refs(&args), needle);
    }
}

#[test]
fn every_malformed_input_is_a_clear_error() {
    let mut suite = Suite::new();
    model_cases(&mut suite);
    inspect_flag_cases(&mut suite);
    finetune_cases(&mut suite);
    run_dir_cases(&mut suite);
    attack_and_probe_cases(&mut suite);
    reproduce_cases(&mut suite);
    assert!(suite.cases.len() >= 100, "{} cases", suite.cases.len());

    let mut failures = Vec::new();
    for case in &suite.cases {
        let out = trainer(&as_refs(&case.args), &[]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let problem = if out.status.code().is_none() {
            Some("killed by a signal (abort?)".to_string())
        } else if out.status.success() {
            Some("exit 0".to_string())
        } else if text.contains("panicked") {
            Some("panicked".to_string())
        } else if !text.contains(&case.needle) {
            Some(format!("the message does not name {:?}", case.needle))
        } else {
            None
        };
        if std::env::var_os("MALFORMED_VERBOSE").is_some() {
            let error = text.lines().find(|l| l.contains("error")).unwrap_or("");
            println!("{:<45} {}", case.name, error);
        }
        if let Some(problem) = problem {
            let last: Vec<&str> = text.lines().rev().take(3).collect();
            failures.push(format!("{}: {problem}\n    {}", case.name, last.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} malformed inputs were not clear errors:\n{}",
        failures.len(),
        suite.cases.len(),
        failures.join("\n")
    );
}
