//! `README.md`'s rule table is the one the rule entries give (what `tra
//! rules --format md` prints), so the documentation cannot drift from the
//! code. `UPDATE_RULES_README=1` rewrites it.

use tra_rules::table::{BEGIN, END};

const REGENERATE: &str = "UPDATE_RULES_README=1 cargo test -p tra-rules --test readme";

#[test]
fn readme_table_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let text = std::fs::read_to_string(&path).expect("rules/README.md");
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        panic!("rules/README.md lacks the markers `{BEGIN}` and `{END}` around the rule table");
    };
    assert!(b < e, "rules/README.md: the table's end marker comes before its start");
    let current = &text[b + BEGIN.len()..e];
    let wanted = format!("\n\n{}\n", tra_rules::markdown());
    if current == wanted {
        return;
    }
    if std::env::var_os("UPDATE_RULES_README").is_some() {
        let updated = format!("{}{BEGIN}{wanted}{}", &text[..b], &text[e..]);
        std::fs::write(&path, updated).expect("write rules/README.md");
        return;
    }
    let first = current.lines().zip(wanted.lines()).position(|(a, b)| a != b);
    let at = first.map_or_else(
        || "(one table is longer)".to_string(),
        |i| {
            format!(
                "first difference at table line {i}:\n  README: {}\n  rules:  {}",
                current.lines().nth(i).unwrap_or(""),
                wanted.lines().nth(i).unwrap_or("")
            )
        },
    );
    panic!(
        "rules/README.md's rule table is not the one the rule entries give; {at}\nregenerate it with:\n  {REGENERATE}"
    );
}
