//! What every JSON and CSV output carries so that a figure can be traced and re-made
//! (decision 0070): the source commit, the command that reproduces it, the seed range,
//! the platform, and every policy's and workload's full values (defaults included, so a
//! shipped file edited later does not change what the output says it ran).
//!
//! In JSON it is the `provenance` object; in CSV, `# key: value` lines before the header
//! (read with `pandas.read_csv(path, comment="#")` or R's `read.csv(comment.char = "#")`).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::research::policy::Policy;
use crate::research::workload::Workload;

#[derive(Debug, Clone)]
pub struct Provenance {
    pub commit: String,
    pub command: String,
    pub seeds: core::ops::Range<u64>,
    pub platform: &'static str,
    pub policies: Vec<Policy>,
    pub workloads: Vec<Workload>,
    /// Anything else the output's figures depend on (a model's parameters, a grid).
    pub extra: Vec<(&'static str, Value)>,
}

/// The commit of the source tree this binary was built from, as git reports it at run
/// time in the crate's directory: `HASH`, `HASH+dirty` when files differ from it, or
/// `unknown` when git cannot tell (no git, or not a checkout).
pub fn commit() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{hash}+dirty") } else { hash }
        }
        _ => "unknown".into(),
    }
}

/// A shell word: quoted when it holds anything but plain characters.
pub fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,=:+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

impl Provenance {
    pub fn json(&self) -> Value {
        let mut v = json!({
            "commit": self.commit,
            "command": self.command,
            "seeds": {
                "first": self.seeds.start,
                "end_exclusive": self.seeds.end,
                "count": self.seeds.end.saturating_sub(self.seeds.start),
            },
            "platform": self.platform,
            "policies": self.policies,
            "workloads": self.workloads,
        });
        for (k, x) in &self.extra {
            v[*k] = x.clone();
        }
        v
    }

    /// `# key: value` lines for the top of a CSV file; values are one-line JSON.
    pub fn csv_header(&self) -> String {
        let mut s = String::from("# provenance (lines starting with # are comments)\n");
        let _ = writeln!(s, "# commit: {}", self.commit);
        let _ = writeln!(s, "# command: {}", self.command);
        let _ = writeln!(
            s,
            "# seeds: {}..{} ({} paired seeds)",
            self.seeds.start,
            self.seeds.end,
            self.seeds.end.saturating_sub(self.seeds.start)
        );
        let _ = writeln!(s, "# platform: {}", self.platform);
        for p in &self.policies {
            let _ = writeln!(s, "# policy: {}", json!(p));
        }
        for w in &self.workloads {
            let _ = writeln!(s, "# workload: {}", json!(w));
        }
        for (k, x) in &self.extra {
            let _ = writeln!(s, "# {k}: {x}");
        }
        s
    }
}

/// The rows of a CSV written with [`Provenance::csv_header`], comments left out.
pub fn csv_rows(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.starts_with('#'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("seed-defaults"), "seed-defaults");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn the_commit_is_a_hash_or_says_unknown() {
        let c = commit();
        let hash = c.trim_end_matches("+dirty");
        assert!(
            c == "unknown" || (hash.len() == 40 && hash.chars().all(|x| x.is_ascii_hexdigit())),
            "{c}"
        );
    }
}
