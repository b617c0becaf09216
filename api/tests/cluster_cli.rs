//! `tra run --processes N`, `tra run --hosts FILE`, `tra worker`, `tra
//! cluster` and `tra serve --hosts`, through the binary: results equal `tra
//! run` on threads, floats moved equal the prediction; a worker killed or
//! stopped mid-run fails the job within seconds with a clear error and
//! leaves no process and no file behind, and so does an interrupted run; a
//! job without the cluster secret, or with a path outside the workers' data
//! directories, is refused and changes nothing; a panicking job leaves the
//! warm worker serving the next one.

mod common;

use common::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tra_executor::npy::{self, Layout};
use tra_executor::reference::random_relation;
use tra_executor::threads::{Pool, TRelation};

const TRA: &str = env!("CARGO_BIN_EXE_tra");

const PROGRAM: &str = r#"{
  "inputs": {"X": {"key_bounds": [4, 3], "array_bounds": [8, 6]},
             "Y": {"key_bounds": [3, 4], "array_bounds": [6, 5]}},
  "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"},
            "R": {"op": "transform", "input": "Z", "kernel": "relu"}},
  "outputs": ["Z", "R"]}"#;

/// The program and its inputs as files; the `--input`/`--output` arguments.
fn setup(dir: &TempDir) -> (PathBuf, Vec<String>) {
    let prog = dir.path("p.json");
    std::fs::write(&prog, PROGRAM).unwrap();
    let pool = Pool::<f64>::new();
    let mut args = Vec::new();
    for (i, (name, kb, ab)) in [("X", [4u32, 3], [8usize, 6]), ("Y", [3, 4], [6, 5])].iter().enumerate() {
        let rel = TRelation::from_relation(&random_relation(kb, ab, 40 + i as u64), &pool);
        let path = dir.path(&format!("{name}.npy"));
        let layout = if i == 0 { Layout::Dense } else { Layout::Relation };
        npy::write_relation(&path, &rel, kb, ab, layout).unwrap();
        args.push("--input".to_string());
        args.push(format!("{name}={}", path.display()));
    }
    (prog, args)
}

fn outputs(dir: &TempDir, tag: &str) -> Vec<String> {
    ["Z", "R"]
        .iter()
        .flat_map(|o| ["--output".to_string(), format!("{o}={}", dir.path(&format!("{tag}-{o}.npy")).display())])
        .collect()
}

fn run(args: &[String], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(TRA);
    cmd.args(["run", "--format", "json"]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn same_files(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(x == y, "{} and {} differ", a.display(), b.display());
}

fn check_summary(out: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["floats_match"], true, "{out}");
    assert_eq!(v["network_floats_measured"], v["network_floats_predicted"], "{out}");
    for op in v["operators"].as_array().unwrap() {
        if !op["floats_moved"].is_null() {
            assert_eq!(op["floats_moved"], op["predicted_floats"], "{op}");
        }
    }
    // Every process's processor time, measured.
    if v["runtime"] == "cluster" {
        let cpu = v["cpu_ms_per_process"].as_array().unwrap_or_else(|| panic!("{out}"));
        assert_eq!(cpu.len() as u64, v["processes"].as_u64().unwrap(), "{out}");
        assert!(cpu.iter().all(|c| c.as_f64().unwrap() > 0.0), "{out}");
        // What others took of the machine meanwhile: a share, unless this
        // is a container allowed fewer processors than its host has.
        if common::sees_the_whole_machine() {
            let others = v["others_busy"].as_f64();
            assert!(others.is_some_and(|o| (0.0..=1.01).contains(&o)), "{out}");
        }
    }
    v
}

#[test]
fn processes_give_the_thread_runtimes_results() {
    let dir = TempDir::new("cli-cluster-procs");
    let (prog, inputs) = setup(&dir);
    let p = prog.display().to_string();
    let mut threads = vec![p.clone(), "--sites".into(), "3".into(), "--no-progress".into()];
    threads.extend(inputs.clone());
    threads.extend(outputs(&dir, "threads"));
    let (ok, _, err) = run(&threads, &[]);
    assert!(ok, "{err}");
    for (procs, workers) in [("3", "1"), ("2", "2")] {
        let tag = format!("cluster{procs}x{workers}");
        let mut args = vec![p.clone(), "--processes".into(), procs.into(), "--workers".into(), workers.into()];
        args.extend(inputs.clone());
        args.extend(outputs(&dir, &tag));
        let (ok, out, err) = run(&args, &[]);
        assert!(ok, "{err}");
        let v = check_summary(&out);
        assert_eq!(v["processes"].as_u64().unwrap().to_string(), procs);
        if procs == "3" {
            // Same sites as the thread run: same plan, same blocks.
            for o in ["Z", "R"] {
                same_files(&dir.path(&format!("threads-{o}.npy")), &dir.path(&format!("{tag}-{o}.npy")));
            }
        }
    }
    // Wrong options are explained.
    let (ok, _, err) = run(&[p.clone(), "--processes".into(), "2".into(), "--sites".into(), "3".into()], &[]);
    assert!(!ok && err.contains("multiple"), "{err}");
}

/// Process ids of a process's children (Linux).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok()
}

fn wait_children(pid: u32, n: usize) -> Vec<u32> {
    let t = Instant::now();
    loop {
        let c = children(pid);
        if c.len() >= n {
            return c;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{n} children did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill9(pid: u32) {
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
}

#[test]
fn a_killed_worker_fails_the_run_within_seconds_and_the_next_run_works() {
    let dir = TempDir::new("cli-cluster-fault");
    let (prog, inputs) = setup(&dir);
    let mut args = vec![prog.display().to_string(), "--processes".into(), "3".into()];
    args.extend(inputs);
    args.extend(outputs(&dir, "f"));
    let mut child = Command::new(TRA)
        .args(["run", "--format", "json"])
        .args(&args)
        .env("TRA_CLUSTER_TEST_STALL_MS", "3000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let workers = wait_children(child.id(), 3);
    std::thread::sleep(Duration::from_millis(1000));
    let killed = Instant::now();
    kill9(workers[1]);
    let out = wait_with_timeout(&mut child, Duration::from_secs(10));
    let took = killed.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("died (signal 9) — job failed"), "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    for w in workers {
        assert!(!alive(w), "worker {w} left behind");
    }
    let (ok, out, err) = run(&args, &[]);
    assert!(ok, "{err}");
    check_summary(&out);
}

/// Whether the kernel lets a process use transparent huge pages (its
/// `THP_enabled` line), `None` where the kernel does not say.
fn thp_enabled(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("THP_enabled:"))?;
    Some(line.split_whitespace().nth(1)? == "1")
}

/// Job processes run without transparent huge pages (the first job's touch
/// of fresh memory costs far less), unless MIMALLOC_ALLOW_THP, the
/// allocator's own setting, is in the environment: then it is the user's.
#[test]
fn job_processes_run_without_huge_pages_unless_the_user_says() {
    let dir = TempDir::new("cli-cluster-thp");
    let (prog, inputs) = setup(&dir);
    if thp_enabled(std::process::id()).is_none() {
        eprintln!("this kernel does not report THP_enabled: nothing to check");
        return;
    }
    for (asked, want) in [(None, false), (Some("1"), true), (Some("0"), false)] {
        let mut args = vec![prog.display().to_string(), "--processes".into(), "2".into()];
        args.extend(inputs.clone());
        args.extend(outputs(&dir, "thp"));
        let mut cmd = Command::new(TRA);
        cmd.args(["run", "--format", "json"])
            .args(&args)
            .env("TRA_CLUSTER_TEST_STALL_MS", "1500")
            .env_remove("MIMALLOC_ALLOW_THP")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(v) = asked {
            cmd.env("MIMALLOC_ALLOW_THP", v);
        }
        let mut child = cmd.spawn().unwrap();
        let jobs = wait_children(child.id(), 2);
        // The allocator turns huge pages off as it starts: wait for it.
        let t = Instant::now();
        let mut seen: Vec<Option<bool>> = Vec::new();
        while t.elapsed() < Duration::from_secs(5) {
            let now: Vec<Option<bool>> = jobs.iter().map(|&p| thp_enabled(p)).collect();
            if now.iter().any(Option::is_none) {
                break; // a job process has ended
            }
            seen = now;
            if seen.iter().all(|s| *s == Some(want)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = wait_with_timeout(&mut child, Duration::from_secs(60));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            seen.iter().all(|s| *s == Some(want)),
            "MIMALLOC_ALLOW_THP={asked:?}: job processes' THP_enabled {seen:?}"
        );
    }
}

fn wait_with_timeout(child: &mut Child, t: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > t {
            let _ = child.kill();
            panic!("no answer within {t:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stderr = String::new();
    use std::io::Read;
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    std::process::Output { status: child.wait().unwrap(), stdout: Vec::new(), stderr: stderr.into_bytes() }
}

/// Three `tra worker` agents on loopback.
struct Agents {
    children: Vec<Child>,
    hosts: PathBuf,
}

impl Agents {
    fn start(dir: &TempDir) -> Agents {
        let secret = dir.path("secret");
        if !secret.exists() {
            let out = Command::new(TRA).arg("secret").arg(&secret).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        // Data ports, and control ports 1000 above them, below the ephemeral
        // range (outgoing connections cannot take them meanwhile).
        let mut lines = Vec::new();
        let mut port = 20000 + (std::process::id() % 4000) as u16 * 2;
        while lines.len() < 3 {
            port += 1;
            let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
            if free(port) && free(port + 1000) {
                lines.push(format!("127.0.0.1:{port}"));
            }
        }
        let hosts = dir.path("hosts.txt");
        std::fs::write(&hosts, format!("# three workers\n{}\n", lines.join("\n"))).unwrap();
        let mut children = Vec::new();
        for i in 0..3 {
            children.push(Agents::spawn(&hosts, i));
        }
        std::thread::sleep(Duration::from_millis(300));
        Agents { children, hosts }
    }

    fn spawn(hosts: &Path, i: usize) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(hosts.with_extension(format!("worker{i}.log")))
            .unwrap();
        let data = hosts.parent().unwrap().display().to_string();
        Command::new(TRA)
            .args(["worker", "--process", &i.to_string(), "--hosts", &hosts.display().to_string()])
            .args(["--data-dir", &data])
            .env("TRA_CLUSTER_ALLOW_TEST_HOOKS", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    fn logs(&self) -> String {
        (0..3)
            .map(|i| std::fs::read_to_string(self.hosts.with_extension(format!("worker{i}.log"))).unwrap_or_default())
            .collect()
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn hosts_run_on_worker_agents_and_survive_a_killed_job() {
    let dir = TempDir::new("cli-cluster-hosts");
    let (prog, inputs) = setup(&dir);
    let mut agents = Agents::start(&dir);
    let p = prog.display().to_string();
    let mut threads = vec![p.clone(), "--sites".into(), "3".into(), "--no-progress".into()];
    threads.extend(inputs.clone());
    threads.extend(outputs(&dir, "threads"));
    assert!(run(&threads, &[]).0);
    let mut args = vec![p.clone(), "--hosts".into(), agents.hosts.display().to_string()];
    args.extend(inputs.clone());
    args.extend(outputs(&dir, "hosts"));
    let (ok, out, err) = run(&args, &[]);
    assert!(ok, "{err}\nworkers:\n{}", agents.logs());
    check_summary(&out);
    for o in ["Z", "R"] {
        same_files(&dir.path(&format!("threads-{o}.npy")), &dir.path(&format!("hosts-{o}.npy")));
    }
    // Kill the job process of worker 2 mid-run: the job fails quickly, the agents stay.
    let mut client = Command::new(TRA)
        .args(["run", "--format", "json"])
        .args(&args)
        .env("TRA_CLUSTER_TEST_STALL_MS", "3000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let job = wait_children(agents.children[2].id(), 1)[0];
    std::thread::sleep(Duration::from_millis(1000));
    let killed = Instant::now();
    kill9(job);
    let out = wait_with_timeout(&mut client, Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("worker 2") && err.contains("died (signal 9)"), "{err}");
    assert!(killed.elapsed() < Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    // Each worker keeps one warm job process: a fresh one where the job failed.
    assert!(!alive(job), "the killed job process is left behind");
    for a in &agents.children {
        assert_eq!(children(a.id()).len(), 1, "a job process is left behind");
    }
    // The next job works; so does one after an agent is restarted.
    assert!(run(&args, &[]).0);
    let _ = agents.children[1].kill();
    let _ = agents.children[1].wait();
    let (ok, _, err) = run(&args, &[]);
    assert!(!ok && err.contains("cannot reach the tra worker of process 1"), "{err}");
    agents.children[1] = Agents::spawn(&agents.hosts, 1);
    std::thread::sleep(Duration::from_millis(300));
    let (ok, out, err) = run(&args, &[]);
    assert!(ok, "{err}");
    check_summary(&out);
}

fn read_log_until(agents: &Agents, text: &str) -> String {
    let t = Instant::now();
    loop {
        let logs = agents.logs();
        if logs.contains(text) || t.elapsed() > Duration::from_secs(5) {
            return logs;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The files under a directory (relative names, sorted) and their contents.
fn tree(d: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            out.extend(tree(&p).into_iter().map(|(n, c)| (format!("{name}/{n}"), c)));
        } else {
            out.push((name, std::fs::read(&p).unwrap_or_default()));
        }
    }
    out.sort();
    out
}

#[test]
fn jobs_without_the_secret_or_outside_the_data_directories_are_refused_and_change_nothing() {
    let dir = TempDir::new("cli-cluster-auth");
    let (prog, inputs) = setup(&dir);
    let agents = Agents::start(&dir);
    let precious = dir.path("precious.npy");
    std::fs::write(&precious, b"precious").unwrap();
    let before = tree(&dir.0);
    // The old attack: one JSON line naming an output path, no secret.
    let job_port = std::fs::read_to_string(&agents.hosts)
        .unwrap()
        .lines()
        .find(|l| !l.starts_with('#'))
        .map(|l| {
            let (h, p) = l.rsplit_once(':').unwrap();
            format!("{h}:{}", p.parse::<u16>().unwrap() + 1000)
        })
        .unwrap();
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&job_port).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let line = format!(
            "{{\"request\":\"job\",\"job\":{{\"outputs\":{{\"Z\":\"{}\"}}}},\"token\":1,\"addresses\":[],\"timeout_s\":5}}\n",
            precious.display()
        );
        let _ = s.write_all(line.as_bytes());
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(!answer.contains("started") && !answer.contains("done"), "{answer}");
    }
    let logs = read_log_until(&agents, "refused");
    assert!(logs.contains("refused a connection to the job port") && logs.contains("cluster secret"), "{logs}");
    // A client with another secret is refused too, and says so.
    let wrong = dir.path("wrong-secret");
    assert!(Command::new(TRA).arg("secret").arg(&wrong).status().unwrap().success());
    let mut args = vec![prog.display().to_string(), "--hosts".into(), agents.hosts.display().to_string()];
    args.extend(inputs.clone());
    let mut with_wrong = args.clone();
    with_wrong.extend(["--secret-file".into(), wrong.display().to_string()]);
    with_wrong.extend(["--output".into(), format!("Z={}", precious.display())]);
    let (ok, _, err) = run(&with_wrong, &[]);
    assert!(!ok && err.contains("authentication failed"), "{err}");
    // Paths that escape the data directory: `..`, a link leading outside.
    let outside = TempDir::new("cli-cluster-auth-outside");
    std::os::unix::fs::symlink(&outside.0, dir.path("link")).unwrap();
    for out in [format!("{}/../escaped.npy", dir.0.display()), format!("{}/z.npy", dir.path("link").display())] {
        let mut a = args.clone();
        a.extend(["--output".into(), format!("Z={out}")]);
        let (ok, _, err) = run(&a, &[]);
        assert!(!ok && (err.contains("`..`") || err.contains("outside this worker's data directories")), "{err}");
    }
    let mut a = args.clone();
    a[6] = format!("Y={}/y.npy", outside.0.display());
    std::fs::copy(dir.path("Y.npy"), outside.path("y.npy")).unwrap();
    let (ok, _, err) = run(&a, &[]);
    assert!(!ok && err.contains("outside this worker's data directories"), "{err}");
    let _ = std::fs::remove_file(dir.path("link"));
    // Nothing changed but the workers' logs and the second secret.
    let kept = |t: Vec<(String, Vec<u8>)>| -> Vec<(String, Vec<u8>)> {
        t.into_iter().filter(|(n, _)| !n.starts_with("hosts.worker") && n != "wrong-secret").collect()
    };
    assert!(kept(tree(&dir.0)) == kept(before), "files changed");
    assert!(!dir.0.parent().unwrap().join("escaped.npy").exists());
    assert_eq!(tree(&outside.0).len(), 1, "nothing written outside");
}

/// `tra run --processes 3` on a run that takes seconds (every operator
/// stalls), in a fresh temporary directory: the child, its job processes.
fn slow_run(dir: &TempDir, tmp: &Path, args: &[String]) -> (Child, Vec<u32>) {
    let child = Command::new(TRA)
        .args(["run", "--format", "json"])
        .args(args)
        .env("TRA_CLUSTER_TEST_STALL_MS", "4000")
        .env("TMPDIR", tmp)
        .current_dir(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let workers = wait_children(child.id(), 3);
    (child, workers)
}

#[test]
fn a_stopped_worker_is_detected_within_10_seconds_and_leaves_nothing() {
    let dir = TempDir::new("cli-cluster-sigstop");
    let (prog, inputs) = setup(&dir);
    let tmp = dir.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut args = vec![prog.display().to_string(), "--processes".into(), "3".into()];
    args.extend(inputs);
    args.extend(outputs(&dir, "s"));
    let before = tree(&dir.0);
    let (mut child, workers) = slow_run(&dir, &tmp, &args);
    std::thread::sleep(Duration::from_millis(1000));
    let stopped = Instant::now();
    assert!(Command::new("kill").args(["-STOP", &workers[1].to_string()]).status().unwrap().success());
    let out = wait_with_timeout(&mut child, Duration::from_secs(15));
    let took = stopped.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("worker 1 stopped responding"), "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    for w in workers {
        assert!(!alive(w), "worker {w} left behind");
    }
    assert_eq!(tree(&dir.0), before, "files left behind");
}

#[test]
fn interrupted_or_killed_runs_leave_no_files_and_keep_existing_outputs() {
    let dir = TempDir::new("cli-cluster-signals");
    let (prog, inputs) = setup(&dir);
    let tmp = dir.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut args = vec![prog.display().to_string(), "--processes".into(), "3".into()];
    args.extend(inputs);
    args.extend(outputs(&dir, "sig"));
    // An output from an earlier run stays as it was.
    std::fs::write(dir.path("sig-Z.npy"), b"an earlier output").unwrap();
    let before = tree(&dir.0);
    for signal in ["INT", "TERM", "KILL"] {
        let (mut child, workers) = slow_run(&dir, &tmp, &args);
        std::thread::sleep(Duration::from_millis(1500));
        assert!(Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap()
            .success());
        let out = wait_with_timeout(&mut child, Duration::from_secs(10));
        assert!(!out.status.success(), "SIG{signal}");
        let t = Instant::now();
        while workers.iter().any(|&w| alive(w)) {
            assert!(t.elapsed() < Duration::from_secs(5), "SIG{signal}: job processes left behind");
            std::thread::sleep(Duration::from_millis(20));
        }
        if signal != "KILL" {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(&format!("interrupted by SIG{signal}")), "{err}");
            assert_eq!(out.status.code(), Some(if signal == "INT" { 130 } else { 143 }));
        }
        assert_eq!(tree(&dir.0), before, "SIG{signal}: files left behind or changed");
    }
}

#[test]
fn a_panicking_job_leaves_the_warm_worker_serving_the_next_job() {
    let dir = TempDir::new("cli-cluster-panic");
    let (prog, inputs) = setup(&dir);
    let agents = Agents::start(&dir);
    let mut args = vec![prog.display().to_string(), "--hosts".into(), agents.hosts.display().to_string()];
    args.extend(inputs);
    args.extend(outputs(&dir, "p"));
    let (ok, _, err) = run(&args, &[]);
    assert!(ok, "{err}");
    // Warm: the next job runs in the same job processes.
    let warm: Vec<Vec<u32>> = agents.children.iter().map(|a| children(a.id())).collect();
    let (ok, _, err) = run(&args, &[]);
    assert!(ok, "{err}");
    assert_eq!(warm, agents.children.iter().map(|a| children(a.id())).collect::<Vec<_>>(), "job processes changed");
    let (ok, _, err) = run(&args, &[("TRA_CLUSTER_TEST_PANIC", "1")]);
    assert!(!ok && err.contains("worker 0") && err.contains("panicked"), "{err}");
    let (ok, out, err) = run(&args, &[]);
    assert!(ok, "{err}\n{}", agents.logs());
    check_summary(&out);
    for a in &agents.children {
        assert!(alive(a.id()), "a worker went down");
    }
}

#[test]
fn a_local_cluster_comes_up_runs_jobs_and_http_executions_and_goes_down() {
    let dir = TempDir::new("cli-cluster-up");
    let (prog, inputs) = setup(&dir);
    let cdir = dir.path("cluster");
    let up = Command::new(TRA)
        .args(["cluster", "up", "--processes", "2", "--dir"])
        .arg(&cdir)
        .args(["--data-dir"])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let info: serde_json::Value = serde_json::from_slice(&up.stdout).unwrap();
    let pids: Vec<u32> = info["worker_pids"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as u32).collect();
    struct Down(PathBuf, Vec<u32>);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Command::new(TRA).args(["cluster", "down", "--dir"]).arg(&self.0).output();
            for p in &self.1 {
                let _ = Command::new("kill").arg(p.to_string()).stderr(Stdio::null()).status();
            }
        }
    }
    let _down = Down(cdir.clone(), pids.clone());
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(cdir.join("secret")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    // `tra run --hosts` on it: the secret beside the host file is found.
    let mut args = vec![prog.display().to_string(), "--hosts".into(), cdir.join("hosts.txt").display().to_string()];
    args.extend(inputs.clone());
    args.extend(outputs(&dir, "up"));
    let (ok, out, err) = run(&args, &[]);
    assert!(ok, "{err}");
    check_summary(&out);
    let status = Command::new(TRA).args(["cluster", "status", "--dir"]).arg(&cdir).output().unwrap();
    let st: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(st["workers"].as_array().unwrap().iter().all(|w| w["up"] == true && w["jobs"] == 1), "{st}");
    // POST /v1/execute on the cluster gives what it gives on threads.
    let target = tra_api::cluster::ClusterTarget::open(&cdir.join("hosts.txt"), None, None).unwrap();
    let body: serde_json::Value = serde_json::from_str(&format!(
        r#"{{"inputs": {{"X": {{"key_bounds": [4, 3], "array_bounds": [8, 6]}}, "Y": {{"key_bounds": [3, 4], "array_bounds": [6, 5]}}}},
            "nodes": {}, "outputs": ["Z", "R"], "cluster": {{"sites": 4}},
            "data": {{"X": {{"random": {{"seed": 3}}}}}}}}"#,
        serde_json::to_string(&serde_json::from_str::<serde_json::Value>(PROGRAM).unwrap()["nodes"]).unwrap()
    ))
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (threads, cluster) = rt.block_on(async {
        let a = common::start(tra_api::server::ServerConfig::default()).await;
        let b = common::start(tra_api::server::ServerConfig {
            cluster: Some(std::sync::Arc::new(target)),
            ..Default::default()
        })
        .await;
        (common::post(a, "/v1/execute", &body).await.json(), common::post(b, "/v1/execute", &body).await.json())
    });
    assert_eq!(cluster["runtime"], "cluster", "{cluster}");
    assert_eq!(threads["network_floats_measured"], cluster["network_floats_measured"]);
    for o in ["Z", "R"] {
        assert_eq!(threads["outputs"][o]["data"], cluster["outputs"][o]["data"], "{o}: {cluster}");
    }
    assert!(std::fs::read_dir(cdir.join("scratch")).unwrap().next().is_none(), "request data left in scratch");
    // `tra calibrate --hosts` measures these workers, its inputs beside the
    // host file (inside their data directory), and leaves no file there.
    let cal = Command::new(TRA)
        .args(["calibrate", "--reps", "1", "--block", "64", "--hosts"])
        .arg(cdir.join("hosts.txt"))
        .output()
        .unwrap();
    assert!(cal.status.success(), "{}", String::from_utf8_lossy(&cal.stderr));
    let profile: tra_optimizer::time::Profile = serde_json::from_slice(&cal.stdout).unwrap();
    assert!(profile.check().is_ok(), "{profile:?}");
    // The workers are all on this machine: they share its processors.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(profile.machine_processors, Some(cores as u32), "{profile:?}");
    assert!(profile.site_threads.is_some_and(|k| k >= 1), "{profile:?}");
    assert!(profile.machine_sites.is_some_and(|n| n >= 2), "{profile:?}");
    let left: Vec<String> = tree(&cdir).into_iter().map(|(n, _)| n).filter(|n| n.contains("tra-calibrate")).collect();
    assert!(left.is_empty(), "calibration files left beside the host file: {left:?}");
    // Beside two threads of this test spinning throughout, it warns that the
    // workers' machine (this one) was busy: the job processes report it.
    let spinners = common::Spinners::start(2);
    let cal = Command::new(TRA)
        .args(["calibrate", "--reps", "1", "--block", "64", "--hosts"])
        .arg(cdir.join("hosts.txt"))
        .output()
        .unwrap();
    drop(spinners);
    let err = String::from_utf8_lossy(&cal.stderr);
    assert!(cal.status.success(), "{err}");
    if common::sees_the_whole_machine() {
        assert!(err.contains("warning: other programs used") && err.contains("of this machine's"), "{err}");
    }
    let down = Command::new(TRA).args(["cluster", "down", "--dir"]).arg(&cdir).output().unwrap();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    let t = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(t.elapsed() < Duration::from_secs(5), "workers still up after tra cluster down");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Outputs are laid out the same way on processes as on threads: dense when
/// the key arity equals the block rank (Z), the relation layout otherwise
/// (S, block-row sums), `--layout` per output, `--dense` refused for S.
#[test]
fn processes_lay_out_each_output_as_threads_do() {
    let dir = TempDir::new("cli-cluster-layouts");
    let (prog, inputs) = setup(&dir);
    let with_sums = PROGRAM
        .replace(
            r#""R": {"op": "transform", "input": "Z", "kernel": "relu"}"#,
            r#""S": {"op": "aggregate", "input": "XY", "group_by": [0], "kernel": "matAdd"}"#,
        )
        .replace(r#""outputs": ["Z", "R"]"#, r#""outputs": ["Z", "S"]"#);
    std::fs::write(&prog, with_sums).unwrap();
    let p = prog.display().to_string();
    let outs = |tag: &str| -> Vec<String> {
        ["Z", "S"]
            .iter()
            .flat_map(|o| ["--output".to_string(), format!("{o}={}", dir.path(&format!("{tag}-{o}.npy")).display())])
            .collect()
    };
    let shape = |f: &str| npy::read_file_header(&dir.path(f)).unwrap().shape;
    for (tag, extra) in [("threads", vec!["--sites", "2"]), ("procs", vec!["--processes", "2"])] {
        let mut args = vec![p.clone(), "--no-progress".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(inputs.clone());
        args.extend(outs(tag));
        let (ok, out, err) = run(&args, &[]);
        assert!(ok, "{err}");
        let v = check_summary(&out);
        assert_eq!(v["outputs"]["Z"]["layout"], "dense", "{out}");
        assert_eq!(v["outputs"]["S"]["layout"], "relation", "{out}");
        assert_eq!(shape(&format!("{tag}-Z.npy")), vec![32, 20]);
        assert_eq!(shape(&format!("{tag}-S.npy")), vec![4, 8, 5]);
        if tag == "procs" {
            // Each site says what it wrote and how long its writing took:
            // every block once (Z: 32 × 20 floats, S: 4 × 8 × 5).
            let size = if v["dtype"] == "f64" { 8 } else { 4 };
            for (o, bytes_written) in [("Z", 32 * 20 * size), ("S", 4 * 8 * 5 * size)] {
                let info = &v["outputs"][o];
                let bytes: Vec<u64> =
                    info["site_bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
                let ms = info["site_write_ms"].as_array().unwrap();
                assert_eq!((bytes.len(), ms.len()), (2, 2), "{info}");
                assert_eq!(bytes.iter().sum::<u64>(), bytes_written, "{info}");
                assert_eq!(info["bytes"], bytes_written, "{info}");
                assert!(ms.iter().all(|m| m.as_f64().unwrap() >= 0.0), "{info}");
            }
        }
        // --dense: refused for S, naming it, before anything runs.
        args.push("--dense".into());
        let (ok, _, err) = run(&args, &[]);
        assert!(
            !ok && err.contains("output `S` cannot be written dense") && err.contains("--layout S=relation"),
            "{err}"
        );
        // --dense with S said otherwise; Z in the relation layout when asked.
        args.extend(["--layout".into(), "S=relation".into()]);
        let (ok, _, err) = run(&args, &[]);
        assert!(ok, "{err}");
        args.truncate(args.len() - 3);
        args.extend(["--layout".into(), "Z=relation".into()]);
        let (ok, _, err) = run(&args, &[]);
        assert!(ok, "{err}");
        assert_eq!(shape(&format!("{tag}-Z.npy")), vec![4, 4, 8, 5]);
    }
    for o in ["Z", "S"] {
        same_files(&dir.path(&format!("threads-{o}.npy")), &dir.path(&format!("procs-{o}.npy")));
    }
    // Without --format json: a summary for a person, naming where each output went and how.
    let mut args = vec![p, "--processes".to_string(), "2".into(), "--no-progress".into()];
    args.extend(inputs);
    args.extend(outs("procs"));
    let out = Command::new(TRA).arg("run").args(&args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with("ran ") && text.contains("2 processes"), "{text}");
    assert!(text.contains("as predicted") && text.contains("procs-Z.npy  dense (32, 20)"), "{text}");
    assert!(text.contains("procs-S.npy  relation (4, 8, 5)"), "{text}");
    assert!(text.contains("writing it took") && text.contains("ms per site"), "{text}");
}

#[test]
fn the_gemm_is_reported_and_a_missing_openblas_is_a_clear_error() {
    let dir = TempDir::new("cli-cluster-gemm");
    let (prog, inputs) = setup(&dir);
    let p = prog.display().to_string();
    let missing = "/nonexistent/libopenblas.so.0";
    for cluster in [false, true] {
        let mut args = vec![p.clone(), "--no-progress".into()];
        if cluster {
            args.extend(["--processes".into(), "2".into()]);
        }
        args.extend(inputs.clone());
        let (ok, out, err) = run(&args, &[("TRA_GEMM", "builtin")]);
        assert!(ok, "{err}");
        let v = check_summary(&out);
        assert_eq!(v["gemm"], "built-in (TRA_GEMM=builtin)", "cluster {cluster}: {out}");
        assert!(v["gemm_detail"].as_str().unwrap().starts_with("builtin"), "cluster {cluster}: {out}");
        // Where OpenBLAS is installed, it runs in `tra`'s processes without
        // the pool of threads it starts of its own when the environment
        // does not say one thread (even where the user's does).
        let require = std::env::var_os("TRA_REQUIRE_OPENBLAS").is_some();
        let setting = if require { "openblas" } else { "auto" };
        let (ok, out, err) = run(&args, &[("OPENBLAS_NUM_THREADS", "4"), ("TRA_GEMM", setting)]);
        assert!(ok, "{err}");
        let gemm = check_summary(&out)["gemm"].as_str().unwrap().to_string();
        assert!(!gemm.contains("idle thread"), "cluster {cluster}: {gemm}");
        // One short line; the full story is `gemm_detail` (docs/gemm.md).
        assert!(gemm.chars().count() <= 120, "cluster {cluster}: {gemm}");
        if !require {
            assert!(!gemm.contains("TRA_GEMM=openblas"), "cluster {cluster}: {gemm}");
        }
        if require {
            assert!(gemm.starts_with("OpenBLAS"), "cluster {cluster}: {gemm}");
            // `auto` takes it too, unless its kernels are its fallback on
            // this processor; then the summary says what to set.
            let (ok, out, err) = run(&args, &[]);
            assert!(ok, "{err}");
            let auto = check_summary(&out)["gemm"].as_str().unwrap().to_string();
            assert!(auto.starts_with("OpenBLAS") || auto.contains("OPENBLAS_CORETYPE="), "cluster {cluster}: {auto}");
            assert_eq!(auto.starts_with("built-in"), gemm.contains("slow: "), "cluster {cluster}: {auto} / {gemm}");
            assert!(auto.chars().count() <= 120 && !auto.contains("TRA_GEMM"), "cluster {cluster}: {auto}");
        }
        // OpenBLAS asked for and missing: the run fails naming the library,
        // without a panic.
        let (ok, _, err) = run(&args, &[("TRA_GEMM", "openblas"), ("TRA_OPENBLAS_LIB", missing)]);
        assert!(!ok && err.contains(missing) && err.contains("TRA_GEMM=openblas"), "cluster {cluster}: {err}");
        assert!(!err.contains("panicked"), "cluster {cluster}: {err}");
    }
}
