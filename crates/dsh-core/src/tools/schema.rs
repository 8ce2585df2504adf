//! The parameter schema DSL, its JSON Schema projection, and validation with exact violation
//! texts (pinned by tests).

use serde_json::{Map, Value, json};

/// What a schema node accepts.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A JSON string.
    String,
    /// Any JSON number.
    Number,
    /// A number with no fractional part.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// Only `null`.
    Null,
    /// An array whose items all match this schema.
    Array(Box<Schema>),
    /// An explicit object: declared properties, required names, and whether other keys pass.
    Object {
        /// Declared properties, in declaration order.
        properties: Vec<(String, Schema)>,
        /// Names of the properties that must be present.
        required: Vec<String>,
        /// Whether undeclared keys pass.
        additional: bool,
    },
    /// Exactly one branch must match.
    OneOf(Vec<Schema>),
    /// Anything.
    Any,
}

/// One schema node with its annotations.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    /// What the node accepts.
    pub kind: Kind,
    /// Also accepts `null`.
    pub nullable: bool,
    /// The `description` annotation.
    pub description: Option<String>,
    /// The `title` annotation.
    pub title: Option<String>,
    /// The only values accepted (`enum`), when set.
    pub enum_values: Option<Vec<Value>>,
    /// The one value accepted (`const`), when set.
    pub const_value: Option<Value>,
}

impl Schema {
    fn of(kind: Kind) -> Self {
        Self { kind, nullable: false, description: None, title: None, enum_values: None, const_value: None }
    }
    /// A string schema.
    pub fn string() -> Self {
        Self::of(Kind::String)
    }
    /// A number schema.
    pub fn number() -> Self {
        Self::of(Kind::Number)
    }
    /// An integer schema.
    pub fn integer() -> Self {
        Self::of(Kind::Integer)
    }
    /// A boolean schema.
    pub fn boolean() -> Self {
        Self::of(Kind::Boolean)
    }
    /// A schema accepting only `null`.
    pub fn null() -> Self {
        Self::of(Kind::Null)
    }
    /// A schema accepting anything.
    pub fn any() -> Self {
        Self::of(Kind::Any)
    }
    /// An array of `items`.
    pub fn array(items: Schema) -> Self {
        Self::of(Kind::Array(Box::new(items)))
    }
    /// An object; `properties` are `(name, schema, required)` in declaration order.
    pub fn object(properties: Vec<(&str, Schema, bool)>, additional: bool) -> Self {
        let required = properties.iter().filter(|p| p.2).map(|p| p.0.to_owned()).collect();
        let properties = properties.into_iter().map(|(n, s, _)| (n.to_owned(), s)).collect();
        Self::of(Kind::Object { properties, required, additional })
    }
    /// Exactly one of `branches` must match.
    pub fn one_of(branches: Vec<Schema>) -> Self {
        Self::of(Kind::OneOf(branches))
    }
    /// Sets the `description` annotation.
    pub fn describe(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }
    /// Sets the `title` annotation.
    pub fn title(mut self, text: impl Into<String>) -> Self {
        self.title = Some(text.into());
        self
    }
    /// Restricts the node to these values (`enum`).
    pub fn enumerated(mut self, values: Vec<Value>) -> Self {
        self.enum_values = Some(values);
        self
    }
    /// Restricts the node to this one value (`const`).
    pub fn constant(mut self, value: Value) -> Self {
        self.const_value = Some(value);
        self
    }
    /// Also accepts `null`.
    pub fn or_null(mut self) -> Self {
        self.nullable = true;
        self
    }

    /// The JSON Schema projection.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        let type_name = match &self.kind {
            Kind::String => Some("string"),
            Kind::Number => Some("number"),
            Kind::Integer => Some("integer"),
            Kind::Boolean => Some("boolean"),
            Kind::Null => Some("null"),
            Kind::Array(_) => Some("array"),
            Kind::Object { .. } => Some("object"),
            Kind::OneOf(_) | Kind::Any => None,
        };
        if let Some(t) = type_name {
            if self.nullable {
                out.insert("type".into(), json!([t, "null"]));
            } else {
                out.insert("type".into(), json!(t));
            }
        }
        if let Some(title) = &self.title {
            out.insert("title".into(), json!(title));
        }
        if let Some(d) = &self.description {
            out.insert("description".into(), json!(d));
        }
        match &self.kind {
            Kind::Array(items) => {
                out.insert("items".into(), items.to_json());
            }
            Kind::Object { properties, required, additional } => {
                out.insert("properties".into(), properties_json(properties));
                if !required.is_empty() {
                    out.insert("required".into(), json!(required));
                }
                out.insert("additionalProperties".into(), json!(additional));
            }
            Kind::OneOf(branches) => {
                out.insert("oneOf".into(), Value::Array(branches.iter().map(Schema::to_json).collect()));
            }
            _ => {}
        }
        if let Some(values) = &self.enum_values {
            out.insert("enum".into(), Value::Array(values.clone()));
        }
        if let Some(c) = &self.const_value {
            out.insert("const".into(), c.clone());
        }
        Value::Object(out)
    }
}

fn properties_json(properties: &[(String, Schema)]) -> Value {
    let mut map = Map::new();
    for (name, schema) in properties {
        map.insert(name.clone(), schema.to_json());
    }
    Value::Object(map)
}

/// A tool's parameters: an **open** root object (no `additionalProperties` key; unknown keys
/// pass validation and are ignored by tools).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolParams {
    properties: Vec<(String, Schema)>,
    required: Vec<String>,
}

impl ToolParams {
    /// Parameters with no properties.
    pub fn new() -> Self {
        Self::default()
    }
    /// Declares a required property.
    pub fn required(mut self, name: &str, schema: Schema) -> Self {
        self.properties.push((name.to_owned(), schema));
        self.required.push(name.to_owned());
        self
    }
    /// Declares an optional property.
    pub fn optional(mut self, name: &str, schema: Schema) -> Self {
        self.properties.push((name.to_owned(), schema));
        self
    }
    /// Property names in declaration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.properties.iter().map(|(n, _)| n.as_str())
    }

    /// `{type:'object', properties, required?}`; `required` omitted when empty.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), json!("object"));
        out.insert("properties".into(), properties_json(&self.properties));
        if !self.required.is_empty() {
            out.insert("required".into(), json!(self.required));
        }
        Value::Object(out)
    }

    /// Violations in walk order; empty when the arguments are valid.
    pub fn validate(&self, args: &Value) -> Vec<String> {
        let mut out = Vec::new();
        self.walk(args, &mut Report::texts(&mut out));
        out
    }

    /// True when `args` passes validation (presenters soft-validate with this).
    pub fn accepts(&self, args: &Value) -> bool {
        let mut probe = Report::probe();
        self.walk(args, &mut probe);
        !probe.failed
    }

    fn walk(&self, args: &Value, report: &mut Report<'_>) {
        match args.as_object() {
            Some(map) => validate_members(&self.properties, &self.required, true, map, &At::Root(""), report),
            None => report.fail(|| "\"arguments\" must be an object".to_owned()),
        }
    }
}

/// Where a value sits in what is validated. Formatted only when a violation names it, so a
/// valid value costs no string.
#[derive(Clone, Copy)]
enum At<'a> {
    /// The path the caller gave (`""` for a tool's arguments).
    Root(&'a str),
    /// A member of an object: `parent.name`, or `name` under an empty path.
    Member(&'a At<'a>, &'a str),
    /// An item of an array: `parent[i]`.
    Item(&'a At<'a>, usize),
}

impl At<'_> {
    fn is_empty(&self) -> bool {
        match self {
            At::Root(path) => path.is_empty(),
            At::Member(parent, name) => parent.is_empty() && name.is_empty(),
            At::Item(..) => false,
        }
    }
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Root(path) => f.write_str(path),
            At::Member(parent, name) if parent.is_empty() => f.write_str(name),
            At::Member(parent, name) => write!(f, "{parent}.{name}"),
            At::Item(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// Where violations go: their texts, or (for a `oneOf` branch) only whether there was one.
struct Report<'o> {
    texts: Option<&'o mut Vec<String>>,
    failed: bool,
}

impl<'o> Report<'o> {
    /// Collects every violation's text into `out`.
    fn texts(out: &'o mut Vec<String>) -> Self {
        Self { texts: Some(out), failed: false }
    }

    /// Only finds whether there is a violation, stopping at the first.
    fn probe() -> Self {
        Self { texts: None, failed: false }
    }

    fn fail(&mut self, text: impl FnOnce() -> String) {
        self.failed = true;
        if let Some(texts) = self.texts.as_deref_mut() {
            texts.push(text());
        }
    }

    /// A probe stops at its first violation; a report with texts goes on to name them all.
    fn done(&self) -> bool {
        self.failed && self.texts.is_none()
    }
}

fn validate_members(
    properties: &[(String, Schema)],
    required: &[String],
    additional: bool,
    map: &Map<String, Value>,
    at: &At<'_>,
    report: &mut Report<'_>,
) {
    for name in required {
        if !map.contains_key(name) {
            report.fail(|| format!("missing required property \"{}\"", At::Member(at, name)));
        }
    }
    for (name, schema) in properties {
        if report.done() {
            return;
        }
        if let Some(value) = map.get(name) {
            walk(schema, value, &At::Member(at, name), report);
        }
    }
    if !additional {
        for key in map.keys() {
            if !properties.iter().any(|(n, _)| n == key) {
                report.fail(|| {
                    format!(
                        "\"{}\" is not a declared property (additionalProperties: false)",
                        At::Member(at, key)
                    )
                });
            }
        }
    }
}

/// Validates `value` against `schema` at `path`, appending violations to `out`.
pub fn validate_value(schema: &Schema, value: &Value, path: &str, out: &mut Vec<String>) {
    walk(schema, value, &At::Root(path), &mut Report::texts(out));
}

fn walk(schema: &Schema, value: &Value, at: &At<'_>, report: &mut Report<'_>) {
    if schema.nullable && value.is_null() {
        return;
    }
    let type_ok = match &schema.kind {
        Kind::String => check(value.is_string(), at, "a string", report),
        Kind::Number => check(value.is_number(), at, "a number", report),
        Kind::Integer => check(
            value.as_f64().is_some_and(|f| f.fract() == 0.0) || value.is_i64() || value.is_u64(),
            at,
            "an integer",
            report,
        ),
        Kind::Boolean => check(value.is_boolean(), at, "a boolean", report),
        Kind::Null => check(value.is_null(), at, "null", report),
        Kind::Array(items) => match value.as_array() {
            Some(values) => {
                for (i, item) in values.iter().enumerate() {
                    if report.done() {
                        break;
                    }
                    walk(items, item, &At::Item(at, i), report);
                }
                true
            }
            None => check(false, at, "an array", report),
        },
        Kind::Object { properties, required, additional } => match value.as_object() {
            Some(map) => {
                validate_members(properties, required, *additional, map, at, report);
                true
            }
            None => check(false, at, "an object", report),
        },
        Kind::OneOf(branches) => {
            let matched = branches
                .iter()
                .filter(|b| {
                    let mut probe = Report::probe();
                    walk(b, value, at, &mut probe);
                    !probe.failed
                })
                .count();
            if matched != 1 {
                report.fail(|| format!("\"{at}\" must match exactly one oneOf branch (matched {matched})"));
            }
            matched == 1
        }
        Kind::Any => true,
    };
    if !type_ok {
        return;
    }
    if let Some(values) = &schema.enum_values
        && !values.contains(value)
    {
        report.fail(|| format!("\"{at}\" must be one of {}", Value::Array(values.clone())));
    }
    if let Some(c) = &schema.const_value
        && c != value
    {
        report.fail(|| format!("\"{at}\" must be {c}"));
    }
}

fn check(ok: bool, at: &At<'_>, what: &str, report: &mut Report<'_>) -> bool {
    if !ok {
        report.fail(|| format!("\"{at}\" must be {what}"));
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ToolParams {
        ToolParams::new()
            .required("command", Schema::string().describe("c"))
            .required("description", Schema::string())
            .optional("timeoutMs", Schema::number())
            .optional("mode", Schema::string().enumerated(vec![json!("a"), json!("b")]))
    }

    #[test]
    fn projection_is_open_and_ordered() {
        assert_eq!(
            params().to_json().to_string(),
            r#"{"type":"object","properties":{"command":{"type":"string","description":"c"},"description":{"type":"string"},"timeoutMs":{"type":"number"},"mode":{"type":"string","enum":["a","b"]}},"required":["command","description"]}"#
        );
        assert_eq!(ToolParams::new().to_json().to_string(), r#"{"type":"object","properties":{}}"#);
    }

    #[test]
    fn violations_in_walk_order() {
        let p = params();
        assert_eq!(
            p.validate(&json!({})),
            vec!["missing required property \"command\"", "missing required property \"description\""]
        );
        assert_eq!(
            p.validate(&json!({"command": null, "description": "d"})),
            vec!["\"command\" must be a string"]
        );
        assert_eq!(
            p.validate(
                &json!({"command": "x", "description": "d", "timeoutMs": "soon", "mode": "c", "extra": 1})
            ),
            vec!["\"timeoutMs\" must be a number", "\"mode\" must be one of [\"a\",\"b\"]"]
        );
        assert_eq!(p.validate(&json!([1])), vec!["\"arguments\" must be an object"]);
    }

    #[test]
    fn nested_paths_closed_objects_one_of_and_const() {
        let s = Schema::object(
            vec![
                ("a", Schema::array(Schema::integer()), true),
                ("k", Schema::string().constant(json!("x")), false),
                ("u", Schema::one_of(vec![Schema::string(), Schema::number()]), false),
            ],
            false,
        );
        let mut out = Vec::new();
        validate_value(&s, &json!({"a": [1, 1.5], "k": "y", "u": true, "z": 0}), "o", &mut out);
        assert_eq!(
            out,
            vec![
                "\"o.a[1]\" must be an integer",
                "\"o.k\" must be \"x\"",
                "\"o.u\" must match exactly one oneOf branch (matched 0)",
                "\"o.z\" is not a declared property (additionalProperties: false)",
            ]
        );
    }

    #[test]
    fn paths_under_an_empty_root_and_branches_that_both_match() {
        let item = Schema::object(vec![("x", Schema::string(), true)], false);
        let s = Schema::array(Schema::one_of(vec![item, Schema::number().or_null()]));
        let mut out = Vec::new();
        validate_value(&s, &json!([{"x": 1}, {"y": "z"}, null, 2]), "", &mut out);
        assert_eq!(
            out,
            vec![
                "\"[0]\" must match exactly one oneOf branch (matched 0)",
                "\"[1]\" must match exactly one oneOf branch (matched 0)",
            ]
        );
        let both = Schema::one_of(vec![Schema::number(), Schema::integer()]);
        let mut out = Vec::new();
        validate_value(&both, &json!(3), "n", &mut out);
        assert_eq!(out, vec!["\"n\" must match exactly one oneOf branch (matched 2)"]);
        let nested = Schema::object(vec![("a", Schema::array(item_of_x()), true)], true);
        let mut out = Vec::new();
        validate_value(&nested, &json!({"a": [{"x": 1}, {}]}), "", &mut out);
        assert_eq!(out, vec!["\"a[0].x\" must be a string", "missing required property \"a[1].x\""]);
    }

    fn item_of_x() -> Schema {
        Schema::object(vec![("x", Schema::string(), true)], true)
    }
}
