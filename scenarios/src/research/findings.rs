//! The "Findings" of `docs/policy-research.md`, made from the tool's own runs: every
//! figure a finding quotes is in one of the blocks made here, and every claim its prose
//! makes about them is checked here and printed with its outcome (`holds:` or
//! `DOES NOT HOLD:`). The test `the_documents_generated_figures_are_the_tools_output`
//! compares the document's blocks with these and fails on a claim that does not hold,
//! so a finding cannot go stale: a change that moves a figure changes the block, and one
//! that breaks a claim fails the test. `servery-scenarios findings` prints the same
//! blocks.
//!
//! A cell (policy × workload × seeds) is run once, however many findings read it: the
//! seed defaults under `crash-storm`, say, serve findings 1, 7 and 8 and the verdict.

use std::collections::HashMap;

use servery_core::supervisor::Platform;

use crate::research::cli::resolve;
use crate::research::compare::{Cell, run_matrix};
use crate::research::error::ResearchError;
use crate::research::findings_tables as tables;
use crate::research::policy::Policy;
use crate::research::sweep;
use crate::research::workload::Workload;

/// What a claim that no longer holds prints; the test fails on it.
pub const BROKEN_CLAIM: &str = "DOES NOT HOLD:";

/// The matrix of findings 1–4 and 7 and of the verdict.
pub const MAIN_POLICIES: [&str; 8] = [
    "seed-defaults",
    "systemd-defaults",
    "systemd-restartsteps",
    "kubernetes-classic",
    "kubernetes-kep4603",
    "erlang-1-5",
    "erlang-5-30",
    "docker",
];
pub const MAIN_WORKLOADS: [&str; 4] = ["crash-storm", "boot-loop", "poison-request", "hang"];
pub const MAIN_SEEDS: u64 = 100;
/// Finding 1's short outages.
pub const SHORT_SEEDS: u64 = 50;
/// Finding 5's aging comparison.
pub const AGING_POLICIES: [&str; 5] = [
    "seed-defaults",
    "seed-defaults-max-age",
    "gunicorn-recycling",
    "uvicorn",
    "granian",
];
/// Finding 6's heat map.
pub const GRID_LIMITS: [i64; 5] = [1, 3, 5, 10, 20];
pub const GRID_WINDOWS: [f64; 5] = [10.0, 30.0, 60.0, 120.0, 300.0];
pub const GRID_SEEDS: u64 = 40;
/// Finding 8's burst window.
pub const BURST_POLICIES: [&str; 3] = [
    "seed-defaults",
    "seed-defaults-burst-1",
    "seed-defaults-burst-5",
];
pub const BURST_WORKLOADS: [&str; 5] = [
    "crash-blip-6",
    "crash-storm",
    "poison-request",
    "hang",
    "boot-loop",
];
/// Finding 9's sweep of systemd's start limit.
pub const SYSTEMD_SWEEP: &str = "sweeps/systemd-start-limit";
pub const SYSTEMD_SEEDS: u64 = 40;

/// The runs the findings share: each cell is simulated once.
#[derive(Debug)]
pub struct Lab {
    jobs: usize,
    platform: Platform,
    done: HashMap<(String, String, u64), Cell>,
}

impl Lab {
    pub fn new(jobs: usize) -> Self {
        Lab {
            jobs,
            platform: Platform::Posix,
            done: HashMap::new(),
        }
    }

    pub fn jobs(&self) -> usize {
        self.jobs
    }

    /// Every policy the shipped (or given) file stands for: one, or a sweep's points.
    pub fn policies(&self, names: &[&str]) -> Result<Vec<Policy>, ResearchError> {
        let mut out = Vec::new();
        for n in names {
            out.extend(sweep::load_all(&resolve(n, "policies"))?);
        }
        Ok(out)
    }

    pub fn workloads(&self, names: &[&str]) -> Result<Vec<Workload>, ResearchError> {
        let mut out = Vec::new();
        for n in names {
            out.extend(sweep::load_workloads(&resolve(n, "workloads"))?);
        }
        Ok(out)
    }

    /// The cells of `policies` × `workloads` over seeds `0..seeds`, in `run_matrix`'s
    /// order (workload-major), running only those not run before.
    pub fn cells(&mut self, policies: &[Policy], workloads: &[Workload], seeds: u64) -> Vec<Cell> {
        let key = |p: &Policy, w: &Workload| (p.name.clone(), w.name.clone(), seeds);
        for w in workloads {
            let missing: Vec<Policy> = policies
                .iter()
                .filter(|p| !self.done.contains_key(&key(p, w)))
                .cloned()
                .collect();
            if missing.is_empty() {
                continue;
            }
            let ran = run_matrix(
                &missing,
                std::slice::from_ref(w),
                0..seeds,
                self.jobs,
                self.platform,
            );
            for (p, cell) in missing.iter().zip(ran) {
                self.done.insert(key(p, w), cell);
            }
        }
        workloads
            .iter()
            .flat_map(|w| policies.iter().map(move |p| (p, w)))
            .map(|(p, w)| self.done[&key(p, w)].clone())
            .collect()
    }

    /// The same, by the shipped files' names.
    pub fn cells_named(
        &mut self,
        policies: &[&str],
        workloads: &[&str],
        seeds: u64,
    ) -> Result<Vec<Cell>, ResearchError> {
        let (p, w) = (self.policies(policies)?, self.workloads(workloads)?);
        Ok(self.cells(&p, &w, seeds))
    }
}

/// A finding's checked statements, printed under its figures.
#[derive(Debug, Default)]
pub struct Claims(Vec<(String, bool)>);

impl Claims {
    pub fn check(&mut self, statement: impl Into<String>, holds: bool) {
        self.0.push((statement.into(), holds));
    }

    pub fn text(&self) -> String {
        self.0
            .iter()
            .map(|(s, holds)| {
                let word = if *holds { "holds:" } else { BROKEN_CLAIM };
                format!("{word} {s}\n")
            })
            .collect()
    }
}

/// The cell of `policy` under `workload` among `cells`.
pub fn cell<'a>(cells: &'a [Cell], policy: &str, workload: &str) -> &'a Cell {
    cells
        .iter()
        .find(|c| c.policy == policy && c.workload == workload)
        .unwrap_or_else(|| panic!("no cell {policy} under {workload}"))
}

/// The document's finding blocks, `(key, text)`, in the document's order.
pub fn generate(jobs: usize) -> Result<Vec<(String, String)>, ResearchError> {
    let mut lab = Lab::new(jobs);
    let main = lab.cells_named(&MAIN_POLICIES, &MAIN_WORKLOADS, MAIN_SEEDS)?;
    let blocks = vec![
        ("findings verdict".into(), tables::verdict(&main)?),
        ("finding 1".into(), tables::crash_storm(&mut lab, &main)?),
        ("finding 2".into(), tables::boot_loop(&main)),
        ("finding 3".into(), tables::poison_request(&main)),
        ("finding 4".into(), tables::hang(&main)),
        ("finding 5".into(), tables::aging(&mut lab)?),
        ("finding 6".into(), tables::grid(&mut lab)?),
        ("finding 7".into(), tables::latency(&main)),
        ("finding 8".into(), tables::burst(&mut lab)?),
        ("finding 9".into(), tables::systemd_sweep(&mut lab)?),
    ];
    // No trailing blanks: the blocks are quoted in Markdown.
    Ok(blocks
        .into_iter()
        .map(|(key, text): (String, String)| {
            let lines: String = text
                .lines()
                .map(|l| format!("{}\n", l.trim_end()))
                .collect();
            (key, lines)
        })
        .collect())
}

/// `servery-scenarios findings`: every block, each under its key.
pub fn print(jobs: usize) -> Result<String, ResearchError> {
    Ok(generate(jobs)?
        .into_iter()
        .map(|(key, text)| format!("== {key}\n{text}\n"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_that_fails_is_printed_as_broken() {
        let mut c = Claims::default();
        c.check("one", true);
        c.check("two", false);
        assert_eq!(
            c.text(),
            format!("holds: one\n{BROKEN_CLAIM} two\n"),
            "claim rule: a false check prints {BROKEN_CLAIM:?}, a true one `holds:`"
        );
    }
}
