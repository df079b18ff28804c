//! The report's plots: which are drawn, their labels, their legend and the T sweep's line.

use super::*;

#[test]
fn plots_are_written_with_their_labels() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let report = default_report(tmp.path());
    let stems: Vec<String> = charts(&report).into_iter().map(|(s, _)| s).collect();
    for stem in [
        "accuracy_vs_T_sst2",
        "accuracy_by_layers_sst2",
        "attack_levels_sst2",
        "attack_levels_mnli-mm",
    ] {
        assert!(stems.iter().any(|s| s == stem), "{stem} missing from {stems:?}");
    }
    assert!(!stems.iter().any(|s| s.starts_with("accuracy_vs_T_mnli")), "no IM runs on mnli");

    let out = tmp.path().join("out");
    let written = write_report(&report, &out, None).unwrap();
    for name in ["report.md", "report.csv", "report.json"] {
        assert!(out.join(name).is_file(), "{name}");
    }
    let svg = std::fs::read_to_string(out.join("plots/accuracy_vs_T_sst2.svg")).unwrap();
    assert!(
        svg.contains("T (IM iterations)")
            && svg.contains("AdvGLUE")
            && svg.contains("(did not learn)"),
        "labels missing"
    );
    let bars = std::fs::read_to_string(out.join("plots/attack_levels_sst2.svg")).unwrap();
    assert!(bars.contains("word (AdvGLUE)") && bars.contains(CLEAN_LABEL) && bars.contains("bert"));
    let png = out.join("plots/attack_levels_sst2.png");
    match &written.font {
        Some(font) => {
            let bytes = std::fs::read(&png).unwrap();
            assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
            println!("PNG plots drawn with {}", font.display());
        }
        None => {
            assert!(!png.exists());
            println!("no system font: SVG only (as designed)");
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("(plots/accuracy_vs_T_sst2.svg)"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 8);
}

/// `(y, text)` of every `<text>` element of a plotters SVG.
fn svg_texts(svg: &str) -> Vec<(f64, String)> {
    svg.split("<text ")
        .skip(1)
        .map(|t| {
            let y = t.split(" y=\"").nth(1).and_then(|r| r.split('"').next()).unwrap();
            let body = t.split_once('>').unwrap().1.split("</text>").next().unwrap();
            (y.parse().unwrap(), body.trim().to_string())
        })
        .collect()
}

/// Every series is named once, beneath the plot, where no data can lie under its name; the
/// picture grows with the number of series instead.
#[test]
fn legends_lie_beneath_the_plot() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let report = default_report(tmp.path());
    let out = tmp.path().join("out");
    write_report(&report, &out, None).unwrap();
    for (stem, chart) in charts(&report) {
        let labels: Vec<&str> = match &chart {
            Chart::Lines(c) => c.series.iter().map(|s| s.label.as_str()).collect(),
            Chart::Bars(c) => c.series.iter().map(|s| s.label.as_str()).collect(),
        };
        let svg = std::fs::read_to_string(out.join(format!("plots/{stem}.svg"))).unwrap();
        let (w, h) = draw::chart_size(&chart);
        assert!(svg.contains(&format!("width=\"{w}\" height=\"{h}\"")), "{stem}: size");
        assert!(
            h >= draw::PLOT_SIZE.1 + 22 * labels.len() as u32,
            "{stem}: no room for the legend"
        );
        let texts = svg_texts(&svg);
        for label in labels {
            let ys: Vec<f64> = texts.iter().filter(|(_, t)| t == label).map(|&(y, _)| y).collect();
            assert_eq!(ys.len(), 1, "{stem}: {label:?} named {} times", ys.len());
            assert!(
                ys[0] > draw::PLOT_SIZE.1 as f64 && ys[0] < h as f64,
                "{stem}: {label:?} at y = {}, inside the plot",
                ys[0]
            );
        }
    }
}

/// EX-BERT is the T sweep's `T = 0` (the solve's start is EX-BERT's step) and BERT a flat
/// reference across the sweep; without EX-BERT the line starts at its smallest T.
#[test]
fn accuracy_vs_t_starts_at_ex_bert_beside_a_bert_reference() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let lines = |report: &Report| -> LineChart {
        charts(report)
            .into_iter()
            .find_map(|(stem, c)| match c {
                Chart::Lines(l) if stem == "accuracy_vs_T_sst2" => Some(l),
                _ => None,
            })
            .expect("an accuracy-vs-T chart")
    };
    let series = |chart: &LineChart, starts: &str, clean: bool| -> Vec<(f64, f64)> {
        let s = chart
            .series
            .iter()
            .find(|s| s.label.starts_with(starts) && s.clean == clean)
            .unwrap_or_else(|| panic!("no series {starts}: {:?}", chart.series));
        s.points.iter().map(|&(t, mean, _)| (t, mean)).collect()
    };
    let without = lines(&default_report(tmp.path()));
    assert_eq!(without.x_label, "T (IM iterations)");
    let im_clean = series(&without, "clean (GLUE dev), γ=0.1 all layers", true);
    assert_eq!(im_clean.first().unwrap().0, 2.0);

    let ex = run_config("sst2", "ex", 1);
    write_run(tmp.path(), "sst2/ex-1", &ex, Some(&eval(&ex, &[sst2(0.80, 0.60)], false)));
    let ex = run_config("sst2", "ex:layers=0-0", 1);
    write_run(tmp.path(), "sst2/ex0-1", &ex, Some(&eval(&ex, &[sst2(0.70, 0.30)], false)));
    let with = lines(&default_report(tmp.path()));
    assert_eq!(with.x_label, "T (IM iterations; T = 0: EX-BERT)");
    let im_clean = series(&with, "clean (GLUE dev), γ=0.1 all layers", true);
    let im_adv = series(&with, "AdvGLUE, γ=0.1 all layers", false);
    assert!(close(im_clean[0].0, 0.0) && close(im_clean[0].1, 80.0), "{im_clean:?}");
    assert!(close(im_adv[0].1, 60.0), "{im_adv:?}");
    assert_eq!(im_clean.iter().map(|p| p.0).collect::<Vec<_>>(), [0.0, 2.0, 5.0]);
    let bert = series(&with, "clean (GLUE dev), BERT", true);
    assert_eq!(bert.len(), 2);
    assert!(bert.iter().all(|&(_, mean)| close(mean, 92.0)), "{bert:?}");
    assert_eq!((bert[0].0, bert[1].0), (0.0, 5.0));
    assert!(with.series.iter().any(|s| s.label.starts_with("AdvGLUE, BERT") && !s.clean));
}

/// A given --font that is not a font is the user's error, not a silent SVG-only run.
#[test]
fn bad_font_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let bogus = tmp.path().join("font.ttf");
    std::fs::write(&bogus, b"not a font").unwrap();
    assert!(find_font(Some(&bogus)).is_err());
    assert!(find_font(Some(&tmp.path().join("missing.ttf"))).is_err());
}
