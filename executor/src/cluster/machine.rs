//! What a job process saw of its machine while the job ran: the whole
//! machine's processor time (`/proc/stat`) and its own (`getrusage`), so that
//! a calibration can tell when other programs were busy on the machines it
//! measured (their figures are then too slow), whichever machines those are.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Processor seconds of the whole machine so far, from the first line of
/// `/proc/stat`: busy (user, nice, system, irq, softirq) and stolen by the
/// hypervisor, with the number of processors it counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MachineCpu {
    /// Seconds the processors were busy, all of them together.
    pub busy: f64,
    /// Seconds the hypervisor ran something else on them (steal).
    pub steal: f64,
    /// The processors `/proc/stat` lists.
    pub processors: usize,
}

/// [`MachineCpu`] from the text of `/proc/stat` (`None` when it does not
/// read as one).
pub fn parse_proc_stat(text: &str, ticks_per_second: f64) -> Option<MachineCpu> {
    let total = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = total.split_whitespace().skip(1).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    let processors = text
        .lines()
        .filter(|l| l.strip_prefix("cpu").and_then(|r| r.chars().next()).is_some_and(|c| c.is_ascii_digit()))
        .count();
    (v.len() >= 4 && processors > 0 && ticks_per_second > 0.0).then(|| MachineCpu {
        busy: (at(0) + at(1) + at(2) + at(5) + at(6)) as f64 / ticks_per_second,
        steal: at(7) as f64 / ticks_per_second,
        processors,
    })
}

/// This machine's [`MachineCpu`] now (`None` where there is no `/proc/stat`).
pub fn machine_cpu() -> Option<MachineCpu> {
    // SAFETY: sysconf takes no pointers.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?, ticks as f64)
}

/// A name of this machine that two processes on it share and two machines
/// do not: the kernel's boot id (the host name where there is none).
pub fn machine_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What one job process saw of its machine over its part of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineLoad {
    /// [`machine_id`]: processes with the same one share a machine.
    pub machine: String,
    /// The processors `/proc/stat` lists.
    pub processors: usize,
    /// The processors this process may run on (its affinity and its cgroup's
    /// quota): fewer than `processors` in a container on a larger host.
    pub usable: usize,
    /// The seconds the process's part of the job took.
    pub wall_s: f64,
    /// The machine's busy processor seconds over that time.
    pub busy_s: f64,
    /// The processor seconds the hypervisor stole over that time.
    pub steal_s: f64,
    /// This process's own processor seconds over that time.
    pub own_s: f64,
}

/// The start of a [`MachineLoad`]: read when a process's part of a job starts.
#[derive(Debug, Clone)]
pub struct MachineWatch {
    at: std::time::Instant,
    cpu: MachineCpu,
    own_ns: u64,
}

impl MachineWatch {
    /// Start watching (`None` where `/proc/stat` cannot be read).
    pub fn start() -> Option<MachineWatch> {
        Some(MachineWatch {
            at: std::time::Instant::now(),
            cpu: machine_cpu()?,
            own_ns: super::dataflow::process_cpu_ns(),
        })
    }

    /// What the machine and this process did since [`MachineWatch::start`].
    pub fn load(&self) -> Option<MachineLoad> {
        let now = machine_cpu()?;
        Some(MachineLoad {
            machine: machine_id(),
            processors: now.processors,
            usable: std::thread::available_parallelism().map_or(0, usize::from),
            wall_s: self.at.elapsed().as_secs_f64(),
            busy_s: (now.busy - self.cpu.busy).max(0.0),
            steal_s: (now.steal - self.cpu.steal).max(0.0),
            own_s: super::dataflow::process_cpu_ns().saturating_sub(self.own_ns) as f64 / 1e9,
        })
    }
}

/// One machine's processor time over one or more jobs, summed from what
/// its job processes saw ([`MachineLoad`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MachineTotals {
    /// The processors `/proc/stat` lists.
    pub processors: usize,
    /// The fewest processors one of its job processes could use.
    pub usable: usize,
    /// Seconds watched (processes of one machine watch it over nearly the
    /// same time: the longest of them per job).
    pub wall: f64,
    /// The machine's busy processor seconds over them.
    pub busy: f64,
    /// Stolen processor seconds.
    pub steal: f64,
    /// The job processes' own processor seconds.
    pub own: f64,
    /// The job processes on it (their indices).
    pub processes: Vec<usize>,
}

impl Default for MachineTotals {
    /// Nothing watched yet.
    fn default() -> MachineTotals {
        MachineTotals {
            processors: 0,
            usable: usize::MAX,
            wall: 0.0,
            busy: 0.0,
            steal: 0.0,
            own: 0.0,
            processes: Vec::new(),
        }
    }
}

impl MachineTotals {
    /// Each machine's totals over one job, by [`machine_id`], from each
    /// process's load (`None`: it could not tell, left out).
    pub fn of_job(loads: &[Option<MachineLoad>]) -> BTreeMap<String, MachineTotals> {
        let mut out: BTreeMap<String, MachineTotals> = BTreeMap::new();
        for (i, m) in loads.iter().enumerate() {
            let Some(m) = m else { continue };
            let t = out.entry(m.machine.clone()).or_default();
            t.processors = m.processors;
            t.usable = t.usable.min(m.usable);
            t.wall = t.wall.max(m.wall_s);
            t.busy = t.busy.max(m.busy_s);
            t.steal = t.steal.max(m.steal_s);
            t.own += m.own_s;
            t.processes.push(i);
        }
        out
    }

    /// Add another job's totals of the same machine.
    pub fn add(&mut self, job: &MachineTotals) {
        self.processors = job.processors;
        self.usable = self.usable.min(job.usable);
        self.wall += job.wall;
        self.busy += job.busy;
        self.steal += job.steal;
        self.own += job.own;
        for p in &job.processes {
            if !self.processes.contains(p) {
                self.processes.push(*p);
            }
        }
    }

    /// The share of the machine's processors that other programs took
    /// (busy less the job processes' own time), and the share the
    /// hypervisor stole; `None` when that cannot be told: nothing watched,
    /// or a job process could use fewer processors than the machine has (a
    /// container on a larger host: the others' time may be on processors the
    /// job never used).
    pub fn others_and_steal(&self) -> Option<(f64, f64)> {
        let capacity = self.wall * self.processors as f64;
        if capacity <= 0.0 || self.usable < self.processors {
            return None;
        }
        // Shares, whatever the rounding: `/proc/stat` counts in ticks (10 ms),
        // so over a short job on a machine others keep busy the busy time
        // read can pass what the processors could give.
        Some((((self.busy - self.own) / capacity).clamp(0.0, 1.0), (self.steal / capacity).clamp(0.0, 1.0)))
    }
}

/// The largest share of a machine's processors that other programs (or the
/// hypervisor) took during one job, over the job's machines (`None`: no
/// machine could tell): how much to doubt a time measured on it.
pub fn others_busy(loads: &[Option<MachineLoad>]) -> Option<f64> {
    MachineTotals::of_job(loads)
        .values()
        .filter_map(MachineTotals::others_and_steal)
        .map(|(others, steal)| others.max(steal))
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::{others_busy, parse_proc_stat, MachineCpu, MachineLoad, MachineWatch};

    const STAT: &str = "cpu  100 20 30 4000 5 6 7 8 0 0\ncpu0 50 10 15 2000 2 3 3 4 0 0\n\
                        cpu1 50 10 15 2000 3 3 4 4 0 0\nintr 12345\nctxt 999\n";

    #[test]
    fn the_machine_time_is_read_from_the_first_line_of_proc_stat() {
        let m = parse_proc_stat(STAT, 100.0).unwrap();
        // user + nice + system + irq + softirq; steal apart; cpu0 and cpu1.
        assert_eq!(m, MachineCpu { busy: 1.63, steal: 0.08, processors: 2 });
        assert_eq!(parse_proc_stat("intr 1\n", 100.0), None);
        assert_eq!(parse_proc_stat("cpu  1 x 3 4\ncpu0 1 2 3 4\n", 100.0), None);
        assert_eq!(parse_proc_stat(STAT, 0.0), None);
    }

    #[test]
    fn a_watch_counts_this_process_s_work_as_its_own_and_as_the_machine_s() {
        let Some(w) = MachineWatch::start() else { return }; // no /proc here
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 300 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let l = w.load().unwrap();
        assert!(l.own_s > 0.2, "{l:?}");
        assert!(l.busy_s >= l.own_s * 0.9, "{l:?}");
        assert!(l.wall_s >= 0.3 && l.processors > 0 && !l.machine.is_empty(), "{l:?}");
    }

    #[test]
    fn others_busy_is_the_worst_machine_s_share_taken_by_others_or_steal() {
        let load = |machine: &str, busy_s: f64, steal_s: f64, own_s: f64, usable: usize| {
            Some(MachineLoad { machine: machine.into(), processors: 2, usable, wall_s: 1.0, busy_s, steal_s, own_s })
        };
        // Two processes on m1 see its 1.5 s busy and used 0.6 s each: others
        // 0.3 s of 2 s; m2: 0.2 s stolen.
        let job = [load("m1", 1.5, 0.0, 0.6, 2), load("m1", 1.5, 0.0, 0.6, 2), load("m2", 0.5, 0.2, 0.5, 2)];
        assert!((others_busy(&job).unwrap() - 0.15).abs() < 1e-9, "{:?}", others_busy(&job));
        let job = [load("m1", 1.5, 0.0, 0.6, 2), load("m1", 1.5, 0.0, 0.6, 2), load("m2", 0.5, 0.5, 0.5, 2)];
        assert!((others_busy(&job).unwrap() - 0.25).abs() < 1e-9);
        // A container allowed fewer processors than the machine has, or no
        // figures: cannot tell.
        assert_eq!(others_busy(&[load("m1", 1.5, 0.0, 0.6, 1)]), None);
        assert_eq!(others_busy(&[None, None]), None);
        // Ticks read more busy time than 2 processors give in 1 s: all of it.
        assert_eq!(others_busy(&[load("m1", 2.06, 0.0, 0.0, 2)]), Some(1.0));
    }
}
