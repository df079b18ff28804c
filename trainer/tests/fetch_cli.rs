//! `trainer fetch-data` against a local stand-in for the HF rows API and the AdvGLUE site
//! (127.0.0.1 only): pagination, field mapping, the written layout, and a failing endpoint.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Serves `requests` HTTP requests, then stops. RTE rows come 2 per page from a 5-row split;
/// `/adv/*` serves the AdvGLUE sample files committed under tests/fixtures/data.
fn serve(requests: usize) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for stream in listener.incoming().take(requests) {
            let mut stream = stream.unwrap();
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (status, body) = respond(&path);
            seen.push(path);
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&body).unwrap();
        }
        seen
    });
    (base, handle)
}

fn respond(path: &str) -> (&'static str, Vec<u8>) {
    // A download cut short: the first 11 bytes of the file, served as a success.
    if let Some(file) = path.strip_prefix("/adv-cut/") {
        let p = shared::data::test_data::fixtures_dir().join("advglue").join(file);
        return ("200 OK", std::fs::read(p).unwrap()[..11].to_vec());
    }
    if let Some(file) = path.strip_prefix("/adv/") {
        let p = shared::data::test_data::fixtures_dir().join("advglue").join(file);
        return match std::fs::read(p) {
            Ok(b) => ("200 OK", b),
            Err(_) => ("404 Not Found", b"{}".to_vec()),
        };
    }
    let query = |key: &str| {
        path.split(['?', '&'])
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or("")
            .to_string()
    };
    let offset: usize = query("offset").parse().unwrap_or(0);
    let split = query("split");
    let total = 5;
    let rows: Vec<serde_json::Value> = (offset..(offset + 2).min(total))
        .map(|i| {
            serde_json::json!({"row_idx": i, "row": {
                "sentence1": format!("{split} premise {i}"), "sentence2": format!("hypothesis {i}"),
                "label": (i % 2), "idx": i}})
        })
        .collect();
    ("200 OK", serde_json::json!({"rows": rows, "num_rows_total": total}).to_string().into_bytes())
}

#[test]
fn fetches_paginated_rows_and_advglue_into_the_shared_layout() {
    // 2 splits x 3 pages + 2 AdvGLUE files.
    let (base, server) = serve(8);
    let dir = repo().join("target/test-artifacts/fetch");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args([
            "fetch-data",
            "--tasks",
            "rte",
            "--page-size",
            "2",
            "--data-dir",
            dir.to_str().unwrap(),
        ])
        .args(["--hf-endpoint", &base, "--advglue-url", &format!("{base}/adv")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = server.join().unwrap();
    assert!(seen.iter().any(|p| p.contains("offset=4")), "paginated: {seen:?}");
    assert!(seen
        .iter()
        .all(|p| p.starts_with("/adv/") || p.contains("dataset=nyu-mll%2Fglue&config=rte")));

    let train = shared::data::load(dir.join("normalized/rte_train.jsonl"), shared::data::Task::Rte)
        .unwrap();
    assert_eq!(train.len(), 5);
    assert_eq!(train[4].text_a, "train premise 4");
    assert_eq!(train[4].text_b.as_deref(), Some("hypothesis 4"));
    let dev =
        shared::data::load(dir.join("normalized/rte_dev.jsonl"), shared::data::Task::Rte).unwrap();
    assert_eq!(dev[0].text_a, "validation premise 0");
    let adv = shared::data::load_advglue(dir.join("advglue/dev_ann.json"), shared::data::Task::Rte)
        .unwrap();
    let served = shared::data::test_data::fixtures_dir().join("advglue/dev_ann.json");
    let served = shared::data::load_advglue(served, shared::data::Task::Rte).unwrap();
    assert!(!adv.is_empty());
    assert_eq!(adv, served, "the AdvGLUE file is written as served");
}

fn fetch_rte(dir: &std::path::Path, base: &str, advglue_path: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["fetch-data", "--tasks", "rte", "--page-size", "2", "--data-dir"])
        .arg(dir)
        .args(["--hf-endpoint", base, "--advglue-url", &format!("{base}{advglue_path}")])
        .output()
        .unwrap()
}

#[test]
fn a_truncated_download_leaves_the_good_file_in_place() {
    let dir = repo().join("target/test-artifacts/fetch-truncated");
    let _ = std::fs::remove_dir_all(&dir);
    let (base, server) = serve(8);
    let out = fetch_rte(&dir, &base, "/adv");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    server.join().unwrap();
    let good = std::fs::read(dir.join("advglue/dev.json")).unwrap();

    // The GLUE pages again (6 requests), then dev.json arrives cut short.
    let (base, _server) = serve(7);
    let out = fetch_rte(&dir, &base, "/adv-cut");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a truncated AdvGLUE file was accepted");
    assert!(stderr.contains("/adv-cut/dev.json") && stderr.contains("left as it was"), "{stderr}");
    assert_eq!(std::fs::read(dir.join("advglue/dev.json")).unwrap(), good, "dev.json was replaced");
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("advglue"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "dev.json" && n != "dev_ann.json")
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind: {leftovers:?}");
}

#[test]
fn an_unreachable_endpoint_is_a_clear_error() {
    // A port with nothing behind it: bind, then drop the listener.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args([
            "fetch-data",
            "--tasks",
            "rte",
            "--data-dir",
            repo().join("target/test-artifacts/fetch-fail").to_str().unwrap(),
        ])
        .args(["--hf-endpoint", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("GET http://127.0.0.1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
