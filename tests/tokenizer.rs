//! Token ids equal HF's for varied sentences and pairs (unicode, accents, emoji, long inputs),
//! from `tokenizer.json` and from a bare `vocab.txt`; for RoBERTa's byte-level BPE, from
//! `tokenizer.json` and from `vocab.json` + `merges.txt`.

use imbert_tests::*;
use shared::BertTokenizer;

fn check(tok: &BertTokenizer, what: &str) {
    check_against(tok, what, "tokenizer_reference.json")
}

fn check_against(tok: &BertTokenizer, what: &str, reference: &str) {
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(reference)).unwrap()).unwrap();
    let max_len = reference["max_len"].as_u64().unwrap() as usize;
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for case in cases {
        let a = case["text_a"].as_str().unwrap();
        let b = case["text_b"].as_str();
        let batch = tok.encode(&[(a, b)], max_len).unwrap();
        let ids: Vec<i64> =
            case["input_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let types: Vec<i64> = case["token_type_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(batch.input_ids, ids, "{what}: ids of {a:?} / {b:?}");
        assert_eq!(batch.token_type_ids, types, "{what}: token types of {a:?} / {b:?}");
    }
}

#[test]
fn tokenizer_json_matches_hf() {
    check(&BertTokenizer::from_dir(&minilm_dir()).unwrap(), "tokenizer.json");
}

#[test]
fn vocab_txt_alone_matches_hf() {
    let dir = repo_root().join("target/test-artifacts/vocab-only");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(minilm_dir().join("vocab.txt"), dir.join("vocab.txt")).unwrap();
    check(&BertTokenizer::from_dir(&dir).unwrap(), "vocab.txt");
}

#[test]
fn roberta_tokenizer_json_matches_hf() {
    let tok = BertTokenizer::from_dir(&fixture("tiny-roberta")).unwrap();
    check_against(&tok, "RoBERTa tokenizer.json", "roberta_tokenizer_reference.json");
}

#[test]
fn roberta_vocab_json_and_merges_alone_match_hf() {
    let dir = repo_root().join("target/test-artifacts/roberta-bpe-only");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["vocab.json", "merges.txt"] {
        std::fs::copy(fixture("tiny-roberta").join(f), dir.join(f)).unwrap();
    }
    let tok = BertTokenizer::from_dir(&dir).unwrap();
    check_against(&tok, "RoBERTa vocab.json + merges.txt", "roberta_tokenizer_reference.json");
}
