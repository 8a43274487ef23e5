//! Human-readable sizes, dates and kinds for the directory page.

/// Bytes in binary units: `999 B`, `1.5 KiB`, `12 MiB` (one decimal below ten).
pub fn human_size(bytes: u64) -> String {
    let mut out = String::with_capacity(10);
    push_human_size(&mut out, bytes);
    out
}

/// Appends [`human_size`]'s text. The value is rounded in floating point as before, but
/// its digits are written as integers: a listing writes one per file, and formatting a
/// float with a precision was most of a row's cost.
pub fn push_human_size(out: &mut String, bytes: u64) {
    let mut text = Ascii::<16>::new();
    put_human_size(&mut text, bytes);
    out.push_str(text.as_str());
}

/// Puts [`human_size`]'s text (at most 8 bytes: `1023 KiB`).
pub(crate) fn put_human_size<const N: usize>(out: &mut Ascii<N>, bytes: u64) {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        out.put_u64(bytes);
        out.put(" B");
        return;
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value.round() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    // Tenths below ten (rounding up to 10.0 shows as "10", like any value at or above
    // ten), whole units otherwise; both are small whole numbers, exact as floats.
    let tenths = (value * 10.0).round();
    if value < 10.0 && tenths < 100.0 {
        let tenths = tenths as u64;
        out.put_u64(tenths / 10);
        out.put(".");
        out.put_u64(tenths % 10);
    } else {
        out.put_u64(value.round() as u64);
    }
    out.put(" ");
    out.put(UNITS[unit]);
}

/// Appends `n` in decimal, as `{}` writes it.
pub fn push_u64(out: &mut String, n: u64) {
    let mut text = Ascii::<20>::new();
    text.put_u64(n);
    out.push_str(text.as_str());
}

/// Text of at most `N` bytes made on the stack and appended to a page in one piece. A
/// page's `String` takes only text, so what is built byte by byte is checked once as a
/// whole (aligned, eight bytes a step) rather than pushed a character at a time.
#[derive(Debug)]
#[repr(C, align(8))]
pub(crate) struct Ascii<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Ascii<N> {
    pub(crate) fn new() -> Self {
        Ascii {
            bytes: [0; N],
            len: 0,
        }
    }

    /// Appends `text`; text that would not fit is left out whole (the callers size `N`
    /// for the longest text they put, so it never is).
    pub(crate) fn put(&mut self, text: &str) {
        let end = self.len + text.len();
        if let Some(room) = self.bytes.get_mut(self.len..end) {
            room.copy_from_slice(text.as_bytes());
            self.len = end;
        }
        debug_assert!(end <= N, "{N} bytes cannot hold {end}");
    }

    /// Appends `n` in decimal, as `{}` writes it.
    pub(crate) fn put_u64(&mut self, n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let digits = &digits[at..];
        let end = self.len + digits.len();
        if let Some(room) = self.bytes.get_mut(self.len..end) {
            room.copy_from_slice(digits);
            self.len = end;
        }
        debug_assert!(end <= N, "{N} bytes cannot hold {end}");
    }

    /// What was put. Only text and ASCII digits are ever put, whole, so it is text.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// Appends `n` with at least `width` digits, zeros in front.
fn push_padded(out: &mut String, n: u64, width: usize) {
    let mut digits = 1;
    let mut rest = n / 10;
    while rest > 0 {
        digits += 1;
        rest /= 10;
    }
    for _ in digits..width {
        out.push('0');
    }
    push_u64(out, n);
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
    let mut out = String::with_capacity(24);
    push_utc_date(&mut out, civil(secs), exact);
    out
}

/// RFC 3339 in UTC, for `<time datetime>`.
pub fn utc_iso(secs: u64) -> String {
    let mut out = String::with_capacity(20);
    push_utc_iso(&mut out, civil(secs));
    out
}

/// A time as [`civil`] gives it.
pub type Civil = (i64, u32, u32, u64, u64, u64);

/// Appends [`utc_date`]'s text for a time already split by [`civil`] (a row shows one
/// time three ways and splits it once).
pub fn push_utc_date(out: &mut String, (y, m, d, hh, mm, ss): Civil, exact: bool) {
    push_day(out, y, m, d);
    out.push(' ');
    push_padded(out, hh, 2);
    out.push(':');
    push_padded(out, mm, 2);
    if exact {
        out.push(':');
        push_padded(out, ss, 2);
        out.push_str(" UTC");
    }
}

/// Appends [`utc_iso`]'s text for a time already split by [`civil`].
pub fn push_utc_iso(out: &mut String, (y, m, d, hh, mm, ss): Civil) {
    push_day(out, y, m, d);
    out.push('T');
    push_padded(out, hh, 2);
    out.push(':');
    push_padded(out, mm, 2);
    out.push(':');
    push_padded(out, ss, 2);
    out.push('Z');
}

/// `YYYY-MM-DD`; a year is never negative here (the seconds are unsigned).
fn push_day(out: &mut String, y: i64, m: u32, d: u32) {
    push_padded(out, y.unsigned_abs(), 4);
    out.push('-');
    push_padded(out, u64::from(m), 2);
    out.push('-');
    push_padded(out, u64::from(d), 2);
}

/// The icon class of a file, from its extension.
pub fn kind_of(name: &str) -> &'static str {
    // The bytes after the last dot ('.' is ASCII, so never inside a character).
    let Some(dot) = name.bytes().rposition(|b| b == b'.') else {
        return "file";
    };
    let ext = &name.as_bytes()[dot + 1..];
    // Lower-cased on the stack: no extension below is longer than eight bytes.
    let mut lower = [0u8; 8];
    let Some(lower) = lower.get_mut(..ext.len()) else {
        return "file";
    };
    lower.copy_from_slice(ext);
    lower.make_ascii_lowercase();
    match &*lower {
        b"png" | b"jpg" | b"jpeg" | b"gif" | b"webp" | b"avif" | b"svg" | b"bmp" | b"ico"
        | b"heic" | b"tif" | b"tiff" => "image",
        b"mp3" | b"flac" | b"ogg" | b"opus" | b"wav" | b"m4a" | b"aac" => "audio",
        b"mp4" | b"mkv" | b"webm" | b"mov" | b"avi" | b"m4v" => "video",
        b"zip" | b"tar" | b"gz" | b"tgz" | b"bz2" | b"xz" | b"zst" | b"7z" | b"rar" | b"deb"
        | b"rpm" | b"iso" => "archive",
        b"pdf" => "pdf",
        b"txt" | b"md" | b"markdown" | b"rst" | b"csv" | b"log" | b"org" | b"adoc" => "text",
        b"rs" | b"c" | b"h" | b"cc" | b"cpp" | b"hpp" | b"go" | b"py" | b"js" | b"mjs" | b"ts"
        | b"java" | b"kt" | b"rb" | b"php" | b"sh" | b"html" | b"htm" | b"css" | b"json"
        | b"toml" | b"yaml" | b"yml" | b"xml" | b"sql" | b"lua" | b"swift" => "code",
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

        /// The integer writing says what formatting the rounded float said.
        #[test]
        fn sizes_read_as_the_float_formatting_wrote_them(bytes in any::<u64>(), small in 0u64..20_000_000) {
            for n in [bytes, small, bytes >> (bytes % 64)] {
                prop_assert_eq!(human_size(n), formatted_size(n), "{}", n);
            }
        }

        /// The dates written digit by digit read as `format!` wrote them.
        #[test]
        fn dates_read_as_formatting_wrote_them(secs in 0u64..253_402_300_799) {
            let (y, m, d, hh, mm, ss) = civil(secs);
            prop_assert_eq!(utc_iso(secs), format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"));
            prop_assert_eq!(utc_date(secs, true), format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02} UTC"));
            prop_assert_eq!(utc_date(secs, false), format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}"));
        }

        #[test]
        fn sizes_never_panic_and_keep_their_unit(bytes in any::<u64>()) {
            let shown = human_size(bytes);
            prop_assert!(shown.ends_with('B'));
        }
    }

    /// The size text as it was first written, with float formatting: the oracle of
    /// [`push_human_size`].
    fn formatted_size(bytes: u64) -> String {
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
            let rounded = (value * 10.0).round() / 10.0;
            if rounded < 10.0 {
                return format!("{rounded:.1} {}", UNITS[unit]);
            }
        }
        format!("{:.0} {}", value.round(), UNITS[unit])
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_of("a.PNG"), "image");
        assert_eq!(kind_of("x.tar.gz"), "archive");
        assert_eq!(kind_of("README"), "file");
        assert_eq!(kind_of("main.rs"), "code");
        assert_eq!(kind_of(".hidden"), "file");
        assert_eq!(kind_of("notes.MarkDown"), "text");
        assert_eq!(
            kind_of("x.markdowns"),
            "file",
            "longer than any kind's extension"
        );
    }
}
