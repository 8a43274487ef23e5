//! Human-readable sizes, dates and kinds for the directory page.

use std::fmt::Write as _;

/// Bytes in binary units: `999 B`, `1.5 KiB`, `12 MiB` (one decimal below ten).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value.round() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        // Rounding up to 10.0 shows as "10", like any value at or above ten.
        let rounded = (value * 10.0).round() / 10.0;
        if rounded < 10.0 {
            return format!("{rounded:.1} {}", UNITS[unit]);
        }
    }
    format!("{:.0} {}", value.round(), UNITS[unit])
}

/// The civil date (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for the proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month, day, hour, minute, second) in UTC.
pub fn civil(secs: u64) -> (i64, u32, u32, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    (y, m, d, rest / 3600, rest % 3600 / 60, rest % 60)
}

/// `2023-11-14 22:13` in UTC, or with seconds and the zone when `exact`.
pub fn utc_date(secs: u64, exact: bool) -> String {
    let (y, m, d, hh, mm, ss) = civil(secs);
    let mut out = format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}");
    if exact {
        let _ = write!(out, ":{ss:02} UTC");
    }
    out
}

/// RFC 3339 in UTC, for `<time datetime>`.
pub fn utc_iso(secs: u64) -> String {
    let (y, m, d, hh, mm, ss) = civil(secs);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// The icon class of a file, from its extension.
pub fn kind_of(name: &str) -> &'static str {
    let Some((_, ext)) = name.rsplit_once('.') else {
        return "file";
    };
    match ext.to_ascii_lowercase().as_str() {
        "png" | "jpg" | "jpeg" | "gif" | "webp" | "avif" | "svg" | "bmp" | "ico" | "heic"
        | "tif" | "tiff" => "image",
        "mp3" | "flac" | "ogg" | "opus" | "wav" | "m4a" | "aac" => "audio",
        "mp4" | "mkv" | "webm" | "mov" | "avi" | "m4v" => "video",
        "zip" | "tar" | "gz" | "tgz" | "bz2" | "xz" | "zst" | "7z" | "rar" | "deb" | "rpm"
        | "iso" => "archive",
        "pdf" => "pdf",
        "txt" | "md" | "markdown" | "rst" | "csv" | "log" | "org" | "adoc" => "text",
        "rs" | "c" | "h" | "cc" | "cpp" | "hpp" | "go" | "py" | "js" | "mjs" | "ts" | "java"
        | "kt" | "rb" | "php" | "sh" | "html" | "htm" | "css" | "json" | "toml" | "yaml"
        | "yml" | "xml" | "sql" | "lua" | "swift" => "code",
        _ => "file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (10_137, "9.9 KiB"),
            (10_189, "10 KiB"),
            (10_220, "10 KiB"),
            (1024 * 1024 - 1, "1.0 MiB"),
            (5 * 1024 * 1024 * 1024, "5.0 GiB"),
            (u64::MAX, "16 EiB"),
        ];
        for (bytes, shown) in cases {
            assert_eq!(human_size(bytes), shown, "{bytes}");
        }
    }

    #[test]
    fn dates() {
        assert_eq!(utc_date(0, true), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_iso(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_date(1_700_000_000, false), "2023-11-14 22:13");
        assert_eq!(utc_iso(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    proptest! {
        /// The calendar arithmetic agrees with httpdate's for any time it can format.
        #[test]
        fn dates_agree_with_httpdate(secs in 0u64..253_402_300_799) {
            let http = httpdate::fmt_http_date(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
            );
            let iso = utc_iso(secs);
            let (y, m, d) = (&iso[0..4], &iso[5..7], &iso[8..10]);
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            let month = MONTHS[m.parse::<usize>().unwrap_or(1) - 1];
            prop_assert!(http.contains(&format!("{d} {month} {y} {}", &iso[11..19])), "{http} vs {iso}");
        }

        #[test]
        fn sizes_never_panic_and_keep_their_unit(bytes in any::<u64>()) {
            let shown = human_size(bytes);
            prop_assert!(shown.ends_with('B'));
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_of("a.PNG"), "image");
        assert_eq!(kind_of("x.tar.gz"), "archive");
        assert_eq!(kind_of("README"), "file");
        assert_eq!(kind_of("main.rs"), "code");
        assert_eq!(kind_of(".hidden"), "file");
    }
}
