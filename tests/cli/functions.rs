//! The calibration functions as the binary registers them.

use super::*;

#[test]
fn calibration_functions_are_built_in() {
    let dir = TempDir::new().unwrap();
    // |0 − 0.2| and |1 − 0.8| in two bins of one row each: (0.2 + 0.2) / 2 = 0.2
    // (rounded: 1 − 0.8 is 0.19999999999999996 in binary floating point).
    calibsql(dir.path())
        .args([
            "-c",
            "SELECT round(ece(p, y), 12) AS e FROM (VALUES (0.2, 0), (0.8, 1)) t(p, y)",
        ])
        .assert()
        .success()
        .stdout("e\n0.2\n");
    calibsql(dir.path())
        .args(["-c", "SELECT sigmoid(0) AS s"])
        .assert()
        .success()
        .stdout("s\n0.5\n");
}

#[test]
fn distinct_is_refused_not_ignored() {
    let dir = TempDir::new().unwrap();
    assert_fails_with(
        calibsql(dir.path()).args([
            "-c",
            "SELECT ece(DISTINCT p, y) FROM (VALUES (0.1, 0), (0.1, 0), (0.1, 1)) t(p, y)",
        ]),
        1,
        "ece: DISTINCT is not supported",
    );
}
