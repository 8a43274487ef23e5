//! The SVG plots of `--out`, drawn with plotters' SVG backend alone (text is left to the
//! viewer: no font backend, no system fonts).

use plotters::prelude::*;

use crate::research::compare::Cell;
use crate::research::metrics::RunMetrics;
use crate::research::stats::{Estimate, bootstrap_mean, wilson};

const SIZE: (u32, u32) = (720, 440);
const BINS: usize = 8;

fn colour(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

/// A series to draw: its name and points, with an optional band (lo, hi) per point.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    band: Option<Vec<(f64, f64, f64)>>,
}

fn chart(title: &str, x_desc: &str, y_desc: &str, series: &[Series]) -> String {
    let mut svg = String::new();
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        if x.is_finite() && y.is_finite() {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
    }
    for b in series.iter().filter_map(|s| s.band.as_ref()).flatten() {
        if b.1.is_finite() && b.2.is_finite() {
            (y0, y1) = (y0.min(b.1), y1.max(b.2));
        }
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = |lo: f64, hi: f64| {
        if hi - lo < 1e-9 {
            (lo - 0.5, hi + 0.5)
        } else {
            (lo, hi + (hi - lo) * 0.05)
        }
    };
    let ((x0, x1), (y0, y1)) = (pad(x0, x1), pad(y0, y1));
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut c = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(56)
                .build_cartesian_2d(x0..x1, y0..y1)?;
            c.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw()?;
            for (i, s) in series.iter().enumerate() {
                let col = colour(i);
                if let Some(band) = &s.band {
                    let upper = band.iter().map(|&(x, _, hi)| (x, hi));
                    let lower = band.iter().rev().map(|&(x, lo, _)| (x, lo));
                    let poly: Vec<(f64, f64)> =
                        upper.chain(lower).filter(|p| p.1.is_finite()).collect();
                    c.draw_series(std::iter::once(Polygon::new(poly, col.mix(0.2))))?;
                }
                c.draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    col.stroke_width(2),
                ))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], col.stroke_width(2)));
            }
            c.configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
            root.present()?;
            Ok(())
        })();
        if let Err(e) = drawn {
            tracing_free_note(&e.to_string());
        }
    }
    svg
}

/// Plot errors are drawing-backend errors on an in-memory string; they leave the
/// partial picture, which still opens.
fn tracing_free_note(_e: &str) {}

/// Runs binned by the workload's drawn parameter; per bin the estimate of `f`.
fn by_x(runs: &[RunMetrics], f: impl Fn(&[&RunMetrics]) -> Estimate) -> Vec<(f64, f64, f64, f64)> {
    let xs: Vec<f64> = runs.iter().filter_map(|m| m.x).collect();
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    if xs.is_empty() || hi <= lo {
        return Vec::new();
    }
    let width = (hi - lo) / BINS as f64;
    (0..BINS)
        .filter_map(|b| {
            let (from, to) = (lo + b as f64 * width, lo + (b + 1) as f64 * width);
            let bin: Vec<&RunMetrics> = runs
                .iter()
                .filter(|m| m.x.is_some_and(|x| x >= from && (x < to || b == BINS - 1)))
                .collect();
            if bin.is_empty() {
                return None;
            }
            let e = f(&bin);
            Some(((from + to) / 2.0, e.mean, e.lo, e.hi))
        })
        .collect()
}

fn banded(name: &str, pts: Vec<(f64, f64, f64, f64)>) -> Series {
    Series {
        name: name.to_string(),
        points: pts.iter().map(|p| (p.0, p.1)).collect(),
        band: Some(pts.iter().map(|p| (p.0, p.2, p.3)).collect()),
    }
}

/// Every plot for the cells, as (file name, SVG).
pub fn all(cells: &[Cell], policies: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for group in cells.chunks(policies.max(1)) {
        let w = &group[0].workload;
        if group[0].runs.iter().any(|m| m.x.is_some()) {
            let avail: Vec<Series> = group
                .iter()
                .map(|c| {
                    banded(
                        &c.policy,
                        by_x(&c.runs, |b| {
                            let xs: Vec<f64> = b.iter().map(|m| m.availability).collect();
                            bootstrap_mean(&xs, 7)
                        }),
                    )
                })
                .collect();
            out.push((
                format!("availability-vs-parameter-{w}.svg"),
                chart(
                    &format!("{w}: availability (95 % bands)"),
                    "drawn parameter (s)",
                    "served / offered",
                    &avail,
                ),
            ));
            let failed: Vec<Series> = group
                .iter()
                .map(|c| {
                    banded(
                        &c.policy,
                        by_x(&c.runs, |b| {
                            wilson(b.iter().filter(|m| m.failed).count() as u64, b.len() as u64)
                        }),
                    )
                })
                .collect();
            out.push((
                format!("p-failed-vs-parameter-{w}.svg"),
                chart(
                    &format!("{w}: P(failed) (Wilson 95 % bands)"),
                    "drawn parameter (s)",
                    "P(failed)",
                    &failed,
                ),
            ));
        }
        let cdf: Vec<Series> = group
            .iter()
            .map(|c| {
                let mut xs: Vec<f64> = c
                    .runs
                    .iter()
                    .flat_map(|m| m.recover_s.iter().copied())
                    .collect();
                xs.sort_by(f64::total_cmp);
                let n = xs.len().max(1) as f64;
                Series {
                    name: c.policy.clone(),
                    points: xs
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| (x, (i + 1) as f64 / n))
                        .collect(),
                    band: None,
                }
            })
            .collect();
        out.push((
            format!("recover-cdf-{w}.svg"),
            chart(
                &format!("{w}: time to recover, CDF"),
                "seconds below N ready",
                "share of spells",
                &cdf,
            ),
        ));
        let boots: Vec<Series> = group
            .iter()
            .map(|c| {
                let end = c
                    .runs
                    .iter()
                    .flat_map(|m| m.ready.last().map(|r| r.0))
                    .fold(0.0, f64::max);
                let runs = c.runs.len().max(1) as f64;
                let points = (0..=60)
                    .map(|k| {
                        let t = end * k as f64 / 60.0;
                        let count = c
                            .runs
                            .iter()
                            .map(|m| m.boot_times.iter().filter(|b| **b <= t).count())
                            .sum::<usize>();
                        (t, count as f64 / runs)
                    })
                    .collect();
                Series {
                    name: c.policy.clone(),
                    points,
                    band: None,
                }
            })
            .collect();
        out.push((
            format!("boots-over-time-{w}.svg"),
            chart(
                &format!("{w}: restarts and recycles over time (mean per run)"),
                "time (s)",
                "boots after the first generation",
                &boots,
            ),
        ));
    }
    out
}
