//! `--out DIR`: the per-run CSV, the summary CSV, the verdict's CSVs and the plots (SVG
//! and PDF).

use std::fmt::Write as _;
use std::path::Path;

use crate::research::compare::{Cell, SCALARS, summarize};
use crate::research::error::ResearchError;
use crate::research::policy::Policy;
use crate::research::provenance::Provenance;
use crate::research::ranking::WorkloadVerdict;
use crate::research::verdict_report;
use crate::research::workload::Workload;

pub(crate) fn write(dir: &Path, name: &str, body: &str) -> Result<(), ResearchError> {
    let path = dir.join(name);
    // Written whole to a temporary name and renamed: a reader never sees half a file.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, body)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| ResearchError::Write { path, source })
}

/// A plot as `NAME.svg` and the same drawing as `NAME.pdf` (decision 0112).
pub(crate) fn write_plot(dir: &Path, svg_name: &str, svg: &str) -> Result<(), ResearchError> {
    write(dir, svg_name, svg)?;
    let pdf_name = format!("{}.pdf", svg_name.trim_end_matches(".svg"));
    let pdf = crate::research::pdf::from_svg(svg).map_err(|source| ResearchError::Pdf {
        name: pdf_name.clone(),
        source,
    })?;
    let path = dir.join(&pdf_name);
    let tmp = dir.join(format!(".{pdf_name}.tmp"));
    std::fs::write(&tmp, pdf)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| ResearchError::Write { path, source })
}

/// Every file of `--out`: the CSVs start with the provenance's comment lines.
pub fn write_all(
    dir: &Path,
    cells: &[Cell],
    verdicts: &[WorkloadVerdict],
    policies: &[Policy],
    workloads: &[Workload],
    prov: &Provenance,
) -> Result<(), ResearchError> {
    std::fs::create_dir_all(dir).map_err(|source| ResearchError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let header = prov.csv_header();
    write(dir, "runs.csv", &(header.clone() + &runs_csv(cells)))?;
    write(dir, "summary.csv", &(header.clone() + &summary_csv(cells)))?;
    write(
        dir,
        "verdict.csv",
        &(header.clone() + &verdict_report::pairs_csv(verdicts)),
    )?;
    write(
        dir,
        "ranks.csv",
        &(header.clone() + &verdict_report::ranks_csv(verdicts)),
    )?;
    write(
        dir,
        "answer.csv",
        &(header + &verdict_report::answer_csv(verdicts)),
    )?;
    for (name, svg) in crate::research::plots::all(cells, policies.len(), workloads) {
        write_plot(dir, &name, &svg)?;
    }
    Ok(())
}

/// A CSV field: quoted when it holds a comma, quote or line break.
pub(crate) fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per run.
pub fn runs_csv(cells: &[Cell]) -> String {
    let mut s = String::from("policy,workload,seed,x,failed");
    for (name, _) in SCALARS {
        let _ = write!(s, ",{name}");
    }
    s.push('\n');
    for c in cells {
        for m in &c.runs {
            let x = m.x.map_or(String::new(), |x| format!("{x:.3}"));
            let (p, w) = (field(&c.policy), field(&c.workload));
            let _ = write!(s, "{p},{w},{},{x},{}", m.seed, m.failed);
            for (_, f) in SCALARS {
                let _ = write!(s, ",{}", f(m).map_or(String::new(), |v| format!("{v}")));
            }
            s.push('\n');
        }
    }
    s
}

/// One row per policy × workload × metric: mean and 95 % interval.
pub fn summary_csv(cells: &[Cell]) -> String {
    let mut s = String::from("policy,workload,fault_class,seeds,metric,mean,lo,hi\n");
    for c in cells {
        let sm = summarize(c);
        let rows = sm
            .metrics
            .iter()
            .map(|(n, e)| (*n, *e))
            .chain([("p_failed", sm.p_failed)]);
        for (name, e) in rows {
            let _ = writeln!(
                s,
                "{},{},{},{},{name},{},{},{}",
                field(&c.policy),
                field(&c.workload),
                c.class.name(),
                c.runs.len(),
                e.mean,
                e.lo,
                e.hi
            );
        }
    }
    s
}
