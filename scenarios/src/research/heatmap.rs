//! `--grid-limits L1,L2,… --grid-windows W1,W2,…`: P(failed) of the first policy with
//! its restart limit and window varied over a grid, per workload, as CSV and an SVG heat
//! map (Wilson intervals in the CSV; the cell's share as its colour and label).

use std::fmt::Write as _;

use plotters::prelude::*;
use servery_core::supervisor::Platform;

use crate::research::compare::run_matrix;
use crate::research::policy::Policy;
use crate::research::stats::{Estimate, wilson};
use crate::research::workload::Workload;

/// The grid's P(failed): `cells[i][j]` for `limits[i]`, `windows[j]`.
#[derive(Debug, Clone)]
pub struct Grid {
    pub workload: String,
    pub limits: Vec<i64>,
    pub windows: Vec<f64>,
    pub cells: Vec<Vec<Estimate>>,
}

pub fn run(
    base: &Policy,
    workload: &Workload,
    limits: &[i64],
    windows: &[f64],
    seeds: u64,
    jobs: usize,
    platform: Platform,
) -> Grid {
    let mut policies = Vec::new();
    for &l in limits {
        for &w in windows {
            let mut p = base.clone();
            p.name = format!("{} limit={l} window={w}", base.name);
            p.recovery.worker_restart_limit = l;
            p.recovery.worker_restart_window = w;
            policies.push(p);
        }
    }
    let cells = run_matrix(
        &policies,
        std::slice::from_ref(workload),
        0..seeds,
        jobs,
        platform,
    );
    let share = |i: usize| {
        let runs = &cells[i].runs;
        wilson(
            runs.iter().filter(|m| m.failed).count() as u64,
            runs.len() as u64,
        )
    };
    Grid {
        workload: workload.name.clone(),
        limits: limits.to_vec(),
        windows: windows.to_vec(),
        cells: (0..limits.len())
            .map(|i| {
                (0..windows.len())
                    .map(|j| share(i * windows.len() + j))
                    .collect()
            })
            .collect(),
    }
}

impl Grid {
    pub fn csv(&self) -> String {
        let mut s = String::from("workload,limit,window_s,p_failed,lo,hi\n");
        for (i, l) in self.limits.iter().enumerate() {
            for (j, w) in self.windows.iter().enumerate() {
                let e = self.cells[i][j];
                let _ = writeln!(s, "{},{l},{w},{},{},{}", self.workload, e.mean, e.lo, e.hi);
            }
        }
        s
    }

    pub fn svg(&self) -> String {
        let mut svg = String::new();
        let (nx, ny) = (self.windows.len() as i32, self.limits.len() as i32);
        {
            let root = SVGBackend::with_string(&mut svg, (720, 480)).into_drawing_area();
            let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
                root.fill(&WHITE)?;
                let title = format!("{}: P(failed) over restart limit and window", self.workload);
                let mut c = ChartBuilder::on(&root)
                    .caption(title, ("sans-serif", 18))
                    .margin(12)
                    .x_label_area_size(36)
                    .y_label_area_size(56)
                    .build_cartesian_2d(0..nx, 0..ny)?;
                let windows = self.windows.clone();
                let limits = self.limits.clone();
                c.configure_mesh()
                    .disable_mesh()
                    .x_desc("worker_restart_window (s)")
                    .y_desc("worker_restart_limit")
                    .x_labels(self.windows.len() + 1)
                    .y_labels(self.limits.len() + 1)
                    .x_label_formatter(&|x| {
                        windows
                            .get(*x as usize)
                            .map_or(String::new(), |w| format!("{w}"))
                    })
                    .y_label_formatter(&|y| {
                        limits
                            .get(*y as usize)
                            .map_or(String::new(), |l| format!("{l}"))
                    })
                    .draw()?;
                for (i, row) in self.cells.iter().enumerate() {
                    for (j, e) in row.iter().enumerate() {
                        let (x, y) = (j as i32, i as i32);
                        let p = if e.mean.is_finite() { e.mean } else { 0.0 };
                        let shade =
                            RGBColor(255, (255.0 * (1.0 - p)) as u8, (255.0 * (1.0 - p)) as u8);
                        c.draw_series(std::iter::once(Rectangle::new(
                            [(x, y), (x + 1, y + 1)],
                            shade.filled(),
                        )))?;
                        c.draw_series(std::iter::once(Text::new(
                            format!("{p:.2}"),
                            (x, y + 1),
                            ("sans-serif", 14),
                        )))?;
                    }
                }
                root.present()?;
                Ok(())
            })();
            // A drawing error on an in-memory string leaves the partial picture.
            let _ = drawn;
        }
        svg
    }
}
