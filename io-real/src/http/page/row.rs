//! One row of the directory table for each entry: its name, linked; its size, or a
//! folder's item count; its time. Written straight into the page: a folder of 10,000
//! entries writes 10,000 rows per request, so a row makes no string of its own, and the
//! size and time cells, nearly all digits, are each made on the stack and appended whole
//! (the time's three texts at fixed places in one template).

use std::fmt::Write as _;

use super::render::{is_plain, push_attr_escaped, push_display_name};
use super::text::{Ascii, civil, kind_of, push_utc_date, push_utc_iso, put_human_size};
use crate::http::listing::Entry;

/// One table row. The name cell links to the entry; the size and time cells show human
/// values with the exact ones in `title`.
pub fn push_row(html: &mut String, e: &Entry) {
    push_row_with(
        html,
        e,
        |html| {
            html.push_str("./");
            match &e.href {
                Some(href) => html.push_str(href),
                None => crate::http::path::push_encoded_segment(html, &e.name),
            }
        },
        &e.name,
    );
}

/// A row linking to `href` (already encoded, without the directory's trailing slash) and
/// labelled `label` (the search results show the path below the searched folder).
pub fn push_row_at(html: &mut String, e: &Entry, href: &str, label: &str) {
    push_row_with(html, e, |html| html.push_str(href), label);
}

fn push_row_with(html: &mut String, e: &Entry, href: impl FnOnce(&mut String), label: &str) {
    let slash = if e.is_dir { "/" } else { "" };
    let kind = if e.is_dir { "dir" } else { kind_of(&e.name) };
    html.push_str("<tr class=\"k-");
    html.push_str(kind);
    html.push_str("\" data-name=\"");
    // Most names need no escaping at all, the same as an attribute and as text: asked
    // once, not once for each.
    let plain = is_plain(&e.name);
    if plain {
        html.push_str(&e.name);
    } else {
        push_attr_escaped(html, &e.name);
    }
    html.push_str("\"><td class=\"name\"><a href=\"");
    href(html);
    html.push_str(slash);
    html.push_str("\">");
    if plain && std::ptr::eq(label, &*e.name) {
        html.push_str(label);
    } else {
        push_display_name(html, label);
    }
    html.push_str(slash);
    html.push_str("</a></td>");
    if e.is_dir {
        match e.items.map(u64::from) {
            Some(n) => {
                // A phone's narrow column shows the count short ("10k"); the title says
                // it whole.
                let text = items_text(n);
                let _ = write!(
                    html,
                    "<td class=\"size items\" title=\"{text}\"><span class=\"full\">{text}</span><span class=\"short\">{}</span></td>",
                    items_short(n)
                );
            }
            None => html.push_str("<td class=\"size\">—</td>"),
        }
    } else {
        push_size_cell(html, e.size);
    }
    push_time_cell(html, e.mtime);
}

/// `<td class="size" title="1536 bytes">1.5 KiB</td>`.
fn push_size_cell(html: &mut String, size: u64) {
    // 24 + 20 digits + 8 + 8 + 5 bytes at most.
    let mut cell = Ascii::<72>::new();
    cell.put("<td class=\"size\" title=\"");
    cell.put_u64(size);
    cell.put(" bytes\">");
    put_human_size(&mut cell, size);
    cell.put("</td>");
    html.push_str(cell.as_str());
}

/// The time cell's pieces around its three texts: the RFC 3339 time, the exact one in
/// the title, the minute shown.
const TIME_OPEN: &str = "<td class=\"time\"><time datetime=\"";
const ISO: &str = "0000-00-00T00:00:00Z";
const TIME_TITLE: &str = "\" title=\"";
const EXACT: &str = "0000-00-00 00:00:00 UTC";
const TIME_SHOWN: &str = "\">";
const SHOWN: &str = "0000-00-00 00:00";
const TIME_CLOSE: &str = "</time></td></tr>\n";

/// Where each text begins in [`TIME_CELL`].
const ISO_AT: usize = TIME_OPEN.len();
const EXACT_AT: usize = ISO_AT + ISO.len() + TIME_TITLE.len();
const SHOWN_AT: usize = EXACT_AT + EXACT.len() + TIME_SHOWN.len();
const TIME_CELL_LEN: usize = SHOWN_AT + SHOWN.len() + TIME_CLOSE.len();

/// The time cell and the row's end with every digit zero, made from the pieces above.
const TIME_CELL: [u8; TIME_CELL_LEN] = {
    let pieces = [
        TIME_OPEN, ISO, TIME_TITLE, EXACT, TIME_SHOWN, SHOWN, TIME_CLOSE,
    ];
    let mut cell = [0u8; TIME_CELL_LEN];
    let (mut at, mut piece) = (0, 0);
    while piece < pieces.len() {
        let bytes = pieces[piece].as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            cell[at] = bytes[i];
            (at, i) = (at + 1, i + 1);
        }
        piece += 1;
    }
    cell
};

/// The time cell of a file modified at `secs` and the row's end:
/// `<td class="time"><time datetime="2023-11-14T22:13:20Z" title="2023-11-14 22:13:20
/// UTC">2023-11-14 22:13</time></td></tr>`. The digits go into the template; a year past
/// 9999 (a time no file has, but a time is any `u64`) is written the long way.
fn push_time_cell(html: &mut String, secs: u64) {
    #[repr(C, align(8))]
    struct Cell([u8; TIME_CELL_LEN]);
    let time = civil(secs);
    let (year, month, day, hour, minute, second) = time;
    let Some(year) = u64::try_from(year).ok().filter(|&y| y <= 9999) else {
        return push_time_cell_by_parts(html, time);
    };
    let two = |cell: &mut Cell, at: usize, n: u64| {
        cell.0[at] = b'0' + (n / 10 % 10) as u8;
        cell.0[at + 1] = b'0' + (n % 10) as u8;
    };
    let mut cell = Cell(TIME_CELL);
    for at in [ISO_AT, EXACT_AT, SHOWN_AT] {
        two(&mut cell, at, year / 100);
        two(&mut cell, at + 2, year % 100);
        two(&mut cell, at + 5, u64::from(month));
        two(&mut cell, at + 8, u64::from(day));
        two(&mut cell, at + 11, hour);
        two(&mut cell, at + 14, minute);
    }
    for at in [ISO_AT, EXACT_AT] {
        two(&mut cell, at + 17, second);
    }
    match std::str::from_utf8(&cell.0) {
        Ok(text) => html.push_str(text),
        // Never: the template is text and only ASCII digits are put in it.
        Err(_) => push_time_cell_by_parts(html, time),
    }
}

/// [`push_time_cell`]'s text written piece by piece, for any year.
fn push_time_cell_by_parts(html: &mut String, time: super::text::Civil) {
    html.push_str(TIME_OPEN);
    push_utc_iso(html, time);
    html.push_str(TIME_TITLE);
    push_utc_date(html, time, true);
    html.push_str(TIME_SHOWN);
    push_utc_date(html, time, false);
    html.push_str(TIME_CLOSE);
}

/// A folder's item count as the size column shows it: "1 item", "12 items", and past
/// what is counted "10,000+ items".
fn items_text(n: u64) -> String {
    use crate::http::listing::ITEMS_COUNTED;
    let grouped = |n: u64| {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, d) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(d);
        }
        out
    };
    match n {
        1 => "1 item".to_owned(),
        n if n > ITEMS_COUNTED => format!("{}+ items", grouped(ITEMS_COUNTED)),
        n => format!("{} items", grouped(n)),
    }
}

/// A folder's item count in at most four characters, for a phone's narrow column: "7",
/// "999", "1.2k", "10k", "10k+".
fn items_short(n: u64) -> String {
    use crate::http::listing::ITEMS_COUNTED;
    match n {
        n if n > ITEMS_COUNTED => format!("{}k+", ITEMS_COUNTED / 1000),
        n if n < 1000 => n.to_string(),
        n if n < 10_000 => format!("{}.{}k", n / 1000, n % 1000 / 100),
        n => format!("{}k", n / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::http::listing::test_entry as entry;

    #[test]
    fn folder_item_counts_read_as_words() {
        assert_eq!(items_text(0), "0 items");
        assert_eq!(items_text(1), "1 item");
        assert_eq!(items_text(999), "999 items");
        assert_eq!(items_text(1_234), "1,234 items");
        assert_eq!(items_text(10_000), "10,000 items");
        assert_eq!(items_text(10_001), "10,000+ items");
        let mut html = String::new();
        let mut folder = entry("photos", true, 0, 0);
        folder.items = Some(3);
        push_row(&mut html, &folder);
        assert!(
            html.contains("title=\"3 items\"><span class=\"full\">3 items</span><span class=\"short\">3</span></td>"),
            "{html}"
        );
        assert_eq!(
            [7, 999, 1_234, 10_000, 10_001].map(items_short),
            ["7", "999", "1.2k", "10k", "10k+"].map(String::from)
        );
        push_row(&mut html, &entry("uncounted", true, 0, 0));
        assert!(html.contains("<td class=\"size\">—</td>"), "{html}");
    }

    /// A file's size and time cells as they were first written, a piece at a time: the
    /// oracle of the cells made on the stack.
    fn cells_by_pieces(size: u64, mtime: u64) -> String {
        let mut html = String::from("<td class=\"size\" title=\"");
        super::super::text::push_u64(&mut html, size);
        html.push_str(" bytes\">");
        super::super::text::push_human_size(&mut html, size);
        html.push_str("</td>");
        push_time_cell_by_parts(&mut html, civil(mtime));
        html
    }

    #[test]
    fn years_past_9999_are_written_whole() {
        let mut html = String::new();
        push_time_cell(&mut html, u64::MAX);
        assert_eq!(html, {
            let mut by_parts = String::new();
            push_time_cell_by_parts(&mut by_parts, civil(u64::MAX));
            by_parts
        });
        assert!(
            html.contains("title=\"584554051223-11-09 07:00:15 UTC\""),
            "{html}"
        );
    }

    proptest! {
        /// The cells made on the stack read as the pieces wrote them, for any size and
        /// time (years of five digits and more included).
        #[test]
        fn cells_read_as_the_pieces_wrote_them(
            size in any::<u64>(),
            mtime in prop_oneof![0u64..253_402_300_800, any::<u64>()],
        ) {
            let mut html = String::new();
            push_row(&mut html, &entry("f", false, size, mtime));
            let expected = cells_by_pieces(size, mtime);
            let cells = html.split_once("</a></td>").map(|(_, cells)| cells);
            prop_assert_eq!(cells, Some(expected.as_str()));
        }
    }
}
