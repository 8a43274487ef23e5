//! `--qr`: a QR code of the LAN URL on standard output, once per committed generation,
//! printed by the parent alone. The URL line comes first, then the code in half-block
//! characters with light modules drawn (as `qrencode -t UTF8` does), so it reads on the
//! usual light-on-dark terminal; with its quiet zone it scans on a dark one (decision
//! 0020).

use std::io::Write;

use qrcode::QrCode;
use qrcode::render::unicode::Dense1x2;
use servery_core::Generation;

use super::context::interfaces;
use super::{Pending, Service, ServiceContext, ServiceError};

#[derive(Debug)]
pub(super) struct QrService;

/// The code for `url` as it is printed: one text line per two module rows.
pub(super) fn render(url: &str) -> Result<String, qrcode::types::QrError> {
    let code = QrCode::new(url.as_bytes())?;
    Ok(code
        .render::<Dense1x2>()
        .dark_color(Dense1x2::Light)
        .light_color(Dense1x2::Dark)
        .quiet_zone(true)
        .build())
}

async fn print(ctx: &ServiceContext) -> Result<(), ServiceError> {
    let url = ctx.site.lan_url(&interfaces());
    let code = render(&url)?;
    let text = crate::banner::block_text(
        "qr",
        &format!(
            "servery: scan to open {url} (generation {})",
            ctx.generation.0
        ),
        &code,
        &[
            ("url", url.as_str().into()),
            ("generation", ctx.generation.0.into()),
        ],
    );
    // Standard output may be a pipe nobody reads: the write must not hold the runtime.
    tokio::task::spawn_blocking(move || {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    })
    .await?
    .map_err(ServiceError::Output)
}

impl Service for QrService {
    fn start<'a>(&'a mut self, ctx: &'a ServiceContext) -> Pending<'a> {
        if ctx.site.loopback_only() {
            tracing::warn!(
                "--qr: every listener is on loopback, so the code opens only on this machine (--bind 0.0.0.0 serves the LAN)"
            );
        }
        Box::pin(print(ctx))
    }

    fn switch<'a>(&'a mut self, _from: Generation, ctx: &'a ServiceContext) -> Pending<'a> {
        Box::pin(print(ctx))
    }

    fn stop(&mut self) -> Pending<'_> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_has_a_quiet_zone_and_two_module_rows_per_line() {
        let url = "http://192.168.1.5:8000/";
        let side = QrCode::new(url.as_bytes()).expect("code").width() + 8;
        let text = render(url).expect("renders");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), side.div_ceil(2));
        assert!(lines.iter().all(|l| l.chars().count() == side));
        // The quiet zone is light, and light is drawn: the first line is all full blocks.
        assert!(lines[0].chars().all(|c| c == '\u{2588}'));
    }
}
