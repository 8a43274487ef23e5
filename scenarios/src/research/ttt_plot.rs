//! Dohi, Goševa-Popstojanova and Trivedi's graphical construction of the optimal
//! rejuvenation age (PRDC 2000): on the scaled total-time-on-test plot `(j/n, φ_j)`, the
//! line from the point `(−β, −α)` tangent to the plot touches it at `j*`, and `t̂₀` is
//! the `j*`-th failure time. The tangent is the steepest line from that point to a plot
//! point, so no point of the plot lies above it; `reproduce dohi-2000 --out DIR` draws it
//! (`ttt-plot.svg` and `.pdf`).

use std::fmt::Write as _;

use crate::research::dohi::scaled_ttt;
use crate::research::heatmap::{svg_open, xml};

/// The tangent from `(−β, −α)` to the scaled TTT plot of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Tangent {
    /// `φ_0 = 0, …, φ_n = 1`.
    pub phi: Vec<f64>,
    /// The sorted failure times.
    pub times: Vec<f64>,
    pub alpha: f64,
    pub beta: f64,
    /// The plot point the tangent touches (`n`: never rejuvenating).
    pub j: usize,
    pub slope: f64,
}

impl Tangent {
    /// The construction for `times`, `α = robust/μ_f`, `β = μ_c/(μ_a − μ_c)`.
    pub fn construct(times: &[f64], alpha: f64, beta: f64) -> Tangent {
        let (phi, times) = scaled_ttt(times);
        let n = times.len();
        let slope_to = |j: usize| (phi[j] + alpha) / (j as f64 / n as f64 + beta);
        let j = (1..=n)
            .max_by(|&a, &b| slope_to(a).total_cmp(&slope_to(b)))
            .unwrap_or(n);
        Tangent {
            slope: slope_to(j),
            phi,
            times,
            alpha,
            beta,
            j,
        }
    }

    pub fn n(&self) -> usize {
        self.times.len()
    }

    /// The line's height at `u` (a share of the failure times).
    pub fn line_at(&self, u: f64) -> f64 {
        -self.alpha + self.slope * (u + self.beta)
    }

    /// Whether every plot point from `j = 1` lies on or below the line (the tangent's
    /// defining property, up to rounding; `j = 0`, rejuvenating at age 0, is no choice).
    pub fn supports_the_plot(&self) -> bool {
        let n = self.n() as f64;
        self.phi
            .iter()
            .enumerate()
            .skip(1)
            .all(|(i, &p)| p <= self.line_at(i as f64 / n) + 1e-12)
    }

    /// `t̂₀`: the touched point's failure time, or `None` at `j = n` (never).
    pub fn age(&self) -> Option<f64> {
        (self.j < self.n()).then(|| self.times[self.j - 1])
    }

    /// The drawing: the plot as points joined by lines, the tangent from `(−β, −α)`,
    /// the touched point ringed; axes named, Okabe–Ito colours.
    pub fn svg(&self, title: &str) -> String {
        let (left, top, width, height) = (90.0, 60.0, 560.0, 340.0);
        let (x0, x1) = (-self.beta, 1.0);
        let (y0, y1) = (-self.alpha, 1.0);
        let px = |u: f64| left + (u - x0) / (x1 - x0) * width;
        let py = |v: f64| top + height - (v - y0) / (y1 - y0) * height;
        let n = self.n() as f64;
        let mut s = svg_open((720, 480), 16, title);
        // Axes through the origin, ticks at 0, 0.5 and 1.
        let _ = write!(
            s,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n\
             <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n",
            px(x0),
            py(0.0),
            px(x1),
            py(0.0),
            px(0.0),
            py(y0),
            px(0.0),
            py(y1),
        );
        for t in [0.5, 1.0] {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\">{t}</text>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\">{t}</text>\n",
                px(t),
                py(0.0) + 16.0,
                px(0.0) - 6.0,
                py(t) + 4.0,
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\">j/n (share of the failure times)</text>\n\
             <text x=\"24\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\" \
             transform=\"rotate(-90 24 {:.1})\">scaled total time on test phi_j</text>\n",
            left + width / 2.0,
            top + height + 44.0,
            top + height / 2.0,
            top + height / 2.0,
        );
        let points: Vec<String> = self
            .phi
            .iter()
            .enumerate()
            .map(|(i, &p)| format!("{:.1},{:.1}", px(i as f64 / n), py(p)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#0072b2\" stroke-width=\"1.5\"/>",
            points.join(" ")
        );
        // The tangent, from (−β, −α) to where it leaves the frame.
        let end = ((y1 + self.alpha) / self.slope - self.beta).min(x1);
        let touch = (self.j as f64 / n, self.phi[self.j]);
        let _ = write!(
            s,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#d55e00\" stroke-width=\"1.5\"/>\n\
             <circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#d55e00\"/>\n\
             <circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\" fill=\"none\" stroke=\"#d55e00\" stroke-width=\"2\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">(-beta, -alpha)</text>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{}</text>\n",
            px(x0),
            py(y0),
            px(end),
            py(self.line_at(end)),
            px(x0),
            py(y0),
            px(touch.0),
            py(touch.1),
            px(x0) + 6.0,
            py(y0) - 8.0,
            px(touch.0) + 10.0,
            py(touch.1) + 16.0,
            xml(&match self.age() {
                Some(t) => format!("j* = {} of {}, t0 = {t:.1} s", self.j, self.n()),
                None => format!("j* = n = {}: never rejuvenate", self.n()),
            }),
        );
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::research::dohi::optimal_age_after;

    #[test]
    fn the_tangent_touches_the_plot_at_the_estimate_and_no_point_lies_above_it() {
        let times: Vec<f64> = (1..=40)
            .map(|i| 600.0 * (-(1.0 - i as f64 / 41.0).ln()).sqrt())
            .collect();
        for (repair, rejuv, robust) in [(20.0, 2.0, 0.0), (20.0, 2.0, 1000.0), (5.0, 4.0, 0.0)] {
            let mean = times.iter().sum::<f64>() / times.len() as f64;
            let t = Tangent::construct(&times, robust / mean, rejuv / (repair - rejuv));
            let (j, age) = optimal_age_after(&times, repair, rejuv, robust);
            assert_eq!(
                (t.j, t.age()),
                (j, age),
                "tangent rule: the touched point is Dohi's estimate ({repair}, {rejuv}, {robust})"
            );
            assert!(
                t.supports_the_plot(),
                "tangent rule: no plot point above the line ({repair}, {rejuv}, {robust})"
            );
            assert!(
                (t.line_at(t.j as f64 / t.n() as f64) - t.phi[t.j]).abs() < 1e-12,
                "tangent rule: the line passes through the touched point"
            );
        }
    }

    #[test]
    fn the_drawing_converts_to_pdf() {
        let times: Vec<f64> = (1..=10).map(|i| 100.0 * i as f64).collect();
        let t = Tangent::construct(&times, 0.0, 0.1);
        let svg = t.svg("TTT plot");
        assert!(svg.contains("<polyline") && svg.contains("j* = "));
        crate::research::pdf::from_svg(&svg).unwrap_or_else(|e| panic!("{e}"));
    }
}
