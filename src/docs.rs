//! The function reference `docs/functions.md`, generated from each function's own
//! [`Documentation`] — the text `SHOW FUNCTIONS`
//! shows — so the reference cannot drift from the code. `tests/sql/functions_doc.rs` fails when
//! the file is stale; `CALIBSQL_UPDATE_DOCS=1 cargo test --test sql functions_doc` rewrites it.

use std::collections::BTreeMap;
use std::fmt::Write;

use datafusion::logical_expr::Documentation;

/// The whole of `docs/functions.md`.
pub fn functions_markdown() -> String {
    let mut sections: BTreeMap<&'static str, Vec<(String, &'static str, Documentation)>> =
        BTreeMap::new();
    let aggregates = crate::udfs::all_aggregate_functions();
    let scalars = crate::udfs::all_scalar_functions();
    for f in &aggregates {
        if let Some(d) = f.documentation() {
            sections.entry(d.doc_section.label).or_default().push((
                f.name().to_string(),
                "aggregate",
                d.clone(),
            ));
        }
    }
    for f in &scalars {
        if let Some(d) = f.documentation() {
            sections.entry(d.doc_section.label).or_default().push((
                f.name().to_string(),
                "scalar",
                d.clone(),
            ));
        }
    }
    let mut out = String::new();
    out.push_str(
        "<!-- Generated from the functions' own documentation by src/docs.rs; do not edit.\n     \
         Regenerate: CALIBSQL_UPDATE_DOCS=1 cargo test --test sql functions_doc -->\n\n",
    );
    out.push_str("# calibsql functions\n\n");
    let literals: Vec<String> = crate::udfs::literal_argument_names()
        .iter()
        .map(|a| format!("`{a}`"))
        .collect();
    let _ = write!(
        out,
        "Every function calibsql adds to SQL, as `SHOW FUNCTIONS` documents it. Optional \
arguments are positional (`ece(p, y, 10, 'quantile')`) or named (`ece(p, y, w => weight)`, \
`reliability(p, y, level => 0.9)`); a named argument may skip optional ones before it, which \
then take their defaults. Literal arguments ({}) must be constants. Aggregates skip rows whose \
data arguments are NULL. What calibsql chose where the papers or tools leave room: \
[SEMANTICS.md](SEMANTICS.md).\n\n",
        literals.join(", ")
    );
    for (label, funcs) in &sections {
        let _ = writeln!(out, "- [{label}](#{})", anchor(label));
        for (name, _, _) in funcs {
            let _ = writeln!(out, "  - [`{name}`](#{})", anchor(name));
        }
    }
    for (label, funcs) in &sections {
        let _ = write!(out, "\n## {label}\n");
        for (name, kind, d) in funcs {
            let _ = write!(out, "\n### `{name}`\n\n");
            let _ = writeln!(out, "*{kind}* — `{}`\n", d.syntax_example);
            let _ = writeln!(out, "{}\n", d.description);
            if let Some(args) = &d.arguments {
                out.push_str("| argument | description |\n| --- | --- |\n");
                for (a, desc) in args {
                    let _ = writeln!(out, "| `{a}` | {} |", desc.replace('|', "\\|"));
                }
                out.push('\n');
            }
            if let Some(ex) = &d.sql_example {
                let _ = writeln!(out, "{}", ex.trim());
            }
        }
    }
    out
}

/// GitHub's heading anchor: lower case, spaces to dashes, punctuation dropped.
fn anchor(s: &str) -> String {
    s.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}
