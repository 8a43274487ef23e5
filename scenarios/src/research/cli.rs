//! `servery-scenarios compare`: load the inputs, run the matrix, print and write.

use std::path::{Path, PathBuf};

use servery_core::supervisor::Platform;

use crate::research::compare::run_matrix;
use crate::research::error::ResearchError;
use crate::research::policy::Policy;
use crate::research::provenance::{self, Provenance, shell_word};
use crate::research::sweep;
use crate::research::workload::Workload;
use crate::research::{heatmap, output, ranking, report, verdict_report};

/// Seeds the verdict's bootstrap: fixed, so a comparison's verdict replays exactly.
pub const VERDICT_SEED: u64 = 0x5e1d_1c70;

/// What `compare` was asked for.
#[derive(Debug, Clone)]
pub struct CompareArgs {
    pub policies: Vec<String>,
    pub workloads: Vec<String>,
    pub seeds: u64,
    pub jobs: usize,
    pub out: Option<PathBuf>,
    pub json: bool,
    pub platform: Platform,
    /// With `--out`: the first policy's restart limit × window grid for the heat map.
    pub grid: Option<(Vec<i64>, Vec<f64>)>,
}

/// A file argument as given, or else the shipped file of that name
/// (`scenarios/policies/NAME.toml`, `scenarios/workloads/NAME.toml`).
pub fn resolve(arg: &str, shipped: &str) -> PathBuf {
    let given = PathBuf::from(arg);
    if given.exists() {
        return given;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(shipped);
    let named = dir.join(format!("{arg}.toml"));
    if named.exists() { named } else { given }
}

/// Load and cross-check the inputs: each policy must also validate with each
/// workload's worker count, and names must be unique.
pub fn load_inputs(args: &CompareArgs) -> Result<(Vec<Policy>, Vec<Workload>), ResearchError> {
    // A file with `[[vary]]` tables stands for one policy per sweep point.
    let mut policies = Vec::new();
    let mut paths = Vec::new();
    for arg in &args.policies {
        let path = resolve(arg, "policies");
        for p in sweep::load_all(&path)? {
            policies.push(p);
            paths.push(path.clone());
        }
    }
    // A workload file with `[[vary]]` tables likewise stands for one workload a point.
    let mut workloads = Vec::new();
    for arg in &args.workloads {
        workloads.extend(sweep::load_workloads(&resolve(arg, "workloads"))?);
    }
    for names in [
        policies.iter().map(|p| &p.name).collect::<Vec<_>>(),
        workloads.iter().map(|w| &w.name).collect(),
    ] {
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(ResearchError::DuplicateName((*n).clone()));
            }
        }
    }
    if let Some((limits, windows)) = &args.grid {
        // Every grid point is a policy too, held to the same rules.
        let path = resolve(&args.policies[0], "policies");
        if policies[0].start_limit().is_some() {
            return Err(ResearchError::Parse {
                path,
                message: "--grid-limits/--grid-windows vary servery's own restart limit, which \
                          a [systemd] policy turns off for systemd's start limit: sweep \
                          systemd.start_limit_burst and systemd.start_limit_interval_s with \
                          [[vary]] instead"
                    .into(),
            });
        }
        for &l in limits {
            for &win in windows {
                let mut p = policies[0].clone();
                p.recovery.worker_restart_limit = l;
                p.recovery.worker_restart_window = win;
                p.config(1)
                    .validate()
                    .map_err(|source| ResearchError::InvalidPolicy {
                        path: path.clone(),
                        source,
                    })?;
            }
        }
    }
    for (p, path) in policies.iter().zip(&paths) {
        for w in &workloads {
            p.config(w.workers)
                .validate()
                .map_err(|source| ResearchError::InvalidPolicy {
                    path: path.clone(),
                    source,
                })?;
        }
    }
    Ok((policies, workloads))
}

/// The platform's name as `--platform` takes it.
pub fn platform_name(platform: Platform) -> &'static str {
    match platform {
        Platform::Windows => "windows",
        _ => "posix",
    }
}

/// The command line that reproduces this comparison (`--jobs` leaves the results alone).
pub fn command(args: &CompareArgs) -> String {
    let mut c = String::from("cargo run --release -p servery-scenarios -- compare");
    for p in &args.policies {
        c.push_str(&format!(" --policy {}", shell_word(p)));
    }
    for w in &args.workloads {
        c.push_str(&format!(" --workload {}", shell_word(w)));
    }
    c.push_str(&format!(
        " --seeds {} --platform {}",
        args.seeds,
        platform_name(args.platform)
    ));
    if let Some(dir) = &args.out {
        c.push_str(&format!(" --out {}", shell_word(&dir.to_string_lossy())));
    }
    if let Some((limits, windows)) = &args.grid {
        let join = |xs: Vec<String>| xs.join(",");
        c.push_str(&format!(
            " --grid-limits {} --grid-windows {}",
            join(limits.iter().map(ToString::to_string).collect()),
            join(windows.iter().map(ToString::to_string).collect())
        ));
    }
    if args.json {
        c.push_str(" --json");
    }
    c
}

/// Run the comparison; the text or JSON to print.
pub fn compare(args: &CompareArgs) -> Result<String, ResearchError> {
    let (policies, workloads) = load_inputs(args)?;
    let prov = Provenance {
        commit: provenance::commit(),
        command: command(args),
        seeds: 0..args.seeds,
        platform: platform_name(args.platform),
        policies: policies.clone(),
        workloads: workloads.clone(),
        extra: Vec::new(),
    };
    let cells = run_matrix(
        &policies,
        &workloads,
        0..args.seeds,
        args.jobs,
        args.platform,
    );
    let verdicts = ranking::judge(&cells, policies.len(), VERDICT_SEED)?;
    if let Some(dir) = &args.out {
        output::write_all(dir, &cells, &verdicts, &policies, &workloads, &prov)?;
        if let Some((limits, windows)) = &args.grid {
            let mut grid_prov = prov.clone();
            grid_prov.extra.push((
                "grid",
                serde_json::json!({
                    "policy": policies[0].name,
                    "varied": ["worker_restart_limit", "worker_restart_window"],
                    "worker_restart_limit": limits,
                    "worker_restart_window": windows,
                }),
            ));
            for w in &workloads {
                let grid = heatmap::run(
                    &policies[0],
                    w,
                    limits,
                    windows,
                    args.seeds,
                    args.jobs,
                    args.platform,
                );
                let csv = grid_prov.csv_header() + &grid.csv();
                output::write(dir, &format!("p-failed-grid-{}.csv", w.name), &csv)?;
                output::write_plot(
                    dir,
                    &format!("p-failed-grid-{}.svg", w.name),
                    &grid.svg(args.seeds),
                )?;
            }
        }
    }
    Ok(if args.json {
        let mut v = report::json(&cells, policies.len());
        v["verdict"] = verdict_report::json(&verdicts);
        v["provenance"] = prov.json();
        v.to_string()
    } else {
        let trailers: Vec<String> = verdicts.iter().map(verdict_report::text).collect();
        let text = report::text(&cells, policies.len(), &trailers);
        format!(
            "{text}{}\ncommit {}; reproduce with:\n{}\n",
            verdict_report::answer_text(&verdicts),
            prov.commit,
            prov.command
        )
    })
}
