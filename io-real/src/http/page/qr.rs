//! `--qr` in the page: the code of the folder's address on the LAN, drawn as SVG and
//! embedded as a `data:` image (the page's policy allows images from `data:` and nothing
//! inline that could run), with the address beside it as text and as a link.
//!
//! The address is the parent's (the same LAN URL it prints with the terminal code), not
//! the one the browser used: a page opened as `localhost` on the serving machine is still
//! the one a phone must scan to reach it.

use base64::Engine as _;
use qrcode::QrCode;
use qrcode::render::svg;

use super::render::html_escape;

/// The `<aside>` for `url`, or nothing when the address cannot be encoded (a URL longer
/// than a QR code holds): the page never fails for its code.
pub fn aside(url: &str) -> Option<String> {
    let code = QrCode::new(url.as_bytes()).ok()?;
    let image = code
        .render::<svg::Color<'_>>()
        .min_dimensions(168, 168)
        .quiet_zone(true)
        .build();
    let data = base64::engine::general_purpose::STANDARD.encode(image);
    let text = html_escape(url);
    Some(format!(
        "<aside class=\"qr card\" aria-labelledby=\"qr-h\"><h2 id=\"qr-h\">Open on a phone</h2>\
         <img src=\"data:image/svg+xml;base64,{data}\" width=\"168\" height=\"168\" \
         alt=\"QR code of {text}\"><p><a href=\"{text}\">{text}</a></p></aside>\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_the_code_of_the_url_and_the_url_is_text() {
        let url = "http://192.168.1.5:8000/a%20b/<x>/";
        let html = aside(url).expect("fits in a code");
        assert!(html.contains("alt=\"QR code of http://192.168.1.5:8000/a%20b/&lt;x&gt;/\""));
        assert!(!html.contains("<x>"), "the URL is text: {html}");
        let data = html
            .split("base64,")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("a data URI");
        let svg = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64");
        let svg = String::from_utf8(svg).expect("utf-8");
        assert!(svg.contains("<svg") && svg.contains("<path"), "{svg}");
        // Dark modules drawn on a light ground: it scans whatever the page's theme.
        assert!(
            svg.contains("fill=\"#fff\"") && svg.contains("fill=\"#000\""),
            "{svg}"
        );
    }

    #[test]
    fn an_address_too_long_for_a_code_leaves_it_out() {
        assert!(aside(&format!("http://h/{}", "a".repeat(8000))).is_none());
    }
}
