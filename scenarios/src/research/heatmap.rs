//! `--grid-limits L1,L2,… --grid-windows W1,W2,…`: P(failed) of the first policy with
//! its restart limit and window varied over a grid, per workload, as CSV and an SVG heat
//! map (Wilson intervals in the CSV; the cell's share as its colour and label).

use std::fmt::Write as _;

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

    /// The heat map as SVG, written by hand so that each cell's label sits in its cell
    /// and each axis label at its row's or column's centre (decision 0070).
    pub fn svg(&self, seeds: u64) -> String {
        let (nx, ny) = (self.windows.len().max(1), self.limits.len().max(1));
        let (left, top, width, height) = (110.0, 56.0, 500.0, 340.0);
        let (cw, ch) = (width / nx as f64, height / ny as f64);
        let mut s = svg_open(
            (760, 480),
            17,
            &format!(
                "{}: P(failed) over restart limit and window ({seeds} seeds a cell)",
                self.workload
            ),
        );
        for (i, row) in self.cells.iter().enumerate() {
            // Limits grow upwards: row i's centre.
            let cy = top + (ny - 1 - i) as f64 * ch + ch / 2.0;
            for (j, e) in row.iter().enumerate() {
                let x = left + j as f64 * cw;
                let p = if e.mean.is_finite() { e.mean } else { f64::NAN };
                let fill = if p.is_nan() {
                    "#dddddd".to_string()
                } else {
                    viridis(p)
                };
                let ink = if p.is_nan() || p > 0.55 {
                    "black"
                } else {
                    "white"
                };
                let label = if p.is_nan() {
                    "-".into()
                } else {
                    format!("{p:.2}")
                };
                let _ = write!(
                    s,
                    "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{cw:.1}\" height=\"{ch:.1}\" \
                     fill=\"{fill}\" stroke=\"white\"/>\n\
                     <text class=\"cell\" data-limit=\"{}\" data-window=\"{}\" x=\"{:.1}\" \
                     y=\"{cy:.1}\" text-anchor=\"middle\" dominant-baseline=\"central\" \
                     font-size=\"14\" fill=\"{ink}\">{label}</text>\n",
                    cy - ch / 2.0,
                    self.limits[i],
                    self.windows[j],
                    x + cw / 2.0,
                );
            }
            let _ = writeln!(
                s,
                "<text class=\"limit\" x=\"{:.1}\" y=\"{cy:.1}\" text-anchor=\"end\" \
                 dominant-baseline=\"central\" font-size=\"13\">{}</text>",
                left - 8.0,
                self.limits[i]
            );
        }
        for (j, w) in self.windows.iter().enumerate() {
            let _ = writeln!(
                s,
                "<text class=\"window\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
                 font-size=\"13\">{w}</text>",
                left + j as f64 * cw + cw / 2.0,
                top + height + 20.0
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"14\">\
             worker_restart_window (seconds)</text>\n\
             <text transform=\"translate(40 {:.1}) rotate(-90)\" text-anchor=\"middle\" \
             font-size=\"14\">worker_restart_limit (restart attempts)</text>\n",
            left + width / 2.0,
            top + height + 48.0,
            top + height / 2.0,
        );
        // The colour scale: P(failed) from 0 (bottom) to 1 (top).
        let (bx, steps) = (left + width + 40.0, 20);
        for k in 0..steps {
            let p = (k as f64 + 0.5) / steps as f64;
            let y = top + height - (k + 1) as f64 * height / steps as f64;
            let _ = writeln!(
                s,
                "<rect x=\"{bx:.1}\" y=\"{y:.1}\" width=\"18\" height=\"{:.1}\" fill=\"{}\"/>",
                height / steps as f64 + 0.5,
                viridis(p)
            );
        }
        for (p, y) in [(0.0, top + height), (0.5, top + height / 2.0), (1.0, top)] {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{y:.1}\" dominant-baseline=\"central\" font-size=\"12\">{p}</text>",
                bx + 24.0
            );
        }
        let _ = writeln!(
            s,
            "<text transform=\"translate({:.1} {:.1}) rotate(-90)\" text-anchor=\"middle\" \
             font-size=\"13\">P(failed) (share of runs)</text>\n</svg>",
            bx + 64.0,
            top + height / 2.0
        );
        s
    }
}

/// The viridis colour map (colour-blind safe, ordered in lightness) at `p` in [0, 1],
/// by linear interpolation between five of its published stops.
pub fn viridis(p: f64) -> String {
    const STOPS: [(u8, u8, u8); 5] = [
        (0x44, 0x01, 0x54),
        (0x3b, 0x52, 0x8b),
        (0x21, 0x91, 0x8c),
        (0x5e, 0xc9, 0x62),
        (0xfd, 0xe7, 0x25),
    ];
    let p = p.clamp(0.0, 1.0) * 4.0;
    let k = (p.floor() as usize).min(3);
    let f = p - k as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (STOPS[k], STOPS[k + 1]);
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// The opening of a plot: an SVG document of `size` (width, height) on white, with
/// `title` centred above at `font_size`; the caller appends the plot and `</svg>`.
pub fn svg_open((width, height): (u32, u32), font_size: u32, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\">\n\
         <rect width=\"{width}\" height=\"{height}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"{font_size}\">{}</text>\n",
        width / 2,
        xml(title)
    )
}

/// Text for SVG: `&`, `<`, `>` and quotes escaped.
pub fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(tag: &str, name: &str) -> Option<String> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(tag[at..].split('"').next()?.to_string())
    }

    /// Every cell's text sits at the height of its own limit's label and under its own
    /// window's label (the plotters version printed each row beside the next limit).
    #[test]
    fn each_cell_label_is_level_with_its_limit_and_window() {
        let e = |p: f64| Estimate {
            mean: p,
            lo: p,
            hi: p,
        };
        let g = Grid {
            workload: "w<1>".into(),
            limits: vec![1, 5, 10],
            windows: vec![10.0, 60.0],
            cells: vec![
                vec![e(1.0), e(0.9)],
                vec![e(0.5), e(0.4)],
                vec![e(0.0), e(0.1)],
            ],
        };
        let svg = g.svg(40);
        assert!(
            svg.contains("w&lt;1&gt;") && svg.contains("(seconds)"),
            "{svg}"
        );
        let tags: Vec<&str> = svg.split('<').collect();
        let class = |c: &str| {
            tags.iter()
                .filter(|t| t.starts_with("text") && t.contains(&format!("class=\"{c}\"")))
                .map(|t| {
                    (
                        t.to_string(),
                        t.rsplit('>').next().unwrap_or("").to_string(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let (limits, windows, cells) = (class("limit"), class("window"), class("cell"));
        assert_eq!((limits.len(), windows.len(), cells.len()), (3, 2, 6));
        for (tag, text) in &cells {
            let (l, w) = (attr(tag, "data-limit"), attr(tag, "data-window"));
            let row = limits.iter().find(|(_, t)| Some(t) == l.as_ref());
            let col = windows.iter().find(|(_, t)| Some(t) == w.as_ref());
            assert_eq!(
                row.and_then(|(t, _)| attr(t, "y")),
                attr(tag, "y"),
                "cell {text} of limit {l:?} is level with that limit's label"
            );
            assert!(row.is_some() && col.is_some());
            assert_eq!(col.and_then(|(t, _)| attr(t, "x")), attr(tag, "x"));
            let (i, j) = (
                g.limits.iter().position(|x| Some(x.to_string()) == l),
                g.windows.iter().position(|x| Some(x.to_string()) == w),
            );
            let want = i.zip(j).map(|(i, j)| format!("{:.2}", g.cells[i][j].mean));
            assert_eq!(Some(text.clone()), want);
        }
    }

    #[test]
    fn viridis_runs_from_dark_purple_to_yellow() {
        assert_eq!(viridis(0.0), "#440154");
        assert_eq!(viridis(1.0), "#fde725");
        assert_eq!(viridis(0.5), "#21918c");
    }
}
