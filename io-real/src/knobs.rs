//! The settings the core sees, by name. Each `Args` struct declares, next to its
//! `#[arg]`s, which core field each of its settings sets ([`core_fields!`]); that one
//! declaration is the mapping to [`RawConfig`] (`apply`), and everything here derives
//! from it: `ctl reload --set` overrides (a reloadable setting, by its key, its flag or
//! its core field name), the flag named next to a core field in validation errors, and
//! the core field through which a reloadable setting's committed value is found (status,
//! and what new workers receive).

use serde_json::{Map, Value};
use servery_core::RawConfig;

/// How an override writes one core field from a JSON value.
pub type Setter = fn(&mut RawConfig, &Value) -> Result<(), String>;

/// One setting the core sees.
#[derive(Clone, Copy)]
pub struct CoreField {
    /// The setting's key (`restart_backoff_initial`): its file key, its flag without `--`.
    pub key: &'static str,
    /// The core field, by segment (`["recovery", "restart_backoff_initial"]`).
    pub path: &'static [&'static str],
    /// Writes an override; `None` for a field worked out from other values (a feature
    /// that is on when a path is given), which only the command line sets.
    pub set: Option<Setter>,
}

impl core::fmt::Debug for CoreField {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.field())
    }
}

impl CoreField {
    /// The core's field name, as validation reports it (`recovery.drain_timeout`).
    pub fn field(&self) -> String {
        self.path.join(".")
    }

    fn is(&self, field: &str) -> bool {
        field.split('.').eq(self.path.iter().copied())
    }

    /// The command-line flag that sets it.
    pub fn flag(&self) -> String {
        format!("--{}", self.key.replace('_', "-"))
    }
}

/// Declares which core field each setting of an `Args` struct sets, and generates from
/// that `apply` (the struct's part of [`RawConfig`]) and `core_fields` (the list the rest
/// of this module reads). Entries:
///
/// - `key => section.field;` the value as parsed (the types agree);
/// - `key => section.field cloned;` the same, for a value that is not `Copy` (a list);
/// - `key => section.field via convert;` through `convert` (`Workers::count`);
/// - `key => section.field = |args| expr;` worked out from the struct (`args` is
///   `&self`; not overridable);
/// - `group field_name: Type;` a flattened struct with its own declaration.
///
/// A struct with no setting the core sees declares so with an empty body, which a
/// [`settings_struct!`] that flattens it needs.
macro_rules! core_fields {
    (impl $ty:ty {}) => {
        impl $ty {
            /// No setting of this struct reaches the core.
            pub fn apply(&self, _raw: &mut servery_core::RawConfig) {}

            /// None: no setting of this struct reaches the core.
            pub fn core_fields() -> Vec<$crate::knobs::CoreField> {
                Vec::new()
            }
        }
    };
    (impl $ty:ty { $($body:tt)* }) => {
        impl $ty {
            /// Writes this struct's settings into the core's configuration.
            pub fn apply(&self, raw: &mut servery_core::RawConfig) {
                $crate::knobs::core_fields!(@apply self raw $($body)*);
            }

            /// The core field each of this struct's settings sets.
            pub fn core_fields() -> Vec<$crate::knobs::CoreField> {
                let mut all = Vec::new();
                $crate::knobs::core_fields!(@list all $($body)*);
                all
            }
        }
    };
    (@apply $s:ident $raw:ident) => {};
    (@apply $s:ident $raw:ident group $g:ident : $gty:ty; $($rest:tt)*) => {
        $s.$g.apply($raw);
        $crate::knobs::core_fields!(@apply $s $raw $($rest)*);
    };
    (@apply $s:ident $raw:ident $key:ident => $($seg:ident).+ via $conv:path; $($rest:tt)*) => {
        $raw.$($seg).+ = $conv($s.$key);
        $crate::knobs::core_fields!(@apply $s $raw $($rest)*);
    };
    (@apply $s:ident $raw:ident $key:ident => $($seg:ident).+ = |$a:ident| $derive:expr; $($rest:tt)*) => {
        let $a = $s;
        $raw.$($seg).+ = $derive;
        $crate::knobs::core_fields!(@apply $s $raw $($rest)*);
    };
    (@apply $s:ident $raw:ident $key:ident => $($seg:ident).+ cloned; $($rest:tt)*) => {
        $raw.$($seg).+ = $s.$key.clone();
        $crate::knobs::core_fields!(@apply $s $raw $($rest)*);
    };
    (@apply $s:ident $raw:ident $key:ident => $($seg:ident).+; $($rest:tt)*) => {
        $raw.$($seg).+ = $s.$key;
        $crate::knobs::core_fields!(@apply $s $raw $($rest)*);
    };
    (@list $all:ident) => {};
    (@list $all:ident group $g:ident : $gty:ty; $($rest:tt)*) => {
        $all.extend(<$gty>::core_fields());
        $crate::knobs::core_fields!(@list $all $($rest)*);
    };
    (@list $all:ident $key:ident => $($seg:ident).+ via $conv:path; $($rest:tt)*) => {
        $all.extend([$crate::knobs::CoreField {
            key: stringify!($key),
            path: &[$(stringify!($seg)),+],
            set: Some(|raw, value| {
                raw.$($seg).+ = $conv($crate::knobs::from_json(stringify!($key), value)?);
                Ok(())
            }),
        }]);
        $crate::knobs::core_fields!(@list $all $($rest)*);
    };
    (@list $all:ident $key:ident => $($seg:ident).+ = |$a:ident| $derive:expr; $($rest:tt)*) => {
        $all.extend([$crate::knobs::CoreField {
            key: stringify!($key),
            path: &[$(stringify!($seg)),+],
            set: None,
        }]);
        $crate::knobs::core_fields!(@list $all $($rest)*);
    };
    (@list $all:ident $key:ident => $($seg:ident).+ cloned; $($rest:tt)*) => {
        $crate::knobs::core_fields!(@list $all $key => $($seg).+; $($rest)*);
    };
    (@list $all:ident $key:ident => $($seg:ident).+; $($rest:tt)*) => {
        $all.extend([$crate::knobs::CoreField {
            key: stringify!($key),
            path: &[$(stringify!($seg)),+],
            set: Some(|raw, value| {
                raw.$($seg).+ = $crate::knobs::from_json(stringify!($key), value)?;
                Ok(())
            }),
        }]);
        $crate::knobs::core_fields!(@list $all $($rest)*);
    };
}
pub(crate) use core_fields;

/// A struct of settings made of fields of its own and of flattened `Args` structs
/// (groups), each group named once: the macro writes each group's field
/// (`#[command(flatten)]` for clap, `#[serde(flatten)]` for what workers receive) and its
/// `group` line of [`core_fields!`], so a group cannot be flattened into the command
/// without its settings reaching the core, or the reverse. Every group declares its core
/// fields (possibly none: `core_fields! { impl T {} }`), or this does not build.
///
/// ```text
/// settings_struct! {
///     #[derive(Args, Serialize, Deserialize)]
///     pub struct ServeArgs { /* own fields, as in any struct */ }
///     flatten { recovery: RecoveryArgs, budgets: BudgetArgs }
///     core_fields { workers => workers via Workers::count; }
/// }
/// ```
macro_rules! settings_struct {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident { $($own:tt)* }
        flatten { $($group:ident : $gty:ty),* $(,)? }
        core_fields { $($fields:tt)* }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($own)*
            $(
                #[command(flatten)]
                #[serde(flatten)]
                pub $group: $gty,
            )*
        }

        $crate::knobs::core_fields! {
            impl $name {
                $($fields)*
                $(group $group: $gty;)*
            }
        }
    };
}
pub(crate) use settings_struct;

/// An override's value as the field's type.
pub fn from_json<T: serde::de::DeserializeOwned>(key: &str, value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|e| format!("{key}: {e}, got {value}"))
}

/// Every setting the core sees.
pub fn all() -> Vec<CoreField> {
    crate::cli::ServeArgs::core_fields()
}

/// The settings `ctl reload --set` may override: those a reload may change.
pub fn overridable() -> Vec<CoreField> {
    let table = crate::settings::table();
    all()
        .into_iter()
        .filter(|f| f.set.is_some())
        .filter(|f| crate::settings::by_key(&table, f.key).is_some_and(|s| s.reloadable))
        .collect()
}

/// The setting a user means by `name`: its key, its core field name or its flag.
pub fn find(name: &str) -> Option<CoreField> {
    let name = name.trim_start_matches("--").replace('-', "_");
    overridable()
        .into_iter()
        .find(|f| f.key == name || f.is(&name))
}

/// The flag for a field named in a validation error.
pub fn flag_for_field(field: &str) -> Option<String> {
    all().iter().find(|f| f.is(field)).map(CoreField::flag)
}

/// The core field a setting's file key sets (`drain_timeout` → `recovery.drain_timeout`).
pub fn field_for_key(key: &str) -> Option<String> {
    all().iter().find(|f| f.key == key).map(CoreField::field)
}

/// Apply `set` (a JSON object of name → value) to `raw`, reporting every bad entry.
pub fn apply_overrides(raw: &mut RawConfig, set: &Map<String, Value>) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for (name, value) in set {
        match find(name).and_then(|f| f.set) {
            Some(set) => {
                if let Err(e) = set(raw, value) {
                    errors.push(e);
                }
            }
            None => errors.push(format!("{name}: no such setting")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// `KEY=VALUE` pairs from the command line as a JSON object; values are read as JSON
/// (so numbers are numbers) and fall back to strings.
pub fn parse_pairs(pairs: &[String]) -> Result<Map<String, Value>, String> {
    let mut map = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("`{pair}`: expected KEY=VALUE"));
        };
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        map.insert(key.trim().to_owned(), value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_override_names_a_field_validation_knows() {
        // Setting each overridable field to an absurd value must produce an issue for
        // exactly that field, so the declarations and the core cannot drift apart.
        for f in overridable() {
            if f.key == "port" {
                // Every u16 is a port (0: any free one); a busy one is found when bound.
                continue;
            }
            let mut raw = RawConfig::default();
            if matches!(
                f.key,
                "restart_backoff_jitter"
                    | "restart_backoff_keep_one"
                    | "restart_backoff_shared"
                    | "worker_cpu_affinity"
            ) {
                // Every value of a choice or a switch is valid: a value of the wrong type
                // is refused when it is set, naming the field.
                let set = f.set.expect("overridable");
                let err = set(&mut raw, &serde_json::json!(-5)).expect_err(f.key);
                assert!(err.starts_with(f.key), "{err}");
                continue;
            }
            if f.key == "proxy" {
                // A list of routes: a value that is no route is refused naming the field.
                let set = f.set.expect("overridable");
                set(&mut raw, &serde_json::json!(["nonsense"])).expect("a list");
                let err = raw.validate().expect_err(f.key);
                assert!(
                    err.issues().iter().any(|i| f.is(i.field)),
                    "{}: {err}",
                    f.key
                );
                continue;
            }
            let bad = if f.key.ends_with("jitter") { 7.0 } else { -5.0 };
            let set = f.set.expect("overridable");
            if set(&mut raw, &serde_json::json!(bad)).is_err()
                && let Err(err) = set(&mut raw, &serde_json::json!(-5))
            {
                // Neither a number nor an integer fits (a choice, a switch, a path, an
                // unsigned count): the value is refused when it is set, naming the field.
                assert!(err.starts_with(f.key), "{err}");
                continue;
            }
            let err = raw.validate().expect_err(f.key);
            assert!(
                err.issues().iter().any(|i| f.is(i.field)),
                "{}: {err}",
                f.key
            );
        }
    }

    #[test]
    fn every_setting_the_core_sees_is_a_setting_once() {
        let table = crate::settings::table();
        let all = all();
        for f in &all {
            assert!(
                crate::settings::by_key(&table, f.key).is_some(),
                "{}: declared for {} but no such setting",
                f.key,
                f.field()
            );
            assert_eq!(
                all.iter().filter(|g| g.key == f.key).count(),
                1,
                "{} is declared twice",
                f.key
            );
        }
    }

    #[test]
    fn every_field_of_the_core_is_set_by_exactly_one_setting() {
        // Every field the raw configuration has, by path (serde names each one).
        fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(map) => {
                    for (k, v) in map {
                        let path = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}.{k}")
                        };
                        leaves(&path, v, out);
                    }
                }
                _ => out.push(prefix.to_owned()),
            }
        }
        let mut paths = Vec::new();
        let raw = serde_json::to_value(RawConfig::default()).expect("serializes");
        leaves("", &raw, &mut paths);
        let all = all();
        let mut unset = Vec::new();
        for path in &paths {
            let by: Vec<_> = all.iter().filter(|f| f.is(path)).map(|f| f.key).collect();
            match by.len() {
                0 => unset.push(path.as_str()),
                1 => {}
                _ => panic!("{path} is set by several settings: {by:?}"),
            }
        }
        // A group left out of `ServeArgs` would leave its fields here.
        assert!(unset.is_empty(), "core fields no setting writes: {unset:?}");
    }

    #[test]
    fn overrides_apply_by_any_name_and_report_every_bad_entry() {
        let mut raw = RawConfig::default();
        let set = parse_pairs(&[
            "--drain-timeout=3".into(),
            "recovery.force_timeout=0.5".into(),
            "workers=3".into(),
        ])
        .expect("pairs");
        apply_overrides(&mut raw, &set).expect("valid names");
        assert_eq!(raw.recovery.drain_timeout, 3.0);
        assert_eq!(raw.recovery.force_timeout, 0.5);
        assert_eq!(raw.workers, 3);
        let auto = parse_pairs(&["workers=auto".into()]).expect("pairs");
        apply_overrides(&mut raw, &auto).expect("auto");
        assert_eq!(raw.workers, crate::cli::Workers::Auto.count());

        let set = parse_pairs(&[
            "nope=1".into(),
            "workers=1.5".into(),
            "drain_timeout=x".into(),
            "tftp_max_transfers=3".into(),
        ])
        .expect("pairs");
        let errors = apply_overrides(&mut raw, &set).expect_err("bad");
        assert_eq!(errors.len(), 4, "{errors:?}");
    }
}
