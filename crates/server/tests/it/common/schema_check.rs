//! A JSON Schema checker for the subset the structured-output tests use: `type`, `properties`,
//! `required`, `additionalProperties: false`, `items`, `minItems`/`maxItems`, `enum`,
//! `const`, number bounds, string lengths and `pattern`, `anyOf`, and `$ref` into `$defs`.
//! Any other keyword is an error, so a schema cannot pass by being half read.
#![allow(dead_code)]

use serde_json::Value;

/// `Ok` when `value` satisfies `schema`; otherwise where and why it does not.
pub fn check(schema: &Value, value: &Value) -> Result<(), String> {
    Checker { root: schema }.check(schema, value, "$")
}

struct Checker<'a> {
    root: &'a Value,
}

impl Checker<'_> {
    fn check(&self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        let fail = |why: String| Err(format!("{at}: {why} (value {value})"));
        let Some(schema) = schema.as_object() else {
            return match schema {
                Value::Bool(true) => Ok(()),
                _ => fail(format!("unsupported schema {schema}")),
            };
        };
        for (keyword, rule) in schema {
            match keyword.as_str() {
                "$ref" => {
                    let target = rule
                        .as_str()
                        .and_then(|r| r.strip_prefix("#"))
                        .and_then(|pointer| self.root.pointer(pointer))
                        .ok_or_else(|| format!("{at}: unresolved $ref {rule}"))?;
                    self.check(target, value, at)?;
                }
                "type" => {
                    let types: Vec<&str> = match rule {
                        Value::String(t) => vec![t.as_str()],
                        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                        _ => return fail(format!("bad type {rule}")),
                    };
                    if !types.iter().any(|t| has_type(value, t)) {
                        return fail(format!("not of type {rule}"));
                    }
                }
                "properties" => {
                    if let (Some(props), Some(object)) = (rule.as_object(), value.as_object()) {
                        for (name, sub) in props {
                            if let Some(v) = object.get(name) {
                                self.check(sub, v, &format!("{at}.{name}"))?;
                            }
                        }
                    }
                }
                "required" => {
                    if let Some(object) = value.as_object() {
                        for name in rule.as_array().into_iter().flatten() {
                            let name = name.as_str().unwrap_or_default();
                            if !object.contains_key(name) {
                                return fail(format!("misses required `{name}`"));
                            }
                        }
                    }
                }
                "additionalProperties" => {
                    if let Some(object) = value.as_object() {
                        let known = schema.get("properties").and_then(Value::as_object);
                        for (name, v) in object {
                            if known.is_some_and(|k| k.contains_key(name)) {
                                continue;
                            }
                            match rule {
                                Value::Bool(false) => {
                                    return fail(format!("has unexpected property `{name}`"))
                                }
                                _ => self.check(rule, v, &format!("{at}.{name}"))?,
                            }
                        }
                    }
                }
                "items" => {
                    for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                        self.check(rule, item, &format!("{at}[{i}]"))?;
                    }
                }
                "minItems" | "maxItems" => {
                    if let Some(items) = value.as_array() {
                        let bound = rule.as_u64().unwrap_or(0) as usize;
                        let ok = if keyword == "minItems" {
                            items.len() >= bound
                        } else {
                            items.len() <= bound
                        };
                        if !ok {
                            return fail(format!("{} items break {keyword} {bound}", items.len()));
                        }
                    }
                }
                "minLength" | "maxLength" => {
                    if let Some(text) = value.as_str() {
                        let bound = rule.as_u64().unwrap_or(0) as usize;
                        let len = text.chars().count();
                        let ok = if keyword == "minLength" {
                            len >= bound
                        } else {
                            len <= bound
                        };
                        if !ok {
                            return fail(format!("length {len} breaks {keyword} {bound}"));
                        }
                    }
                }
                "pattern" => {
                    if let Some(text) = value.as_str() {
                        let re = regex::Regex::new(rule.as_str().unwrap_or_default())
                            .map_err(|e| format!("{at}: bad pattern: {e}"))?;
                        if !re.is_match(text) {
                            return fail(format!("does not match {rule}"));
                        }
                    }
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                    if let (Some(x), Some(bound)) = (value.as_f64(), rule.as_f64()) {
                        let ok = match keyword.as_str() {
                            "minimum" => x >= bound,
                            "maximum" => x <= bound,
                            "exclusiveMinimum" => x > bound,
                            _ => x < bound,
                        };
                        if !ok {
                            return fail(format!("breaks {keyword} {bound}"));
                        }
                    }
                }
                "enum" => {
                    if !rule
                        .as_array()
                        .is_some_and(|options| options.contains(value))
                    {
                        return fail(format!("not in enum {rule}"));
                    }
                }
                "const" => {
                    if rule != value {
                        return fail(format!("not the const {rule}"));
                    }
                }
                "anyOf" => {
                    let options = rule.as_array().cloned().unwrap_or_default();
                    if !options.iter().any(|s| self.check(s, value, at).is_ok()) {
                        return fail("matches no anyOf branch".into());
                    }
                }
                // Annotations and where `$ref`s point: nothing to check in place.
                "$defs" | "title" | "description" => {}
                other => return fail(format!("the checker does not know `{other}`")),
            }
        }
        Ok(())
    }
}

fn has_type(value: &Value, t: &str) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}
