//! Which GEMM computes the matrix products: the system's OpenBLAS when it is
//! installed, the `gemm` crate (built in) otherwise.
//!
//! OpenBLAS's hand-tuned kernels reach about a third more flops per core than
//! the `gemm` crate on current x86 servers, and every matrix product of both
//! runtimes goes through [`super::matmul_into_par`], so the choice sets the
//! speed of matmul-bound plans. OpenBLAS is opened at run time (`dlopen` of
//! `libopenblas.so.0`, the soname of Debian's `libopenblas0-pthread` and
//! `libopenblas0-serial` and of most distributions' packages, then the
//! threaded build by its path when the soname gives a build that is refused),
//! once, on the first matrix product or the first check: nothing links against it, so the
//! workspace builds and runs on a machine without it.
//!
//! `TRA_GEMM` chooses: `auto` (the default: OpenBLAS if it loads, else the
//! built-in GEMM), `openblas` (OpenBLAS or an error naming the library tried)
//! or `builtin`; `TRA_OPENBLAS_LIB` names another library file to open. The runtimes check the choice where they start
//! ([`gemm_backend`]), so that a missing library is an error of the run, not a
//! failure inside a kernel thread.
//!
//! **Reports.** [`GemmBackend::describe`] is one short line (at most
//! [`DESCRIBE_MAX_CHARS`] characters) saying which GEMM runs and why, naming
//! no setting the user did not make (`built-in (OpenBLAS not found)`);
//! [`GemmBackend::details`] has the rest (the library's path and build, each
//! library tried and its loader's message), for `RUST_LOG=debug` logs and the
//! reports' `gemm_detail`. `docs/gemm.md` explains both to users.
//!
//! **Threads.** The runtimes already run one GEMM per kernel thread (over
//! output blocks, or over row panels of one product), so OpenBLAS must not
//! start threads of its own: on loading, its thread count is set to one
//! (`openblas_set_num_threads(1)`), and every call then runs on the caller's
//! thread. That setting comes too late for the pool a threaded build starts
//! when it is loaded (one thread per core but one), whose threads wait for
//! work busily (yielding) for about a tenth of a second before they sleep:
//! measured on 2 cores, 0.12 s of processor time after each load, taken
//! from the job that loaded it (a 2-process matmul of 0.12 s used 20–30%
//! more processor time). The pool is not started when
//! `OPENBLAS_NUM_THREADS=1` is in the environment at load: the `tra`
//! command sets it when it starts, for itself and the processes it starts
//! ([`ONE_THREAD_ENV`]); a program that links this crate should do the
//! same. [`OpenBlas::pool_threads`] reports the pool found at load. Calls from several threads at once are safe with OpenBLAS built
//! with threading (`USE_THREAD=1`, Debian's `libopenblas0-pthread`, which
//! then also takes its buffer-allocation locks) or with `USE_LOCKING=1`;
//! a serial build without locking shares buffers between concurrent calls
//! unguarded, and a serial build does not say whether it locks, so a serial
//! build (`openblas_get_parallel() == 0`) is refused (`auto` then takes the
//! built-in GEMM). The package to install is therefore `libopenblas0-pthread`.
//! OpenBLAS's integers are 32-bit (the `64_`-suffixed ILP64 builds are other
//! libraries): a product with a dimension past `i32::MAX` goes to the built-in
//! GEMM.
//!
//! **A processor newer than the library.** A `DYNAMIC_ARCH` OpenBLAS picks
//! its kernels by the processor's model when it is loaded, and a model it
//! does not know gets its oldest kernels: Debian 12's OpenBLAS 0.3.21 runs
//! its `Prescott` (SSE3) kernels on an Emerald Rapids Xeon (family 6, model
//! 207), and a 2-process 4096² `f32` matmul took 2.8 s with them, 0.74–0.94 s
//! with the built-in GEMM and 0.76–0.82 s with the same library told to use
//! its AVX-512 kernels (`OPENBLAS_CORETYPE=SkylakeX`). So the library's
//! kernels ([`OpenBlas::core`], `openblas_get_corename`) are checked against
//! the processor when `OPENBLAS_CORETYPE` is not set: kernels without AVX2
//! and FMA on a processor that has them are the library's fallback
//! ([`generic_kernels`]), and `auto` then takes the built-in GEMM, saying
//! why and which `OPENBLAS_CORETYPE` would give the library's fast kernels
//! (`TRA_GEMM=openblas` keeps OpenBLAS, and its description says the same).
//! A core chosen with `OPENBLAS_CORETYPE` is the user's choice, and kept; a
//! name the library did not take chose nothing (it prints "Core not found"
//! and runs other kernels, which are judged).

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use crate::threads::elem::{Dtype, Elem};

/// The environment that keeps a threaded OpenBLAS from starting its own
/// pool of threads when it is loaded (see the module's doc): it must be set
/// before the library is opened, so before any thread of the process might
/// read the environment (the `tra` command sets it first thing in `main`).
pub const ONE_THREAD_ENV: (&str, &str) = ("OPENBLAS_NUM_THREADS", "1");

/// The environment variable that chooses the GEMM.
pub const GEMM_ENV: &str = "TRA_GEMM";

/// The environment variable a `DYNAMIC_ARCH` OpenBLAS reads when it is
/// loaded: the kernels to use instead of those its detection picks.
pub const CORETYPE_ENV: &str = "OPENBLAS_CORETYPE";

/// The widest vector instructions a processor has (or a set of OpenBLAS
/// kernels uses), as far as matrix products are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VectorLevel {
    /// SSE, up to SSE4.2.
    Sse,
    /// AVX, without AVX2 and FMA.
    Avx,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512 (F, BW, DQ and VL: what OpenBLAS's `SkylakeX` kernels use).
    Avx512,
}

impl VectorLevel {
    /// This processor's level (as the operating system lets programs use it);
    /// `None` on other architectures than x86-64.
    pub fn of_this_processor() -> Option<VectorLevel> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            Some(if has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
                VectorLevel::Avx512
            } else if has!("avx2") && has!("fma") {
                VectorLevel::Avx2
            } else if has!("avx") {
                VectorLevel::Avx
            } else {
                VectorLevel::Sse
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// The level of an x86 OpenBLAS core (`openblas_get_corename`, the
    /// names of its `dynamic.c`, case-insensitive); `None` for a name not
    /// listed here (another architecture, or a core newer than this list).
    pub fn of_openblas_core(core: &str) -> Option<VectorLevel> {
        #[rustfmt::skip]
        const SSE: &[&str] = &[
            "katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn", "dunnington",
            "nehalem", "athlon", "opteron", "opteron_sse3", "barcelona", "nano", "bobcat",
        ];
        const AVX: &[&str] = &["sandybridge", "bulldozer", "piledriver", "steamroller"];
        const AVX2: &[&str] = &["haswell", "zen", "excavator"];
        const AVX512: &[&str] = &["skylakex", "cooperlake", "sapphirerapids"];
        let core = core.trim().to_ascii_lowercase();
        [(SSE, VectorLevel::Sse), (AVX, VectorLevel::Avx), (AVX2, VectorLevel::Avx2), (AVX512, VectorLevel::Avx512)]
            .into_iter()
            .find(|(names, _)| names.contains(&core.as_str()))
            .map(|(_, level)| level)
    }

    /// The OpenBLAS core (for [`CORETYPE_ENV`]) that uses this level's
    /// instructions for its matrix products; `None` below AVX2.
    pub fn openblas_core(self) -> Option<&'static str> {
        match self {
            VectorLevel::Avx512 => Some("SkylakeX"),
            VectorLevel::Avx2 => Some("Haswell"),
            VectorLevel::Sse | VectorLevel::Avx => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            VectorLevel::Sse => "SSE",
            VectorLevel::Avx => "AVX",
            VectorLevel::Avx2 => "AVX2 and FMA",
            VectorLevel::Avx512 => "AVX-512",
        }
    }
}

/// Why OpenBLAS's `core` kernels are its fallback on a processor of level
/// `cpu`, or `None` when they are not: they lack AVX2 and FMA, which the
/// processor has (the library did not know the processor's model). Kernels
/// one level below the processor's (AVX2 on an AVX-512 processor) are a
/// choice OpenBLAS makes for some processors it knows, and are kept. So are
/// the kernels `asked` for ([`CORETYPE_ENV`]'s value) when they are the ones
/// it runs: the user's choice. A name it did not take chose nothing.
pub fn generic_kernels(core: &str, asked: Option<&str>, cpu: Option<VectorLevel>) -> Option<String> {
    if asked.is_some_and(|a| !a.trim().is_empty() && a.trim().eq_ignore_ascii_case(core.trim())) {
        return None;
    }
    let cpu = cpu?;
    let kernels = VectorLevel::of_openblas_core(core)?;
    if kernels >= VectorLevel::Avx2 || cpu < VectorLevel::Avx2 {
        return None;
    }
    let suggest = cpu.openblas_core()?;
    Some(format!(
        "it runs its {core} kernels ({}) on a processor with {}: it did not recognise the processor (a library \
         older than the processor, or built without those kernels), and its fallback is several times slower; \
         {CORETYPE_ENV}={suggest} makes it use its {suggest} kernels, or install a newer OpenBLAS",
        kernels.name(),
        cpu.name()
    ))
}

/// The environment variable naming the OpenBLAS library to open instead of
/// [`OPENBLAS_LIBRARIES`] (a path, or a name the loader searches for).
pub const OPENBLAS_LIB_ENV: &str = "TRA_OPENBLAS_LIB";

/// The shared libraries tried, in order, for OpenBLAS.
#[cfg(target_os = "macos")]
pub const OPENBLAS_LIBRARIES: &[&str] = &["libopenblas.0.dylib", "libopenblas.dylib"];
/// The shared libraries tried, in order, for OpenBLAS: the soname first,
/// then the threaded builds by path (Debian and Ubuntu install them beside a
/// serial or OpenMP build and pick one for the soname with
/// `update-alternatives`, which may name a build that is refused, or be
/// missing from the loader's cache), then Fedora's threaded soname.
#[cfg(not(target_os = "macos"))]
pub const OPENBLAS_LIBRARIES: &[&str] = &[
    "libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "libopenblasp.so.0",
    "libopenblas.so",
];

/// An error and its sources, `: `-separated (libloading's own message is
/// only "dlopen failed"; the loader's reason is its source).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// What `TRA_GEMM` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmRequest {
    /// OpenBLAS if it loads, else the built-in GEMM.
    Auto,
    /// OpenBLAS, or an error.
    OpenBlas,
    /// The built-in GEMM (the `gemm` crate).
    Builtin,
}

impl GemmRequest {
    /// Parse a value of `TRA_GEMM` (case-insensitive; empty is `auto`).
    pub fn parse(s: &str) -> Result<GemmRequest, GemmError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(GemmRequest::Auto),
            "openblas" => Ok(GemmRequest::OpenBlas),
            "builtin" => Ok(GemmRequest::Builtin),
            _ => Err(GemmError::BadSetting(s.to_string())),
        }
    }

    /// What `TRA_GEMM` asks for (`auto` when unset).
    pub fn from_env() -> Result<GemmRequest, GemmError> {
        match std::env::var(GEMM_ENV) {
            Ok(v) => GemmRequest::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(GemmRequest::Auto),
            Err(std::env::VarError::NotUnicode(v)) => Err(GemmError::BadSetting(v.to_string_lossy().into_owned())),
        }
    }
}

/// Why the GEMM asked for cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GemmError {
    /// `TRA_GEMM` has a value other than the three known.
    #[error("{GEMM_ENV}={0:?}: expected `openblas`, `builtin` or `auto`")]
    BadSetting(String),
    /// OpenBLAS was asked for and does not load.
    #[error(
        "{GEMM_ENV}=openblas: cannot load OpenBLAS (tried {tried}): {reason}; install it (Debian: \
         `apt-get install libopenblas0-pthread`) or set {GEMM_ENV}=builtin or auto"
    )]
    OpenBlasUnavailable {
        /// The libraries tried, comma-separated.
        tried: String,
        /// Why each one failed (the loader's message, a missing symbol, or
        /// a serial build), `; `-separated.
        reason: String,
    },
}

/// `cblas_sgemm` / `cblas_dgemm`: (order, transa, transb, m, n, k, alpha, a,
/// lda, b, ldb, beta, c, ldc).
type CblasGemm<F> = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    F,
    *const F,
    c_int,
    *const F,
    c_int,
    F,
    *mut F,
    c_int,
);

const CBLAS_ROW_MAJOR: c_int = 101;
const CBLAS_NO_TRANS: c_int = 111;
const CBLAS_TRANS: c_int = 112;

/// Why a library tried for OpenBLAS was not taken, from the least telling
/// to the most (the order [`OpenBlas::open_all`] keeps the largest of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Refusal {
    /// It does not load (absent, as a rule).
    NotFound,
    /// It loads but lacks OpenBLAS's CBLAS symbols.
    NotOpenBlas,
    /// A serial build of OpenBLAS (see the module's doc).
    Serial,
}

/// `s` cut to at most `max` characters (an ellipsis marking the cut), so
/// that what a library says of itself cannot stretch [`GemmBackend::describe`].
fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// [`generic_kernels`]'s finding in a few words: the kernels `core` and the
/// `OPENBLAS_CORETYPE` that gives the fast ones on a processor of level `cpu`.
fn generic_short(core: &str, cpu: VectorLevel) -> Option<String> {
    let suggest = cpu.openblas_core()?;
    Some(format!("{} kernels here; {CORETYPE_ENV}={suggest} enables its {} ones", short(core, 16), cpu.name()))
}

/// [`GemmBackend::describe`] of OpenBLAS with this build description
/// (`openblas_get_config`), kernels, [`generic_short`] and pool.
fn describe_openblas(config: &str, core: &str, generic_short: Option<&str>, pool_threads: usize) -> String {
    // `openblas_get_config` starts with "OpenBLAS 0.3.21 …".
    let mut words = config.split_whitespace();
    let version = match (words.next(), words.next()) {
        (Some("OpenBLAS"), Some(v)) => format!("OpenBLAS {}", short(v, 24)),
        _ => "OpenBLAS".to_string(),
    };
    let mut notes = Vec::new();
    match generic_short {
        Some(s) => notes.push(format!("slow: runs its {s}")),
        None if !core.trim().is_empty() => notes.push(format!("{} kernels", short(core.trim(), 20))),
        None => {}
    }
    let line = |notes: &[String]| {
        if notes.is_empty() {
            version.clone()
        } else {
            format!("{version} ({})", notes.join("; "))
        }
    };
    let without_pool = line(&notes);
    if pool_threads > 0 {
        let s = if pool_threads == 1 { "" } else { "s" };
        notes.push(format!("{pool_threads} idle thread{s} of its own"));
        let with_pool = line(&notes);
        if with_pool.chars().count() <= DESCRIBE_MAX_CHARS {
            return with_pool;
        }
    }
    short(&without_pool, DESCRIBE_MAX_CHARS)
}

/// The longest line [`GemmBackend::describe`] gives.
pub const DESCRIBE_MAX_CHARS: usize = 120;

/// OpenBLAS, loaded and set to one thread per call.
pub struct OpenBlas {
    sgemm: CblasGemm<f32>,
    dgemm: CblasGemm<f64>,
    library: String,
    config: String,
    /// The kernels it chose (`openblas_get_corename`; empty if it does not say).
    core: String,
    /// Why those kernels are its fallback on this processor
    /// ([`generic_kernels`]; `None` when they are not, or when
    /// [`CORETYPE_ENV`] chose them).
    generic: Option<String>,
    /// [`OpenBlas::generic`] in a few words (the kernels and the
    /// `OPENBLAS_CORETYPE` that gives the fast ones).
    generic_short: Option<String>,
    /// Threads of its own OpenBLAS started when it was loaded.
    pool_threads: usize,
    /// Keeps the library mapped for as long as the function pointers live.
    _lib: libloading::Library,
}

impl std::fmt::Debug for OpenBlas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenBlas").field("library", &self.library).field("config", &self.config).finish()
    }
}

/// What `lib`'s function `symbol` (no arguments, returning a C string) says,
/// trimmed; empty when the library lacks it or it returns null.
///
/// # Safety
/// `symbol`, where `lib` has it, takes no arguments and returns a pointer to
/// a NUL-terminated string that stays valid while `lib` is loaded (as
/// OpenBLAS's `openblas_get_config` and `openblas_get_corename` do).
unsafe fn described(lib: &libloading::Library, symbol: &[u8]) -> String {
    // SAFETY: by the caller's contract.
    unsafe {
        match lib.get::<unsafe extern "C" fn() -> *const c_char>(symbol) {
            Ok(get) => {
                let p = get();
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().trim().to_string()
                }
            }
            Err(_) => String::new(),
        }
    }
}

impl OpenBlas {
    /// Open the first of `libraries` that loads and has the CBLAS GEMMs,
    /// and set it to run every call on the caller's thread.
    pub fn open(libraries: &[&str]) -> Result<OpenBlas, GemmError> {
        OpenBlas::open_all(libraries).map_err(|(_, e)| e)
    }

    /// [`OpenBlas::open`], with the most telling refusal among the
    /// libraries tried (a serial build found says more than a name absent).
    fn open_all(libraries: &[&str]) -> Result<OpenBlas, (Refusal, GemmError)> {
        let mut reasons = Vec::new();
        let mut worst = Refusal::NotFound;
        for &name in libraries {
            match OpenBlas::open_one(name) {
                Ok(o) => return Ok(o),
                Err((refusal, e)) => {
                    worst = worst.max(refusal);
                    reasons.push(e);
                }
            }
        }
        let reason = if reasons.is_empty() { String::from("no library to try") } else { reasons.join("; ") };
        Err((worst, GemmError::OpenBlasUnavailable { tried: libraries.join(", "), reason }))
    }

    fn open_one(name: &str) -> Result<OpenBlas, (Refusal, String)> {
        // SAFETY: loading OpenBLAS runs its initialisers, which only set up
        // its own state (and, in threaded builds, its idle thread pool).
        let lib = unsafe { libloading::Library::new(name) }
            .map_err(|e| (Refusal::NotFound, format!("{name}: {}", with_sources(&e))))?;
        // SAFETY: the symbols have these C signatures in every OpenBLAS
        // (cblas.h; `blasint` is `int` in the LP64 builds this soname names).
        unsafe {
            let missing = |symbol: &'static str| {
                move |e: libloading::Error| {
                    (Refusal::NotOpenBlas, format!("{name} has no `{symbol}` (not OpenBLAS?): {}", with_sources(&e)))
                }
            };
            let sgemm = *lib.get::<CblasGemm<f32>>(b"cblas_sgemm\0").map_err(missing("cblas_sgemm"))?;
            let dgemm = *lib.get::<CblasGemm<f64>>(b"cblas_dgemm\0").map_err(missing("cblas_dgemm"))?;
            let set_threads = *lib
                .get::<unsafe extern "C" fn(c_int)>(b"openblas_set_num_threads\0")
                .map_err(missing("openblas_set_num_threads"))?;
            // A serial build takes no locks unless it was built with
            // USE_LOCKING=1, which it does not report: calls from several
            // kernel threads could share its buffers. Refused.
            if let Ok(parallel) = lib.get::<unsafe extern "C" fn() -> c_int>(b"openblas_get_parallel\0") {
                if parallel() == 0 {
                    return Err((
                        Refusal::Serial,
                        format!(
                            "{name} is a serial build of OpenBLAS (openblas_get_parallel() = 0), not safe to call \
                             from several threads at once unless built with USE_LOCKING=1, which it does not report; \
                             install the threaded build (Debian: libopenblas0-pthread)"
                        ),
                    ));
                }
            }
            // Its thread count at load: the caller's thread and the pool
            // it started then (which stays, idle, after the count is set to 1).
            let pool_threads = match lib.get::<unsafe extern "C" fn() -> c_int>(b"openblas_get_num_threads\0") {
                Ok(get) => usize::try_from(get()).unwrap_or(1).saturating_sub(1),
                Err(_) => 0,
            };
            set_threads(1);
            let config = described(&lib, b"openblas_get_config\0");
            let core = described(&lib, b"openblas_get_corename\0");
            let asked = std::env::var(CORETYPE_ENV).ok();
            let cpu = VectorLevel::of_this_processor();
            let generic = generic_kernels(&core, asked.as_deref(), cpu).map(|why| format!("{name}: {why}"));
            // The short form of the same (the suggestion exists whenever `generic` does).
            let generic_short = generic.as_ref().and_then(|_| generic_short(&core, cpu?));
            Ok(OpenBlas {
                sgemm,
                dgemm,
                library: name.to_string(),
                config,
                core,
                generic,
                generic_short,
                pool_threads,
                _lib: lib,
            })
        }
    }

    /// Threads OpenBLAS started of its own when it was loaded (0 when
    /// [`ONE_THREAD_ENV`] was in the environment then, or with a build
    /// without threads of its own).
    pub fn pool_threads(&self) -> usize {
        self.pool_threads
    }

    /// The library opened (as named when it was tried).
    pub fn library(&self) -> &str {
        &self.library
    }

    /// OpenBLAS's own description of its build (`openblas_get_config`).
    pub fn config(&self) -> &str {
        &self.config
    }

    /// The kernels it runs (`openblas_get_corename`: `Haswell`, `SkylakeX`,
    /// …; empty when the library does not say).
    pub fn core(&self) -> &str {
        &self.core
    }

    /// Why its kernels are its fallback on this processor, if they are
    /// (see the module's doc); `auto` then takes the built-in GEMM.
    pub fn generic_kernels(&self) -> Option<&str> {
        self.generic.as_deref()
    }

    /// `C = A·B` (or `C += A·B` when `accumulate`) for row-major `C`
    /// `[m, n]` with leading dimension `ldc`; `a` is `[m, k]` with leading
    /// dimension `lda` (`[k, m]` when `trans_a`), `b` is `[k, n]` with
    /// leading dimension `ldb` (`[n, k]` when `trans_b`). `None` when a
    /// dimension does not fit OpenBLAS's 32-bit integers.
    ///
    /// # Safety
    /// The pointers cover the matrices their shapes and leading dimensions
    /// describe, and `c` aliases neither operand.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm<T: Elem>(
        &self,
        trans: (bool, bool),
        (m, n, k): (usize, usize, usize),
        a: *const T,
        lda: usize,
        b: *const T,
        ldb: usize,
        c: *mut T,
        ldc: usize,
        accumulate: bool,
    ) -> Option<()> {
        let int = |x: usize| c_int::try_from(x).ok();
        let (m, n, k, lda, ldb, ldc) = (int(m)?, int(n)?, int(k)?, int(lda)?, int(ldb)?, int(ldc)?);
        let ta = if trans.0 { CBLAS_TRANS } else { CBLAS_NO_TRANS };
        let tb = if trans.1 { CBLAS_TRANS } else { CBLAS_NO_TRANS };
        // One call of `cblas_sgemm` or `cblas_dgemm` (the literals take the
        // element type of the function).
        macro_rules! cblas {
            ($f:expr) => {
                $f(
                    CBLAS_ROW_MAJOR,
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    1.0,
                    a.cast(),
                    lda,
                    b.cast(),
                    ldb,
                    if accumulate { 1.0 } else { 0.0 },
                    c.cast(),
                    ldc,
                )
            };
        }
        // SAFETY: by the caller's contract; T's dtype says which of the two
        // element types the pointers are.
        unsafe {
            match T::DTYPE {
                Dtype::F32 => cblas!(self.sgemm),
                Dtype::F64 => cblas!(self.dgemm),
            }
        }
        Some(())
    }
}

/// The GEMM that computes the matrix products.
#[derive(Debug)]
pub enum GemmBackend {
    /// The system's OpenBLAS.
    OpenBlas(OpenBlas),
    /// The `gemm` crate, asked for (`TRA_GEMM=builtin`).
    Builtin,
    /// The `gemm` crate, because `auto` could not use OpenBLAS.
    BuiltinFallback {
        /// Why not, in a few words (for [`GemmBackend::describe`]).
        reason: String,
        /// Why not, in full: each library tried and what its loader said,
        /// or the kernels it runs (for [`GemmBackend::details`]).
        detail: String,
    },
}

impl GemmBackend {
    /// The GEMM `request` asks for (OpenBLAS opened from `TRA_OPENBLAS_LIB`
    /// when it is set, else from [`OPENBLAS_LIBRARIES`]). Each call opens the
    /// library anew; the runtimes use the one [`gemm_backend`] chose.
    pub fn select(request: GemmRequest) -> Result<GemmBackend, GemmError> {
        match std::env::var(OPENBLAS_LIB_ENV) {
            Ok(lib) if !lib.is_empty() => GemmBackend::select_in(request, &[lib.as_str()], true),
            _ => GemmBackend::select_in(request, OPENBLAS_LIBRARIES, false),
        }
    }

    /// [`GemmBackend::select`] with OpenBLAS opened from `libraries`.
    pub fn select_from(request: GemmRequest, libraries: &[&str]) -> Result<GemmBackend, GemmError> {
        GemmBackend::select_in(request, libraries, false)
    }

    /// `named`: `libraries` is the one `TRA_OPENBLAS_LIB` names.
    fn select_in(request: GemmRequest, libraries: &[&str], named: bool) -> Result<GemmBackend, GemmError> {
        match request {
            GemmRequest::Builtin => Ok(GemmBackend::Builtin),
            GemmRequest::OpenBlas => OpenBlas::open(libraries).map(GemmBackend::OpenBlas),
            GemmRequest::Auto => Ok(match OpenBlas::open_all(libraries) {
                Ok(o) => match (o.generic.clone(), o.generic_short.clone()) {
                    // Its fallback kernels are several times slower than the built-in GEMM.
                    (Some(detail), short) => GemmBackend::BuiltinFallback {
                        reason: match short {
                            Some(s) => format!("OpenBLAS runs its {s}"),
                            None => "OpenBLAS runs its slow fallback kernels here".to_string(),
                        },
                        detail,
                    },
                    (None, _) => GemmBackend::OpenBlas(o),
                },
                Err((refusal, e)) => {
                    let reason = match (refusal, named) {
                        (Refusal::NotFound, false) => "OpenBLAS not found".to_string(),
                        (Refusal::NotFound, true) => format!("the library {OPENBLAS_LIB_ENV} names does not load"),
                        (Refusal::NotOpenBlas, false) => "the OpenBLAS found lacks the CBLAS GEMMs".to_string(),
                        (Refusal::NotOpenBlas, true) => format!("the library {OPENBLAS_LIB_ENV} names is not OpenBLAS"),
                        (Refusal::Serial, _) => {
                            "only a serial OpenBLAS found (unsafe across threads); install libopenblas0-pthread"
                                .to_string()
                        }
                    };
                    let detail = match e {
                        GemmError::OpenBlasUnavailable { tried, reason } => {
                            format!("cannot load OpenBLAS (tried {tried}): {reason}")
                        }
                        other => other.to_string(),
                    };
                    GemmBackend::BuiltinFallback { reason, detail }
                }
            }),
        }
    }

    /// `openblas` or `builtin`.
    pub fn name(&self) -> &'static str {
        match self {
            GemmBackend::OpenBlas(_) => "openblas",
            GemmBackend::Builtin | GemmBackend::BuiltinFallback { .. } => "builtin",
        }
    }

    /// One short line for reports and logs (at most [`DESCRIBE_MAX_CHARS`]
    /// characters): which GEMM runs and why, e.g. `OpenBLAS 0.3.21 (Haswell
    /// kernels)` or `built-in (OpenBLAS not found)`. [`GemmBackend::details`]
    /// has the rest (the library's path and build, each library tried and
    /// its loader's message).
    pub fn describe(&self) -> String {
        match self {
            GemmBackend::OpenBlas(o) => {
                describe_openblas(&o.config, &o.core, o.generic_short.as_deref(), o.pool_threads)
            }
            GemmBackend::Builtin => format!("built-in ({GEMM_ENV}=builtin)"),
            GemmBackend::BuiltinFallback { reason, .. } => short(&format!("built-in ({reason})"), DESCRIBE_MAX_CHARS),
        }
    }

    /// Everything known of the choice, on one (long) line: the name, and for
    /// OpenBLAS the library and its build; for `auto`'s fallback, each
    /// library tried and why it was not taken. For `RUST_LOG=debug` logs and
    /// the reports' `gemm_detail`; [`GemmBackend::describe`] is the short form.
    pub fn details(&self) -> String {
        match self {
            GemmBackend::OpenBlas(o) => {
                let config = if o.config.is_empty() { String::new() } else { format!(": {}", o.config) };
                let pool = match o.pool_threads {
                    0 => String::new(),
                    n => format!(
                        "; {n} idle thread(s) of its own started at load: {}={} was not in the environment",
                        ONE_THREAD_ENV.0, ONE_THREAD_ENV.1
                    ),
                };
                let generic = match &o.generic {
                    Some(why) => format!("; slow: {why}"),
                    None => String::new(),
                };
                format!("openblas ({}{config}, one thread per call{pool}{generic})", o.library)
            }
            GemmBackend::Builtin => format!("builtin (the gemm crate, as {GEMM_ENV}=builtin asks)"),
            GemmBackend::BuiltinFallback { detail, .. } => {
                format!("builtin (the gemm crate; OpenBLAS not used: {detail})")
            }
        }
    }

    /// `C = A·B` (or `C += A·B`) on the calling thread, with the pointers and
    /// leading dimensions of [`OpenBlas::gemm`]'s contract; through the
    /// `gemm` crate for [`GemmBackend::Builtin`] or a dimension past
    /// OpenBLAS's integers.
    ///
    /// # Safety
    /// As [`OpenBlas::gemm`]: the pointers cover their matrices, `c` aliases
    /// neither operand, and `m`, `n`, `k` are not zero.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn gemm<T: Elem>(
        &self,
        trans: (bool, bool),
        (m, n, k): (usize, usize, usize),
        a: *const T,
        lda: usize,
        b: *const T,
        ldb: usize,
        c: *mut T,
        ldc: usize,
        accumulate: bool,
        threads: usize,
    ) {
        if let GemmBackend::OpenBlas(o) = self {
            // SAFETY: the caller's contract.
            if unsafe { o.gemm(trans, (m, n, k), a, lda, b, ldb, c, ldc, accumulate) }.is_some() {
                return;
            }
        }
        // (row stride, column stride) of the logical [m,k] and [k,n] operands.
        let (lda, ldb, ldc) = (lda as isize, ldb as isize, ldc as isize);
        let (lhs_rs, lhs_cs) = if trans.0 { (1, lda) } else { (lda, 1) };
        let (rhs_rs, rhs_cs) = if trans.1 { (1, ldb) } else { (ldb, 1) };
        // SAFETY: the caller's contract; T is f32 or f64, which gemm supports.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c,
                1,
                ldc,
                accumulate,
                a,
                lhs_cs,
                lhs_rs,
                b,
                rhs_cs,
                rhs_rs,
                T::ONE,
                T::ONE,
                false,
                false,
                false,
                if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None },
            )
        }
    }
}

/// Make this thread's buffers of the built-in GEMM (the `gemm` crate keeps a
/// packing buffer of the L2 cache's size per thread, made on the thread's
/// first product): kernel threads call it when they start, so that no run
/// after the first allocates it, whichever threads the products land on.
pub fn warm_thread_buffers() {
    fn warm<T: Elem>() {
        // Column-major 64×64 operands: the path that packs into the thread's buffer.
        const N: usize = 64;
        let a = [T::ONE; N * N];
        let mut c = [T::ONE; N * N];
        // SAFETY: every operand is an N×N column-major matrix in its own vector.
        unsafe {
            gemm::gemm(
                N,
                N,
                N,
                c.as_mut_ptr(),
                N as isize,
                1,
                false,
                a.as_ptr(),
                N as isize,
                1,
                a.as_ptr(),
                N as isize,
                1,
                T::ONE,
                T::ONE,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    }
    warm::<f32>();
    warm::<f64>();
}

static CHOSEN: OnceLock<Result<GemmBackend, GemmError>> = OnceLock::new();
static BUILTIN: GemmBackend = GemmBackend::Builtin;

/// The GEMM of this process, chosen by `TRA_GEMM` on the first call; the error when OpenBLAS was asked for and does not
/// load, or the setting is unknown. The runtimes call this where they start.
pub fn gemm_backend() -> Result<&'static GemmBackend, GemmError> {
    CHOSEN.get_or_init(|| GemmRequest::from_env().and_then(GemmBackend::select)).as_ref().map_err(Clone::clone)
}

/// The GEMM the kernels call: [`gemm_backend`]'s, or the built-in one when
/// that is an error (which the runtimes reported before running anything).
pub(super) fn kernel_backend() -> &'static GemmBackend {
    gemm_backend().unwrap_or(&BUILTIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const SSE_AVX_CORES: &[&str] = &[
        "katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn", "dunnington", "nehalem",
        "athlon", "opteron", "opteron_sse3", "barcelona", "nano", "bobcat", "sandybridge", "bulldozer", "piledriver",
        "steamroller",
    ];

    fn fits(line: &str) {
        assert!(line.chars().count() <= DESCRIBE_MAX_CHARS, "{} chars: {line}", line.chars().count());
        assert!(!line.contains("TRA_GEMM=openblas"), "{line}");
    }

    /// Every line `describe` can give for OpenBLAS (any build description,
    /// kernels, fallback finding and pool) and for `auto`'s fallback to its
    /// slow kernels is at most 120 characters.
    #[test]
    fn every_openblas_line_is_short() {
        let long = "x".repeat(500);
        let configs =
            ["", "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64", "OpenBLAS", long.as_str()];
        let long_version = format!("OpenBLAS {long} DYNAMIC_ARCH");
        let mut shorts: Vec<Option<String>> = vec![None];
        for core in SSE_AVX_CORES.iter().chain(&[long.as_str()]) {
            for cpu in [VectorLevel::Avx2, VectorLevel::Avx512] {
                let g = generic_short(core, cpu).expect("a suggestion at AVX2 and above");
                assert!(g.contains(CORETYPE_ENV), "{g}");
                let fallback =
                    GemmBackend::BuiltinFallback { reason: format!("OpenBLAS runs its {g}"), detail: long.clone() };
                fits(&fallback.describe());
                shorts.push(Some(g));
            }
        }
        for config in configs.iter().copied().chain([long_version.as_str()]) {
            for core in ["", "Haswell", "SapphireRapids", long.as_str()] {
                for g in &shorts {
                    for pool in [0, 1, 191, c_int::MAX as usize, usize::MAX] {
                        let line = describe_openblas(config, core, g.as_deref(), pool);
                        fits(&line);
                        assert!(line.starts_with("OpenBLAS"), "{line}");
                    }
                }
            }
        }
        assert_eq!(
            describe_openblas("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64", "Haswell", None, 0),
            "OpenBLAS 0.3.21 (Haswell kernels)"
        );
        let g = generic_short("Prescott", VectorLevel::Avx512).unwrap();
        assert_eq!(
            GemmBackend::BuiltinFallback { reason: format!("OpenBLAS runs its {g}"), detail: String::new() }.describe(),
            "built-in (OpenBLAS runs its Prescott kernels here; OPENBLAS_CORETYPE=SkylakeX enables its AVX-512 ones)"
        );
    }

    /// `auto`'s fallback for each refusal, with or without
    /// `TRA_OPENBLAS_LIB`: short, and blaming no `TRA_GEMM=openblas`.
    #[test]
    fn every_fallback_line_is_short() {
        let missing = "/no/such/dir/libtra-no-such-blas.so.0";
        for named in [false, true] {
            for libs in [&[missing][..], &[missing, missing, missing, missing, missing], &[]] {
                let b = GemmBackend::select_in(GemmRequest::Auto, libs, named).unwrap();
                fits(&b.describe());
                assert!(!b.details().contains("TRA_GEMM=openblas"), "{}", b.details());
                if !libs.is_empty() {
                    assert!(b.details().contains(missing), "{}", b.details());
                }
            }
        }
        let b = GemmBackend::select_in(GemmRequest::Auto, &[missing], false).unwrap();
        assert_eq!(b.describe(), "built-in (OpenBLAS not found)");
        fits(&GemmBackend::Builtin.describe());
        // A library that loads but is not OpenBLAS says more than one absent.
        #[cfg(target_os = "linux")]
        for named in [false, true] {
            let b = GemmBackend::select_in(GemmRequest::Auto, &[missing, "libc.so.6"], named).unwrap();
            fits(&b.describe());
            assert!(b.describe().contains("CBLAS") || b.describe().contains("not OpenBLAS"), "{}", b.describe());
            assert!(b.details().contains("cblas_sgemm"), "{}", b.details());
        }
    }
}
