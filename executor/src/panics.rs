//! The text of a caught panic, for the errors that report one: a kernel that
//! panics fails its node with this message instead of taking the run down.

use std::any::Any;

/// The message a panic was raised with (`panic!("…")` payloads are a
/// `&str` or a `String`); a payload of any other type gives a fixed text.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::panic_message;

    #[test]
    fn reads_str_and_string_payloads() {
        let s = std::panic::catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(panic_message(&*s), "static text");
        let n = 3;
        let f = std::panic::catch_unwind(|| panic!("formatted {n}")).unwrap_err();
        assert_eq!(panic_message(&*f), "formatted 3");
        let o = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(&*o), "a panic without a message");
    }
}
