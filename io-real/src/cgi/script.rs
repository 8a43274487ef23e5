//! Which script a request names, and the `PATH_INFO` after it (RFC 3875 §3.3, §4.1.5):
//! the path under the prefix is walked a segment at a time from the scripts' directory
//! until a file is found; that file is the script and the rest of the path its
//! `PATH_INFO`. Only an executable regular file that is inside the directory once every
//! symlink is resolved may run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use percent_encoding::percent_decode_str;

/// The script a request runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Script {
    /// The file to run, every symlink resolved (inside the scripts' directory).
    pub file: PathBuf,
    /// The URL path naming the script (`/cgi-bin/app.py`), decoded.
    pub script_name: String,
    /// What follows the script's name (`/x/y`), decoded; empty when nothing does.
    pub path_info: String,
    /// A non-parsed-header script (its name starts with `nph-`).
    pub nph: bool,
}

/// Why a request runs no script, and the status that says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(super) enum NotRun {
    #[error("no script at this path")]
    NotFound,
    #[error("{0}")]
    Forbidden(&'static str),
}

impl NotRun {
    pub(super) fn status(&self) -> http::StatusCode {
        match self {
            NotRun::NotFound => http::StatusCode::NOT_FOUND,
            NotRun::Forbidden(_) => http::StatusCode::FORBIDDEN,
        }
    }
}

/// The script `rest` (the request path after the prefix, as sent: `""`, `/app.py/x`)
/// names under `dir` (canonical), reached from the URL `prefix`.
pub(super) fn find(dir: &Path, prefix: &str, rest: &str) -> Result<Script, NotRun> {
    let Some(rest) = rest.strip_prefix('/') else {
        return Err(NotRun::Forbidden("the scripts' directory is not a script"));
    };
    let mut segments = Vec::new();
    for raw in rest.split('/') {
        let bytes: Vec<u8> = percent_decode_str(raw).collect();
        let segment =
            String::from_utf8(bytes).map_err(|_| NotRun::Forbidden("the path is not UTF-8"))?;
        if segment.contains(['\0', '\\']) || segment.contains('/') {
            return Err(NotRun::Forbidden(
                "the path holds an encoded separator or NUL",
            ));
        }
        if segment == ".." || segment == "." {
            return Err(NotRun::Forbidden("the path holds a dot-segment"));
        }
        segments.push(segment);
    }
    let mut candidate = dir.to_path_buf();
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() {
            // `dir/` (or `dir//x`): a directory is named, never a script.
            return Err(NotRun::Forbidden("a directory is not a script"));
        }
        if segment.starts_with('.') {
            // Hidden files (`.htaccess`, an editor's swap file) are never scripts.
            return Err(NotRun::NotFound);
        }
        candidate.push(segment);
        let meta = std::fs::metadata(&candidate).map_err(|_| NotRun::NotFound)?;
        if meta.is_dir() {
            continue;
        }
        let file = std::fs::canonicalize(&candidate).map_err(|_| NotRun::NotFound)?;
        if !file.starts_with(dir) {
            return Err(NotRun::Forbidden(
                "the script leads out of the scripts' directory",
            ));
        }
        if !meta.is_file() {
            return Err(NotRun::Forbidden("the script is not a regular file"));
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(NotRun::Forbidden("the script is not executable"));
        }
        let path_info = if i + 1 < segments.len() {
            format!("/{}", segments[i + 1..].join("/"))
        } else {
            String::new()
        };
        return Ok(Script {
            file,
            script_name: format!("{prefix}/{}", segments[..=i].join("/")),
            path_info,
            nph: segment.starts_with("nph-"),
        });
    }
    Err(NotRun::Forbidden("a directory is not a script"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fresh directory for one test, canonical (removed by the next run of the test).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("servery-cgi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        std::fs::canonicalize(&dir).expect("canonical")
    }

    fn write_script(path: &Path, mode: u32) {
        std::fs::write(path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn path_info_follows_the_first_file() {
        let dir = scratch("path-info");
        std::fs::create_dir(dir.join("sub")).expect("mkdir");
        write_script(&dir.join("sub/app.cgi"), 0o755);
        write_script(&dir.join("nph-raw"), 0o755);
        write_script(&dir.join("plain.txt"), 0o644);
        let found = find(&dir, "/cgi-bin", "/sub/app.cgi/a%20b/c/").expect("found");
        assert_eq!(found.script_name, "/cgi-bin/sub/app.cgi");
        assert_eq!(found.path_info, "/a b/c/");
        assert_eq!(found.file, dir.join("sub/app.cgi"));
        assert!(!found.nph);
        assert!(find(&dir, "/cgi-bin", "/nph-raw").expect("nph").nph);
        assert_eq!(
            find(&dir, "/cgi-bin", "/sub/app.cgi")
                .expect("bare")
                .path_info,
            ""
        );
        assert_eq!(find(&dir, "/cgi-bin", "/missing"), Err(NotRun::NotFound));
        assert!(matches!(
            find(&dir, "/cgi-bin", "/plain.txt"),
            Err(NotRun::Forbidden(_))
        ));
        assert!(matches!(
            find(&dir, "/cgi-bin", "/sub"),
            Err(NotRun::Forbidden(_))
        ));
        assert!(matches!(
            find(&dir, "/cgi-bin", "/sub/../sub/app.cgi"),
            Err(NotRun::Forbidden(_))
        ));
        assert!(matches!(
            find(&dir, "/cgi-bin", "/sub%2fapp.cgi"),
            Err(NotRun::Forbidden(_))
        ));
    }

    #[test]
    fn a_symlink_out_of_the_directory_never_runs() {
        let base = scratch("symlink");
        let dir = base.join("cgi");
        std::fs::create_dir(&dir).expect("mkdir");
        write_script(&base.join("outside"), 0o755);
        write_script(&dir.join("inside"), 0o755);
        symlink(base.join("outside"), dir.join("out")).expect("symlink");
        symlink(&base, dir.join("up")).expect("symlink");
        symlink(dir.join("inside"), dir.join("alias")).expect("symlink");
        for out in ["/out", "/up/outside"] {
            assert!(
                matches!(find(&dir, "/c", out), Err(NotRun::Forbidden(_))),
                "{out}: a script whose real path is outside DIR must never run"
            );
        }
        assert_eq!(
            find(&dir, "/c", "/alias").expect("inside").file,
            dir.join("inside")
        );
    }
}
