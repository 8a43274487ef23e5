use super::*;

const SVG: &str = "<svg width=\"200\" height=\"100\" viewBox=\"0 0 200 100\" xmlns=\"http://www.w3.org/2000/svg\">\n\
<rect x=\"0\" y=\"0\" width=\"200\" height=\"100\" opacity=\"1\" fill=\"#FFFFFF\" stroke=\"none\"/>\n\
<line opacity=\"0.1\" stroke=\"#000000\" stroke-width=\"1\" x1=\"10\" y1=\"90\" x2=\"10\" y2=\"10\"/>\n\
<polyline fill=\"none\" opacity=\"1\" stroke=\"#0072B2\" stroke-width=\"2\" points=\"10,90 50,90 50,40 \"/>\n\
<text x=\"100\" y=\"20\" dy=\"-0.5ex\" text-anchor=\"end\" font-family=\"sans-serif\" font-size=\"10\" opacity=\"1\" fill=\"#000000\">\n\
A (s) &amp; 95 %\n\
</text>\n\
<text x=\"12\" y=\"50\" dy=\"0.76em\" text-anchor=\"middle\" font-size=\"10\" fill=\"#000000\" transform=\"rotate(270, 12, 50)\">\n\
P(failed)\n\
</text>\n\
<text transform=\"translate(40 60) rotate(-90)\" text-anchor=\"start\" font-size=\"10\">limit</text>\n\
<circle cx=\"5\" cy=\"5\" r=\"2\" fill=\"black\"/>\n\
</svg>\n";

fn text(pdf: &[u8]) -> String {
    String::from_utf8_lossy(pdf).into_owned()
}

#[test]
fn the_cross_references_and_the_stream_length_point_where_they_say() {
    let pdf = from_svg(SVG).unwrap_or_else(|e| panic!("{e}"));
    let s = text(&pdf);
    assert!(s.starts_with("%PDF-1.4\n") && s.ends_with("%%EOF\n"), "{s}");
    let startxref: usize = s
        .rsplit("startxref\n")
        .next()
        .and_then(|t| t.lines().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        pdf[startxref..].starts_with(b"xref\n0 6\n"),
        "startxref {startxref} does not point at the table"
    );
    // Offsets are of bytes (the second line's binary marker is not UTF-8).
    let table = String::from_utf8_lossy(&pdf[startxref..]).into_owned();
    for (i, line) in table.lines().skip(3).take(5).enumerate() {
        let offset: usize = line[..10].parse().unwrap_or(usize::MAX);
        let want = format!("{} 0 obj\n", i + 1);
        assert!(
            pdf.get(offset..)
                .is_some_and(|b| b.starts_with(want.as_bytes())),
            "object {} is not at its cross-reference offset {offset}",
            i + 1
        );
    }
    let length: usize = s
        .split("/Length ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let start = pdf
        .windows(7)
        .position(|w| w == b"stream\n")
        .map_or(0, |i| i + 7);
    assert!(
        pdf[start + length..].starts_with(b"\nendstream"),
        "the stream's /Length is its length"
    );
    assert!(s.contains("/MediaBox [0 0 200 100]"), "{s}");
}

#[test]
fn labels_are_placed_by_helveticas_widths_and_turned_as_the_svg_turns_them() {
    let s = text(&from_svg(SVG).unwrap_or_else(|e| panic!("{e}")));
    // "A (s) & 95 %" ends at x = 100: it starts its Helvetica width to the left, with its
    // baseline a quarter em below y = 20 (page y 80 + 2.5).
    let label = "A (s) & 95 %";
    let x = 100.0 - text_width(label, 10.0);
    let want = format!(
        "BT /F1 10.00 Tf 1.0000 0.0000 -0.0000 1.0000 {x:.2} 82.50 Tm (A \\(s\\) & 95 %) Tj ET"
    );
    assert!(s.contains(&want), "no {want:?} in\n{s}");
    // rotate(270) on the page is a quarter turn anticlockwise: reading upward, centred on
    // y = 50, the baseline 0.76 em to the right of x = 12.
    let w = text_width("P(failed)", 10.0);
    let want = format!(
        "0.0000 1.0000 -1.0000 0.0000 {:.2} {:.2} Tm (P\\(failed\\)) Tj",
        12.0 + 7.6,
        50.0 - w / 2.0
    );
    assert!(s.contains(&want), "no {want:?} in\n{s}");
    assert!(
        s.contains("0.0000 1.0000 -1.0000 0.0000 40.00 40.00 Tm (limit) Tj"),
        "translate then rotate(-90): {s}"
    );
}

#[test]
fn an_opacity_is_the_colour_over_the_white_page_and_shapes_keep_their_points() {
    let s = text(&from_svg(SVG).unwrap_or_else(|e| panic!("{e}")));
    assert!(
        s.contains("10.00 10.00 m 10.00 90.00 l\n0.900 0.900 0.900 RG\n1.00 w\nS"),
        "a black line at opacity 0.1 is 90 % white: {s}"
    );
    assert!(
        s.contains("10.00 10.00 m\n50.00 10.00 l\n50.00 60.00 l\n0.000 0.447 0.698 RG\n2.00 w\nS"),
        "the polyline's points, flipped to the page's y: {s}"
    );
    assert!(
        s.contains("0.00 0.00 200.00 100.00 re\n1.000 1.000 1.000 rg\nf"),
        "{s}"
    );
}

#[test]
fn what_the_plots_do_not_use_is_refused_by_name() {
    let svg = |body: &str| format!("<svg width=\"10\" height=\"10\">\n{body}\n</svg>");
    assert_eq!(
        from_svg(&svg("<ellipse cx=\"1\" cy=\"1\" rx=\"1\" ry=\"2\"/>")),
        Err(PdfError::UnknownElement("ellipse".into()))
    );
    assert_eq!(
        from_svg(&svg(
            "<rect x=\"1\" y=\"1\" width=\"2\" height=\"2\" fill=\"teal\"/>"
        )),
        Err(PdfError::BadAttribute {
            element: "rect".into(),
            attribute: "fill",
            value: "teal".into()
        })
    );
    assert_eq!(
        from_svg(&svg(
            "<line x1=\"a\" y1=\"1\" x2=\"2\" y2=\"2\" stroke=\"black\"/>"
        )),
        Err(PdfError::BadAttribute {
            element: "line".into(),
            attribute: "x1",
            value: "a".into()
        })
    );
    assert!(matches!(from_svg("<g></g>"), Err(PdfError::Malformed(_))));
    assert!(matches!(
        from_svg("<svg width=\"10\" height=\"10\"><text>open"),
        Err(PdfError::Malformed(_))
    ));
}

#[test]
fn labels_outside_ascii_are_set_in_winansi() {
    assert_eq!(
        pdf_string("a–b (×2) µs ≥"),
        b"(a\x96b \\(\xd72\\) \xb5s ?)".to_vec()
    );
}

proptest::proptest! {
    /// Whatever the input, the converter answers: a PDF or an error, never a panic.
    #[test]
    fn any_text_is_converted_or_refused_without_a_panic(s in "(<|>|\"|=|svg|rect|text|/| |[a-z0-9#.,-]){0,80}") {
        let _ = from_svg(&s);
        let _ = from_svg(&format!("<svg width=\"5\" height=\"5\">{s}</svg>"));
    }
}
