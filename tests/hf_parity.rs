//! Plain BERT equals transformers, layer by layer, on MiniLM-L6 (sentences and pairs, batched
//! with padding), and so does a small random RoBERTa; one MiniLM layer's hand-written VJP equals
//! burn autodiff.

use imbert_tests::*;
use shared::BertTokenizer;

#[test]
fn minilm_every_layer_matches_transformers() {
    check_minilm_hidden_states::<Cpu>(&Default::default());
}

#[test]
fn tiny_roberta_every_layer_and_the_logits_match_transformers() {
    let diffs = check_tiny_roberta_forward::<Cpu>(&Default::default(), "tiny-roberta", "f32.");
    assert!(diffs.iter().all(|&d| d < 1e-4), "{diffs:?}");
}

#[test]
fn tokenizer_builds_the_reference_batch() {
    let tok = BertTokenizer::from_dir(&minilm_dir()).unwrap();
    let items: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("minilm_hidden.json")).unwrap())
            .unwrap();
    let pairs: Vec<(String, Option<String>)> = items["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_str().map(String::from)))
        .collect();
    let refs: Vec<(&str, Option<&str>)> =
        pairs.iter().map(|(a, b)| (a.as_str(), b.as_deref())).collect();
    let batch = tok.encode(&refs, 128).unwrap();
    let r = reference("minilm_hidden.safetensors");
    assert_eq!(batch.input_ids, ints(&r["input_ids"].1));
    assert_eq!(batch.token_type_ids, ints(&r["token_type_ids"].1));
    assert_eq!(batch.attention_mask, ints(&r["attention_mask"].1));
}

#[test]
fn minilm_layer_vjp_matches_autodiff() {
    check_minilm_layer_vjp::<Train>(&Default::default());
}

/// With `--features openblas` (`make rust-test`): the library is linked and answers, and with the
/// advised core type set there is no advice left.
#[cfg(feature = "openblas")]
#[test]
fn openblas_reports_its_kernels() {
    use shared::cpu::blas::{advice, best_core, core_name};
    let core = core_name();
    println!("OpenBLAS core: {core}; advice: {:?}", advice());
    assert!(!core.is_empty());
    if std::env::var("OPENBLAS_CORETYPE")
        .is_ok_and(|c| Some(c.as_str()) == best_core().map(|b| b.0))
    {
        assert_eq!(advice(), None, "OPENBLAS_CORETYPE is set, yet OpenBLAS chose {core}");
    }
}
