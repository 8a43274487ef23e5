//! Which CPUs each worker runs on (`worker_cpu_affinity`, decision 0122).
//!
//! A worker that hosts an application hands every request from its I/O thread to its
//! interpreter's thread and back. On one CPU that hand-over is a cheap wake-up; across
//! CPUs the scheduler keeps migrating the pair, which cost a WSGI worker a quarter of its
//! throughput in our measurements. Under `auto` the CPUs the parent may run on (as the
//! driver found them at start: `taskset` and cgroup cpusets narrow them) are shared out
//! among the worker slots, so each application worker keeps to its own CPUs.
//!
//! The choice is a pure function of the slot, the worker count and the allowed CPUs, so a
//! replacement (crash, recycle) gets its slot's CPUs again, and a reload that changes the
//! count shares them out again for its generation. The supervisor puts the result in the
//! spawn action; the drivers only apply it.

use core::fmt;

use crate::config::{CpuAffinity, ValidConfig};
use crate::ids::Slot;

/// The most CPUs a set may name (Linux's `CPU_SETSIZE`): a larger number in a list is
/// refused rather than allocated for.
pub const MAX_CPUS: u32 = 1024;

/// A set of CPU numbers, ascending, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(Vec<u32>);

/// Why a CPU list (`0-3,8`) does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuListError {
    #[error("`{0}` is not a CPU number or a range of them (`3`, `0-3`)")]
    NotANumber(String),
    #[error("the range `{0}` runs backwards")]
    Backwards(String),
    #[error("CPU `{0}` is beyond the {MAX_CPUS} a set may name")]
    TooLarge(String),
}

impl CpuSet {
    /// The set of `cpus`, in any order and with repeats.
    pub fn new(cpus: impl IntoIterator<Item = u32>) -> CpuSet {
        let mut cpus: Vec<u32> = cpus.into_iter().collect();
        cpus.sort_unstable();
        cpus.dedup();
        CpuSet(cpus)
    }

    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.binary_search(&cpu).is_ok()
    }

    /// Whether no CPU is in both.
    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        !self.0.iter().any(|c| other.contains(*c))
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.iter().all(|c| other.contains(*c))
    }

    /// Reads the kernel's list format (`Cpus_allowed_list` in `/proc/PID/status`,
    /// `cpuset.cpus`): numbers and ranges separated by commas, `0-3,8`; the empty list is
    /// the empty set. Surrounding white space is ignored.
    pub fn parse_list(list: &str) -> Result<CpuSet, CpuListError> {
        let list = list.trim();
        let mut cpus = Vec::new();
        if list.is_empty() {
            return Ok(CpuSet(cpus));
        }
        let number = |s: &str, part: &str| -> Result<u32, CpuListError> {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(CpuListError::NotANumber(part.to_owned()));
            }
            match s.parse::<u32>() {
                Ok(n) if n < MAX_CPUS => Ok(n),
                _ => Err(CpuListError::TooLarge(s.to_owned())),
            }
        };
        for part in list.split(',') {
            match part.split_once('-') {
                None => cpus.push(number(part, part)?),
                Some((lo, hi)) => {
                    let (lo, hi) = (number(lo, part)?, number(hi, part)?);
                    if hi < lo {
                        return Err(CpuListError::Backwards(part.trim().to_owned()));
                    }
                    cpus.extend(lo..=hi);
                }
            }
        }
        Ok(CpuSet::new(cpus))
    }
}

/// The kernel's list format: runs of consecutive CPUs as ranges (`0-3,8`).
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// The share of `allowed` that `slot` of `workers` slots runs on.
///
/// With at most as many slots as CPUs, each slot gets a contiguous run of
/// `allowed.len() / workers` CPUs, the first `allowed.len() % workers` slots one more, so
/// the shares are disjoint and cover `allowed`. With more slots than CPUs, slot `i` gets
/// CPU `i mod C` alone (each CPU then serves as few slots as it can). One slot gets every
/// CPU. An empty `allowed` gives the empty set.
pub fn slot_share(slot: Slot, workers: u32, allowed: &CpuSet) -> CpuSet {
    let cpus = allowed.as_slice();
    let c = cpus.len();
    let n = workers.max(1) as usize;
    if c == 0 {
        return CpuSet::default();
    }
    let i = slot.0 as usize % n;
    if n > c {
        return CpuSet(vec![cpus[i % c]]);
    }
    let (each, extra) = (c / n, c % n);
    let start = i * each + i.min(extra);
    let len = each + usize::from(i < extra);
    CpuSet(cpus[start..start + len].to_vec())
}

/// What a worker of `config` in `slot` is pinned to, `allowed` being the CPUs the parent
/// may run on; `None`: not pinned (it runs where the parent may). Pinned only under
/// `auto`, only when the workers host an application (file-serving workers gained
/// nothing measurable), and only when the driver knows the allowed CPUs.
pub fn worker_cpus(config: &ValidConfig, slot: Slot, allowed: &CpuSet) -> Option<CpuSet> {
    let pinned = config.worker_cpu_affinity() == CpuAffinity::Auto
        && config.features().application
        && !allowed.is_empty();
    pinned.then(|| slot_share(slot, config.workers(), allowed))
}

/// Every slot's CPUs under `config`, slot 0 first (what `--check-config` shows).
pub fn plan(config: &ValidConfig, allowed: &CpuSet) -> Vec<Option<CpuSet>> {
    (0..config.workers())
        .map(|i| worker_cpus(config, Slot(i), allowed))
        .collect()
}

#[cfg(test)]
#[path = "cpu_affinity_tests.rs"]
mod tests;
