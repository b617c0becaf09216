//! The `tra` command line: check, compile, optimize, rules, and clear errors.

mod common;

use std::process::Command;

fn tra(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tra"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run tra");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_prints_every_node_with_its_frontier_and_size() {
    let (ok, out, err) = tra(&["check", "examples/matmul.json"]);
    assert!(ok, "{err}");
    assert!(out.contains("XY") && out.contains("[4, 4, 4]") && out.contains("64000000"), "{out}");
    let (ok, out, _) = tra(&["check", "--format", "json", "examples/diag-x-plus-y.json"]);
    assert!(ok);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(rows.as_array().unwrap().iter().any(|r| r["dense"] == false), "a filter leaves holes: {out}");
}

#[test]
fn compile_prints_the_table_1_plan() {
    let (ok, out, err) = tra(&["compile", "examples/matmul.json"]);
    assert!(ok, "{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(plan["outputs"], serde_json::json!(["Z"]));
    let (ok, out, _) = tra(&["compile", "--format", "text", "examples/matmul.json"]);
    assert!(ok);
    assert_eq!(
        out.trim(),
        "(local_aggregate [0 2] matAdd (shuffle [0 2] (local_join [1] [0] matMul (broadcast X) Y)))"
    );
}

#[test]
fn optimize_in_four_formats() {
    // By default a short summary for a person: the plan, its cost, the alternatives.
    let (ok, out, err) = tra(&["optimize", "examples/matmul.json"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("plan: ") && out.contains("network floats") && out.contains("alternatives"), "{out}");
    assert!(out.lines().count() < 20 && serde_json::from_str::<serde_json::Value>(&out).is_err(), "{out}");
    let (ok, out, err) = tra(&["optimize", "--format", "json", "examples/matmul-common-large-dim.json"]);
    assert!(ok, "{err}");
    let a: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The API's answer: `report` on the answer and on every alternative too.
    for f in ["plan", "cost", "alternatives", "rules_applied", "stats", "report"] {
        assert!(a.get(f).is_some(), "missing {f}");
    }
    assert!(a["alternatives"].as_array().unwrap().iter().all(|alt| alt["report"].is_object()), "{a}");
    assert_eq!(a["stats"]["stop_reason"], "saturated");
    let (ok, out, _) = tra(&["optimize", "--format", "text", "examples/matmul.json"]);
    assert!(ok && out.contains("cost:") && out.contains("alternatives:"), "{out}");
    let (ok, out, _) = tra(&["optimize", "--format", "dot", "--sites", "3", "examples/matmul.json"]);
    assert!(ok && out.starts_with("digraph plan {"), "{out}");
}

#[test]
fn rules_lists_every_rule() {
    let (ok, out, _) = tra(&["rules", "--format", "json"]);
    assert!(ok);
    let rules: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    for name in ["lower-join", "R1-6", "R1-7", "R2-5", "R2-7b", "matmul-rmm"] {
        assert!(
            rules.iter().any(|r| r["name"] == name && r["equation"].is_string() && r["condition"].is_string()),
            "{name}"
        );
    }
}

#[test]
fn rules_md_is_the_readme_table() {
    // rules/README.md holds this table; tra-rules' `readme` test keeps it current.
    let (ok, out, _) = tra(&["rules", "--format", "md"]);
    assert!(ok);
    assert_eq!(out, tra_rules::markdown());
    assert!(out.contains("| `R2-6` |") && out.contains("### R1: lambda composition"), "{out}");
}

#[test]
fn errors_are_clear_and_exit_nonzero() {
    let (ok, _, err) = tra(&["check", "no/such/file.json"]);
    assert!(!ok && err.contains("cannot read no/such/file.json"), "{err}");
    let dir = std::env::temp_dir().join(format!("tra-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"inputs": {"X": {"key_bounds": [2], "array_bounds": [2]}}, "nodes": {"Z": {"op": "transform", "input": "X", "kernel": "matmul"}}, "outputs": ["Z"]}"#).unwrap();
    let (ok, _, err) = tra(&["optimize", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("unknown_kernel") && err.contains("Z.kernel") && err.contains("matMul"), "{err}");
}

/// `--max-ms` bounds the whole optimization and `--analysis-memory-bytes` the
/// analysis's key sets and layouts, as the server's limits do; either ends
/// with `error [limit_exceeded]`, never a crash (a deadline passing while the
/// program was added to the e-graph exited with status 101 and no message).
#[test]
fn optimize_bounds_its_time_and_its_analysis_memory() {
    let dir = std::env::temp_dir().join(format!("tra-cli-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.json");
    // A million-key matmul: its per-site layouts need megabytes.
    std::fs::write(
        &big,
        r#"{"inputs": {"X": {"key_bounds": [1024, 1024], "array_bounds": [4, 4]},
                       "Y": {"key_bounds": [1024, 1], "array_bounds": [4, 4]}},
            "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                      "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
            "outputs": ["Z"], "cluster": {"sites": 4}}"#,
    )
    .unwrap();
    let big = big.to_str().unwrap();
    let (ok, _, err) = tra(&["optimize", big, "--analysis-memory-bytes", "1048576", "--max-ms", "120000"]);
    assert!(!ok, "{err}");
    assert!(err.starts_with("error [limit_exceeded]"), "{err}");
    assert!(err.contains("--analysis-memory-bytes limit of 1.0 MiB"), "{err}");
    for ms in ["1", "20", "200"] {
        for model in ["network", "time"] {
            let (ok, _, err) =
                tra(&["optimize", "examples/ffnn-amazoncat.json", "--max-ms", ms, "--cost-model", model]);
            if !ok {
                assert!(
                    err.starts_with("error [limit_exceeded]") && !err.contains("panicked"),
                    "{ms} ms, {model}: {err}"
                );
            }
        }
    }
    let (ok, _, err) = tra(&["optimize", "examples/ffnn-amazoncat.json", "--max-ms", "1"]);
    assert!(!ok && err.starts_with("error [limit_exceeded]"), "1 ms is too little for any plan: {err}");
}

#[test]
fn einsum_prints_a_summary_or_the_json_report() {
    let dir = std::env::temp_dir().join(format!("tra-cli-einsum-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a: Vec<f64> = (0..12).map(f64::from).collect();
    tra_executor::npy::write_array(&dir.join("a.npy"), &[3, 4], &a).unwrap();
    tra_executor::npy::write_array(&dir.join("b.npy"), &[4, 2], &a[..8]).unwrap();
    let (ai, bi, c) = (
        format!("A={}", dir.join("a.npy").display()),
        format!("B={}", dir.join("b.npy").display()),
        format!("C={}", dir.join("c.npy").display()),
    );
    let (ok, out, err) = tra(&["einsum", "ij,jk->ik", "--input", &ai, "--input", &bi, "--output", &c, "--block", "2"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("einsum ij,jk->ik on 4 sites (block 2"), "{out}");
    assert!(out.contains("as predicted") && out.contains("c.npy  dense (3, 2) float64"), "{out}");
    let (ok, out, err) =
        tra(&["einsum", "ij,jk->ik", "--input", &ai, "--input", &bi, "--format", "json", "--block", "2"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Row 0 of A·B: [0 1 2 3]·[[0 1] [2 3] [4 5] [6 7]] = [28, 34].
    assert_eq!(v["output"]["data"][0], serde_json::json!([28.0, 34.0]), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn calibrate_prints_a_profile_that_optimize_takes() {
    let (ok, out, err) = tra(&["calibrate", "--processes", "2", "--reps", "1"]);
    assert!(ok, "{err}");
    let profile: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    for f in [
        "link_bytes_per_second",
        "site_flops_per_second",
        "memory_bytes_per_second",
        "latency_seconds",
        "output_bytes_per_second",
    ] {
        assert!(profile[f].as_f64().unwrap_or(0.0) > 0.0, "{f}: {out}");
    }
    assert_eq!(profile["bytes_per_float"], 4);
    // Both processes on this machine, sharing its processors, each with its
    // share of them as kernel threads (as `tra run --processes 2` gives).
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(profile["machine_processors"], cores, "{out}");
    assert_eq!(profile["site_threads"], (cores / 2).max(1), "{out}");
    assert_eq!(profile["machine_sites"], 2, "{out}");
    // The GEMM the rate was measured with.
    let gemm = err.lines().find(|l| l.starts_with("GEMM: ")).unwrap_or_else(|| panic!("no GEMM line: {err}"));
    assert!(gemm.starts_with("GEMM: OpenBLAS") || gemm.starts_with("GEMM: built-in ("), "{err}");
    // One short line, blaming no TRA_GEMM=openblas it was not given.
    assert!(gemm.chars().count() <= 120 && !gemm.contains("TRA_GEMM=openblas"), "{gemm}");
    let path = std::env::temp_dir().join(format!("tra-profile-{}.json", std::process::id()));
    std::fs::write(&path, &out).unwrap();
    let (ok, out, err) = tra(&[
        "optimize",
        "examples/matmul.json",
        "--cost-model",
        "time",
        "--profile",
        path.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(ok, "{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["stats"]["cost_model"], "time");
    assert_eq!(answer["cost"]["total"], answer["cost"]["seconds"]);
    let (ok, out, _) = tra(&["optimize", "examples/matmul.json", "--cost-model", "time"]);
    assert!(ok);
    assert!(out.contains("predicted time:") && out.contains("chosen by the time cost model"), "{out}");
    let (ok, _, err) = tra(&["optimize", "examples/matmul.json", "--profile", "no-such-profile.json"]);
    assert!(!ok && err.contains("no-such-profile.json"), "{err}");
}

#[test]
fn calibrate_warns_when_another_program_keeps_the_machine_busy() {
    // Two threads of this test spinning throughout: more than a tenth of any
    // machine this runs on with two to sixteen processors.
    let spinners = common::Spinners::start(2);
    let (ok, out, err) = tra(&["calibrate", "--processes", "2", "--reps", "1", "--block", "64"]);
    drop(spinners);
    assert!(ok, "{err}");
    // Still a profile, with the reason to doubt it.
    let profile: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(profile["site_flops_per_second"].as_f64().unwrap() > 0.0, "{out}");
    // In a container allowed fewer processors than its host has, the
    // calibration cannot tell whose time is on its processors, and is silent.
    if !common::sees_the_whole_machine() {
        assert!(!err.contains("warning: other programs used"), "{err}");
        return;
    }
    assert!(
        err.contains("warning: other programs used") && err.contains("measure again when the machine is quiet"),
        "{err}"
    );
}

#[test]
fn bench_names_workloads_measured_while_another_program_kept_the_machine_busy() {
    let spinners = common::Spinners::start(2);
    let (ok, out, err) = tra(&["bench", "--reps", "30", "--only", "=matmul"]);
    drop(spinners);
    assert!(ok && out.contains("matmul"), "{err}");
    if common::sees_the_whole_machine() {
        assert!(err.contains("warning: other programs or the hypervisor took more than 10%"), "{err}");
        assert!(err.contains("likely slow: matmul ("), "{err}");
    }
}

#[test]
fn calibrate_names_what_is_wrong_with_its_arguments() {
    let (ok, _, err) = tra(&["calibrate", "--processes", "2", "--block", "0"]);
    assert!(!ok && err.contains("--block 0") && err.contains("between 16 and 4096"), "{err}");
    let dir = std::env::temp_dir().join(format!("tra-calibrate-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("absent.txt");
    let (ok, _, err) = tra(&["calibrate", "--hosts", missing.to_str().unwrap()]);
    assert!(!ok && err.contains("cannot read the host file"), "{err}");
    let bad = dir.join("hosts.txt");
    std::fs::write(&bad, "garbage line\n").unwrap();
    let (ok, _, err) = tra(&["calibrate", "--hosts", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("line 1") && err.contains("is not HOST:PORT"), "{err}");
    // Nothing was written beside the host file.
    let mut left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, vec![std::ffi::OsString::from("hosts.txt")]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tra serve --cost-model` takes the two models by name and refuses
/// anything else before it listens, naming the values it takes.
#[test]
fn serve_refuses_a_cost_model_it_does_not_have() {
    for bad in ["fast", "Time", ""] {
        let (ok, _, err) = tra(&["serve", "--addr", "127.0.0.1:0", "--cost-model", bad]);
        assert!(!ok, "--cost-model {bad:?} was accepted");
        assert!(err.contains("--cost-model") && err.contains("network") && err.contains("time"), "{bad:?}: {err}");
    }
}

#[test]
fn serve_refuses_a_cpu_slot_count_it_cannot_keep_threads_for() {
    for bad in ["0", "100000"] {
        let (ok, _, err) = tra(&["serve", "--addr", "127.0.0.1:0", "--max-concurrent-optimizations", bad]);
        assert!(!ok, "--max-concurrent-optimizations {bad} was accepted");
        assert!(err.contains("--max-concurrent-optimizations") && err.contains("between 1 and 512"), "{err}");
    }
}

#[test]
fn kernels_lists_the_catalog_as_get_v1_kernels_does() {
    let (ok, out, err) = tra(&["kernels", "--format", "json"]);
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed, serde_json::to_value(tra_optimizer::kernel::catalog()).unwrap());
    let (ok, text, _) = tra(&["kernels"]);
    assert!(ok);
    for k in tra_optimizer::kernel::catalog() {
        assert!(
            text.contains(&format!("{} (arity {})", k.name, k.arity)) && text.contains(k.doc),
            "{}: {text}",
            k.name
        );
    }
    let (ok, md, _) = tra(&["kernels", "--format", "md"]);
    assert!(ok && md.starts_with("| Kernel | Arity |") && md.contains("| `matMul` | 2 |"), "{md}");
}

#[test]
fn the_optimize_summary_says_why_the_chosen_plan_won() {
    let (ok, out, err) = tra(&["optimize", "examples/matmul.json"]);
    assert!(ok, "{err}");
    assert!(out.contains("why: runner-up: CMM — ") && out.contains(" — 1.50× the network floats"), "{out}");
    let (ok, out, err) = tra(&["optimize", "examples/matmul.json", "--sites", "4"]);
    assert!(ok, "{err}");
    assert!(out.contains("why: tied on network floats with RMM") && out.contains("chosen by the tie-break: "), "{out}");
    assert!(out.contains("ties are broken by fewer flops, then fewer network floats, then a fixed order"), "{out}");
}

#[test]
fn help_names_the_paper_in_words() {
    let (ok, out, _) = tra(&["--help"]);
    assert!(ok && !out.contains("paper 004") && out.contains("the TRA paper's Table 1"), "{out}");
}
