//! PDF copies of the tool's SVG plots (decision 0112): the plots are drawn once, as SVG,
//! and this module writes the same drawing as a one-page PDF a paper can include. It
//! reads only the SVG the tool itself writes — `rect`, `line`, `polyline`, `polygon`,
//! `circle` and `text`, colours as `#rrggbb`, `white`, `black` or `none` — and refuses
//! anything else by name rather than drop it. Text is set in the PDF's standard
//! Helvetica (no font embedded), so a label is placed by Helvetica's own widths; an
//! element's opacity is applied as its colour over the white page, which every plot has.

use std::fmt::Write as _;

/// Why an SVG could not be written as PDF.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PdfError {
    #[error("svg to pdf: element <{0}> is not one the plots use")]
    UnknownElement(String),
    #[error("svg to pdf: <{element}> {attribute}={value:?} is not a number or colour")]
    BadAttribute {
        element: String,
        attribute: &'static str,
        value: String,
    },
    #[error("svg to pdf: {0}")]
    Malformed(String),
}

/// One SVG element: its name, attributes and text content.
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
}

impl Element {
    fn get(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn num(&self, name: &'static str, default: f64) -> Result<f64, PdfError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.trim().parse::<f64>().map_err(|_| self.bad(name, v)),
        }
    }

    fn bad(&self, attribute: &'static str, value: &str) -> PdfError {
        PdfError::BadAttribute {
            element: self.name.clone(),
            attribute,
            value: value.to_string(),
        }
    }

    /// The paint of `attribute` (fill or stroke) as RGB in 0..1 over a white page, or
    /// None for `none`.
    fn paint(&self, attribute: &'static str, default: &str) -> Result<Option<[f64; 3]>, PdfError> {
        let v = self.get(attribute).unwrap_or(default);
        let rgb = match v {
            "none" => return Ok(None),
            "white" => [1.0; 3],
            "black" => [0.0; 3],
            hex if hex.len() == 7 && hex.starts_with('#') => {
                let c = |i: usize| {
                    u8::from_str_radix(&hex[i..i + 2], 16)
                        .map(|b| f64::from(b) / 255.0)
                        .map_err(|_| self.bad(attribute, v))
                };
                [c(1)?, c(3)?, c(5)?]
            }
            _ => return Err(self.bad(attribute, v)),
        };
        let a = self.num("opacity", 1.0)?.clamp(0.0, 1.0);
        Ok(Some(rgb.map(|c| c * a + (1.0 - a))))
    }
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The SVG's elements in document order (the closing tags dropped).
fn elements(svg: &str) -> Result<Vec<Element>, PdfError> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let close = rest
            .find('>')
            .ok_or_else(|| PdfError::Malformed("a tag is not closed".into()))?;
        let tag = &rest[..close];
        rest = &rest[close + 1..];
        if tag.starts_with('/') || tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
        let name = tag[..name_end].to_string();
        let mut attrs = Vec::new();
        let mut a = &tag[name_end..];
        while let Some(eq) = a.find("=\"") {
            let key = a[..eq].trim().to_string();
            let after = &a[eq + 2..];
            let end = after
                .find('"')
                .ok_or_else(|| PdfError::Malformed(format!("<{name}> {key}: no closing quote")))?;
            attrs.push((key, unescape(&after[..end])));
            a = &after[end + 1..];
        }
        let mut text = String::new();
        if !self_closing && name == "text" {
            let end = rest
                .find("</text>")
                .ok_or_else(|| PdfError::Malformed("<text> is not closed".into()))?;
            text = unescape(rest[..end].trim());
            rest = &rest[end + "</text>".len()..];
        }
        out.push(Element { name, attrs, text });
    }
    Ok(out)
}

/// Helvetica's advance widths (per 1,000 units of the font size) for ASCII 32–126, from
/// the standard font metrics; other characters are taken as 556.
const HELVETICA: [u16; 95] = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278, 556, 556, 556,
    556, 556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556, 1015, 667, 667, 722, 722, 667,
    611, 778, 722, 278, 500, 667, 556, 833, 722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667,
    667, 611, 278, 278, 278, 469, 556, 222, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500,
    222, 833, 556, 556, 556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584,
];

/// A label's width in points at `size`.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars()
        .map(|c| match c as u32 {
            32..=126 => f64::from(HELVETICA[c as usize - 32]),
            _ => 556.0,
        })
        .sum::<f64>()
        * size
        / 1000.0
}

/// `text` as a PDF string in WinAnsi bytes: Latin-1 as itself, the dashes and a few
/// signs by their WinAnsi codes, anything else as `?`.
fn pdf_string(text: &str) -> Vec<u8> {
    let mut out = vec![b'('];
    for c in text.chars() {
        let b = match c {
            '–' => 0x96,
            '—' => 0x97,
            '…' => 0x85,
            '’' => 0x92,
            '‘' => 0x91,
            '“' => 0x93,
            '”' => 0x94,
            c if (c as u32) < 0x80 || (0xa0..=0xff).contains(&(c as u32)) => c as u32 as u8,
            _ => b'?',
        };
        if matches!(b, b'(' | b')' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b')');
    out
}

/// The rotation (degrees, SVG's clockwise sense) and translation of a `transform`: the
/// forms the plots write, `rotate(a, cx, cy)` and `translate(x y) rotate(a)`.
fn transform(e: &Element) -> Result<(f64, f64, f64), PdfError> {
    let Some(t) = e.get("transform") else {
        return Ok((0.0, 0.0, 0.0));
    };
    let nums = |inner: &str| -> Result<Vec<f64>, PdfError> {
        inner
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<f64>().map_err(|_| e.bad("transform", t)))
            .collect()
    };
    let call = |name: &str| -> Result<Option<Vec<f64>>, PdfError> {
        match t.find(&format!("{name}(")) {
            None => Ok(None),
            Some(i) => {
                let from = i + name.len() + 1;
                let to = t[from..].find(')').ok_or_else(|| e.bad("transform", t))? + from;
                nums(&t[from..to]).map(Some)
            }
        }
    };
    let (dx, dy) = match call("translate")?.as_deref() {
        None => (0.0, 0.0),
        Some([x, y]) => (*x, *y),
        Some(_) => return Err(e.bad("transform", t)),
    };
    let angle = match call("rotate")?.as_deref() {
        None => 0.0,
        // Rotation about the text's own anchor, which is where it is placed anyway.
        Some([a]) | Some([a, _, _]) => *a,
        Some(_) => return Err(e.bad("transform", t)),
    };
    Ok((angle, dx, dy))
}

fn colour_op(rgb: [f64; 3], op: &str) -> String {
    format!("{:.3} {:.3} {:.3} {op}\n", rgb[0], rgb[1], rgb[2])
}

/// The page's drawing operators for `svg`, and the page's size in points.
fn content(svg: &str) -> Result<(Vec<u8>, f64, f64), PdfError> {
    let all = elements(svg)?;
    let root = all
        .first()
        .filter(|e| e.name == "svg")
        .ok_or_else(|| PdfError::Malformed("the document is not an <svg>".into()))?;
    let (w, h) = (root.num("width", 0.0)?, root.num("height", 0.0)?);
    if !(w > 0.0 && h > 0.0) {
        return Err(PdfError::Malformed("<svg> has no width and height".into()));
    }
    let y = |v: f64| h - v;
    let mut out: Vec<u8> = Vec::new();
    let mut ops = String::new();
    for e in &all[1..] {
        ops.clear();
        let stroke = e.paint("stroke", "none")?;
        let line_width = e.num("stroke-width", 1.0)?;
        match e.name.as_str() {
            "rect" => {
                let (x0, y0) = (e.num("x", 0.0)?, e.num("y", 0.0)?);
                let (rw, rh) = (e.num("width", 0.0)?, e.num("height", 0.0)?);
                let fill = e.paint("fill", "black")?;
                let _ = writeln!(ops, "{x0:.2} {:.2} {rw:.2} {rh:.2} re", y(y0 + rh));
                paint(&mut ops, fill, stroke, line_width);
            }
            "line" => {
                let (x1, y1) = (e.num("x1", 0.0)?, e.num("y1", 0.0)?);
                let (x2, y2) = (e.num("x2", 0.0)?, e.num("y2", 0.0)?);
                let _ = writeln!(ops, "{x1:.2} {:.2} m {x2:.2} {:.2} l", y(y1), y(y2));
                paint(&mut ops, None, stroke, line_width);
            }
            "polyline" | "polygon" => {
                let points = e.get("points").unwrap_or_default();
                let mut first = true;
                for pair in points.split_whitespace() {
                    let (px, py) = pair.split_once(',').ok_or_else(|| e.bad("points", pair))?;
                    let px: f64 = px.parse().map_err(|_| e.bad("points", pair))?;
                    let py: f64 = py.parse().map_err(|_| e.bad("points", pair))?;
                    let op = if first { "m" } else { "l" };
                    let _ = writeln!(ops, "{px:.2} {:.2} {op}", y(py));
                    first = false;
                }
                if e.name == "polygon" {
                    ops.push_str("h\n");
                }
                let fill = e.paint("fill", if e.name == "polygon" { "black" } else { "none" })?;
                paint(&mut ops, fill, stroke, line_width);
            }
            "circle" => {
                let (cx, cy, r) = (e.num("cx", 0.0)?, e.num("cy", 0.0)?, e.num("r", 0.0)?);
                // Four Bézier quarters: k = 4(√2 − 1)/3 of the radius.
                let k = 0.552_284_75 * r;
                let cy = y(cy);
                let _ = writeln!(
                    ops,
                    "{:.2} {cy:.2} m {:.2} {:.2} {:.2} {:.2} {cx:.2} {:.2} c {:.2} {:.2} {:.2} {:.2} {:.2} {cy:.2} c \
                     {:.2} {:.2} {:.2} {:.2} {cx:.2} {:.2} c {:.2} {:.2} {:.2} {:.2} {:.2} {cy:.2} c h",
                    cx + r,
                    cx + r,
                    cy + k,
                    cx + k,
                    cy + r,
                    cy + r,
                    cx - k,
                    cy + r,
                    cx - r,
                    cy + k,
                    cx - r,
                    cx - r,
                    cy - k,
                    cx - k,
                    cy - r,
                    cy - r,
                    cx + k,
                    cy - r,
                    cx + r,
                    cy - k,
                    cx + r,
                );
                let fill = e.paint("fill", "black")?;
                paint(&mut ops, fill, stroke, line_width);
            }
            "text" => {
                out.extend_from_slice(ops.as_bytes());
                text(&mut out, e, h)?;
                continue;
            }
            other => return Err(PdfError::UnknownElement(other.to_string())),
        }
        out.extend_from_slice(ops.as_bytes());
    }
    Ok((out, w, h))
}

fn paint(ops: &mut String, fill: Option<[f64; 3]>, stroke: Option<[f64; 3]>, width: f64) {
    if let Some(f) = fill {
        ops.push_str(&colour_op(f, "rg"));
    }
    if let Some(s) = stroke {
        ops.push_str(&colour_op(s, "RG"));
        let _ = writeln!(ops, "{width:.2} w");
    }
    ops.push_str(match (fill.is_some(), stroke.is_some()) {
        (true, true) => "B\n",
        (true, false) => "f\n",
        (false, true) => "S\n",
        (false, false) => "n\n",
    });
}

/// A label: Helvetica at the SVG's size, anchored and rotated as the SVG places it.
fn text(out: &mut Vec<u8>, e: &Element, page_h: f64) -> Result<(), PdfError> {
    if e.text.is_empty() {
        return Ok(());
    }
    let size = e.num("font-size", 12.0)?;
    let Some(fill) = e.paint("fill", "black")? else {
        return Ok(());
    };
    let (angle, tx, ty) = transform(e)?;
    let (x, y) = (e.num("x", 0.0)? + tx, e.num("y", 0.0)? + ty);
    let width = text_width(&e.text, size);
    let along = match e.get("text-anchor").unwrap_or("start") {
        "middle" => -width / 2.0,
        "end" => -width,
        _ => 0.0,
    };
    // How far below the anchor the baseline sits, as the SVG's dy or baseline says
    // (an ex taken as half an em; a central baseline a third of an em above it).
    let down = match e.get("dy") {
        Some("0.76em") => 0.76 * size,
        Some("0.5ex") => 0.25 * size,
        Some("-0.5ex") => -0.25 * size,
        Some(other) if other.ends_with("em") => {
            let v: f64 = other
                .trim_end_matches("em")
                .parse()
                .map_err(|_| e.bad("dy", other))?;
            v * size
        }
        Some(other) => other.parse().map_err(|_| e.bad("dy", other))?,
        None if e.get("dominant-baseline") == Some("central") => 0.35 * size,
        None => 0.0,
    };
    // SVG turns clockwise with y down; PDF counter-clockwise with y up: the same turn
    // on the page is the negated angle.
    let (s, c) = (-angle).to_radians().sin_cos();
    let (s, c) = (round(s), round(c));
    let (ax, ay) = (x, page_h - y);
    // The local offset (along, −down) turned by the angle.
    let (bx, by) = (ax + c * along + s * down, ay + s * along - c * down);
    let mut op = colour_op(fill, "rg");
    let _ = write!(
        op,
        "BT /F1 {size:.2} Tf {c:.4} {s:.4} {:.4} {c:.4} {bx:.2} {by:.2} Tm ",
        -s
    );
    out.extend_from_slice(op.as_bytes());
    out.extend_from_slice(&pdf_string(&e.text));
    out.extend_from_slice(b" Tj ET\n");
    Ok(())
}

/// Sines and cosines of right angles exactly.
fn round(v: f64) -> f64 {
    if (v - v.round()).abs() < 1e-9 {
        v.round() + 0.0
    } else {
        v
    }
}

/// The one-page PDF of `svg`.
pub fn from_svg(svg: &str) -> Result<Vec<u8>, PdfError> {
    let (stream, w, h) = content(svg)?;
    let mut pdf: Vec<u8> = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    let objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w} {h}] \
             /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>"
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_vec(),
        [
            format!("<< /Length {} >>\nstream\n", stream.len()).as_bytes(),
            &stream,
            b"\nendstream",
        ]
        .concat(),
    ];
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        pdf.extend_from_slice(body);
        pdf.extend_from_slice(b"\nendobj\n");
    }
    let xref = pdf.len();
    let mut table = format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1);
    for o in &offsets {
        let _ = writeln!(table, "{o:010} 00000 n ");
    }
    let _ = write!(
        table,
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    );
    pdf.extend_from_slice(table.as_bytes());
    Ok(pdf)
}

#[cfg(test)]
mod tests;
