//! `docs/functions.md` is generated from the functions' own documentation (src/docs.rs);
//! this test fails when the file is stale, as DataFusion's function-docs check does.
//! `CALIBSQL_UPDATE_DOCS=1 cargo test --test sql functions_doc` rewrites it.

use std::path::Path;

#[test]
fn functions_md_is_up_to_date() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/functions.md");
    let generated = calibsql::docs::functions_markdown();
    if std::env::var_os("CALIBSQL_UPDATE_DOCS").is_some_and(|v| v != "0") {
        std::fs::write(&path, &generated).expect("write docs/functions.md");
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/functions.md is stale: run CALIBSQL_UPDATE_DOCS=1 cargo test --test sql functions_doc"
    );
}

#[test]
fn every_function_is_in_the_reference() {
    let md = calibsql::docs::functions_markdown();
    for f in calibsql::udfs::all_aggregate_functions() {
        assert!(md.contains(&format!("### `{}`", f.name())), "{}", f.name());
    }
    for f in calibsql::udfs::all_scalar_functions() {
        assert!(md.contains(&format!("### `{}`", f.name())), "{}", f.name());
    }
}
