use super::*;
use proptest::prelude::*;

// ---- A reference model, written straight from RFC 9110 §13.1 and §13.2.2 ----
//
// It works on what the client meant (a list of tags, `*`, a date), never on text, so the
// text the property renders from it also exercises the parser.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Star,
    Tags(Vec<(bool, &'static str)>),
    /// A line that is not a list of entity-tags (it names no tag).
    Garbage(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ModelIfRange {
    Tag(bool, &'static str),
    Date(u64),
    Invalid,
}

#[derive(Debug, Clone)]
struct Request {
    method: MethodKind,
    if_match: Option<Vec<Line>>,
    if_none_match: Option<Vec<Line>>,
    if_unmodified_since: Option<u64>,
    if_modified_since: Option<u64>,
    range: bool,
    if_range: Option<ModelIfRange>,
}

/// The current representation: its (strong) entity-tag and Last-Modified.
type State = Option<(&'static str, u64)>;

/// §13.1.1: "*" is true if a current representation exists; otherwise true if any listed
/// tag matches the current one by the strong comparison (a weak tag never does).
fn model_if_match(lines: &[Line], state: State) -> bool {
    let Some((etag, _)) = state else {
        return false;
    };
    lines.iter().any(|line| match line {
        Line::Star => true,
        Line::Tags(tags) => tags.iter().any(|&(weak, t)| !weak && t == etag),
        Line::Garbage(_) => false,
    })
}

/// §13.1.2: "*" is false if a current representation exists; otherwise false if any
/// listed tag matches the current one by the weak comparison. Here: whether it "matches"
/// (the condition is false).
fn model_none_match_matches(lines: &[Line], state: State) -> bool {
    let Some((etag, _)) = state else {
        return false;
    };
    lines.iter().any(|line| match line {
        Line::Star => true,
        Line::Tags(tags) => tags.iter().any(|&(_, t)| t == etag),
        Line::Garbage(_) => false,
    })
}

/// §13.2.2, steps 1 to 5.
fn model(req: &Request, state: State) -> Precondition {
    let get_or_head = matches!(req.method, MethodKind::Get | MethodKind::Head);
    // Step 1.
    if let Some(lines) = &req.if_match {
        if !model_if_match(lines, state) {
            return Precondition::Failed;
        }
    } else if let Some(date) = req.if_unmodified_since {
        // Step 2; no representation means no modification date: ignored.
        if let Some((_, modified)) = state
            && modified > date
        {
            return Precondition::Failed;
        }
    }
    // Step 3.
    if let Some(lines) = &req.if_none_match {
        if model_none_match_matches(lines, state) {
            return if get_or_head {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if get_or_head && let Some(date) = req.if_modified_since {
        // Step 4.
        if let Some((_, modified)) = state
            && modified <= date
        {
            return Precondition::NotModified;
        }
    }
    // Step 5: If-Range only for a GET with Range; a strong exact tag or an equal date.
    let range_applies = req.method == MethodKind::Get
        && (!req.range
            || match (&req.if_range, state) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(ModelIfRange::Tag(weak, t)), Some((etag, _))) => !weak && *t == etag,
                (Some(ModelIfRange::Date(d)), Some((_, modified))) => *d == modified,
                (Some(ModelIfRange::Invalid), Some(_)) => false,
            });
    Precondition::Proceed { range_applies }
}

// ---- Rendering what the client meant as the text it sends ----

fn render_tag((weak, opaque): (bool, &str)) -> String {
    format!("{}\"{opaque}\"", if weak { "W/" } else { "" })
}

fn render_line(line: &Line, space: &str) -> String {
    match line {
        Line::Star => format!("{space}*{space}"),
        Line::Tags(tags) => tags
            .iter()
            .map(|t| render_tag(*t))
            .collect::<Vec<_>>()
            .join(&format!("{space},{space}")),
        Line::Garbage(text) => (*text).to_owned(),
    }
}

fn tag_field<'a>(lines: &'a [String]) -> Option<TagField<'a>> {
    let (first, more) = lines.split_first()?;
    let mut field = TagField::new(first);
    for line in more {
        field.push(line);
    }
    Some(field)
}

const OPAQUES: [&str; 4] = ["a", "b", "2a-64-f", "x!y"];

fn arb_tag() -> impl Strategy<Value = (bool, &'static str)> {
    (any::<bool>(), prop::sample::select(OPAQUES.to_vec()))
}

fn arb_line() -> impl Strategy<Value = Line> {
    prop_oneof![
        1 => Just(Line::Star),
        4 => prop::collection::vec(arb_tag(), 1..4).prop_map(Line::Tags),
        1 => prop::sample::select(vec!["a", "\"a", "\"a\" \"b\"", "W/ \"a\"", "\"a b\""])
            .prop_map(Line::Garbage),
    ]
}

fn arb_lines() -> impl Strategy<Value = Option<Vec<Line>>> {
    prop::option::weighted(0.6, prop::collection::vec(arb_line(), 1..3))
}

fn arb_date() -> impl Strategy<Value = Option<u64>> {
    prop::option::weighted(0.5, 98u64..=103)
}

fn arb_request() -> impl Strategy<Value = Request> {
    (
        prop_oneof![
            Just(MethodKind::Get),
            Just(MethodKind::Head),
            Just(MethodKind::Other)
        ],
        arb_lines(),
        arb_lines(),
        arb_date(),
        arb_date(),
        any::<bool>(),
        prop::option::weighted(
            0.5,
            prop_oneof![
                arb_tag().prop_map(|(w, t)| ModelIfRange::Tag(w, t)),
                (98u64..=103).prop_map(ModelIfRange::Date),
                Just(ModelIfRange::Invalid),
            ],
        ),
    )
        .prop_map(
            |(method, if_match, if_none_match, ius, ims, range, if_range)| Request {
                method,
                if_match,
                if_none_match,
                if_unmodified_since: ius,
                if_modified_since: ims,
                range,
                if_range,
            },
        )
}

fn arb_state() -> impl Strategy<Value = State> {
    prop::option::weighted(0.8, (prop::sample::select(OPAQUES.to_vec()), 99u64..=102))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// The ladder agrees with the RFC's text for every combination of fields, tags,
    /// dates, methods and a present or absent representation.
    #[test]
    fn ladder_agrees_with_the_rfc_model(
        req in arb_request(),
        state in arb_state(),
        space in prop::sample::select(vec!["", " ", "\t", " \t "]),
    ) {
        let render = |lines: &Option<Vec<Line>>| -> Option<Vec<String>> {
            lines.as_ref().map(|ls| ls.iter().map(|l| render_line(l, space)).collect())
        };
        let (im, inm) = (render(&req.if_match), render(&req.if_none_match));
        let if_range_text = match &req.if_range {
            Some(ModelIfRange::Tag(w, t)) => Some(render_tag((*w, t))),
            _ => None,
        };
        let conditions = Conditions {
            if_match: im.as_deref().and_then(tag_field),
            if_none_match: inm.as_deref().and_then(tag_field),
            if_unmodified_since: req.if_unmodified_since,
            if_modified_since: req.if_modified_since,
            range: req.range,
            if_range: match &req.if_range {
                None => None,
                Some(ModelIfRange::Tag(..)) => if_range_text.as_deref().map(IfRange::Tag),
                Some(ModelIfRange::Date(d)) => Some(IfRange::Date(*d)),
                Some(ModelIfRange::Invalid) => Some(IfRange::Invalid),
            },
        };
        let current = state.map(|(etag, modified)| Current {
            opaque: etag.as_bytes(),
            modified_secs: Some(modified),
        });
        prop_assert_eq!(evaluate(req.method, &conditions, current), model(&req, state));
    }

    /// Peer text never panics the parser, and what it accepts is what it was given.
    #[test]
    fn tag_lists_parse_any_text_without_panicking(text in "[ \t,W/\"a-c!*]{0,24}") {
        if let Some(tags) = parse_tag_list(&text) {
            for tag in tags {
                let quoted = format!("\"{}\"", tag.opaque);
                prop_assert!(text.contains(&quoted), "{} not in {}", quoted, text);
            }
        }
        let field = TagField::new(&text);
        let current = Current { opaque: b"a", modified_secs: Some(0) };
        for method in [MethodKind::Get, MethodKind::Other] {
            let c = Conditions { if_match: Some(field.clone()), ..Conditions::default() };
            let _ = evaluate(method, &c, Some(current));
            let c = Conditions { if_none_match: Some(field.clone()), ..Conditions::default() };
            let _ = evaluate(method, &c, None);
        }
    }

    /// A rendered list parses back to the tags it was made of.
    #[test]
    fn rendered_lists_parse_back(tags in prop::collection::vec(arb_tag(), 0..5), space in "[ \t]{0,2}") {
        let text = render_line(&Line::Tags(tags.clone()), &space);
        let parsed = parse_tag_list(&text).expect("a rendered list parses");
        let parsed: Vec<(bool, &str)> = parsed.iter().map(|t| (t.weak, t.opaque)).collect();
        prop_assert_eq!(parsed, tags);
    }
}

fn current(opaque: &str, modified_secs: u64) -> Option<Current<'_>> {
    Some(Current {
        opaque: opaque.as_bytes(),
        modified_secs: Some(modified_secs),
    })
}

#[test]
fn writes_answer_412_where_reads_answer_304() {
    let field = TagField::new("\"a\"");
    let c = Conditions {
        if_none_match: Some(field),
        ..Conditions::default()
    };
    assert_eq!(
        evaluate(MethodKind::Get, &c, current("a", 1)),
        Precondition::NotModified
    );
    assert_eq!(
        evaluate(MethodKind::Other, &c, current("a", 1)),
        Precondition::Failed
    );
}

#[test]
fn a_missing_representation() {
    let star = Conditions {
        if_match: Some(TagField::new("*")),
        ..Conditions::default()
    };
    assert_eq!(
        evaluate(MethodKind::Other, &star, None),
        Precondition::Failed,
        "If-Match: * needs a representation"
    );
    let create_only = Conditions {
        if_none_match: Some(TagField::new("*")),
        ..Conditions::default()
    };
    assert!(matches!(
        evaluate(MethodKind::Other, &create_only, None),
        Precondition::Proceed { .. }
    ));
    assert_eq!(
        evaluate(MethodKind::Other, &create_only, current("a", 1)),
        Precondition::Failed
    );
    let dated = Conditions {
        if_unmodified_since: Some(0),
        ..Conditions::default()
    };
    assert!(
        matches!(
            evaluate(MethodKind::Other, &dated, None),
            Precondition::Proceed { .. }
        ),
        "no modification date: If-Unmodified-Since is ignored"
    );
    assert_eq!(
        evaluate(MethodKind::Other, &dated, current("a", 1)),
        Precondition::Failed
    );
}

/// A representation without a modification date (a directory listing): its tag decides,
/// and every date condition is ignored, whatever date the client sends.
#[test]
fn a_representation_without_a_date_is_judged_by_its_tag_alone() {
    let listing = Some(Current {
        opaque: b"l1",
        modified_secs: None,
    });
    for since in [0, u64::MAX] {
        let modified = Conditions {
            if_modified_since: Some(since),
            ..Conditions::default()
        };
        assert_eq!(
            evaluate(MethodKind::Get, &modified, listing),
            Precondition::Proceed {
                range_applies: true
            },
            "no Last-Modified: If-Modified-Since {since} is ignored, never a 304"
        );
        let unmodified = Conditions {
            if_unmodified_since: Some(since),
            ..Conditions::default()
        };
        assert!(
            matches!(
                evaluate(MethodKind::Get, &unmodified, listing),
                Precondition::Proceed { .. }
            ),
            "no Last-Modified: If-Unmodified-Since {since} is ignored, never a 412"
        );
        let ranged = Conditions {
            range: true,
            if_range: Some(IfRange::Date(since)),
            ..Conditions::default()
        };
        assert_eq!(
            evaluate(MethodKind::Get, &ranged, listing),
            Precondition::Proceed {
                range_applies: false
            },
            "no Last-Modified: an If-Range date {since} never matches"
        );
    }
    let tagged = Conditions {
        if_none_match: Some(TagField::new("\"l1\"")),
        if_modified_since: Some(0),
        ..Conditions::default()
    };
    assert_eq!(
        evaluate(MethodKind::Get, &tagged, listing),
        Precondition::NotModified
    );
}
