//! Every subcommand takes a RoBERTa checkpoint (`tests/fixtures/tiny-roberta`, a small random
//! RobertaForSequenceClassification with a byte-level BPE vocabulary): inspect, finetune with an
//! IM layer, eval, export --web (the bundle reloads and gives the model's logits), attack and
//! probe. The model type comes from config.json; no flag says "RoBERTa".

mod common;

use common::*;
use shared::io::bundle::WebBundle;

const TINY_ROBERTA: &str = "tests/fixtures/tiny-roberta";

fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_roberta_checkpoint_goes_through_every_subcommand() {
    let sentence = "the movie was good";
    let out = ok(trainer(
        &["inspect", "--model", TINY_ROBERTA, "--connection", "im:T=2", "--text", sentence],
        &[],
    ));
    assert!(out.contains("layer"), "{out}");

    let run = scratch("tiny-roberta-im");
    let args = tiny_finetune_of(TINY_ROBERTA, &run, &["--connection", "im", "--im-layers", "1-1"]);
    ok(trainer(&as_refs(&args), &[]));
    let best = run.join("best");
    let config = read_json(&best.join("config.json"));
    assert_eq!(config["model_type"], "roberta");
    assert_eq!(config["architectures"][0], "RobertaForSequenceClassification");
    for f in ["vocab.json", "merges.txt", "tokenizer.json", "model.safetensors"] {
        assert!(best.join(f).exists(), "best/{f} missing");
    }

    ok(trainer(&["eval", "--run", run.to_str().unwrap(), "--limit", "8"], &[]));
    let report = read_json(&run.join("eval.json"));
    let connection = report["connection"].as_str().unwrap();
    assert!(connection.starts_with("im:") && connection.ends_with("layers=1-1"), "{connection}");
    assert_eq!(report["advglue"][0]["adversarial"]["n"], 8);

    let site = scratch("tiny-roberta-site");
    let best_str = best.to_str().unwrap();
    let export =
        ["export", "--web", "--model", best_str, "--site", site.to_str().unwrap(), "--name", "r"];
    ok(trainer(&export, &[]));
    let bundle = WebBundle::from_dir(&site.join("r")).unwrap();
    assert_eq!(bundle.config.model_type, "roberta");
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(site.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["models"][0]["architecture"], "roberta", "the page names its parts RoBERTa");
    type Cpu = burn::backend::NdArray<f32>;
    let device = Default::default();
    let web = bundle.classifier::<Cpu>(&device).unwrap();
    let (native, _) = shared::io::checkpoint::load_classifier::<Cpu>(&best, None, &device).unwrap();
    let native = native.with_connections(&bundle.card.connection_spec().unwrap()).unwrap();
    let batch = bundle.tokenizer.encode(&[(sentence, None)], 32).unwrap();
    assert_eq!(batch.tokens[0][0], "<s>", "the bundle's tokenizer is RoBERTa's");
    let logits = |m: &shared::BertClassifier<Cpu>| -> Vec<f32> {
        let out = m.forward(&batch.to_input::<Cpu>(&device), Default::default());
        out.logits.unwrap().into_data().into_vec().unwrap()
    };
    let (a, b) = (logits(&web), logits(&native));
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(diff < 0.05, "int8 bundle logits {a:?} vs f32 {b:?}");

    let attack_json = run.join("attack.json");
    let sst2_dev = data_dir().join("normalized/sst2_dev.jsonl");
    let out = ok(trainer(
        &[
            "attack",
            "--task",
            "sst2",
            "--limit",
            "3",
            "--k",
            "4",
            "--queries",
            "40",
            "--model",
            best_str,
            "--data",
            sst2_dev.to_str().unwrap(),
            "--json",
            attack_json.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(out.contains("Attack success rate:"), "{out}");
    assert_eq!(read_json(&attack_json)["results"].as_array().unwrap().len(), 3);

    let probe = trainer(
        &[
            "probe",
            "--model",
            TINY_ROBERTA,
            "--no-f64",
            "--json",
            "--text",
            sentence,
            "--perturbed",
            "the movie was goood",
        ],
        &[],
    );
    assert!(probe.status.success(), "{}", String::from_utf8_lossy(&probe.stderr));
    let report: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    let connections = report["connections"].as_array().unwrap();
    assert!(connections.len() >= 3, "{report}");
    for c in connections {
        // Embeddings and two layers, each drifting by a finite amount under the typo.
        let drift = c["cls_cosine_distance"].as_array().unwrap();
        assert_eq!(drift.len(), 3, "{c}");
        assert!(drift.iter().all(|v| v.as_f64().unwrap().is_finite()), "{c}");
    }
}
