//! Dead properties (PROPPATCH), stored beside the resource they describe: the properties
//! of `dir/name` live in `dir/.servery-props.name` (the root's in `.servery-props.`), a
//! JSON list replaced atomically (written under a private temporary name, then renamed).
//! servery's private names are never served, listed or writable over HTTP, so the store is
//! invisible to clients; it moves, copies and goes with its resource because the tree
//! operations carry it along (decision 0018 says why not xattrs). Blocking.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use super::resource::DavPath;
use crate::write::temp;

/// The name prefix of property sidecars.
pub const SIDECAR_PREFIX: &str = ".servery-props.";

/// A resource's dead properties may take this many bytes once serialised; a PROPPATCH
/// that would grow them past it is refused (507) without changing anything.
pub const MAX_STORED: usize = 256 * 1024;

/// One dead property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    pub namespace: String,
    pub local: String,
    /// The value as a self-contained XML fragment.
    pub xml: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<String>,
}

/// The sidecar of `path`: its directory (relative to the root) and its name.
pub fn sidecar(path: &DavPath) -> (PathBuf, String) {
    match path.parent() {
        Some(parent) => (
            parent.rel(),
            format!("{SIDECAR_PREFIX}{}", path.name().unwrap_or_default()),
        ),
        None => (PathBuf::from("."), SIDECAR_PREFIX.to_owned()),
    }
}

fn open_dir(root: &Dir, rel: &Path) -> io::Result<Dir> {
    if rel == Path::new(".") {
        root.try_clone()
    } else {
        root.open_dir(rel)
    }
}

/// The dead properties of `path`; none when it has no sidecar.
pub fn load(root: &Dir, path: &DavPath) -> io::Result<Vec<Stored>> {
    let (dir, name) = sidecar(path);
    let mut file = match open_dir(root, &dir).and_then(|d| d.open(&name)) {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    let mut text = Vec::new();
    Read::by_ref(&mut file)
        .take(MAX_STORED as u64 + 1)
        .read_to_end(&mut text)?;
    serde_json::from_slice(&text).map_err(|e| {
        tracing::warn!(resource = %path.resource(), error = %e, "unreadable property store");
        io::Error::new(io::ErrorKind::InvalidData, e)
    })
}

/// Whether `props` fit the store.
pub fn fits(props: &[Stored]) -> bool {
    serde_json::to_vec(props).is_ok_and(|v| v.len() <= MAX_STORED)
}

/// Replaces the dead properties of `path` (an empty list removes the sidecar).
pub fn save(root: &Dir, path: &DavPath, props: &[Stored], worker: u64) -> io::Result<()> {
    let (dir, name) = sidecar(path);
    let dir = Arc::new(open_dir(root, &dir)?);
    if props.is_empty() {
        return remove_name(&dir, &name);
    }
    let text = serde_json::to_vec(props).map_err(io::Error::other)?;
    let (mut guard, mut file) = temp::create(&dir, worker)?;
    file.write_all(&text)?;
    file.sync_data()?;
    dir.rename(guard.name(), &dir, &name)?;
    guard.disarm();
    Ok(())
}

fn remove_name(dir: &Dir, name: &str) -> io::Result<()> {
    match dir.remove_file(name) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Drops the dead properties of `path` (after a DELETE, or before an overwrite).
pub fn remove(root: &Dir, path: &DavPath) -> io::Result<()> {
    let (dir, name) = sidecar(path);
    match open_dir(root, &dir) {
        Ok(dir) => remove_name(&dir, &name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Gives `to` the dead properties of `from` (COPY), replacing any it had.
pub fn copy(root: &Dir, from: &DavPath, to: &DavPath, worker: u64) -> io::Result<()> {
    let props = load(root, from)?;
    save(root, to, &props, worker)
}

/// Moves the dead properties of `from` to `to` (MOVE).
pub fn rename(root: &Dir, from: &DavPath, to: &DavPath) -> io::Result<()> {
    let (from_dir, from_name) = sidecar(from);
    let (to_dir, to_name) = sidecar(to);
    let to_dir = open_dir(root, &to_dir)?;
    remove_name(&to_dir, &to_name)?;
    match open_dir(root, &from_dir)?.rename(&from_name, &to_dir, &to_name) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether a private name is a property sidecar (which travels with its directory's
/// contents) rather than a temporary or partial file (which does not).
pub fn is_sidecar(name: &str) -> bool {
    name.starts_with(SIDECAR_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::path::RequestPath;

    fn p(raw: &str) -> DavPath {
        DavPath::from_request(&RequestPath::parse(raw, false).expect("path"))
    }

    fn prop(local: &str, xml: &str) -> Stored {
        Stored {
            namespace: "http://example.com/ns".into(),
            local: local.into(),
            xml: xml.into(),
            lang: None,
        }
    }

    #[test]
    fn sidecars_sit_beside_their_resource() {
        assert_eq!(
            sidecar(&p("/a/b")),
            (PathBuf::from("a"), ".servery-props.b".into())
        );
        assert_eq!(
            sidecar(&p("/b")),
            (PathBuf::from("."), ".servery-props.b".into())
        );
        assert_eq!(
            sidecar(&p("/")),
            (PathBuf::from("."), ".servery-props.".into())
        );
        assert!(crate::write::is_private(&sidecar(&p("/x")).1));
    }

    #[test]
    fn save_load_copy_rename_remove() {
        let tmp = std::env::temp_dir().join(format!("servery-props-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("d")).expect("mkdir");
        let root = Dir::open_ambient_dir(&tmp, cap_std::ambient_authority()).expect("root");
        let a = p("/d/a");
        assert!(load(&root, &a).expect("load").is_empty());
        let props = vec![prop("x", "<y xmlns=\"urn:z\">1</y>"), prop("é", "text")];
        save(&root, &a, &props, 1).expect("save");
        assert_eq!(load(&root, &a).expect("load"), props);
        copy(&root, &a, &p("/b"), 1).expect("copy");
        assert_eq!(load(&root, &p("/b")).expect("load"), props);
        rename(&root, &p("/b"), &p("/d/c")).expect("rename");
        assert!(load(&root, &p("/b")).expect("load").is_empty());
        assert_eq!(load(&root, &p("/d/c")).expect("load"), props);
        remove(&root, &a).expect("remove");
        assert!(load(&root, &a).expect("load").is_empty());
        save(&root, &p("/d/c"), &[], 1).expect("clear");
        let left: Vec<_> = std::fs::read_dir(tmp.join("d"))
            .expect("ls")
            .map(|e| e.expect("e").file_name())
            .collect();
        assert!(
            left.is_empty(),
            "no sidecar or temporary file left: {left:?}"
        );
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn the_store_is_bounded() {
        assert!(fits(&[prop("x", "small")]));
        assert!(!fits(&[prop("x", &"v".repeat(MAX_STORED))]));
    }
}
