//! The page as its accessibility tree, for `browser read` with `format: tree`: what
//! Chromium's `Accessibility.getFullAXTree` answers, rendered as one indented line per
//! node that carries meaning (`button "Show"`, `textbox "Name" value="Ana"`, `heading
//! "Orders" level=2`). Nodes the browser marks ignored, and wrappers without a name
//! (`generic`, `none`), give their place to their children; inline text boxes repeat
//! their static text and are left out.
//!
//! Pure: JSON in, text out.

use std::collections::HashMap;

use serde_json::Value;

/// Roles that only wrap others: their children are shown in their place.
const WRAPPERS: &[&str] = &["generic", "none", "presentation", "InlineTextBox"];

/// Node properties worth a word on the line, in this order.
const PROPERTIES: &[&str] = &[
    "level", "checked", "pressed", "selected", "expanded", "disabled", "required", "focused",
];

/// Deepest nesting rendered; deeper nodes are cut (a hostile page can nest thousands).
const MAX_DEPTH: usize = 64;

/// Longest name or value shown on one line, in characters.
const MAX_LABEL: usize = 200;

/// The tree in `nodes` (the `nodes` array of `Accessibility.getFullAXTree`) as text of
/// at most `max_bytes`, and whether it was cut.
pub fn render(nodes: &[Value], max_bytes: usize) -> (String, bool) {
    let by_id: HashMap<&str, &Value> = nodes
        .iter()
        .filter_map(|node| Some((node["nodeId"].as_str()?, node)))
        .collect();
    // The root: the node no other names as its child (the first such node).
    let roots: Vec<&Value> = nodes
        .iter()
        .filter(|node| node.get("parentId").and_then(Value::as_str).is_none())
        .collect();
    let mut out = Renderer {
        by_id,
        text: String::new(),
        max_bytes,
        cut: false,
        visited: 0,
    };
    for root in roots {
        out.node(root, 0);
    }
    (out.text, out.cut)
}

struct Renderer<'a> {
    by_id: HashMap<&'a str, &'a Value>,
    text: String,
    max_bytes: usize,
    cut: bool,
    /// Nodes walked: a malformed tree that names a node twice is walked at most once
    /// per node in it.
    visited: usize,
}

impl Renderer<'_> {
    fn node(&mut self, node: &Value, depth: usize) {
        self.visited += 1;
        if self.cut || self.visited > self.by_id.len().max(1) * 2 {
            return;
        }
        if depth > MAX_DEPTH {
            self.cut = true;
            return;
        }
        let shown = line(node);
        let child_depth = if let Some(shown) = &shown {
            let entry = format!("{}{shown}\n", "  ".repeat(depth));
            if self.text.len() + entry.len() > self.max_bytes {
                self.cut = true;
                return;
            }
            self.text.push_str(&entry);
            depth + 1
        } else {
            depth
        };
        let children: Vec<&Value> = node["childIds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(|id| self.by_id.get(id).copied())
            .collect();
        for child in children {
            self.node(child, child_depth);
        }
    }
}

/// One node's line, or `None` when it only wraps its children.
fn line(node: &Value) -> Option<String> {
    if node["ignored"].as_bool() == Some(true) {
        return None;
    }
    let role = node["role"]["value"].as_str().unwrap_or_default();
    let name = label(&node["name"]["value"]);
    if role.is_empty() || WRAPPERS.contains(&role) {
        return None;
    }
    if role == "StaticText" {
        return name.map(|name| format!("text {name}"));
    }
    let mut shown = role.to_string();
    if let Some(name) = name {
        shown.push(' ');
        shown.push_str(&name);
    }
    if let Some(value) = label(&node["value"]["value"]) {
        shown.push_str(&format!(" value={value}"));
    }
    let properties: HashMap<&str, &Value> = node["properties"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|property| Some((property["name"].as_str()?, &property["value"]["value"])))
        .collect();
    for name in PROPERTIES {
        match properties.get(name) {
            Some(Value::Bool(true)) => shown.push_str(&format!(" {name}")),
            Some(Value::Number(number)) => shown.push_str(&format!(" {name}={number}")),
            Some(Value::String(text)) if text != "false" => {
                shown.push_str(&format!(" {name}={text}"));
            }
            _ => {}
        }
    }
    Some(shown)
}

/// A name or value as a quoted, one-line label, cut to [`MAX_LABEL`] characters.
fn label(value: &Value) -> Option<String> {
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        _ => return None,
    };
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return None;
    }
    let mut shown: String = text.chars().take(MAX_LABEL).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    Some(format!("{shown:?}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(id: &str, parent: Option<&str>, role: &str, name: &str, children: &[&str]) -> Value {
        let mut node = json!({
            "nodeId": id,
            "ignored": false,
            "role": {"type": "role", "value": role},
            "name": {"type": "computedString", "value": name},
            "childIds": children,
        });
        if let Some(parent) = parent {
            node["parentId"] = json!(parent);
        }
        node
    }

    #[test]
    fn meaningful_nodes_are_shown_indented_and_wrappers_give_way_to_their_children() {
        let mut heading = node("3", Some("2"), "heading", "Orders", &["4"]);
        heading["properties"] =
            json!([{"name": "level", "value": {"type": "integer", "value": 2}}]);
        let mut textbox = node("6", Some("2"), "textbox", "Name", &[]);
        textbox["value"] = json!({"type": "string", "value": "Ana"});
        textbox["properties"] = json!([
            {"name": "focused", "value": {"type": "boolean", "value": true}},
            {"name": "disabled", "value": {"type": "boolean", "value": false}}
        ]);
        let mut ignored = node("7", Some("2"), "generic", "", &["8"]);
        ignored["ignored"] = json!(true);
        let nodes = vec![
            node("1", None, "RootWebArea", "Shop", &["2"]),
            node("2", Some("1"), "generic", "", &["3", "5", "6", "7"]),
            heading,
            node("4", Some("3"), "StaticText", "Orders", &["9"]),
            node("5", Some("2"), "button", "Show", &[]),
            textbox,
            ignored,
            node("8", Some("7"), "link", "Next  page", &[]),
            node("9", Some("4"), "InlineTextBox", "Orders", &[]),
        ];
        let (text, cut) = render(&nodes, 4096);
        assert!(!cut);
        assert_eq!(
            text,
            "RootWebArea \"Shop\"\n  heading \"Orders\" level=2\n    text \"Orders\"\n  \
             button \"Show\"\n  textbox \"Name\" value=\"Ana\" focused\n  link \"Next page\"\n"
        );
    }

    #[test]
    fn the_text_is_cut_at_a_line_and_said_to_be() {
        let children: Vec<String> = (0..100).map(|index| format!("b{index}")).collect();
        let ids: Vec<&str> = children.iter().map(String::as_str).collect();
        let mut nodes = vec![node("root", None, "RootWebArea", "Long", &ids)];
        nodes.extend(
            ids.iter()
                .map(|id| node(id, Some("root"), "button", &format!("Button {id}"), &[])),
        );
        let (text, cut) = render(&nodes, 200);
        assert!(cut);
        assert!(text.len() <= 200);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn a_hostile_tree_costs_bounded_work() {
        // A cycle (a node naming its ancestor as a child) and a very deep chain.
        let mut nodes = vec![
            node("a", None, "RootWebArea", "Loop", &["b"]),
            node("b", Some("a"), "button", "Again", &["a"]),
        ];
        let (text, _) = render(&nodes, 1 << 20);
        assert!(text.lines().count() <= 4, "{text}");
        nodes.clear();
        nodes.push(node("n0", None, "RootWebArea", "Deep", &["n1"]));
        for depth in 1..5_000 {
            let (id, child) = (format!("n{depth}"), format!("n{}", depth + 1));
            nodes.push(node(
                &id,
                Some(&format!("n{}", depth - 1)),
                "group",
                "g",
                &[&child],
            ));
        }
        let (text, cut) = render(&nodes, 1 << 20);
        assert!(cut);
        assert!(text.lines().count() <= MAX_DEPTH + 1);
    }

    #[test]
    fn long_names_are_cut_and_kept_on_one_line() {
        let nodes = vec![node("1", None, "paragraph", &"word\n".repeat(100), &[])];
        let (text, _) = render(&nodes, 1 << 20);
        assert_eq!(text.lines().count(), 1);
        assert!(text.contains('…'));
    }
}
