//! The operator's deny list (`--deny`, decision 0078): names that servery treats as its
//! own private files — never served, listed, searched, archived, offered over TFTP or
//! written, at any depth — such as `.git`, `*.key` or `.env` in a shared project folder.
//!
//! The list is the process's: a worker sets it once from its generation's settings
//! before it serves (a reload that changes it is a new generation of workers), and the
//! parent sets it at start and again when a reload commits, for the TFTP service it
//! runs. Every check of a name goes through [`crate::write::is_private`], so the places
//! that hide `.servery-*` names hide denied ones with the same answer.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The longest pattern accepted (a file name's limit).
const MAX_PATTERN: usize = 255;

/// One `--deny` pattern: a whole file or folder name, where `*` stands for any run of
/// characters (none included) and `?` for one character. Matched case-sensitively, as
/// the file system names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePattern {
    chars: Vec<char>,
}

impl NamePattern {
    /// A pattern as written, or why it cannot be one (for the configuration error).
    pub fn parse(written: &str) -> Result<Self, String> {
        if written.is_empty() {
            return Err("a pattern cannot be empty".into());
        }
        if written.len() > MAX_PATTERN {
            return Err(format!("a pattern is at most {MAX_PATTERN} bytes"));
        }
        if written.contains(['/', '\\', '\0']) {
            return Err(format!(
                "{written:?} is not a name: a pattern matches one file or folder name at any depth, so it cannot contain '/'"
            ));
        }
        if written.chars().all(|c| c == '*') {
            return Err(format!(
                "{written:?} would deny every name; stop serving instead"
            ));
        }
        Ok(NamePattern {
            chars: written.chars().collect(),
        })
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        wildcard_match(&self.chars, &name)
    }
}

/// `*` and `?` matching with one remembered star (linear in practice, never exponential):
/// on a mismatch after a star, the star takes one more character and matching resumes.
fn wildcard_match(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Whether any pattern is set: the common case (none) costs one atomic load per name.
static ANY_DENIED: AtomicBool = AtomicBool::new(false);
static DENIED: RwLock<Vec<NamePattern>> = RwLock::new(Vec::new());

/// Sets this process's deny list from the patterns as written (each already accepted by
/// [`NamePattern::parse`] when the settings were read; any other is skipped).
pub fn set_denied(written: &[String]) {
    let patterns: Vec<NamePattern> = written
        .iter()
        .filter_map(|w| NamePattern::parse(w).ok())
        .collect();
    let any = !patterns.is_empty();
    // A poisoned lock held only a list being replaced: replace it all the same.
    *DENIED.write().unwrap_or_else(|e| e.into_inner()) = patterns;
    ANY_DENIED.store(any, Ordering::Release);
}

/// Whether the operator's deny list names `name`.
pub fn is_denied(name: &str) -> bool {
    if !ANY_DENIED.load(Ordering::Acquire) {
        return false;
    }
    DENIED
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|p| p.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: the textbook recursion, exponential but plain.
    fn reference(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => reference(&p[1..], n) || (!n.is_empty() && reference(p, &n[1..])),
            (Some('?'), Some(_)) => reference(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => reference(&p[1..], &n[1..]),
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn matching_agrees_with_the_reference(
            pattern in "[ab*?.]{1,8}",
            name in "[ab.]{0,10}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let n: Vec<char> = name.chars().collect();
            prop_assert_eq!(wildcard_match(&p, &n), reference(&p, &n), "pattern {:?} name {:?}", pattern, name);
        }
    }

    #[test]
    fn patterns_match_whole_names() {
        let p = |s: &str| NamePattern::parse(s).expect("a pattern");
        assert!(p(".git").matches(".git"));
        assert!(
            !p(".git").matches(".gitignore"),
            "a pattern is the whole name"
        );
        assert!(p("*.key").matches("server.key"));
        assert!(p("*.key").matches(".key"));
        assert!(!p("*.key").matches("server.key.txt"));
        assert!(p(".env*").matches(".env.local"));
        assert!(p("secret?").matches("secret1"));
        assert!(!p("secret?").matches("secret"));
        assert!(
            !p("*.KEY").matches("server.key"),
            "case-sensitive, as file names are"
        );
        assert!(p("é*").matches("été"), "characters, not bytes");
    }

    #[test]
    fn what_cannot_be_a_pattern_says_why() {
        assert!(NamePattern::parse("").is_err());
        assert!(
            NamePattern::parse("a/b")
                .expect_err("a path")
                .contains("'/'")
        );
        assert!(
            NamePattern::parse("**")
                .expect_err("everything")
                .contains("every name")
        );
        assert!(NamePattern::parse(&"a".repeat(256)).is_err());
    }
}
