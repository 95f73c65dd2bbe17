//! Driver options: a driver's own scenario section (`[amqp]`, `[kafka]`, ...), which the engine
//! carries but never interprets. The driver crate owns the section's type, its resolution into
//! a plan and its command-line flags; it names them to the engine through [`DriverSection`].
//!
//! The flow, file to driver:
//! - parsing: [`Scenario::parse`](super::Scenario::parse) keeps every top-level table that is
//!   not an engine key as written ([`DriverSections`]), after the owning driver has checked it
//!   against the text ([`SectionSpec::check`]), so its errors carry file, line and column;
//! - overlay: command-line flags arrive as a section too (`DriverSections::put`), merged key by
//!   key over the file's;
//! - resolution: every known section is resolved into its driver's plan and kept in
//!   [`RunPlan::drivers`](super::RunPlan) ([`DriverPlans`]), so the results file records each
//!   driver's settings, defaults included, under its section's name;
//! - building: the driver reads its plan back ([`DriverPlans::get`]) once, at construction.

use super::plan::{PlanError, RunPlan};
use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// A driver's scenario section as its crate declares it: the TOML table as written (every field
/// optional, unknown keys refused) and how it resolves. A plan that carries request headers
/// keeps them in a `headers` list of `[name, value]` pairs, so redaction finds them
/// ([`DriverPlans::headers_mut`]).
pub trait DriverSection: Serialize + DeserializeOwned + Default {
    /// The table's name in a scenario file (`"amqp"` for `[amqp]`).
    const NAME: &'static str;
    /// What the section resolves to: defaults applied, values checked.
    type Plan: Serialize + DeserializeOwned;
    /// Applies defaults and checks the values; errors name the dotted key (`amqp.prefetch`).
    fn resolve(&self) -> Result<Self::Plan, PlanError>;
    /// Adjusts the engine's plan to what the driver's options mean (AMQP 1.0: consumers on one
    /// queue compete whatever the subscription mode says). Default: nothing.
    fn refine(_plan: &Self::Plan, _run: &mut RunPlan) {}
}

/// What the engine needs to know of a driver's section: its name and two functions, made for
/// a section type by [`SectionSpec::of`].
#[derive(Debug, Clone, Copy)]
pub struct SectionSpec {
    /// The table's name.
    pub name: &'static str,
    /// Parses the section out of a whole scenario text, so that errors point into the file.
    pub check: fn(&str) -> Result<(), toml::de::Error>,
    /// Resolves the section (as written, possibly absent) into `run.drivers` and refines `run`.
    pub resolve: fn(&DriverSections, &mut RunPlan) -> Result<(), PlanError>,
}

impl SectionSpec {
    /// The spec of section type `S`.
    pub const fn of<S: DriverSection>() -> SectionSpec {
        SectionSpec {
            name: S::NAME,
            check: check_section::<S>,
            resolve: resolve_section::<S>,
        }
    }
}

fn check_section<S: DriverSection>(text: &str) -> Result<(), toml::de::Error> {
    toml::Deserializer::parse(text)?
        .deserialize_map(OneKey::<S>(S::NAME, std::marker::PhantomData))
        .map(drop)
}

fn resolve_section<S: DriverSection>(
    sections: &DriverSections,
    run: &mut RunPlan,
) -> Result<(), PlanError> {
    let plan = sections.get::<S>()?.resolve()?;
    S::refine(&plan, run);
    run.drivers.put::<S>(&plan);
    Ok(())
}

/// Visits a whole scenario, deserializing the value of one top-level key and skipping the rest:
/// the TOML deserializer then reports the section's errors at their place in the text.
struct OneKey<S>(&'static str, std::marker::PhantomData<S>);

impl<'de, S: DeserializeOwned> Visitor<'de> for OneKey<S> {
    type Value = Option<S>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a scenario table")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<S>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 {
                found = Some(map.next_value::<S>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The driver sections of a scenario as written, by name. Holds tables, not types: the engine
/// does not know the drivers; each reads its own with [`DriverSections::get`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriverSections(BTreeMap<String, toml::Table>);

impl DriverSections {
    /// Section `S` as written (its defaults when the scenario has none). Sections were checked
    /// when the file was parsed; an error here comes from flags or code that set a bad value.
    pub fn get<S: DriverSection>(&self) -> Result<S, PlanError> {
        match self.0.get(S::NAME) {
            None => Ok(S::default()),
            Some(t) => S::deserialize(toml::Value::Table(t.clone())).map_err(|e| PlanError {
                setting: S::NAME,
                message: e.message().trim().to_string(),
            }),
        }
    }

    /// Lays section `S` over what is there, key by key: the keys `s` sets win (command-line
    /// flags over a file; `None` fields are no keys).
    pub fn put<S: DriverSection>(&mut self, s: &S) {
        if let Ok(toml::Value::Table(table)) = toml::Value::try_from(s) {
            self.merge(S::NAME, table);
        }
    }

    /// Sets one key of a section (presets that fix a driver's option).
    pub fn set(&mut self, section: &str, key: &str, value: impl Into<toml::Value>) {
        self.0
            .entry(section.to_string())
            .or_default()
            .insert(key.to_string(), value.into());
    }

    /// The value of one key, as written.
    pub fn value(&self, section: &str, key: &str) -> Option<&toml::Value> {
        self.0.get(section)?.get(key)
    }

    /// Keeps a section parsed from a file.
    pub(super) fn insert(&mut self, name: String, table: toml::Table) {
        self.0.insert(name, table);
    }

    /// `over` on top of `self`, key by key within each section.
    pub fn overlay(&mut self, over: DriverSections) {
        for (name, table) in over.0 {
            self.merge(&name, table);
        }
    }

    fn merge(&mut self, name: &str, table: toml::Table) {
        if table.is_empty() {
            return;
        }
        let base = self.0.entry(name.to_string()).or_default();
        for (k, v) in table {
            base.insert(k, v);
        }
    }
}

/// Every driver's resolved options, by section name, as the results file records them (each a
/// JSON value: the engine never looks inside). Absent sections read as their defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DriverPlans(BTreeMap<String, serde_json::Value>);

impl DriverPlans {
    /// The resolved plan of section `S`: what the run resolved, or the section's defaults when
    /// the plan was made without drivers (engine tests, older results files).
    pub fn get<S: DriverSection>(&self) -> Result<S::Plan, PlanError> {
        match self.0.get(S::NAME) {
            None => S::default().resolve(),
            Some(v) => S::Plan::deserialize(v).map_err(|e| PlanError {
                setting: S::NAME,
                message: e.to_string(),
            }),
        }
    }

    /// Records the resolved plan of section `S`.
    pub fn put<S: DriverSection>(&mut self, plan: &S::Plan) {
        if let Ok(v) = serde_json::to_value(plan) {
            self.0.insert(S::NAME.to_string(), v);
        }
    }

    /// Every request header a driver's plan carries, by convention a `headers` list of
    /// `[name, value]` pairs (the HTTP driver's): what redaction hides, in whatever driver.
    pub fn headers_mut(&mut self) -> impl Iterator<Item = (&str, &mut String)> {
        self.0
            .values_mut()
            .filter_map(|plan| plan.get_mut("headers")?.as_array_mut())
            .flatten()
            .filter_map(|pair| match pair.as_array_mut()?.as_mut_slice() {
                [
                    serde_json::Value::String(name),
                    serde_json::Value::String(value),
                ] => Some((name.as_str(), value)),
                _ => None,
            })
    }

    /// Every URL a driver's plan carries besides the target, by convention a `proxy` string
    /// (the HTTP driver's forward proxy, which may hold credentials): what redaction hides.
    pub fn urls_mut(&mut self) -> impl Iterator<Item = &mut String> {
        self.0
            .values_mut()
            .filter_map(|plan| match plan.get_mut("proxy")? {
                serde_json::Value::String(url) => Some(url),
                _ => None,
            })
    }

    /// Whether no driver's plan is recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Top-level keys the engine reads itself (every other top-level table is a driver's): the
/// field names of [`Scenario`](super::Scenario), taken from its `Deserialize` so that a field
/// added there cannot be missing here.
pub(super) fn engine_keys() -> &'static [&'static str] {
    use serde::de::value::Error;
    struct Fields(Option<&'static [&'static str]>);
    impl<'de> Deserializer<'de> for &mut Fields {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Err(serde::de::Error::custom("fields only"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Error> {
            self.0 = Some(fields);
            Err(serde::de::Error::custom("fields only"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    static KEYS: std::sync::OnceLock<&'static [&'static str]> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let mut f = Fields(None);
        let _ = super::Scenario::deserialize(&mut f);
        f.0.unwrap_or(&[])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Demo {
        depth: Option<u32>,
        name: Option<String>,
    }

    impl DriverSection for Demo {
        const NAME: &'static str = "demo";
        type Plan = u32;
        fn resolve(&self) -> Result<u32, PlanError> {
            match self.depth.unwrap_or(7) {
                0 => Err(PlanError {
                    setting: "demo.depth",
                    message: "at least 1".into(),
                }),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn a_section_is_checked_in_place_and_overlaid_key_by_key() {
        let err = check_section::<Demo>("x = 1\n[demo]\ndepth = 2\nnope = 3\n").unwrap_err();
        assert!(err.message().contains("unknown field `nope`"), "{err}");
        assert_eq!(err.span().map(|s| s.start), Some(23)); // `nope`, line 4
        check_section::<Demo>("[other]\nnope = 1\n").unwrap();

        let mut s = DriverSections::default();
        s.set("demo", "depth", 2);
        s.set("demo", "name", "file");
        s.put(&Demo {
            depth: Some(5),
            name: None,
        });
        assert_eq!(
            s.get::<Demo>().unwrap(),
            Demo {
                depth: Some(5),
                name: Some("file".into())
            }
        );
    }

    #[test]
    fn plans_default_when_absent_and_round_trip() {
        let mut p = DriverPlans::default();
        assert_eq!(p.get::<Demo>().unwrap(), 7);
        p.put::<Demo>(&9);
        assert_eq!(p.get::<Demo>().unwrap(), 9);
        let mut sections = DriverSections::default();
        sections.set("demo", "depth", 0);
        assert_eq!(
            sections
                .get::<Demo>()
                .unwrap()
                .resolve()
                .unwrap_err()
                .setting,
            "demo.depth"
        );
    }

    #[test]
    fn engine_keys_are_the_scenario_fields() {
        let keys = engine_keys();
        for k in [
            "name",
            "target",
            "producers",
            "phases",
            "stages",
            "thresholds",
        ] {
            assert!(keys.contains(&k), "{k} in {keys:?}");
        }
        assert!(!keys.contains(&"amqp"));
    }
}
