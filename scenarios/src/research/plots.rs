//! The SVG plots of `--out`, drawn with plotters' SVG backend alone (text is left to the
//! viewer: no font backend, no system fonts).

use plotters::prelude::*;

use crate::research::compare::Cell;
use crate::research::metrics::RunMetrics;
use crate::research::stats::{Estimate, bootstrap_mean, wilson};
use crate::research::workload::Workload;

const SIZE: (u32, u32) = (720, 440);

/// Okabe & Ito's colour-blind-safe palette (2008), yellow last: it is faint on white.
const OKABE_ITO: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0xf0, 0xe4, 0x42),
];

fn colour(i: usize) -> RGBColor {
    OKABE_ITO[i % OKABE_ITO.len()]
}

/// Bins for runs binned by the drawn parameter: about 12 runs a bin, 4 to 20 bins.
fn bins(runs: usize) -> usize {
    (runs / 12).clamp(4, 20)
}

/// One bin of runs: (from, to, mean, lo, hi).
type Bin = (f64, f64, f64, f64, f64);

/// A series to draw: its name and points; binned series are drawn as steps over each
/// bin's width with their interval as a box per bin, not as lines joining bin centres.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    /// Per bin: (from, to, mean, lo, hi).
    steps: Option<Vec<Bin>>,
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
    for b in series.iter().filter_map(|s| s.steps.as_ref()).flatten() {
        if b.3.is_finite() && b.4.is_finite() {
            (x0, x1, y0, y1) = (x0.min(b.0), x1.max(b.1), y0.min(b.3), y1.max(b.4));
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
                if let Some(steps) = &s.steps {
                    for &(from, to, _, lo, hi) in steps.iter().filter(|b| b.3.is_finite()) {
                        c.draw_series(std::iter::once(Rectangle::new(
                            [(from, lo), (to, hi)],
                            col.mix(0.15).filled(),
                        )))?;
                    }
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

/// Runs binned by the workload's drawn parameter; per bin (from, to) the estimate of `f`.
fn by_x(runs: &[RunMetrics], f: impl Fn(&[&RunMetrics]) -> Estimate) -> Vec<Bin> {
    let xs: Vec<f64> = runs.iter().filter_map(|m| m.x).collect();
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    if xs.is_empty() || hi <= lo {
        return Vec::new();
    }
    let n = bins(xs.len());
    let width = (hi - lo) / n as f64;
    (0..n)
        .filter_map(|b| {
            let (from, to) = (lo + b as f64 * width, lo + (b + 1) as f64 * width);
            let bin: Vec<&RunMetrics> = runs
                .iter()
                .filter(|m| m.x.is_some_and(|x| x >= from && (x < to || b == n - 1)))
                .collect();
            if bin.is_empty() {
                return None;
            }
            let e = f(&bin);
            Some((from, to, e.mean, e.lo, e.hi))
        })
        .collect()
}

/// A step function through the bins: flat over each bin, vertical between adjacent
/// ones (a gap where a bin had no runs is drawn across at the next bin's level).
fn banded(name: &str, bins: Vec<Bin>) -> Series {
    let points = bins
        .iter()
        .flat_map(|&(from, to, mean, _, _)| [(from, mean), (to, mean)])
        .collect();
    Series {
        name: name.to_string(),
        points,
        steps: Some(bins),
    }
}

/// The empirical CDF as a step function: it rises at each value, flat between.
fn ecdf(xs: &[f64]) -> Vec<(f64, f64)> {
    let n = xs.len().max(1) as f64;
    let mut out = Vec::with_capacity(2 * xs.len());
    for (i, &x) in xs.iter().enumerate() {
        out.push((x, i as f64 / n));
        out.push((x, (i + 1) as f64 / n));
    }
    out
}

/// Every plot for the cells, as (file name, SVG).
pub fn all(cells: &[Cell], policies: usize, workloads: &[Workload]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for group in cells.chunks(policies.max(1)) {
        let w = &group[0].workload;
        let parameter = workloads
            .iter()
            .find(|x| &x.name == w)
            .map_or("drawn parameter (seconds)", Workload::parameter);
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
                    &format!("{w}: availability by bin (bootstrap 95 % boxes)"),
                    parameter,
                    "availability (served / offered requests)",
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
                    &format!("{w}: P(failed) by bin (Wilson 95 % boxes)"),
                    parameter,
                    "P(failed) (share of runs)",
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
                Series {
                    name: c.policy.clone(),
                    points: ecdf(&xs),
                    steps: None,
                }
            })
            .collect();
        out.push((
            format!("recover-cdf-{w}.svg"),
            chart(
                &format!("{w}: time to recover, CDF"),
                "time below N ready workers (seconds)",
                "share of spells (cumulative)",
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
                    steps: None,
                }
            })
            .collect();
        out.push((
            format!("boots-over-time-{w}.svg"),
            chart(
                &format!("{w}: restarts and recycles over time (mean per run)"),
                "time since start (seconds)",
                "boots after the first generation (mean per run)",
                &boots,
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `<polyline>` of `svg`: its stroke colour (lower case) and its points.
    fn polylines(svg: &str) -> Vec<(String, Vec<(f64, f64)>)> {
        svg.split("<polyline")
            .skip(1)
            .map(|rest| {
                let attr = |name: &str| {
                    rest.split(&format!("{name}=\""))
                        .nth(1)
                        .and_then(|v| v.split('"').next())
                        .unwrap_or_default()
                        .to_ascii_lowercase()
                };
                let points = attr("points")
                    .split_whitespace()
                    .filter_map(|p| {
                        let (x, y) = p.split_once(',')?;
                        Some((x.parse().ok()?, y.parse().ok()?))
                    })
                    .collect();
                (attr("stroke"), points)
            })
            .collect()
    }

    #[test]
    fn a_binned_series_is_drawn_as_steps_in_the_colour_blind_safe_palette_with_named_axes() {
        let bins = |shift: f64| -> Vec<Bin> {
            (0..4)
                .map(|b| {
                    let (from, to) = (b as f64, b as f64 + 1.0);
                    let mean = 0.2 * b as f64 + shift;
                    (from, to, mean, mean - 0.05, mean + 0.05)
                })
                .collect()
        };
        let series = [banded("first", bins(0.0)), banded("second", bins(0.1))];
        let svg = chart(
            "title",
            "crash delay (seconds)",
            "availability (share)",
            &series,
        );
        assert!(
            svg.contains("crash delay (seconds)") && svg.contains("availability (share)"),
            "plot rule: both axes are named, with their units"
        );
        let palette: Vec<String> = OKABE_ITO
            .iter()
            .map(|c| format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2))
            .collect();
        let drawn: Vec<_> = polylines(&svg)
            .into_iter()
            .filter(|(_, points)| points.len() > 2)
            .collect();
        assert_eq!(drawn.len(), 2, "one line a series: {svg}");
        for (i, (stroke, points)) in drawn.iter().enumerate() {
            assert_eq!(
                stroke, &palette[i],
                "plot rule: series {i} is drawn in Okabe and Ito's colour-blind-safe palette"
            );
            // A step: each segment is flat (one bin's mean across its width) or upright
            // (the jump to the next bin's), never a slope joining two bins' centres.
            for w in points.windows(2) {
                let ((x0, y0), (x1, y1)) = (w[0], w[1]);
                assert!(
                    (x0 - x1).abs() < 0.5 || (y0 - y1).abs() < 0.5,
                    "plot rule: a binned series is drawn as steps, not lines between bins: {points:?}"
                );
            }
        }
    }
}
