//! Sorting a listing by keys made once per name. Sorting 10,000 names compares about
//! 140,000 pairs, and [`natural_cmp`] walks both names for each (the shared start, the
//! runs of digits, the case folded): most of a large listing's instructions went there.
//! Here each name that is all ASCII is turned once into a key whose bytes, compared as
//! bytes, order the names exactly as [`natural_cmp`]'s loose order does; a pair is then
//! decided by its first eight key bytes held in a register, or by one `memcmp`.
//! A name that is not ASCII has no key and is compared by [`natural_cmp`], so the order
//! is the one [`natural_cmp`] gives for every pair.

use super::{Entry, Order, SortKey, natural_cmp};

/// Where a run of digits begins in a key. Compared with any other byte of a key it orders
/// as the run's first digit would: every byte of a name that is not a digit is below `0`
/// or above `9`, and so is its lower case.
const DIGITS: u8 = b'0';

/// A run's length at or above this is written as this byte and eight bytes of length,
/// big-endian; shorter ones as one byte. Either way a longer run's length compares higher.
const LONG_RUN: u8 = 0xff;

/// Appends the key of `name` to `keys` and returns true, or returns false (nothing
/// appended) when `name` is not all ASCII.
///
/// A name's bytes in lower case, each run of digits written as [`DIGITS`], the length of
/// the run without its leading zeros, then those digits: so two runs compare by value
/// (the longer number is the larger, then digit by digit) and runs of equal value (`01`
/// and `1`) are the same bytes. A run always ends where a byte that is not a digit, or the
/// name, does; so where two keys are equal up to a [`DIGITS`] byte, both are at a run's
/// start and their next bytes are both lengths.
fn push_key(keys: &mut Vec<u8>, name: &str) -> bool {
    let bytes = name.as_bytes();
    if !bytes.is_ascii() {
        return false;
    }
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        if !b.is_ascii_digit() {
            keys.push(b.to_ascii_lowercase());
            at += 1;
            continue;
        }
        let run = &bytes[at..];
        let len = run.iter().take_while(|d| d.is_ascii_digit()).count();
        let zeros = run[..len].iter().take_while(|&&d| d == b'0').count();
        let value = &run[zeros..len];
        keys.push(DIGITS);
        match u8::try_from(value.len()) {
            Ok(short) if short < LONG_RUN => keys.push(short),
            _ => {
                keys.push(LONG_RUN);
                keys.extend_from_slice(&(value.len() as u64).to_be_bytes());
            }
        }
        keys.extend_from_slice(value);
        at += len;
    }
    true
}

/// One entry as the sort sees it: what decides its place, and where it came from.
struct Keyed {
    /// Eight bytes of the key from where the keys of the listing first differ (past the
    /// start they all share: `file-0` in a folder of `file-1.txt` … `file-9999.txt`),
    /// big-endian, zeros past its end. Compared as a number they order two keys as their
    /// bytes do whenever they differ (a key that ends where the other has bytes is the
    /// lesser either way), so nearly every pair stops here.
    head: u64,
    /// The size or the time when sorting by one, else 0.
    primary: u64,
    /// The key's place in the buffer of keys; [`NO_KEY`] when the name is not ASCII.
    key_start: u32,
    key_len: u32,
    /// The entry's place in the listing as it was read.
    at: u32,
    is_dir: bool,
}

/// [`Keyed::key_len`] of a name without a key.
const NO_KEY: u32 = u32::MAX;

/// [`super::sort`]'s order, reached through keys (see the module): the same total order,
/// so the same listing.
pub(super) fn sort(entries: &mut [Entry], key: SortKey, order: Order) {
    let Some(Keys {
        keys,
        mut keyed,
        shared,
    }) = keyed(entries, key)
    else {
        // More entries, or more bytes of keys, than a key's place can name: never a
        // folder, but the order is the same without keys.
        return by_comparison(entries, key, order);
    };
    // Past the start every key shares: what is left to compare once the heads are equal.
    let rest_of = |k: &Keyed| {
        let start = k.key_start as usize;
        &keys[start + shared..start + k.key_len as usize]
    };
    // The exact text, then the links: what `natural_cmp` and the listing's order fall
    // back to for names that read the same.
    let exactly = |a: &Keyed, b: &Keyed| {
        let (x, y) = (&entries[a.at as usize], &entries[b.at as usize]);
        x.name.cmp(&y.name).then_with(|| x.href.cmp(&y.href))
    };
    // The heads first, and nothing else looked up while they differ (nearly always).
    let by_name = |a: &Keyed, b: &Keyed| {
        if a.key_len == NO_KEY || b.key_len == NO_KEY {
            let (x, y) = (&entries[a.at as usize], &entries[b.at as usize]);
            return natural_cmp(&x.name, &y.name).then_with(|| x.href.cmp(&y.href));
        }
        a.head
            .cmp(&b.head)
            .then_with(|| rest_of(a).cmp(rest_of(b)))
            // Keys equal: the names read the same; as `natural_cmp`, their exact text decides.
            .then_with(|| exactly(a, b))
    };
    keyed.sort_unstable_by(|a, b| {
        b.is_dir.cmp(&a.is_dir).then_with(|| {
            let by_key = a.primary.cmp(&b.primary).then_with(|| by_name(a, b));
            match order {
                Order::Asc => by_key,
                Order::Desc => by_key.reverse(),
            }
        })
    });
    let places: Vec<u32> = keyed.iter().map(|k| k.at).collect();
    drop(keyed);
    permute(entries, places);
}

/// The keys of a listing's names, made for one sort.
struct Keys {
    /// Every key, one after the other.
    keys: Vec<u8>,
    keyed: Vec<Keyed>,
    /// How many bytes every key starts with alike (0 when no name has a key).
    shared: usize,
}

/// The keys of every entry's name and each entry's [`Keyed`]; `None` when a place does
/// not fit in a `u32`.
fn keyed(entries: &[Entry], key: SortKey) -> Option<Keys> {
    u32::try_from(entries.len()).ok()?;
    let name_bytes: usize = entries.iter().map(|e| e.name.len()).sum();
    // A run's length byte and its marker add two bytes a run; a quarter more is room
    // for names full of numbers without growing.
    let mut keys = Vec::with_capacity(name_bytes + name_bytes / 4);
    let mut keyed = Vec::with_capacity(entries.len());
    let mut first_key: Option<(usize, usize)> = None;
    let mut shared = usize::MAX;
    for (at, e) in entries.iter().enumerate() {
        let start = keys.len();
        let key_len = if push_key(&mut keys, &e.name) {
            let (first, len) = *first_key.get_or_insert((start, keys.len() - start));
            let alike = keys[first..first + len.min(shared)]
                .iter()
                .zip(&keys[start..])
                .take_while(|(x, y)| x == y)
                .count();
            shared = shared.min(alike);
            u32::try_from(keys.len() - start).ok()?
        } else {
            NO_KEY
        };
        keyed.push(Keyed {
            head: 0,
            primary: match key {
                SortKey::Name => 0,
                SortKey::Size => e.size,
                SortKey::Mtime => e.mtime,
            },
            key_start: u32::try_from(start).ok()?,
            key_len,
            at: u32::try_from(at).ok()?,
            is_dir: e.is_dir,
        });
    }
    let shared = if first_key.is_some() { shared } else { 0 };
    for k in keyed.iter_mut().filter(|k| k.key_len != NO_KEY) {
        let start = k.key_start as usize + shared;
        let rest = &keys[start..k.key_start as usize + k.key_len as usize];
        let mut head = [0u8; 8];
        let n = rest.len().min(8);
        head[..n].copy_from_slice(&rest[..n]);
        k.head = u64::from_be_bytes(head);
    }
    Some(Keys {
        keys,
        keyed,
        shared,
    })
}

/// Puts `entries[places[i]]` at `i` for every `i`, in place: each cycle of the
/// permutation is followed once, an entry swapped at each step.
fn permute(entries: &mut [Entry], mut places: Vec<u32>) {
    const DONE: u32 = u32::MAX;
    for start in 0..places.len() {
        let mut at = start;
        loop {
            let from = places[at];
            if from == DONE {
                break;
            }
            places[at] = DONE;
            let from = from as usize;
            if from == start {
                break;
            }
            entries.swap(at, from);
            at = from;
        }
    }
}

/// The order by comparing the entries themselves, without keys.
pub(super) fn by_comparison(entries: &mut [Entry], key: SortKey, order: Order) {
    entries.sort_unstable_by(|a, b| {
        b.is_dir.cmp(&a.is_dir).then_with(|| {
            let by_name = || natural_cmp(&a.name, &b.name).then_with(|| a.href.cmp(&b.href));
            let by_key = match key {
                SortKey::Name => by_name(),
                SortKey::Size => a.size.cmp(&b.size).then_with(by_name),
                SortKey::Mtime => a.mtime.cmp(&b.mtime).then_with(by_name),
            };
            match order {
                Order::Asc => by_key,
                Order::Desc => by_key.reverse(),
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use super::*;

    fn key(name: &str) -> Option<Vec<u8>> {
        let mut keys = Vec::new();
        push_key(&mut keys, name).then_some(keys)
    }

    fn entry(name: &str, is_dir: bool, size: u64, href: Option<&str>) -> Entry {
        Entry {
            name: name.into(),
            is_dir,
            size,
            mtime: size % 3,
            href: href.map(Into::into),
            items: None,
        }
    }

    #[test]
    fn keys_hold_runs_of_digits_by_value() {
        assert_eq!(
            key("File-007.TXT").as_deref(),
            Some(&b"file-0\x017.txt"[..])
        );
        assert_eq!(key("a0").as_deref(), Some(&b"a0\x00"[..]));
        assert_eq!(key("é"), None);
        let long = "1".repeat(300);
        let mut expected = vec![DIGITS, LONG_RUN];
        expected.extend_from_slice(&300u64.to_be_bytes());
        expected.extend_from_slice(long.as_bytes());
        assert_eq!(key(&long), Some(expected));
    }

    #[test]
    fn heads_start_past_what_every_key_shares() {
        let v: Vec<Entry> = ["file-1.txt", "file-22.txt", "File-3", "é"]
            .iter()
            .map(|n| entry(n, false, 0, None))
            .collect();
        let keys = keyed(&v, SortKey::Name).expect("keys");
        assert_eq!(keys.shared, b"file-0".len());
        assert_eq!(keys.keyed[1].head, u64::from_be_bytes(*b"\x0222.txt\0"));
        assert_eq!(keys.keyed[3].key_len, NO_KEY);
    }

    #[test]
    fn a_permutation_is_applied_in_place() {
        let mut v: Vec<Entry> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| entry(n, false, 0, None))
            .collect();
        permute(&mut v, vec![3, 0, 4, 1, 2]);
        let names: Vec<&str> = v.iter().map(|e| &*e.name).collect();
        assert_eq!(names, ["d", "a", "e", "b", "c"]);
    }

    proptest::proptest! {
        /// Two ASCII names' keys compare as the names' loose order does (runs of digits
        /// past 255 and 256 digits included), and their heads never disagree with it.
        #[test]
        fn keys_compare_as_the_loose_order(
            a in "[aAzZ0-9._~ -]{0,12}",
            b in "[aAzZ0-9._~ -]{0,12}",
            run in proptest::option::of(250usize..260),
        ) {
            let (a, b) = match run {
                Some(n) => (format!("{a}{}", "7".repeat(n)), format!("{b}{}", "7".repeat(257))),
                None => (a, b),
            };
            let (ka, kb) = (key(&a).expect("ASCII"), key(&b).expect("ASCII"));
            let loose = super::super::loose_cmp(&a, &b);
            proptest::prop_assert_eq!(ka.cmp(&kb), loose, "{:?} {:?}", a, b);
            let head = |k: &[u8]| {
                let mut h = [0u8; 8];
                let n = k.len().min(8);
                h[..n].copy_from_slice(&k[..n]);
                u64::from_be_bytes(h)
            };
            let by_head = head(&ka).cmp(&head(&kb));
            proptest::prop_assert!(by_head == Ordering::Equal || by_head == loose);
        }

        /// A listing sorted through keys is the listing sorted by comparing its entries,
        /// for every key and order, with names ASCII or not, equal but for case or zeros,
        /// told apart only by their links, all starting alike (so the heads are taken
        /// past a shared start), and agreeing in their heads.
        #[test]
        fn keyed_order_is_the_compared_order(
            names in proptest::collection::vec(
                // Names that often agree in eight bytes past their shared start, so
                // heads are equal and the rest of the keys decides.
                ("[aAkK0-9é\u{212a}._-]{0,3}(abcdefgh)?[aAkK0-9é._-]{0,3}",
                 proptest::prelude::any::<bool>(), 0u64..4,
                 proptest::option::of("%[0-9A-F]{2}")),
                0..40,
            ),
            prefix in "[aA0-9-]{0,10}",
            by in 0usize..3,
            desc in proptest::prelude::any::<bool>(),
        ) {
            let key = [SortKey::Name, SortKey::Size, SortKey::Mtime][by];
            let order = if desc { Order::Desc } else { Order::Asc };
            let entries: Vec<Entry> = names
                .iter()
                .map(|(n, dir, size, href)| {
                    entry(&format!("{prefix}{n}"), *dir, *size, href.as_deref())
                })
                .collect();
            let (mut keyed, mut compared) = (entries.clone(), entries);
            sort(&mut keyed, key, order);
            by_comparison(&mut compared, key, order);
            proptest::prop_assert_eq!(keyed, compared);
        }
    }
}
