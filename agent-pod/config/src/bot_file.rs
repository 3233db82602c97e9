//! The bot file a person edits on one machine. It is the rendered config with every
//! value that equals its default left out — each omission proven by reading the
//! shorter document back to the very same [`BotConfig`] — printed with short arrays
//! and objects on one line, members sorted by key (`$schema` first), and pointing at
//! the JSON Schema editors validate and complete it with. The operator's ConfigMap keeps the whole rendering.

use serde_json::{Map, Value};

use crate::BotConfig;

/// The schema's file name beside the bot file, and what its `$schema` names.
pub const SCHEMA_FILE_NAME: &str = "bot-config.schema.json";

/// Lines longer than this are broken up.
const WIDTH: usize = 120;

/// The JSON Schema of a bot file (pretty, trailing newline): what
/// `agent-pod/config/bot-config.schema.json` holds.
pub fn schema_text() -> String {
    let mut text =
        serde_json::to_string_pretty(&BotConfig::json_schema()).expect("schema serialises");
    text.push('\n');
    text
}

/// The bot file for `config`: defaults left out, short values on one line, trailing
/// newline. Reading it back gives `config` exactly.
pub fn render(config: &BotConfig) -> String {
    let mut value = serde_json::to_value(config).expect("config serialises");
    let mut path = Vec::new();
    leave_out_defaults(&mut value, &mut path, config);
    let mut text = String::new();
    write_value(&mut text, &value, 0, 0);
    text.push('\n');
    text
}

/// A step into a JSON document: an object key or an array index.
#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn node_mut<'a>(root: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(root, |node, step| match step {
        Step::Key(key) => &mut node[key.as_str()],
        Step::Index(index) => &mut node[*index],
    })
}

fn reads_back_as(root: &Value, config: &BotConfig) -> bool {
    serde_json::from_value::<BotConfig>(root.clone()).is_ok_and(|read| read == *config)
}

/// Removes every object member whose absence reads back to the same config, outer
/// members first (a whole default section goes in one step).
fn leave_out_defaults(root: &mut Value, path: &mut Vec<Step>, config: &BotConfig) {
    let steps: Vec<Step> = match node_mut(root, path) {
        Value::Object(members) => members.keys().cloned().map(Step::Key).collect(),
        Value::Array(items) => (0..items.len()).map(Step::Index).collect(),
        _ => return,
    };
    for step in steps {
        if let Step::Key(key) = &step {
            let removed = match node_mut(root, path) {
                Value::Object(members) => members.remove(key),
                _ => None,
            };
            let Some(removed) = removed else { continue };
            if reads_back_as(root, config) {
                continue;
            }
            restore(node_mut(root, path), key, removed);
        }
        path.push(step);
        leave_out_defaults(root, path, config);
        path.pop();
    }
}

/// Puts a member back (object members are kept sorted by key, so it returns to its
/// place).
fn restore(node: &mut Value, key: &str, value: Value) {
    if let Value::Object(members) = node {
        members.insert(key.to_string(), value);
    }
}

fn one_line(value: &Value) -> String {
    match value {
        Value::Object(members) if !members.is_empty() => {
            let inner: Vec<String> = members
                .iter()
                .map(|(key, value)| format!("{}: {}", Value::from(key.as_str()), one_line(value)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
        Value::Array(items) if !items.is_empty() => {
            let inner: Vec<String> = items.iter().map(one_line).collect();
            format!("[{}]", inner.join(", "))
        }
        other => other.to_string(),
    }
}

fn is_scalar(value: &Value) -> bool {
    !matches!(value, Value::Object(_) | Value::Array(_))
}

/// Writes `value` at `indent` levels, `prefix` characters already on its line (the
/// member's key): on one line when it fits, else one member per line, and arrays of
/// scalars packed several to a line.
fn write_value(out: &mut String, value: &Value, indent: usize, prefix: usize) {
    let line = one_line(value);
    // The closing comma counts too.
    if indent * 2 + prefix + line.len() < WIDTH {
        out.push_str(&line);
        return;
    }
    let inner = "  ".repeat(indent + 1);
    let closing = "  ".repeat(indent);
    match value {
        Value::Object(members) => write_members(out, members, indent, &inner, &closing),
        Value::Array(items) if items.iter().all(is_scalar) => {
            out.push_str("[\n");
            let mut current = String::new();
            let mut lines = Vec::new();
            for item in items {
                let text = item.to_string();
                if !current.is_empty() && inner.len() + current.len() + text.len() + 3 > WIDTH {
                    lines.push(std::mem::take(&mut current));
                }
                if !current.is_empty() {
                    current.push_str(", ");
                }
                current.push_str(&text);
            }
            lines.push(current);
            out.push_str(&join_lines(&lines, &inner));
            out.push('\n');
            out.push_str(&closing);
            out.push(']');
        }
        Value::Array(items) => {
            out.push_str("[\n");
            for (index, item) in items.iter().enumerate() {
                out.push_str(&inner);
                write_value(out, item, indent + 1, 0);
                out.push_str(if index + 1 < items.len() { ",\n" } else { "\n" });
            }
            out.push_str(&closing);
            out.push(']');
        }
        _ => out.push_str(&line),
    }
}

fn write_members(
    out: &mut String,
    members: &Map<String, Value>,
    indent: usize,
    inner: &str,
    closing: &str,
) {
    out.push_str("{\n");
    for (index, (key, member)) in members.iter().enumerate() {
        let key = Value::from(key.as_str()).to_string();
        out.push_str(inner);
        out.push_str(&key);
        out.push_str(": ");
        write_value(out, member, indent + 1, key.len() + 2);
        out.push_str(if index + 1 < members.len() {
            ",\n"
        } else {
            "\n"
        });
    }
    out.push_str(closing);
    out.push('}');
}

fn join_lines(lines: &[String], inner: &str) -> String {
    lines
        .iter()
        .map(|line| format!("{inner}{line}"))
        .collect::<Vec<_>>()
        .join(",\n")
}
