//! Content codings: negotiation (RFC 9110 §12.5.3), which files are worth encoding, and the
//! encoders themselves.
//!
//! Choices, and why:
//!
//! - **Which codings.** `zstd`, `br` and `gzip`, preferred in that order when the client
//!   weighs them equally: zstd compresses about as well as brotli at a fraction of the CPU,
//!   brotli beats gzip on text, and gzip is what everything understands.
//! - **No `Accept-Encoding` means identity.** The RFC lets us pick any coding then, but a
//!   client that says nothing is usually a script or a tool that would store the coded
//!   bytes as if they were the file.
//! - **Identity is acceptable unless excluded** (`identity;q=0`, or `*;q=0` without a more
//!   specific `identity`). When the client lists codings but not identity, identity ranks
//!   below every listed coding it accepts; a coding wins a tie with identity because it is
//!   the smaller transfer. When nothing at all is acceptable we still send identity, which
//!   §12.5.3 allows ("SHOULD send a response without any content coding") and which is
//!   more useful than a 406.
//! - **Ranges are served identity.** A byte range of a coded representation would be a
//!   range of bytes the client cannot decode on its own, and resuming a download across a
//!   coding change would splice two different representations. So a request that carries
//!   `Range` always gets the identity representation, and `If-Range` always compares
//!   against the identity ETag.
//! - **Already-compressed media is left alone** (images other than SVG, audio, video,
//!   archives, woff/woff2, PDF, unknown binaries): re-encoding them burns CPU for nothing
//!   and can even grow them. It is an allow-list, so a type we do not know is not encoded.
//! - **Tiny files are not encoded** ([`MIN_COMPRESS_SIZE`]): the coding's framing would eat
//!   the saving.
//! - **Strong, coding-specific ETags** (`"<etag>-zst"`): each coding is a different
//!   representation with different bytes, so it needs its own validator for `If-None-Match`
//!   to work per representation. They are strong because our encoders are deterministic
//!   for a given input, coding and level, and the level is fixed per file size (see
//!   [`Level`]), so the same file always encodes to the same bytes within one build.
//! - **Encoding runs on the blocking pool**, never inside a body poll on the async threads,
//!   which is why we drive the codec crates directly rather than through async adapters.

use std::io::{self, Write};

/// Files shorter than this are always sent identity.
pub const MIN_COMPRESS_SIZE: u64 = 64;

/// A content coding servery can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Coding {
    /// `zstd` (RFC 8878).
    Zstd,
    /// `br` (RFC 7932).
    Brotli,
    /// `gzip` (RFC 1952).
    Gzip,
}

impl Coding {
    /// Every coding, in server preference order (used to break ties).
    pub const ALL: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

    /// The `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Brotli => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// The extension of a precompressed sidecar (`file.js.zst`), also used to suffix the
    /// coding-specific ETag.
    pub fn extension(self) -> &'static str {
        match self {
            Coding::Zstd => "zst",
            Coding::Brotli => "br",
            Coding::Gzip => "gz",
        }
    }

    fn from_token(token: &str) -> Option<Self> {
        // `x-gzip` is an alias that recipients SHOULD accept (RFC 9110 §8.4.1.3).
        Self::ALL
            .into_iter()
            .find(|c| c.token().eq_ignore_ascii_case(token))
            .or_else(|| token.eq_ignore_ascii_case("x-gzip").then_some(Coding::Gzip))
    }

    fn rank(self) -> usize {
        Self::ALL
            .iter()
            .position(|&c| c == self)
            .unwrap_or(usize::MAX)
    }
}

/// A q-value in thousandths (`q=0.5` is 500).
type Weight = u16;

/// The codings a request accepts, best first, each preferred over identity. Empty means
/// "send identity". `accept_encoding` is all `Accept-Encoding` field lines joined by `,`,
/// or `None` when the header is absent.
pub fn negotiate(accept_encoding: Option<&str>) -> Vec<Coding> {
    let Some(value) = accept_encoding else {
        return Vec::new();
    };
    let mut explicit: [Option<Weight>; 3] = [None; 3];
    let mut star: Option<Weight> = None;
    let mut identity: Option<Weight> = None;
    for element in value.split(',') {
        let Some((token, weight)) = parse_element(element) else {
            continue;
        };
        // A coding listed twice keeps its lowest weight: an exclusion is never undone.
        let merge = |slot: &mut Option<Weight>| {
            *slot = Some(slot.map_or(weight, |w| w.min(weight)));
        };
        if token == "*" {
            merge(&mut star);
        } else if token.eq_ignore_ascii_case("identity") {
            merge(&mut identity);
        } else if let Some(coding) = Coding::from_token(token) {
            merge(&mut explicit[coding.rank()]);
        }
    }
    // Unlisted identity: excluded by `*;q=0`, otherwise acceptable but below any coding.
    let identity = identity.or(star).unwrap_or(1);
    let mut ranked: Vec<(Weight, Coding)> = Coding::ALL
        .into_iter()
        .filter_map(|c| {
            let w = explicit[c.rank()].or(star)?;
            (w > 0 && w >= identity).then_some((w, c))
        })
        .collect();
    // Stable sort: equal weights keep server preference order.
    ranked.sort_by_key(|&(w, _)| std::cmp::Reverse(w));
    ranked.into_iter().map(|(_, c)| c).collect()
}

/// `token [OWS ";" OWS "q=" qvalue]`; other parameters are ignored, an element with a
/// malformed q-value or no token is dropped.
fn parse_element(element: &str) -> Option<(&str, Weight)> {
    let mut parts = element.split(';');
    let token = parts.next()?.trim();
    if token.is_empty() || !token.bytes().all(is_tchar) {
        return None;
    }
    let mut weight = 1000;
    for param in parts {
        let (name, value) = param.split_once('=')?;
        if name.trim().eq_ignore_ascii_case("q") {
            weight = parse_qvalue(value.trim())?;
        }
    }
    Some((token, weight))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )` (RFC 9110 §12.4.2).
fn parse_qvalue(text: &str) -> Option<Weight> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0, |acc, b| acc * 10 + Weight::from(b - b'0'));
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether a file of this `Content-Type` is worth encoding: text and text-like structured
/// formats, SVG, uncompressed fonts and wasm. Everything else, including types we do not
/// recognise, is assumed to be compressed already or to gain too little.
pub fn is_compressible(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    // Case-insensitive without a lower-cased copy: every file response asks.
    let is =
        |name: &str, candidates: &[&str]| candidates.iter().any(|c| name.eq_ignore_ascii_case(c));
    let ends_with = |name: &str, suffix: &str| {
        name.len() >= suffix.len()
            && name.as_bytes()[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
    };
    if is(kind, &["text"]) {
        true
    } else if is(kind, &["image"]) {
        is(subtype, &["svg+xml"])
    } else if is(kind, &["font"]) {
        is(subtype, &["ttf", "otf", "sfnt"])
    } else if is(kind, &["application"]) {
        is(
            subtype,
            &[
                "json",
                "javascript",
                "xml",
                "wasm",
                "x-tar",
                "manifest+json",
            ],
        ) || ends_with(subtype, "+json")
            || ends_with(subtype, "+xml")
    } else {
        // audio, video, and anything unknown.
        false
    }
}

/// What negotiation allows for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidates {
    /// The response depends on `Accept-Encoding` (`Vary: Accept-Encoding`): true for every
    /// compressible type, whether or not this request ends up coded, so caches never hand
    /// a coded body to a client that did not ask for one.
    pub vary: bool,
    /// Acceptable codings, best first; empty means identity.
    pub codings: Vec<Coding>,
}

/// Plans the codings a file may be sent in.
///
/// `ranged` says a `Range` header is present (served identity, see the module docs). The
/// size limit for encoding on the fly (`max_compress_size`) is applied by the caller,
/// because precompressed sidecars are not subject to it: they cost nothing to serve.
pub fn plan(
    accept_encoding: Option<&str>,
    ranged: bool,
    content_type: &str,
    len: u64,
) -> Candidates {
    let vary = is_compressible(content_type);
    let codings = if vary && !ranged && len >= MIN_COMPRESS_SIZE {
        negotiate(accept_encoding)
    } else {
        Vec::new()
    };
    Candidates { vary, codings }
}

/// How hard to compress. The level is a function of file size only (files small enough to
/// be encoded in memory and cached get [`Level::Cached`], larger ones are streamed with
/// [`Level::Streaming`]), which keeps each coding's output deterministic per file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Encoded once, then served from the cache many times: worth more CPU.
    Cached,
    /// Encoded per request while streaming: keep it cheap.
    Streaming,
}

impl Level {
    fn zstd(self) -> i32 {
        match self {
            Level::Cached => 12,
            Level::Streaming => 3,
        }
    }

    fn brotli(self) -> u32 {
        match self {
            Level::Cached => 9,
            Level::Streaming => 4,
        }
    }

    fn gzip(self) -> flate2::Compression {
        match self {
            Level::Cached => flate2::Compression::best(),
            Level::Streaming => flate2::Compression::new(6),
        }
    }
}

/// Brotli window: 4 MiB, the encoder's usual default.
const BROTLI_LGWIN: u32 = 22;
/// Brotli's smallest window (1 KiB).
const BROTLI_MIN_LGWIN: u32 = 10;

/// The smallest brotli window that holds `len` bytes (a window of 2^w holds 2^w − 16).
fn brotli_lgwin_for(len: usize) -> u32 {
    (BROTLI_MIN_LGWIN..BROTLI_LGWIN)
        .find(|w| (1usize << w) - 16 >= len)
        .unwrap_or(BROTLI_LGWIN)
}

/// An incremental encoder writing into memory: feed it input, take the output produced so
/// far. Used on the blocking pool by the streaming body and by [`encode_all`].
pub struct StreamEncoder {
    inner: Inner,
}

enum Inner {
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    // Boxed: the brotli state is large and would bloat every other variant.
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
}

impl std::fmt::Debug for StreamEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let coding = match self.inner {
            Inner::Zstd(_) => Coding::Zstd,
            Inner::Brotli(_) => Coding::Brotli,
            Inner::Gzip(_) => Coding::Gzip,
        };
        f.debug_struct("StreamEncoder")
            .field("coding", &coding)
            .finish_non_exhaustive()
    }
}

impl StreamEncoder {
    /// A fresh encoder for `coding` at `level`.
    pub fn new(coding: Coding, level: Level) -> io::Result<Self> {
        let inner = match coding {
            Coding::Zstd => {
                Inner::Zstd(zstd::stream::write::Encoder::new(Vec::new(), level.zstd())?)
            }
            Coding::Brotli => Inner::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                level.brotli(),
                BROTLI_LGWIN,
            ))),
            Coding::Gzip => Inner::Gzip(flate2::write::GzEncoder::new(Vec::new(), level.gzip())),
        };
        Ok(Self { inner })
    }

    /// A fresh encoder for an input of exactly `len` bytes: zstd is told the size (it then
    /// sizes its tables to the input instead of to the level's window: at level 12 that
    /// was 84 million instructions of clearing per encoder, most of a worker's start, for
    /// page assets of a few KiB) and records it in the frame; brotli gets the smallest
    /// window that holds the input. Same format, same decoders.
    fn sized(coding: Coding, level: Level, len: usize) -> io::Result<Self> {
        let inner = match coding {
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), level.zstd())?;
                e.set_pledged_src_size(Some(len as u64))?;
                Inner::Zstd(e)
            }
            Coding::Brotli => Inner::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                level.brotli(),
                brotli_lgwin_for(len),
            ))),
            Coding::Gzip => return Self::new(coding, level),
        };
        Ok(Self { inner })
    }

    /// Feeds `input`; returns whatever encoded output is ready (possibly nothing).
    pub fn push(&mut self, input: &[u8]) -> io::Result<Vec<u8>> {
        match &mut self.inner {
            Inner::Zstd(e) => {
                e.write_all(input)?;
                Ok(std::mem::take(e.get_mut()))
            }
            Inner::Brotli(e) => {
                e.write_all(input)?;
                Ok(std::mem::take(e.get_mut()))
            }
            Inner::Gzip(e) => {
                e.write_all(input)?;
                Ok(std::mem::take(e.get_mut()))
            }
        }
    }

    /// Ends the stream; returns the remaining output, trailer included.
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self.inner {
            Inner::Zstd(e) => e.finish(),
            Inner::Brotli(e) => Ok(e.into_inner()),
            Inner::Gzip(e) => e.finish(),
        }
    }
}

/// Encodes a whole in-memory file.
pub fn encode_all(coding: Coding, level: Level, input: &[u8]) -> io::Result<Vec<u8>> {
    let mut encoder = StreamEncoder::sized(coding, level, input.len())?;
    let mut out = encoder.push(input)?;
    out.extend_from_slice(&encoder.finish()?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::{Brotli, Gzip, Zstd};
    use std::io::Read;

    #[test]
    fn the_brotli_window_is_the_smallest_that_holds_the_input() {
        assert_eq!(brotli_lgwin_for(0), 10);
        assert_eq!(brotli_lgwin_for(1008), 10);
        assert_eq!(brotli_lgwin_for(1009), 11);
        assert_eq!(brotli_lgwin_for(100_000), 17);
        assert_eq!(brotli_lgwin_for(usize::MAX), BROTLI_LGWIN);
    }

    fn neg(value: &str) -> Vec<Coding> {
        negotiate(Some(value))
    }

    #[test]
    fn absent_or_empty_header_means_identity() {
        assert_eq!(negotiate(None), vec![]);
        assert_eq!(neg(""), vec![]);
        assert_eq!(neg("identity"), vec![]);
    }

    #[test]
    fn equal_weights_follow_server_preference() {
        assert_eq!(neg("gzip, br, zstd"), vec![Zstd, Brotli, Gzip]);
        assert_eq!(neg("gzip, deflate, br"), vec![Brotli, Gzip]);
        assert_eq!(neg("*"), vec![Zstd, Brotli, Gzip]);
        assert_eq!(neg("GZIP"), vec![Gzip]);
        assert_eq!(neg("x-gzip"), vec![Gzip]);
    }

    #[test]
    fn q_values_rank_codings() {
        assert_eq!(
            neg("zstd;q=0.5, gzip;q=0.9, br;q=0.7"),
            vec![Gzip, Brotli, Zstd]
        );
        assert_eq!(neg("zstd;q=0.999, gzip"), vec![Gzip, Zstd]);
        assert_eq!(neg("br ; Q=1.000, gzip;q=1"), vec![Brotli, Gzip]);
        assert_eq!(
            neg("zstd;q=0.001"),
            vec![Zstd],
            "any positive weight beats unlisted identity"
        );
    }

    #[test]
    fn q_zero_excludes() {
        assert_eq!(neg("zstd;q=0, br, gzip"), vec![Brotli, Gzip]);
        assert_eq!(neg("*;q=0"), vec![]);
        assert_eq!(neg("*, br;q=0"), vec![Zstd, Gzip]);
        assert_eq!(neg("*;q=0, gzip"), vec![Gzip]);
        assert_eq!(
            neg("gzip, gzip;q=0"),
            vec![],
            "duplicates keep the lowest weight"
        );
        assert_eq!(neg("gzip;q=0.000"), vec![]);
    }

    #[test]
    fn identity_weight_competes() {
        assert_eq!(neg("gzip;q=0.5, identity"), vec![], "identity weighs more");
        assert_eq!(
            neg("gzip;q=0.5, identity;q=0.5"),
            vec![Gzip],
            "ties favour the coding"
        );
        assert_eq!(neg("identity;q=0.2, br;q=0.3, gzip;q=0.1"), vec![Brotli]);
        // identity;q=0 alone excludes identity but accepts nothing else either: identity
        // is still sent (the caller has no better option), which the RFC allows.
        assert_eq!(neg("identity;q=0"), vec![]);
        assert_eq!(neg("identity;q=0, gzip;q=0.1"), vec![Gzip]);
        assert_eq!(
            neg("*;q=0.5"),
            vec![Zstd, Brotli, Gzip],
            "* covers identity too; tie"
        );
    }

    #[test]
    fn malformed_elements_are_dropped() {
        assert_eq!(neg("gzip;q=2, br"), vec![Brotli]);
        assert_eq!(neg("gzip;q=1.5, br"), vec![Brotli]);
        assert_eq!(neg("gzip;q=0.1234, br"), vec![Brotli]);
        assert_eq!(neg("gzip;q=, br"), vec![Brotli]);
        assert_eq!(neg("gzip;q, br"), vec![Brotli]);
        assert_eq!(neg("g zip, ,, br"), vec![Brotli]);
        assert_eq!(
            neg("gzip;level=9"),
            vec![Gzip],
            "unknown parameters are ignored"
        );
        assert_eq!(neg("compress, deflate"), vec![]);
    }

    #[test]
    fn compressible_types() {
        for ty in [
            "text/html; charset=utf-8",
            "text/css; charset=utf-8",
            "application/json",
            "application/manifest+json",
            "image/svg+xml",
            "application/wasm",
            "font/ttf",
            "application/xml",
            "Text/Plain",
            " APPLICATION/LD+JSON ",
            "application/atom+xml; charset=utf-8",
        ] {
            assert!(is_compressible(ty), "{ty}");
        }
        for ty in [
            "image/png",
            "image/jpeg",
            "video/mp4",
            "audio/mpeg",
            "font/woff2",
            "font/woff",
            "application/zip",
            "application/gzip",
            "application/zstd",
            "application/pdf",
            "application/octet-stream",
            "garbage",
            "application/json-seq-not",
            "application/+jso",
            "",
        ] {
            assert!(!is_compressible(ty), "{ty}");
        }
    }

    #[test]
    fn planning() {
        let html = "text/html; charset=utf-8";
        let p = plan(Some("gzip"), false, html, 1000);
        assert_eq!((p.vary, p.codings), (true, vec![Gzip]));
        let p = plan(Some("gzip"), true, html, 1000);
        assert_eq!((p.vary, p.codings), (true, vec![]), "ranges are identity");
        let p = plan(Some("gzip"), false, "image/png", 1000);
        assert_eq!((p.vary, p.codings), (false, vec![]));
        let p = plan(Some("gzip"), false, html, MIN_COMPRESS_SIZE - 1);
        assert_eq!(
            (p.vary, p.codings),
            (true, vec![]),
            "tiny files are identity"
        );
    }

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Zstd => {
                out = zstd::stream::decode_all(data).expect("zstd");
            }
            Brotli => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .expect("br");
            }
            Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .expect("gzip");
            }
        }
        out
    }

    #[test]
    fn encoders_round_trip_and_are_deterministic() {
        let input: Vec<u8> = b"servery compresses text. ".repeat(400);
        for coding in Coding::ALL {
            for level in [Level::Cached, Level::Streaming] {
                let whole = encode_all(coding, level, &input).expect("encode");
                assert!(whole.len() < input.len() / 4, "{coding:?} compresses");
                assert_eq!(decode(coding, &whole), input, "{coding:?} round trip");
                // The same input gives the same bytes, whole or streamed in pieces, each
                // time: the ETag may stay strong. (A file is encoded whole or streamed by
                // its size alone, never both, so the two need not agree with each other.)
                assert_eq!(
                    encode_all(coding, level, &input).expect("encode"),
                    whole,
                    "{coding:?} whole, deterministic"
                );
                let streamed = || {
                    let mut enc = StreamEncoder::new(coding, level).expect("encoder");
                    let mut pieces = Vec::new();
                    for chunk in input.chunks(1000) {
                        pieces.extend(enc.push(chunk).expect("push"));
                    }
                    pieces.extend(enc.finish().expect("finish"));
                    pieces
                };
                let pieces = streamed();
                assert_eq!(
                    decode(coding, &pieces),
                    input,
                    "{coding:?} streamed round trip"
                );
                assert_eq!(streamed(), pieces, "{coding:?} streamed, deterministic");
            }
        }
    }
}
