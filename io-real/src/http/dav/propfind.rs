//! PROPFIND and PROPPATCH: live properties computed from the file system and the broker's
//! lock table, dead properties from [`super::props`].

use cap_std::fs::{Dir, Metadata};
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Response, StatusCode};
use servery_core::proto::DavLockInfo;
use tokio::runtime::Handle;

use super::super::body::Body;
use super::super::compress;
use super::super::error::HttpError;
use super::super::long_work;
use super::super::mime;
use super::locks;
use super::propfind_stream::{self, Listing};
use super::props::{self, Stored};
use super::resource::{self, DavPath};
use super::xml::{self, DAV_NS, Multistatus, Name, PatchOp, PropOut, Propfind};
use super::{Dav, DavError, blocking, encoded_multistatus, multistatus, single};
use crate::http::site::joined_values;
use crate::write::{Grant, Writer, target};
use servery_core::dav_lock::Write;

/// The live properties servery computes, in the order allprop lists them. The quota
/// properties are only sent when asked for by name (RFC 4331 §3).
const LIVE: [&str; 9] = [
    "creationdate",
    "displayname",
    "getcontentlength",
    "getcontenttype",
    "getetag",
    "getlastmodified",
    "resourcetype",
    "supportedlock",
    "lockdiscovery",
];
const QUOTA: [&str; 2] = ["quota-available-bytes", "quota-used-bytes"];

fn dav(local: &str) -> Name {
    Name {
        namespace: DAV_NS.to_owned(),
        local: local.to_owned(),
    }
}

fn is_live(name: &Name) -> bool {
    name.namespace == DAV_NS
        && (LIVE.contains(&name.local.as_str()) || QUOTA.contains(&name.local.as_str()))
}

/// One resource a PROPFIND answers for.
pub(super) struct Found {
    pub path: DavPath,
    pub meta: Metadata,
    pub dead: Vec<Stored>,
}

/// `Depth` for PROPFIND: 0, 1 or infinity (the default).
fn depth(parts: &Parts) -> Result<Option<usize>, HttpError> {
    match single(&parts.headers, "depth").as_deref() {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("infinity") => Ok(None),
        Some("0") => Ok(Some(0)),
        Some("1") => Ok(Some(1)),
        Some(_) => Err(HttpError::Dav(DavError::Depth)),
    }
}

/// The resources at and below `path` up to `depth` (None: all), at most `max` of them.
fn walk(
    root: &Dir,
    path: &DavPath,
    depth: Option<usize>,
    max: usize,
    show_hidden: bool,
) -> Result<Vec<Found>, HttpError> {
    let meta = resource::stat(root, &path.rel()).map_err(HttpError::from_io)?;
    let mut found = Vec::new();
    // Whether a resource has a property sidecar: unknown for the start (looked up), and
    // known for members from the listing that found them (no lookup for most of them).
    let mut queue = vec![(path.clone(), meta, 0usize, true)];
    while let Some((path, meta, level, may_have_props)) = queue.pop() {
        if found.len() >= max {
            return Err(HttpError::Dav(DavError::FiniteDepth));
        }
        if meta.is_dir() && depth.is_none_or(|d| level < d) {
            let listing =
                resource::members(root, &path, show_hidden).map_err(HttpError::from_io)?;
            for (name, member) in listing.members.into_iter().rev() {
                let has_props = listing.with_props.contains(&name);
                queue.push((path.child(&name), member, level + 1, has_props));
            }
        }
        let dead = if may_have_props {
            props::load(root, &path).unwrap_or_default()
        } else {
            Vec::new()
        };
        found.push(Found { path, meta, dead });
    }
    Ok(found)
}

/// The quota of the file system holding the share: (available, used) bytes.
fn quota(root: &Dir) -> Option<(u64, u64)> {
    let st = rustix::fs::fstatvfs(root).ok()?;
    let unit = st.f_frsize;
    Some((
        st.f_bavail.saturating_mul(unit),
        st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(unit),
    ))
}

/// One live property of `found`, or `None` where it has none (a collection's length).
fn live(
    local: &str,
    found: &Found,
    locks: &[DavLockInfo],
    quota: Option<(u64, u64)>,
) -> Option<PropOut> {
    let name = dav(local);
    let meta = &found.meta;
    let file = !meta.is_dir();
    Some(match local {
        "creationdate" => PropOut::Text(name, crate::civil_time::rfc3339(resource::created(meta))),
        "displayname" => PropOut::Text(name, found.path.name().unwrap_or("").to_owned()),
        "getcontentlength" if file => PropOut::Text(name, meta.len().to_string()),
        "getcontenttype" if file => PropOut::Text(
            name,
            mime::content_type(found.path.name().unwrap_or("")).to_owned(),
        ),
        "getetag" => PropOut::Text(
            name,
            String::from_utf8_lossy(resource::validators(meta).etag().as_bytes()).into_owned(),
        ),
        "getlastmodified" => PropOut::Text(name, httpdate::fmt_http_date(resource::modified(meta))),
        "resourcetype" if file => PropOut::Empty(name),
        "resourcetype" => PropOut::Raw(name, "<D:collection/>".to_owned(), None),
        "supportedlock" => PropOut::Raw(name, xml::supported_lock_fragment().to_owned(), None),
        "lockdiscovery" => {
            let key = found.path.resource();
            let active: Vec<_> = locks
                .iter()
                .filter(|l| locks::applies(l, &key))
                .map(locks::active)
                .collect();
            PropOut::Raw(name, xml::lock_discovery_fragment(&active), None)
        }
        "quota-available-bytes" => PropOut::Text(name, quota?.0.to_string()),
        "quota-used-bytes" => PropOut::Text(name, quota?.1.to_string()),
        _ => return None,
    })
}

fn dead_out(p: &Stored) -> PropOut {
    PropOut::Raw(
        Name {
            namespace: p.namespace.clone(),
            local: p.local.clone(),
        },
        p.xml.clone(),
        p.lang.clone(),
    )
}

fn dead_name(p: &Stored) -> Name {
    Name {
        namespace: p.namespace.clone(),
        local: p.local.clone(),
    }
}

/// One `<D:response>` for `f`, as `request` asks.
pub(super) fn describe(
    out: &mut Multistatus,
    request: &Propfind,
    f: &Found,
    locks: &[DavLockInfo],
    quota: Option<(u64, u64)>,
) {
    let href = f.path.href(f.meta.is_dir());
    match request {
        Propfind::PropName => {
            let mut names: Vec<PropOut> = LIVE
                .iter()
                .filter(|l| live(l, f, &[], None).is_some())
                .map(|l| PropOut::Empty(dav(l)))
                .collect();
            names.extend(f.dead.iter().map(|p| PropOut::Empty(dead_name(p))));
            out.propstat_response(&href, &[(200, &names)]);
        }
        Propfind::AllProp { include } => {
            let mut props: Vec<PropOut> = LIVE
                .iter()
                .filter_map(|l| live(l, f, locks, None))
                .collect();
            props.extend(f.dead.iter().map(dead_out));
            let mut missing = Vec::new();
            for name in include {
                if name.namespace == DAV_NS && QUOTA.contains(&name.local.as_str()) {
                    match live(&name.local, f, locks, quota) {
                        Some(p) => props.push(p),
                        None => missing.push(PropOut::Empty(name.clone())),
                    }
                }
            }
            out.propstat_response(&href, &[(200, &props), (404, &missing)]);
        }
        Propfind::Prop(names) => {
            let mut props = Vec::new();
            let mut missing = Vec::new();
            for name in names {
                let value = if name.namespace == DAV_NS && is_live(name) {
                    live(&name.local, f, locks, quota)
                } else {
                    f.dead
                        .iter()
                        .find(|p| p.namespace == name.namespace && p.local == name.local)
                        .map(dead_out)
                };
                match value {
                    Some(p) => props.push(p),
                    None => missing.push(PropOut::Empty(name.clone())),
                }
            }
            out.propstat_response(&href, &[(200, &props), (404, &missing)]);
        }
    }
}

impl Dav {
    pub(super) async fn propfind(
        &self,
        parts: &Parts,
        path: &DavPath,
        body: &[u8],
    ) -> Result<Response<Body>, HttpError> {
        let request = xml::parse_propfind(body).map_err(DavError::Xml)?;
        let depth = depth(parts)?;
        let (root, show_hidden, max) =
            (self.root.dir(), self.show_hidden, self.max_propfind_entries);
        let start = path.clone();
        let wants_quota = matches!(&request, Propfind::Prop(names) if names.iter().any(|n| n.namespace == DAV_NS && QUOTA.contains(&n.local.as_str())));
        // One question answers for every resource in the answer: the locks on the start,
        // above it with depth infinity, and below it.
        let locks = self.locks.around(&path.resource()).await?;
        let codings = if self.compress {
            compress::negotiate(joined_values(&parts.headers, header::ACCEPT_ENCODING).as_deref())
        } else {
            Vec::new()
        };
        if depth == Some(1) {
            // A collection's members at any count, streamed (`propfind_stream`); a file
            // is answered like Depth 0.
            let (at, dir) = (start.clone(), root.clone());
            let (meta, quota) = blocking(move || {
                let root = dir;
                let meta = resource::stat(&root, &at.rel()).map_err(HttpError::from_io)?;
                Ok((meta, if wants_quota { quota(&root) } else { None }))
            })
            .await?;
            if meta.is_dir() {
                let listing = Listing {
                    root,
                    dir: start,
                    meta,
                    request,
                    locks,
                    quota,
                    show_hidden,
                };
                let (body, coding) =
                    propfind_stream::stream(listing, codings.first().copied(), Handle::current());
                let mut response = Response::new(body);
                *response.status_mut() = StatusCode::MULTI_STATUS;
                let headers = response.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/xml; charset=utf-8"),
                );
                if let Some(coding) = coding {
                    headers.insert(
                        header::CONTENT_ENCODING,
                        HeaderValue::from_static(coding.token()),
                    );
                }
                if self.compress {
                    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
                }
                return Ok(response);
            }
        }
        // A walk of the whole tree holds its blocking thread for as long as the tree is
        // large: long work, under the worker's share of the pool (decision 0042), and
        // bounded by `--dav-propfind-max-entries`; Depth 0 answers for one resource.
        let (place, max) = match depth {
            None => (
                Some(long_work::try_start().ok_or(HttpError::Unavailable)?),
                max,
            ),
            Some(_) => (None, usize::MAX),
        };
        let (found, quota) = blocking(move || {
            let _place = place;
            // A finite depth here is 0, or 1 on a file (a collection's was streamed).
            let found = walk(&root, &start, depth.map(|_| 0), max, show_hidden)?;
            Ok((found, if wants_quota { quota(&root) } else { None }))
        })
        .await?;
        let mut out = Multistatus::new();
        for f in &found {
            describe(&mut out, &request, f, &locks, quota);
        }
        Ok(encoded_multistatus(out.finish(), &codings, self.compress))
    }

    pub(super) async fn proppatch(
        &self,
        parts: &Parts,
        path: &DavPath,
        body: &[u8],
        writer: &Writer,
    ) -> Result<Response<Body>, HttpError> {
        let ops = xml::parse_proppatch(body).map_err(DavError::Xml)?;
        let root = self.root.dir();
        let rel = path.rel();
        let meta =
            blocking(move || resource::stat(&root, &rel).map_err(HttpError::from_io)).await?;
        let mut seen = self.locks.seen();
        let submitted = self.preconditions(parts, path, &mut seen).await?;
        let resource = path.resource();
        seen.require_all(Write::Proppatch(&resource), &submitted)
            .await?;
        // `If-Match` and the like are judged under the resource's own lease, held until
        // the properties are written.
        let _held = self.hold_if_conditional(parts, path).await?;
        // The sidecar is written under its own lease, so two workers patching one
        // resource apply their changes one after the other.
        let (dir, name) = props::sidecar(path);
        let root = self.root.dir();
        let sidecar = blocking(move || Ok(target::resolve(&root, &dir, &name)?)).await?;
        let lease = Grant::lease(
            &writer.broker,
            &sidecar.key,
            writer.settings.write_lock_timeout,
        )
        .await?;
        let (root, at, worker) = (self.root.dir(), path.clone(), writer.settings.worker_id);
        let statuses = blocking(move || {
            let mut stored = props::load(&root, &at).map_err(HttpError::Internal)?;
            let mut statuses: Vec<(Name, u16)> = Vec::with_capacity(ops.len());
            let mut failed = false;
            for op in &ops {
                let name = match op {
                    PatchOp::Set(name, _) | PatchOp::Remove(name) => name.clone(),
                };
                if is_live(&name) {
                    failed = true;
                    statuses.push((name, 403));
                    continue;
                }
                match op {
                    PatchOp::Set(name, value) => {
                        let entry = Stored {
                            namespace: name.namespace.clone(),
                            local: name.local.clone(),
                            xml: value.xml.clone(),
                            lang: value.lang.clone(),
                        };
                        match stored
                            .iter_mut()
                            .find(|p| p.namespace == name.namespace && p.local == name.local)
                        {
                            Some(existing) => *existing = entry,
                            None => stored.push(entry),
                        }
                    }
                    PatchOp::Remove(name) => {
                        stored
                            .retain(|p| !(p.namespace == name.namespace && p.local == name.local));
                    }
                }
                statuses.push((name, 200));
            }
            if !failed && !props::fits(&stored) {
                // Nothing is applied: every property is answered 507.
                return Ok(statuses.into_iter().map(|(n, _)| (n, 507)).collect());
            }
            if failed {
                // Atomic: one failure and nothing is applied (RFC 4918 §9.2).
                return Ok(statuses
                    .into_iter()
                    .map(|(n, s)| (n, if s == 200 { 424 } else { s }))
                    .collect());
            }
            props::save(&root, &at, &stored, worker).map_err(HttpError::Internal)?;
            Ok(statuses)
        })
        .await?;
        lease.release().await;
        let mut groups: Vec<(u16, Vec<PropOut>)> = Vec::new();
        for (name, status) in statuses {
            match groups.iter_mut().find(|(s, _)| *s == status) {
                Some((_, names)) => names.push(PropOut::Empty(name)),
                None => groups.push((status, vec![PropOut::Empty(name)])),
            }
        }
        let groups: Vec<(u16, &[PropOut])> =
            groups.iter().map(|(s, p)| (*s, p.as_slice())).collect();
        let mut out = Multistatus::new();
        out.propstat_response(&path.href(meta.is_dir()), &groups);
        Ok(multistatus(out.finish()))
    }
}
