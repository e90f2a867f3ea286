//! A JSON Schema validator for the subset `schemars` writes (types, properties, required,
//! items, `$ref` into `$defs`, anyOf/oneOf/allOf, enum, const, pattern, minimum,
//! additionalProperties): enough to hold every `--json` output against `cdac schema`.

use serde_json::Value;

/// Every place where `value` breaks `schema`, as `path: problem` lines (empty: valid).
pub fn violations(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, schema, value, "$", &mut out);
    out
}

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        _ => false,
    }
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let path = reference.strip_prefix("#/")?;
    let mut cur = root;
    for part in path.split('/') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

fn check(root: &Value, schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        // `true` accepts anything; `false` nothing.
        if schema == &Value::Bool(false) {
            out.push(format!("{path}: no value is allowed here"));
        }
        return;
    };
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        match resolve(root, r) {
            Some(target) => check(root, target, v, path, out),
            None => out.push(format!("{path}: unresolvable $ref {r}")),
        }
    }
    match s.get("type") {
        Some(Value::String(t)) if !type_matches(t, v) => {
            out.push(format!("{path}: {v} is not {t}"));
            return;
        }
        Some(Value::Array(ts))
            if !ts
                .iter()
                .any(|t| t.as_str().is_some_and(|t| type_matches(t, v))) =>
        {
            out.push(format!("{path}: {v} is none of {ts:?}"));
            return;
        }
        _ => {}
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        if !values.contains(v) {
            out.push(format!("{path}: {v} is not one of {values:?}"));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            out.push(format!("{path}: {v} is not {c}"));
        }
    }
    if let (Some(p), Some(text)) = (s.get("pattern").and_then(Value::as_str), v.as_str()) {
        match regex::Regex::new(p) {
            Ok(re) if !re.is_match(text) => {
                out.push(format!("{path}: {text:?} does not match {p}"))
            }
            Ok(_) => {}
            Err(e) => out.push(format!("{path}: bad pattern {p}: {e}")),
        }
    }
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if n < min {
            out.push(format!("{path}: {n} < minimum {min}"));
        }
    }
    for key in ["allOf"] {
        for sub in s.get(key).and_then(Value::as_array).into_iter().flatten() {
            check(root, sub, v, path, out);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(subs) = s.get(key).and_then(Value::as_array) {
            let passing = subs
                .iter()
                .filter(|sub| {
                    let mut inner = Vec::new();
                    check(root, sub, v, path, &mut inner);
                    inner.is_empty()
                })
                .count();
            let ok = if key == "oneOf" {
                passing == 1
            } else {
                passing >= 1
            };
            if !ok {
                out.push(format!(
                    "{path}: {passing} of the {key} alternatives match {v}"
                ));
            }
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for req in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = req.as_str() {
                if !obj.contains_key(name) {
                    out.push(format!("{path}: missing required {name}"));
                }
            }
        }
        for (k, val) in obj {
            let sub_path = format!("{path}.{k}");
            match props.and_then(|p| p.get(k)) {
                Some(sub) => check(root, sub, val, &sub_path, out),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => out.push(format!("{sub_path}: not in the schema")),
                    Some(extra @ Value::Object(_)) => check(root, extra, val, &sub_path, out),
                    // schemars leaves it open unless told otherwise; an undocumented key is
                    // still a difference worth failing on when the schema lists properties.
                    _ if props.is_some() => out.push(format!("{sub_path}: not in the schema")),
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            check(root, items, item, &format!("{path}[{i}]"), out);
        }
    }
}

/// The schema `cdac schema COMMAND` prints.
pub fn schema_of(command: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cdac"))
        .args(["schema", command])
        .output()
        .expect("run cdac schema");
    assert!(out.status.success(), "cdac schema {command}");
    serde_json::from_slice(&out.stdout).expect("schema JSON")
}

/// Panics with every violation when `value` (the output of `cdac COMMAND --json`) breaks
/// the command's schema.
pub fn assert_matches_schema(command: &str, value: &Value) {
    let problems = violations(&schema_of(command), value);
    assert!(
        problems.is_empty(),
        "cdac {command} --json breaks its schema:\n{}",
        problems
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
