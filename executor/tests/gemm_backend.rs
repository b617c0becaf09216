//! The GEMM backends: OpenBLAS against the built-in GEMM on random shapes
//! (0 and 1 included), every transpose kind, f32 and f64, into and
//! accumulating into the output, split over row panels, and called from
//! several threads at once; and the choice `TRA_GEMM` makes, each setting in
//! a process of its own (the choice is made once per process).
//!
//! Without OpenBLAS installed the comparisons say so and pass, unless
//! `TRA_REQUIRE_OPENBLAS` is set (CI sets it: there OpenBLAS is installed).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::process::Command;
use tra_executor::threads::kernels::{
    gemm_backend,
    gemm_backend::{generic_kernels, VectorLevel, CORETYPE_ENV, DESCRIBE_MAX_CHARS, OPENBLAS_LIBRARIES},
    matmul_into, matmul_with, GemmBackend, GemmError, GemmRequest, MatMulKind,
};
use tra_executor::threads::Elem;

const KINDS: [MatMulKind; 4] = [
    MatMulKind { trans_a: false, trans_b: false },
    MatMulKind { trans_a: true, trans_b: false },
    MatMulKind { trans_a: false, trans_b: true },
    MatMulKind { trans_a: true, trans_b: true },
];

/// OpenBLAS, or `None` with the reason printed (a failure when
/// `TRA_REQUIRE_OPENBLAS` is set).
fn openblas() -> Option<GemmBackend> {
    match GemmBackend::select(GemmRequest::OpenBlas) {
        Ok(b) => Some(b),
        Err(e) if std::env::var_os("TRA_REQUIRE_OPENBLAS").is_some() => {
            panic!("TRA_REQUIRE_OPENBLAS is set but OpenBLAS does not load: {e}")
        }
        Err(e) => {
            println!("skipped: OpenBLAS is not installed ({e})");
            None
        }
    }
}

fn random<T: Elem>(rng: &mut ChaCha8Rng, len: usize) -> Vec<T> {
    (0..len).map(|_| T::from_f64(rng.random_range(-1.0..1.0))).collect()
}

/// The stored shapes of A and B for a product `[m,k]·[k,n]` of `kind`.
fn shapes(kind: MatMulKind, m: usize, k: usize, n: usize) -> ([usize; 2], [usize; 2]) {
    let a = if kind.trans_a { [k, m] } else { [m, k] };
    let b = if kind.trans_b { [n, k] } else { [k, n] };
    (a, b)
}

/// Element `(i, j)` of A·B in f64, and the sum of the magnitudes of its terms
/// (the scale of its rounding error).
fn exact<T: Elem>(
    kind: MatMulKind,
    a: &[T],
    b: &[T],
    (m, k, n): (usize, usize, usize),
    i: usize,
    j: usize,
) -> (f64, f64) {
    let (mut s, mut mag) = (0.0, 0.0);
    for l in 0..k {
        let x = if kind.trans_a { a[l * m + i] } else { a[i * k + l] }.to_f64();
        let y = if kind.trans_b { b[j * k + l] } else { b[l * n + j] }.to_f64();
        s += x * y;
        mag += (x * y).abs();
    }
    (s, mag)
}

/// Both backends on one product, each checked against the exact value
/// within the rounding bound of `k` terms in `T` (so they agree with each
/// other too): into a NaN-filled output (which must be overwritten), and
/// accumulating into a random one.
fn check_product<T: Elem>(
    open: &GemmBackend,
    rng: &mut ChaCha8Rng,
    kind: MatMulKind,
    (m, k, n): (usize, usize, usize),
    threads: usize,
) {
    let (sa, sb) = shapes(kind, m, k, n);
    let a: Vec<T> = random(rng, m * k);
    let b: Vec<T> = random(rng, k * n);
    let start: Vec<T> = random(rng, m * n);
    let eps = if T::DTYPE == tra_executor::threads::Dtype::F32 { f32::EPSILON as f64 } else { f64::EPSILON };
    for accumulate in [false, true] {
        let init = if accumulate { start.clone() } else { vec![T::from_f64(f64::NAN); m * n] };
        let mut results = Vec::new();
        for backend in [open, &GemmBackend::Builtin] {
            let mut out = init.clone();
            matmul_with(backend, kind, &mut out, &a, &sa, &b, &sb, accumulate, threads);
            results.push(out);
        }
        let what = format!("{} {kind:?} m={m} k={k} n={n} accumulate={accumulate} threads={threads}", T::DTYPE.name());
        for i in 0..m {
            for j in 0..n {
                let (s, mag) = exact(kind, &a, &b, (m, k, n), i, j);
                let c0 = if accumulate { start[i * n + j].to_f64() } else { 0.0 };
                let want = c0 + s;
                let tol = 4.0 * (k as f64 + 2.0) * eps * (mag + c0.abs()) + f64::MIN_POSITIVE;
                for (r, name) in results.iter().zip([open.name(), "builtin"]) {
                    let got = r[i * n + j].to_f64();
                    assert!((got - want).abs() <= tol, "{name}, {what}: ({i},{j}) is {got}, expected {want} ± {tol}");
                }
            }
        }
        if m * n > 0 && k == 0 && !accumulate {
            assert!(results[0].iter().all(|x| x.to_f64() == 0.0), "{what}: an empty sum is zero");
        }
    }
}

#[test]
fn openblas_agrees_with_the_builtin_gemm() {
    let Some(open) = openblas() else { return };
    assert_eq!(open.name(), "openblas");
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut dims: Vec<(usize, usize, usize)> = vec![
        (0, 0, 0),
        (0, 3, 4),
        (3, 0, 4),
        (3, 4, 0),
        (1, 1, 1),
        (1, 7, 1),
        (1, 1, 9),
        (9, 1, 1),
        (1, 300, 1),
        (64, 64, 64),
        (130, 70, 90),
    ];
    for _ in 0..12 {
        dims.push((rng.random_range(0..40), rng.random_range(0..40), rng.random_range(0..40)));
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    pool.install(|| {
        for &d in &dims {
            for kind in KINDS {
                for threads in [1, 3] {
                    check_product::<f32>(&open, &mut rng, kind, d, threads);
                    check_product::<f64>(&open, &mut rng, kind, d, threads);
                }
            }
        }
    });
}

#[test]
fn openblas_calls_from_several_threads_at_once() {
    // Kernel threads each run their own single-threaded OpenBLAS calls at
    // the same time: every result must be that call's own.
    let Some(open) = openblas() else { return };
    use rayon::prelude::*;
    let (m, k, n) = (96, 80, 72);
    let kind = KINDS[0];
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let cases: Vec<(Vec<f32>, Vec<f32>)> =
        (0..32).map(|_| (random(&mut rng, m * k), random(&mut rng, k * n))).collect();
    let want: Vec<Vec<f32>> = cases
        .iter()
        .map(|(a, b)| {
            let mut c = vec![0.0; m * n];
            matmul_with(&open, kind, &mut c, a, &[m, k], b, &[k, n], false, 1);
            c
        })
        .collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    for _ in 0..4 {
        let got: Vec<Vec<f32>> = pool.install(|| {
            cases
                .par_iter()
                .map(|(a, b)| {
                    let mut c = vec![f32::NAN; m * n];
                    matmul_with(&open, kind, &mut c, a, &[m, k], b, &[k, n], false, 1);
                    c
                })
                .collect()
        });
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "product {i} computed concurrently differs from the same product alone");
        }
    }
}

#[test]
fn settings_parse_and_a_missing_library_is_named() {
    assert_eq!(GemmRequest::parse("auto").unwrap(), GemmRequest::Auto);
    assert_eq!(GemmRequest::parse("").unwrap(), GemmRequest::Auto);
    assert_eq!(GemmRequest::parse("OpenBLAS").unwrap(), GemmRequest::OpenBlas);
    assert_eq!(GemmRequest::parse("builtin").unwrap(), GemmRequest::Builtin);
    let e = GemmRequest::parse("mkl").unwrap_err();
    assert!(matches!(&e, GemmError::BadSetting(s) if s == "mkl"));
    assert!(e.to_string().contains("TRA_GEMM=\"mkl\""), "{e}");

    let missing = "libtra-no-such-blas.so.0";
    let e = GemmBackend::select_from(GemmRequest::OpenBlas, &[missing]).unwrap_err();
    assert!(e.to_string().contains(missing) && e.to_string().contains("TRA_GEMM=openblas"), "{e}");
    // The loader's own reason is kept, for every library tried.
    #[cfg(target_os = "linux")]
    {
        let e = GemmBackend::select_from(GemmRequest::OpenBlas, &[missing, "libtra-other.so"]).unwrap_err().to_string();
        assert!(e.contains(&format!("{missing}: dlopen failed: {missing}: cannot open shared object file")), "{e}");
        assert!(e.contains("libtra-other.so: dlopen failed: libtra-other.so: cannot open"), "{e}");
    }
    // Auto falls back to the built-in GEMM; builtin never opens anything.
    let fallback = GemmBackend::select_from(GemmRequest::Auto, &[missing]).unwrap();
    assert_eq!(fallback.name(), "builtin");
    // `auto` says why it did not take OpenBLAS: in short, blaming no
    // `TRA_GEMM=openblas` it was not given; in full, with the library tried.
    assert_eq!(fallback.describe(), "built-in (OpenBLAS not found)");
    assert!(fallback.details().contains(missing) && !fallback.details().contains("TRA_GEMM"), "{}", fallback.details());
    assert_eq!(GemmBackend::select_from(GemmRequest::Builtin, &["libopenblas.so.0"]).unwrap().name(), "builtin");
    // A library without the CBLAS symbols is refused, naming the symbol.
    if let Err(e) = GemmBackend::select_from(GemmRequest::OpenBlas, &["libc.so.6"]) {
        assert!(e.to_string().contains("cblas_sgemm"), "{e}");
    }
}

/// Kernels without AVX2 and FMA on a processor that has them are OpenBLAS's
/// fallback (it did not know the processor); kernels a level below the
/// processor's, or names not known here, are not judged.
#[test]
fn openblas_fallback_kernels_are_told_from_its_own_choices() {
    use VectorLevel::*;
    let why = generic_kernels("Prescott", None, Some(Avx512)).expect("Prescott kernels on AVX-512 are the fallback");
    assert!(why.contains("Prescott") && why.contains("AVX-512") && why.contains("OPENBLAS_CORETYPE=SkylakeX"), "{why}");
    let why = generic_kernels("sandybridge", None, Some(Avx2)).expect("AVX kernels on AVX2 and FMA are the fallback");
    assert!(why.contains("OPENBLAS_CORETYPE=Haswell"), "{why}");
    assert!(generic_kernels("CORE2", None, Some(Avx2)).is_some(), "names are case-insensitive");
    // OpenBLAS's own choices for processors it knows.
    for core in ["Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"] {
        assert_eq!(generic_kernels(core, None, Some(Avx512)), None, "{core}");
    }
    // The processor has nothing better, or is not judged.
    assert_eq!(generic_kernels("Prescott", None, Some(Avx)), None);
    assert_eq!(generic_kernels("Sandybridge", None, Some(Avx)), None);
    assert_eq!(generic_kernels("Prescott", None, None), None);
    assert_eq!(generic_kernels("NeoverseN1", None, Some(Avx512)), None);
    assert_eq!(generic_kernels("", None, Some(Avx512)), None);
    // Kernels asked for with OPENBLAS_CORETYPE and run are the user's
    // choice; a name the library did not take (or an empty one) chose nothing.
    assert_eq!(generic_kernels("Prescott", Some("prescott"), Some(Avx512)), None);
    assert!(generic_kernels("Prescott", Some("NoSuchCore"), Some(Avx512)).is_some());
    assert!(generic_kernels("Prescott", Some(""), Some(Avx512)).is_some());
    assert_eq!(VectorLevel::of_openblas_core("Haswell"), Some(Avx2));
    assert!(Sse < Avx && Avx < Avx2 && Avx2 < Avx512);
}

#[test]
fn a_serial_openblas_is_refused() {
    // In a process of its own: once the serial build is loaded, the loader
    // hands it out for the soname `libopenblas.so.0` to every later caller
    // in the process, the other tests here included.
    run_alone("serial_openblas_in_this_process", &[]);
}

#[test]
#[ignore = "run by a_serial_openblas_is_refused in a process of its own"]
fn serial_openblas_in_this_process() {
    // Debian's serial build (libopenblas0-serial; CI installs it beside the
    // threaded one, which stays libopenblas.so.0): it does not say whether it
    // locks, so several kernel threads must not call it at once.
    let serial = "/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0";
    if !std::path::Path::new(serial).exists() {
        assert!(
            std::env::var_os("TRA_REQUIRE_OPENBLAS").is_none(),
            "TRA_REQUIRE_OPENBLAS is set but {serial} is missing"
        );
        println!("skipped: {serial} is not installed");
        return;
    }
    let e = GemmBackend::select_from(GemmRequest::OpenBlas, &[serial]).unwrap_err().to_string();
    assert!(e.contains(serial) && e.contains("serial build"), "{e}");
    let fallback = GemmBackend::select_from(GemmRequest::Auto, &[serial]).unwrap();
    assert_eq!(fallback.name(), "builtin");
    assert!(fallback.describe().contains("serial"), "{}", fallback.describe());
    assert!(fallback.describe().chars().count() <= DESCRIBE_MAX_CHARS, "{}", fallback.describe());
    assert!(fallback.details().contains(serial) && !fallback.details().contains("TRA_GEMM"), "{}", fallback.details());
    // When the soname gives the serial build (here: it is loaded already, as
    // when update-alternatives chose it), the search goes on to the threaded
    // build by its path.
    // SAFETY: loading OpenBLAS only runs its own initialisers.
    let _resident = unsafe { libloading::Library::new(serial) }.unwrap();
    let threaded = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";
    assert!(OPENBLAS_LIBRARIES.contains(&threaded));
    if std::path::Path::new(threaded).exists() {
        let soname = GemmBackend::select_from(GemmRequest::OpenBlas, &["libopenblas.so.0"]).unwrap_err().to_string();
        assert!(soname.contains("serial build"), "{soname}");
        let b = GemmBackend::select(GemmRequest::OpenBlas).unwrap();
        assert_eq!(b.name(), "openblas");
        assert!(b.details().contains("openblas-pthread"), "{}", b.details());
        assert!(b.describe().starts_with("OpenBLAS"), "{}", b.describe());
    }
}

/// Run the ignored test `name` in a process of its own with `env`, and check
/// that it ran and passed.
fn run_alone(name: &str, env: &[(&str, &str)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"]);
    cmd.env_remove("TRA_GEMM").env_remove("TRA_OPENBLAS_LIB").env_remove(CORETYPE_ENV);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} with {env:?}:\n{text}");
    assert!(text.contains("1 passed"), "{name} with {env:?} did not run:\n{text}");
}

/// Run [`gemm_choice_in_this_process`] in a process of its own with `env`.
fn child(env: &[(&str, &str)]) {
    run_alone("gemm_choice_in_this_process", env);
}

#[test]
fn tra_gemm_chooses_the_gemm_of_the_runtimes() {
    let installed = openblas().is_some();
    child(&[("TRA_GEMM", "builtin"), ("EXPECT", "builtin")]);
    child(&[("TRA_GEMM", "openblas"), ("TRA_OPENBLAS_LIB", "/nonexistent/libopenblas.so.0"), ("EXPECT", "error")]);
    child(&[("TRA_GEMM", "fastest"), ("EXPECT", "error")]);
    if installed {
        // OpenBLAS, unless its kernels here are its fallback (then the
        // built-in GEMM, saying why): the child finds out which.
        child(&[("EXPECT", "auto")]);
        child(&[("TRA_GEMM", "openblas"), ("EXPECT", "openblas")]);
        // Kernels chosen with OPENBLAS_CORETYPE are the user's choice, kept
        // even where they are the slow fallback.
        child(&[(CORETYPE_ENV, "Prescott"), ("EXPECT", "openblas"), ("EXPECT_CORE", "Prescott")]);
        if let Some(fast) = VectorLevel::of_this_processor().and_then(VectorLevel::openblas_core) {
            child(&[(CORETYPE_ENV, fast), ("EXPECT", "openblas"), ("EXPECT_CORE", fast)]);
        }
        // A name OpenBLAS does not know chooses nothing: the kernels it runs
        // then (its detection's; 0.3.21 takes its Cooperlake ones) are judged.
        child(&[(CORETYPE_ENV, "NoSuchCore"), ("EXPECT", "auto")]);
    } else {
        child(&[("EXPECT", "builtin")]);
    }
}

#[test]
#[ignore = "run by tra_gemm_chooses_the_gemm_of_the_runtimes in a process of its own, with TRA_GEMM set"]
fn gemm_choice_in_this_process() {
    use std::collections::BTreeMap;
    use tra_executor::reference::random_inputs;
    use tra_executor::threads::{RunOptions, TRelation, ThreadRuntime};
    let expect = std::env::var("EXPECT").expect("EXPECT names the outcome");
    let p = tra_optimizer::Plan::from_json(
        r#"{"inputs": {"X": {"key_bounds": [2, 2], "array_bounds": [40, 30]},
                       "Y": {"key_bounds": [2, 2], "array_bounds": [30, 20]}},
            "nodes": {"j": {"op": "local_join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0],
                            "kernel": "matMul"},
                      "Z": {"op": "local_aggregate", "input": "j", "group_by": [0, 2], "kernel": "matAdd"}},
            "outputs": ["Z"]}"#,
    )
    .unwrap();
    let rt = ThreadRuntime::<f32>::with_threads(2);
    let data: BTreeMap<String, TRelation<f32>> = random_inputs(&p.inputs, 3)
        .unwrap()
        .iter()
        .map(|(n, r)| (n.clone(), TRelation::from_relation(r, rt.pool())))
        .collect();
    let run = rt.run(&p, 1, &data, &RunOptions::default());
    if expect == "error" {
        // A clear error of the run, naming the setting or the library.
        let e = run.unwrap_err().to_string();
        let setting = std::env::var("TRA_GEMM").unwrap();
        let named = std::env::var("TRA_OPENBLAS_LIB").unwrap_or(setting);
        assert!(e.contains(&named) && e.contains("TRA_GEMM"), "{e}");
        assert!(gemm_backend().is_err());
        return;
    }
    // `auto`: OpenBLAS, or the built-in GEMM where OpenBLAS runs its
    // fallback kernels on this processor (OPENBLAS_CORETYPE unset).
    let (generic, core, config) = match GemmBackend::select(GemmRequest::OpenBlas) {
        Ok(GemmBackend::OpenBlas(o)) => {
            (o.generic_kernels().map(str::to_string), o.core().to_string(), o.config().to_string())
        }
        _ => (None, String::new(), String::new()),
    };
    let expect = match expect.as_str() {
        "auto" if generic.is_some() => "builtin".to_string(),
        "auto" => "openblas".to_string(),
        other => other.to_string(),
    };
    let chosen = gemm_backend().unwrap();
    assert_eq!(chosen.name(), expect);
    let run = run.unwrap();
    assert!(run.report.gemm_detail.starts_with(&expect), "{}", run.report.gemm_detail);
    // The report's line is the short one, naming the GEMM that ran.
    assert_eq!(run.report.gemm, chosen.describe());
    let named = if expect == "builtin" { "built-in (" } else { "OpenBLAS" };
    assert!(run.report.gemm.starts_with(named), "{}", run.report.gemm);
    assert!(run.report.gemm.chars().count() <= DESCRIBE_MAX_CHARS, "{}", run.report.gemm);
    if std::env::var("TRA_GEMM").map_or(true, |g| !g.eq_ignore_ascii_case("openblas")) {
        assert!(!run.report.gemm.contains("TRA_GEMM=openblas"), "{}", run.report.gemm);
        assert!(!run.report.gemm_detail.contains("TRA_GEMM=openblas"), "{}", run.report.gemm_detail);
    }
    if let Ok(want) = std::env::var("EXPECT_CORE") {
        // OPENBLAS_CORETYPE is taken by a DYNAMIC_ARCH build.
        if config.contains("DYNAMIC_ARCH") {
            assert!(core.eq_ignore_ascii_case(&want), "asked for {want}, runs {core}: {}", run.report.gemm);
        }
    }
    match std::env::var(CORETYPE_ENV) {
        Ok(asked) if core.eq_ignore_ascii_case(&asked) => {
            // The user's choice, taken by the library: never judged.
            assert!(generic.is_none() && !run.report.gemm_detail.contains("slow"), "{}", run.report.gemm_detail);
            assert!(!run.report.gemm.contains("slow"), "{}", run.report.gemm);
        }
        _ => {
            // No choice (or a name the library did not take): its kernels
            // are judged against this processor.
            if !core.is_empty() {
                let asked = std::env::var(CORETYPE_ENV).ok();
                let judged = generic_kernels(&core, asked.as_deref(), VectorLevel::of_this_processor());
                assert_eq!(generic.is_some(), judged.is_some(), "{core}: {}", run.report.gemm);
            }
            if let (Some(why), false) = (&generic, matches!(chosen, GemmBackend::Builtin)) {
                // OpenBLAS asked for, or `auto`'s fallback: the report says
                // why OpenBLAS is slow here and what to set.
                assert!(
                    why.contains(CORETYPE_ENV) && run.report.gemm_detail.contains(why.as_str()),
                    "{}",
                    run.report.gemm_detail
                );
                // and in short, which OPENBLAS_CORETYPE gives the fast kernels.
                assert!(run.report.gemm.contains(CORETYPE_ENV), "{}", run.report.gemm);
            }
        }
    }
    // The kernels call the chosen backend: matmul_into's result is bit for
    // bit that backend's, and (with OpenBLAS installed) not the other's on
    // a product where their rounding differs.
    let (m, k, n) = (64, 500, 48);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (a, b): (Vec<f32>, Vec<f32>) = (random(&mut rng, m * k), random(&mut rng, k * n));
    let by = |backend: &GemmBackend| {
        let mut c = vec![0.0f32; m * n];
        matmul_with(backend, KINDS[0], &mut c, &a, &[m, k], &b, &[k, n], false, 1);
        c
    };
    let mut got = vec![0.0f32; m * n];
    matmul_into(KINDS[0], &mut got, &a, &[m, k], &b, &[k, n], false);
    assert!(got == by(chosen), "matmul_into did not use the chosen {expect} GEMM");
    if let Ok(open) = GemmBackend::select(GemmRequest::OpenBlas) {
        let other = if expect == "builtin" { by(&open) } else { by(&GemmBackend::Builtin) };
        assert!(got != other, "the two GEMMs round this product alike: the check above cannot tell them apart");
    }
}

/// With `OPENBLAS_NUM_THREADS=1` in the environment at load, a threaded
/// OpenBLAS starts no threads of its own (they would wait busily beside the
/// kernel threads); without it, the pool it started is reported.
#[test]
fn openblas_starts_no_pool_with_one_thread_in_the_environment() {
    if openblas().is_none() {
        return;
    }
    let (var, one) = gemm_backend::ONE_THREAD_ENV;
    run_alone("openblas_pool_in_this_process", &[(var, one), ("EXPECT_POOL", "0")]);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    // Debian's threaded build starts one thread per core but the caller's.
    let expected = (cores - 1).to_string();
    run_alone("openblas_pool_in_this_process", &[(var, ""), ("EXPECT_POOL", expected.as_str())]);
}

#[test]
#[ignore = "run by openblas_starts_no_pool_with_one_thread_in_the_environment in a process of its own"]
fn openblas_pool_in_this_process() {
    let expect: usize = std::env::var("EXPECT_POOL").unwrap().parse().unwrap();
    // The first load of the process (a second one finds the count set to 1).
    let Some(GemmBackend::OpenBlas(o)) = openblas() else { panic!("OpenBLAS loads in the parent") };
    let pool = o.pool_threads();
    let backend = GemmBackend::OpenBlas(o);
    assert!(backend.describe().chars().count() <= DESCRIBE_MAX_CHARS, "{}", backend.describe());
    let described = backend.details();
    assert_eq!(pool, expect, "{described}");
    assert_eq!(described.contains("idle thread"), expect > 0, "{described}");
}
